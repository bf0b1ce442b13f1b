//! Queues and events: the async info as the device sees it, waiting for or polling its
//! queue, and the device's events.

use super::{
    guard, invalid, on_device, plugin, status, TgtAsyncInfo, OFFLOAD_FAIL, OFFLOAD_SUCCESS,
};
use crate::backend::{EventHandle, QueueHandle};
use crate::generic::device::AsyncInfo;
use crate::generic::error::PluginError;
use std::ffi::c_void;

/// The async info as the device sees it ([`AsyncInfo`]), for `body`; what the device
/// left in it (a queue created on first use, or none once synchronized) is stored back,
/// on failure too, so a queue is never lost. None for a null async info.
///
/// # Safety
/// `info` is null or a valid `__tgt_async_info`.
pub(super) unsafe fn with_async_info<T>(
    info: *mut TgtAsyncInfo,
    body: impl FnOnce(Option<&mut AsyncInfo>) -> Result<T, PluginError>,
) -> Result<T, PluginError> {
    // SAFETY: caller contract.
    let Some(raw) = (unsafe { info.as_mut() }) else {
        return body(None);
    };
    let mut info = AsyncInfo {
        queue: (!raw.queue.is_null()).then_some(raw.queue as QueueHandle),
    };
    let result = body(Some(&mut info));
    raw.queue = info
        .queue
        .map_or(std::ptr::null_mut(), |q| q as *mut c_void);
    result
}

/// Wait for the async info's queue and let it go (the queue is null afterwards), or for
/// the whole device.
///
/// # Safety
/// `async_info` is null or a valid `__tgt_async_info`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_synchronize(device: i32, async_info: *mut TgtAsyncInfo) -> i32 {
    guard("synchronize", OFFLOAD_FAIL, || {
        let on = plugin().device(device)?;
        // SAFETY: caller contract: null or valid.
        status(unsafe {
            with_async_info(async_info, |info| match info {
                Some(info) => on.synchronize_queue(info),
                None => on.synchronize(),
            })
        })
    })
}

/// A finished queue is let go and cleared (libomptarget reads a null queue as
/// "complete"); an unfinished one stays.
///
/// # Safety
/// `async_info` is null or a valid `__tgt_async_info`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_query_async(device: i32, async_info: *mut TgtAsyncInfo) -> i32 {
    guard("query_async", OFFLOAD_FAIL, || {
        let on = plugin().device(device)?;
        // SAFETY: caller contract: null or valid.
        status(unsafe { with_async_info(async_info, |info| on.query_queue(info)) })
    })
}

// ---------------------------------------------------------------------------------------
// Events: the device's (a token where its backend has none, [`crate::generic::device::token_event`]).

/// # Safety
/// `event` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_create_event(device: i32, event: *mut *mut c_void) -> i32 {
    guard("create_event", OFFLOAD_FAIL, || {
        // SAFETY: caller contract: null or a writable handle slot.
        let slot = unsafe { event.as_mut() }
            .ok_or_else(|| invalid(device, "create_event without an output"))?;
        *slot = plugin().device(device)?.event_create()? as *mut c_void;
        Ok(OFFLOAD_SUCCESS)
    })
}

/// # Safety
/// `async_info` is null or a valid `__tgt_async_info`; `event` came from create_event.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_record_event(
    device: i32,
    event: *mut c_void,
    async_info: *mut TgtAsyncInfo,
) -> i32 {
    guard("record_event", OFFLOAD_FAIL, || {
        let on = plugin().device(device)?;
        // SAFETY: caller contract: null or valid.
        status(unsafe {
            with_async_info(async_info, |info| {
                on.event_record(event as EventHandle, info)
            })
        })
    })
}

/// # Safety
/// `async_info` is null or a valid `__tgt_async_info`; `event` came from create_event.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_wait_event(
    device: i32,
    event: *mut c_void,
    async_info: *mut TgtAsyncInfo,
) -> i32 {
    guard("wait_event", OFFLOAD_FAIL, || {
        let on = plugin().device(device)?;
        // SAFETY: caller contract: null or valid.
        status(unsafe {
            with_async_info(async_info, |info| on.event_wait(event as EventHandle, info))
        })
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_sync_event(device: i32, event: *mut c_void) -> i32 {
    guard("sync_event", OFFLOAD_FAIL, || {
        status(on_device(device, |on| on.event_sync(event as EventHandle)))
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_destroy_event(device: i32, event: *mut c_void) -> i32 {
    guard("destroy_event", OFFLOAD_FAIL, || {
        status(on_device(device, |on| {
            on.event_destroy(event as EventHandle)
        }))
    })
}
