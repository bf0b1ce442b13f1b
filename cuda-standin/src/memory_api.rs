//! The exported memory functions: allocations (device, managed, pinned), frees,
//! cuMemGetInfo, copies (host and device, sync and async, between contexts), memsets,
//! and host registration. Thin shims over the state's memory registry (`memory.rs`).

use crate::errors::CuResult;
use crate::errors::{Failure, Outcome};
use crate::memory::{self, RegionKind};
use crate::state::with_initialized;
use crate::{calls, faults, handle, key, out, shim};
use std::ffi::{c_uint, c_void};

/// CU_MEM_ATTACH_GLOBAL and CU_MEM_ATTACH_HOST.
const MANAGED_FLAGS: [c_uint; 2] = [1, 2];

/// An allocation of `kind` in the current context (within its device's memory).
pub(crate) fn allocate(size: usize, kind: RegionKind) -> Outcome<u64> {
    with_initialized(|s| {
        let device = s.current()?.device;
        s.memory.alloc(size, kind, device, s.config.memory)
    })
}

/// # Safety
/// `dptr` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut u64, size: usize) -> CuResult {
    shim("cuMemAlloc_v2", || {
        let p = allocate(size, RegionKind::Device)?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(dptr, p, "dptr") }
    })
}

/// # Safety
/// `dptr` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(dptr: *mut u64, size: usize, flags: c_uint) -> CuResult {
    shim("cuMemAllocManaged", || {
        if !MANAGED_FLAGS.contains(&flags) {
            return Err(Failure::invalid_value(format!("flags {flags}")));
        }
        let p = allocate(size, RegionKind::Managed)?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(dptr, p, "dptr") }
    })
}

/// # Safety
/// `host` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(
    host: *mut *mut c_void,
    size: usize,
    _flags: c_uint,
) -> CuResult {
    shim("cuMemHostAlloc", || {
        let p = allocate(size, RegionKind::Pinned)?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(host, handle(p), "pp") }
    })
}

/// # Safety
/// `host` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(host: *mut *mut c_void, size: usize) -> CuResult {
    shim("cuMemAllocHost_v2", || {
        let p = allocate(size, RegionKind::Pinned)?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(host, handle(p), "pp") }
    })
}

/// Stream-ordered: the stand-in runs every call at once, so the allocation is made
/// now, after checking `stream` (0, the legacy default stream, or a live one).
///
/// # Safety
/// `dptr` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(dptr: *mut u64, size: usize, stream: u64) -> CuResult {
    shim("cuMemAllocAsync", || {
        with_initialized(|s| {
            s.current()?;
            s.check_stream(stream)
        })?;
        let p = allocate(size, RegionKind::Device)?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(dptr, p, "dptr") }
    })
}

/// Stream-ordered: freed now (the stand-in's streams have nothing pending), after
/// checking `stream`.
#[no_mangle]
pub extern "C" fn cuMemFreeAsync(dptr: u64, stream: u64) -> CuResult {
    shim("cuMemFreeAsync", || {
        with_initialized(|s| {
            s.current()?;
            s.check_stream(stream)?;
            s.memory.free(dptr, &[RegionKind::Device])
        })
    })
}

#[no_mangle]
pub extern "C" fn cuMemFree_v2(dptr: u64) -> CuResult {
    shim("cuMemFree_v2", || {
        with_initialized(|s| {
            s.current()?;
            if dptr == 0 {
                return Ok(());
            }
            s.memory
                .free(dptr, &[RegionKind::Device, RegionKind::Managed])
        })
    })
}

#[no_mangle]
pub extern "C" fn cuMemFreeHost(host: *mut c_void) -> CuResult {
    shim("cuMemFreeHost", || {
        with_initialized(|s| {
            s.current()?;
            s.memory.free(key(host), &[RegionKind::Pinned])
        })
    })
}

/// # Safety
/// `free` and `total` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult {
    shim("cuMemGetInfo_v2", || {
        let (used, limit) = with_initialized(|s| {
            let device = s.current()?.device;
            Ok((s.memory.allocated(device), s.config.memory))
        })?;
        // SAFETY: the caller's pointers, per the driver API.
        unsafe {
            out(free, limit.saturating_sub(used), "free")?;
            out(total, limit, "total")
        }
    })
}

/// Which side of a copy is device memory (checked) and which host memory (trusted).
#[derive(Clone, Copy)]
enum Sides {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
}

