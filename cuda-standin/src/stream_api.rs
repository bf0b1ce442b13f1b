//! The exported stream and event functions. Everything completes at once: a stream or
//! event is only checked to be live.

use crate::errors::{CuResult, Failure};
use crate::state::with_initialized;
use crate::{handle, key, out, shim};
use std::ffi::{c_uint, c_void};

// ---- streams and events (everything completes at once) ----

/// # Safety
/// `stream` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut *mut c_void, flags: c_uint) -> CuResult {
    shim("cuStreamCreate", || {
        if stream.is_null() {
            return Err(Failure::invalid_value("stream is null"));
        }
        let h = with_initialized(|s| s.create_stream(flags))?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(stream, handle(h), "stream") }
    })
}

#[no_mangle]
pub extern "C" fn cuStreamDestroy_v2(stream: *mut c_void) -> CuResult {
    shim("cuStreamDestroy_v2", || {
        with_initialized(|s| s.destroy_stream(key(stream)))
    })
}

#[no_mangle]
pub extern "C" fn cuStreamSynchronize(stream: *mut c_void) -> CuResult {
    shim("cuStreamSynchronize", || {
        with_initialized(|s| s.check_stream(key(stream)))
    })
}

#[no_mangle]
pub extern "C" fn cuStreamQuery(stream: *mut c_void) -> CuResult {
    shim("cuStreamQuery", || {
        with_initialized(|s| s.check_stream(key(stream)))
    })
}

#[no_mangle]
pub extern "C" fn cuStreamWaitEvent(
    stream: *mut c_void,
    event: *mut c_void,
    _flags: c_uint,
) -> CuResult {
    shim("cuStreamWaitEvent", || {
        with_initialized(|s| {
            s.check_stream(key(stream))?;
            s.check_event(key(event))
        })
    })
}

/// # Safety
/// `event` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(event: *mut *mut c_void, _flags: c_uint) -> CuResult {
    shim("cuEventCreate", || {
        if event.is_null() {
            return Err(Failure::invalid_value("event is null"));
        }
        let h = with_initialized(|s| s.create_event())?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(event, handle(h), "event") }
    })
}

#[no_mangle]
pub extern "C" fn cuEventRecord(event: *mut c_void, stream: *mut c_void) -> CuResult {
    shim("cuEventRecord", || {
        with_initialized(|s| {
            s.check_event(key(event))?;
            s.check_stream(key(stream))
        })
    })
}

#[no_mangle]
pub extern "C" fn cuEventSynchronize(event: *mut c_void) -> CuResult {
    shim("cuEventSynchronize", || {
        with_initialized(|s| s.check_event(key(event)))
    })
}

#[no_mangle]
pub extern "C" fn cuEventQuery(event: *mut c_void) -> CuResult {
    shim("cuEventQuery", || {
        with_initialized(|s| s.check_event(key(event)))
    })
}

#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(event: *mut c_void) -> CuResult {
    shim("cuEventDestroy_v2", || {
        with_initialized(|s| s.destroy_event(key(event)))
    })
}
