//! Device memory: allocation and release, copies between host and device (on the async
//! info's queue when there is one) and between devices, and page-locking host memory.

use super::queues::with_async_info;
use super::{
    guard, invalid, on_device, plugin, status, TgtAsyncInfo, OFFLOAD_FAIL, OFFLOAD_SUCCESS,
};
use crate::backend::AllocKind;
use crate::generic::error::PluginError;
use std::ffi::c_void;

#[no_mangle]
pub extern "C" fn __tgt_rtl_data_alloc(
    device: i32,
    size: i64,
    _host_ptr: *mut c_void,
    kind: i32,
) -> *mut c_void {
    guard("data_alloc", std::ptr::null_mut(), || {
        // TARGET_ALLOC_DEFAULT, HOST, SHARED, DEVICE: the backend maps each to its memory
        // (all ordinary memory on the host).
        let kind = AllocKind::from_raw(kind)
            .ok_or_else(|| invalid(device, format!("unknown allocation kind {kind}")))?;
        let size = usize::try_from(size)
            .map_err(|_| invalid(device, format!("allocation size {size}")))?;
        // libomptarget owns the memory from here: it frees it with __tgt_rtl_data_delete.
        let buffer = plugin().device(device)?.alloc(size, kind)?;
        Ok(buffer.into_raw() as *mut c_void)
    })
}

/// # Safety
/// `ptr` is null or came from `__tgt_rtl_data_alloc` on this device.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_delete(device: i32, ptr: *mut c_void, _kind: i32) -> i32 {
    guard("data_delete", OFFLOAD_FAIL, || {
        if ptr.is_null() {
            return Ok(OFFLOAD_SUCCESS);
        }
        // SAFETY: forwarded caller contract.
        status(unsafe { on_device(device, |on| on.free(ptr as u64)) })
    })
}

fn length(device: i32, size: i64) -> Result<usize, PluginError> {
    usize::try_from(size).map_err(|_| invalid(device, format!("transfer size {size}")))
}

/// A copy's byte count, None when there is nothing to copy; a non-empty copy with a
/// null pointer is refused with `null_refusal`.
fn copy_length(
    device: i32,
    size: i64,
    pointers: [*mut c_void; 2],
    null_refusal: &str,
) -> Result<Option<usize>, PluginError> {
    let n = length(device, size)?;
    if n == 0 {
        return Ok(None);
    }
    if pointers.iter().any(|p| p.is_null()) {
        return Err(invalid(device, null_refusal));
    }
    Ok(Some(n))
}

/// The one body of `data_submit` and `data_submit_async`: on the async info's queue
/// when there is one, else synchronously.
///
/// # Safety
/// `hst` is `size` readable host bytes (untouched until the queue is synchronized when
/// there is an async info, libomptarget's rule for asynchronous copies), `tgt` `size`
/// bytes of device memory; `async_info` is null or a valid `__tgt_async_info`.
unsafe fn write(
    device: i32,
    tgt: *mut c_void,
    hst: *mut c_void,
    size: i64,
    async_info: *mut TgtAsyncInfo,
) -> Result<i32, PluginError> {
    let refusal = "copy to the device with a null pointer";
    let Some(n) = copy_length(device, size, [hst, tgt], refusal)? else {
        return Ok(OFFLOAD_SUCCESS);
    };
    let on = plugin().device(device)?;
    // SAFETY: caller contract: null or a valid async info.
    status(unsafe {
        with_async_info(async_info, |info| match info {
            // SAFETY: caller contract: `hst` holds `n` bytes untouched until the queue is
            // synchronized; `tgt` is `n` bytes of device memory.
            Some(info) => on.write_async(tgt as u64, hst as *const u8, n, info),
            // SAFETY: as above, and the copy completes before it returns.
            None => on.write(tgt as u64, std::slice::from_raw_parts(hst as *const u8, n)),
        })
    })
}

/// The one body of `data_retrieve` and `data_retrieve_async`.
///
/// # Safety
/// `hst` is `size` writable host bytes nothing else touches until the copy completes
/// (until the queue is synchronized when there is an async info), `tgt` `size` bytes of
/// device memory; `async_info` is null or a valid `__tgt_async_info`.
unsafe fn read(
    device: i32,
    hst: *mut c_void,
    tgt: *mut c_void,
    size: i64,
    async_info: *mut TgtAsyncInfo,
) -> Result<i32, PluginError> {
    let refusal = "copy from the device with a null pointer";
    let Some(n) = copy_length(device, size, [hst, tgt], refusal)? else {
        return Ok(OFFLOAD_SUCCESS);
    };
    let on = plugin().device(device)?;
    // SAFETY: caller contract: null or a valid async info.
    status(unsafe {
        with_async_info(async_info, |info| match info {
            // SAFETY: caller contract: `hst` holds `n` writable bytes nothing else touches
            // until the queue is synchronized; `tgt` is `n` bytes of device memory.
            Some(info) => on.read_async(tgt as u64, hst as *mut u8, n, info),
            // SAFETY: as above, and the copy completes before it returns.
            None => on.read(
                tgt as u64,
                std::slice::from_raw_parts_mut(hst as *mut u8, n),
            ),
        })
    })
}