/// The start of every copy call: its bytes are counted (the `calls` event), and the
/// copy the stand-in was told to fail fails here, before anything is checked or touched.
fn start_copy(call: &'static str, len: usize) -> Outcome {
    calls::add_bytes(call, len);
    faults::copy(len)
}

/// One copy call (in the current context, on `stream` if any): started, checked and
/// performed.
///
/// # Safety
/// The host side must be valid for `len` bytes (the driver API's contract).
unsafe fn copy(
    call: &'static str,
    sides: Sides,
    dst: u64,
    src: u64,
    len: usize,
    stream: Option<u64>,
) -> Outcome {
    start_copy(call, len)?;
    // SAFETY: the caller's promise, passed on.
    unsafe { checked_copy(call, sides, dst, src, len, stream) }
}

/// Check and perform one copy (in the current context, on `stream` if any).
///
/// # Safety
/// The host side must be valid for `len` bytes (the driver API's contract).
unsafe fn checked_copy(
    call: &str,
    sides: Sides,
    dst: u64,
    src: u64,
    len: usize,
    stream: Option<u64>,
) -> Outcome {
    with_initialized(|s| {
        s.current()?;
        if let Some(stream) = stream {
            s.check_stream(stream)?;
        }
        if matches!(sides, Sides::HostToDevice | Sides::DeviceToDevice) {
            s.memory
                .check(dst, len, &format!("destination of {call}"))?;
        }
        if matches!(sides, Sides::DeviceToHost | Sides::DeviceToDevice) {
            s.memory.check(src, len, &format!("source of {call}"))?;
        }
        // SAFETY: the device sides were just checked to lie in live ranges (which stay
        // while the state is locked); the caller promises the host side.
        unsafe { memory::copy(dst, src, len) };
        Ok(())
    })
}

/// # Safety
/// `src` must be readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, len: usize) -> CuResult {
    // SAFETY: the caller's pointer, per the driver API.
    shim("cuMemcpyHtoD_v2", || unsafe {
        copy(
            "cuMemcpyHtoD_v2",
            Sides::HostToDevice,
            dst,
            src as u64,
            len,
            None,
        )
    })
}

