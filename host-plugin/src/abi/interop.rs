//! OpenMP interop (`#pragma omp interop`): libomptarget's `__tgt_interop_init` asks the
//! plugin for the device's foreign-runtime handles and, for `targetsync`, for an async
//! info with a queue of its own, which the program gets as
//! `omp_get_interop_ptr(obj, omp_ipr_targetsync)` (a CUDA stream). Both work on an
//! initialised device with no image loaded. The ABI is the same in LLVM 16, 17 and 18,
//! and libomptarget reads only the async info's `Queue` and never frees it: the async
//! info lives as long as the device.

use super::{
    guard, invalid, on_device, TgtAsyncInfo, TgtDeviceInfo, OFFLOAD_FAIL, OFFLOAD_SUCCESS,
};
use std::ffi::{c_char, c_void, CStr};

/// What `*err_str` says when the handles could not be read; the error itself is printed.
const INTEROP_FAILED: &CStr =
    c"omptarget-rs: the device's interop handles could not be read (the reason was printed)";

/// An async info handed out for an interop object, kept by its device.
struct KeptAsyncInfo(#[allow(dead_code)] Box<TgtAsyncInfo>);

// SAFETY: the box holds one queue handle, an opaque driver value usable from any thread
// (CUDA streams are); nothing here dereferences it.
unsafe impl Send for KeptAsyncInfo {}

/// The device's context and device handles (`omp_ipr_device_context`, `omp_ipr_device`).
///
/// # Safety
/// `info` is null or writable; `err_str` is null or a writable `const char *` slot.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_init_device_info(
    device: i32,
    info: *mut TgtDeviceInfo,
    err_str: *mut *const c_char,
) -> i32 {
    let say = |message: &'static CStr| {
        if !err_str.is_null() {
            // SAFETY: caller contract: a writable slot; the message is static.
            unsafe { *err_str = message.as_ptr() };
        }
    };
    // Empty unless it fails, as LLVM's plugins leave it.
    say(c"");
    let status = guard("init_device_info", OFFLOAD_FAIL, || {
        // SAFETY: caller contract: null or writable.
        let info = unsafe { info.as_mut() }
            .ok_or_else(|| invalid(device, "init_device_info without an output"))?;
        let handles = on_device(device, |on| on.interop_handles())?;
        info.context = handles.context as *mut c_void;
        info.device = handles.device as *mut c_void;
        Ok(OFFLOAD_SUCCESS)
    });
    if status != OFFLOAD_SUCCESS {
        say(INTEROP_FAILED);
    }
    status
}

/// A new async info whose queue (a CUDA stream; null where the device has no queues) is
/// the interop object's own.
///
/// # Safety
/// `async_info` is null or a writable `__tgt_async_info *` slot.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_init_async_info(
    device: i32,
    async_info: *mut *mut TgtAsyncInfo,
) -> i32 {
    guard("init_async_info", OFFLOAD_FAIL, || {
        // SAFETY: caller contract: null or a writable slot.
        let slot = unsafe { async_info.as_mut() }
            .ok_or_else(|| invalid(device, "init_async_info without an output"))?;
        on_device(device, |on| {
            let queue = on.interop_queue()?;
            let mut info = Box::new(TgtAsyncInfo {
                queue: queue.map_or(std::ptr::null_mut(), |q| q as *mut c_void),
            });
            *slot = &mut *info;
            on.keep_with_device(Box::new(KeptAsyncInfo(info)));
            Ok(OFFLOAD_SUCCESS)
        })
    })
}