/// # Safety
/// `tgt` is device memory and `hst` host memory, each `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_submit(
    device: i32,
    tgt: *mut c_void,
    hst: *mut c_void,
    size: i64,
) -> i32 {
    // SAFETY: forwarded caller contract.
    guard("data_submit", OFFLOAD_FAIL, || unsafe {
        write(device, tgt, hst, size, std::ptr::null_mut())
    })
}

/// # Safety
/// As `__tgt_rtl_data_submit`; `async_info` is null or a valid `__tgt_async_info`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_submit_async(
    device: i32,
    tgt: *mut c_void,
    hst: *mut c_void,
    size: i64,
    async_info: *mut TgtAsyncInfo,
) -> i32 {
    guard("data_submit_async", OFFLOAD_FAIL, || {
        // SAFETY: forwarded caller contract.
        unsafe { write(device, tgt, hst, size, async_info) }
    })
}

/// # Safety
/// `hst` is host memory and `tgt` device memory, each `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_retrieve(
    device: i32,
    hst: *mut c_void,
    tgt: *mut c_void,
    size: i64,
) -> i32 {
    // SAFETY: forwarded caller contract.
    guard("data_retrieve", OFFLOAD_FAIL, || unsafe {
        read(device, hst, tgt, size, std::ptr::null_mut())
    })
}

/// # Safety
/// As `__tgt_rtl_data_retrieve`; `async_info` is null or a valid `__tgt_async_info`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_retrieve_async(
    device: i32,
    hst: *mut c_void,
    tgt: *mut c_void,
    size: i64,
    async_info: *mut TgtAsyncInfo,
) -> i32 {
    guard("data_retrieve_async", OFFLOAD_FAIL, || {
        // SAFETY: forwarded caller contract.
        unsafe { read(device, hst, tgt, size, async_info) }
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_is_data_exchangable(src_device: i32, dst_device: i32) -> i32 {
    guard("is_data_exchangable", 0, || {
        let n = plugin().device_count() as i32;
        Ok(((0..n).contains(&src_device) && (0..n).contains(&dst_device)) as i32)
    })
}

/// # Safety
/// `src` is `size` bytes of device memory on `src_device`, `dst` on `dst_device`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_exchange(
    src_device: i32,
    src: *mut c_void,
    dst_device: i32,
    dst: *mut c_void,
    size: i64,
) -> i32 {
    guard("data_exchange", OFFLOAD_FAIL, || {
        // SAFETY: forwarded caller contract; no async info: to completion.
        unsafe { exchange(src_device, src, dst_device, dst, size, std::ptr::null_mut()) }
    })
}

/// # Safety
/// As `__tgt_rtl_data_exchange`; `async_info` is null or a valid `__tgt_async_info` of
/// the source device (LLVM 16 passes the source's).
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_exchange_async(
    src_device: i32,
    src: *mut c_void,
    dst_device: i32,
    dst: *mut c_void,
    size: i64,
    async_info: *mut TgtAsyncInfo,
) -> i32 {
    guard("data_exchange_async", OFFLOAD_FAIL, || {
        // SAFETY: forwarded caller contract.
        unsafe { exchange(src_device, src, dst_device, dst, size, async_info) }
    })
}

/// The one body of `data_exchange` and `data_exchange_async`.
///
/// # Safety
/// As `__tgt_rtl_data_exchange_async`; both ranges stay allocated until the copy
/// completes (until the queue is synchronized when there is an async info).
unsafe fn exchange(
    src_device: i32,
    src: *mut c_void,
    dst_device: i32,
    dst: *mut c_void,
    size: i64,
    async_info: *mut TgtAsyncInfo,
) -> Result<i32, PluginError> {
    let refusal = "device-to-device copy with a null pointer";
    let Some(n) = copy_length(dst_device, size, [src, dst], refusal)? else {
        return Ok(OFFLOAD_SUCCESS);
    };
    let (from, to) = (plugin().device(src_device)?, plugin().device(dst_device)?);
    // SAFETY: caller contract: null or a valid async info.
    status(unsafe {
        with_async_info(async_info, |info| {
            // SAFETY: caller contract: both ranges are device memory of their devices,
            // allocated until the copy completes.
            from.copy_to(src as u64, to, dst as u64, n, info)
        })
    })
}

/// Page-lock host memory (CUDA: cuMemHostRegister); `locked` gets the address the
/// device reaches it at. Where device memory needs no locking (the host devices) it is
/// the host address itself.
///
/// # Safety
/// `ptr` is `size` bytes of host memory allocated until unlocked; `locked` is null or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_lock(
    device: i32,
    ptr: *mut c_void,
    size: i64,
    locked: *mut *mut c_void,
) -> i32 {
    guard("data_lock", OFFLOAD_FAIL, || {
        // SAFETY: caller contract: null or a writable pointer slot.
        let slot = unsafe { locked.as_mut() }
            .ok_or_else(|| invalid(device, "data_lock without an output"))?;
        let n = length(device, size)?;
        // SAFETY: caller contract: `ptr` is `n` host bytes allocated until unlocked.
        let pinned = unsafe { plugin().device(device)?.lock_host(ptr.cast(), n) }?;
        *slot = pinned.cast();
        Ok(OFFLOAD_SUCCESS)
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_data_unlock(device: i32, ptr: *mut c_void) -> i32 {
    guard("data_unlock", OFFLOAD_FAIL, || {
        status(on_device(device, |on| on.unlock_host(ptr.cast())))
    })
}