/// # Safety
/// `dst` must be writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, len: usize) -> CuResult {
    // SAFETY: the caller's pointer, per the driver API.
    shim("cuMemcpyDtoH_v2", || unsafe {
        copy(
            "cuMemcpyDtoH_v2",
            Sides::DeviceToHost,
            dst as u64,
            src,
            len,
            None,
        )
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoD_v2(dst: u64, src: u64, len: usize) -> CuResult {
    // SAFETY: both sides are device memory, checked.
    shim("cuMemcpyDtoD_v2", || unsafe {
        copy(
            "cuMemcpyDtoD_v2",
            Sides::DeviceToDevice,
            dst,
            src,
            len,
            None,
        )
    })
}

/// With unified addressing the driver tells the sides apart by address; the plugin
/// copies device to device with it, and so does the check.
#[no_mangle]
pub extern "C" fn cuMemcpy(dst: u64, src: u64, len: usize) -> CuResult {
    // SAFETY: both sides are device memory, checked.
    shim("cuMemcpy", || unsafe {
        copy("cuMemcpy", Sides::DeviceToDevice, dst, src, len, None)
    })
}

/// # Safety
/// `src` must be readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: u64,
    src: *const c_void,
    len: usize,
    stream: *mut c_void,
) -> CuResult {
    // SAFETY: the caller's pointer, per the driver API (the copy is done at once).
    shim("cuMemcpyHtoDAsync_v2", || unsafe {
        copy(
            "cuMemcpyHtoDAsync_v2",
            Sides::HostToDevice,
            dst,
            src as u64,
            len,
            Some(key(stream)),
        )
    })
}

/// # Safety
/// `dst` must be writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: u64,
    len: usize,
    stream: *mut c_void,
) -> CuResult {
    // SAFETY: the caller's pointer, per the driver API (the copy is done at once).
    shim("cuMemcpyDtoHAsync_v2", || unsafe {
        copy(
            "cuMemcpyDtoHAsync_v2",
            Sides::DeviceToHost,
            dst as u64,
            src,
            len,
            Some(key(stream)),
        )
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: u64,
    src: u64,
    len: usize,
    stream: *mut c_void,
) -> CuResult {
    // SAFETY: both sides are device memory, checked.
    shim("cuMemcpyDtoDAsync_v2", || unsafe {
        copy(
            "cuMemcpyDtoDAsync_v2",
            Sides::DeviceToDevice,
            dst,
            src,
            len,
            Some(key(stream)),
        )
    })
}

/// A copy between contexts: both must be live.
fn peer_copy(
    call: &'static str,
    dst: u64,
    dst_ctx: u64,
    src: u64,
    src_ctx: u64,
    len: usize,
    stream: Option<u64>,
) -> Outcome {
    start_copy(call, len)?;
    with_initialized(|s| {
        s.context(dst_ctx)?;
        s.context(src_ctx)?;
        Ok(())
    })?;
    // SAFETY: both sides are device memory, checked.
    unsafe { checked_copy(call, Sides::DeviceToDevice, dst, src, len, stream) }
}

#[no_mangle]
pub extern "C" fn cuMemcpyPeer(
    dst: u64,
    dst_ctx: *mut c_void,
    src: u64,
    src_ctx: *mut c_void,
    len: usize,
) -> CuResult {
    shim("cuMemcpyPeer", || {
        peer_copy(
            "cuMemcpyPeer",
            dst,
            key(dst_ctx),
            src,
            key(src_ctx),
            len,
            None,
        )
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyPeerAsync(
    dst: u64,
    dst_ctx: *mut c_void,
    src: u64,
    src_ctx: *mut c_void,
    len: usize,
    stream: *mut c_void,
) -> CuResult {
    shim("cuMemcpyPeerAsync", || {
        peer_copy(
            "cuMemcpyPeerAsync",
            dst,
            key(dst_ctx),
            src,
            key(src_ctx),
            len,
            Some(key(stream)),
        )
    })
}

/// Check and perform a memset of `count` elements of `width` bytes.
fn memset(
    call: &str,
    dst: u64,
    value: u32,
    width: usize,
    count: usize,
    stream: Option<u64>,
) -> Outcome {
    with_initialized(|s| {
        s.current()?;
        if let Some(stream) = stream {
            s.check_stream(stream)?;
        }
        let len = count
            .checked_mul(width)
            .ok_or_else(|| Failure::invalid_value(format!("{count} elements")))?;
        s.memory
            .check(dst, len, &format!("destination of {call}"))?;
        // SAFETY: the range was just checked to lie in a live range.
        unsafe { memory::fill(dst, value, width, count) };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemsetD8_v2(dst: u64, value: u8, count: usize) -> CuResult {
    shim("cuMemsetD8_v2", || {
        memset("cuMemsetD8_v2", dst, value as u32, 1, count, None)
    })
}

#[no_mangle]
pub extern "C" fn cuMemsetD32_v2(dst: u64, value: c_uint, count: usize) -> CuResult {
    shim("cuMemsetD32_v2", || {
        memset("cuMemsetD32_v2", dst, value, 4, count, None)
    })
}

#[no_mangle]
pub extern "C" fn cuMemsetD8Async(
    dst: u64,
    value: u8,
    count: usize,
    stream: *mut c_void,
) -> CuResult {
    shim("cuMemsetD8Async", || {
        memset(
            "cuMemsetD8Async",
            dst,
            value as u32,
            1,
            count,
            Some(key(stream)),
        )
    })
}

#[no_mangle]
pub extern "C" fn cuMemsetD32Async(
    dst: u64,
    value: c_uint,
    count: usize,
    stream: *mut c_void,
) -> CuResult {
    shim("cuMemsetD32Async", || {
        memset("cuMemsetD32Async", dst, value, 4, count, Some(key(stream)))
    })
}

#[no_mangle]
pub extern "C" fn cuMemHostRegister_v2(host: *mut c_void, len: usize, _flags: c_uint) -> CuResult {
    shim("cuMemHostRegister_v2", || {
        with_initialized(|s| {
            s.current()?;
            s.memory.register_host(key(host), len)
        })
    })
}

#[no_mangle]
pub extern "C" fn cuMemHostUnregister(host: *mut c_void) -> CuResult {
    shim("cuMemHostUnregister", || {
        with_initialized(|s| {
            s.current()?;
            s.memory.unregister_host(key(host))
        })
    })
}

/// # Safety
/// `dptr` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    dptr: *mut u64,
    host: *mut c_void,
    flags: c_uint,
) -> CuResult {
    shim("cuMemHostGetDevicePointer_v2", || {
        if flags != 0 {
            return Err(Failure::invalid_value(format!("flags {flags}")));
        }
        let p = with_initialized(|s| {
            s.current()?;
            s.memory.host_device_pointer(key(host))
        })?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(dptr, p, "dptr") }
    })
}
