//! Device memory the driver releases in stream order. `cuMemFree` waits for the whole
//! device before it returns, so a release (of a block the memory pool does not keep,
//! or of the pool's blocks when it gives them back) would stall every queue's work
//! behind it. Where the device has memory pools (`CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_
//! SUPPORTED`, CUDA 11.2 and later), device memory comes from `cuMemAllocAsync` and
//! goes back with `cuMemFreeAsync`, both on the legacy default stream: the queues are
//! blocking streams, so the release is ordered after the work already queued on any of
//! them, and the host does not wait. Where it has not, or an allocation there fails for
//! any reason but a full device, `cuMemAlloc` / `cuMemFree` as before; each address
//! remembers which way it came.

use super::driver::driver_err;
use crate::backend::{BackendError, DeviceAddr};
use crate::support::locking::lock;
use cudarc::driver::{result, sys};
use std::collections::HashSet;
use std::sync::Mutex;

/// One device's stream-ordered allocations.
#[derive(Default)]
pub struct StreamOrdered {
    /// The device has memory pools and the driver both functions.
    supported: bool,
    /// The addresses `cuMemAllocAsync` gave.
    live: Mutex<HashSet<DeviceAddr>>,
}

impl StreamOrdered {
    /// Whether device `handle` has memory pools and the driver exports both functions.
    pub fn for_device(handle: sys::CUdevice) -> Self {
        let attribute = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED;
        // SAFETY: `handle` came from cuDeviceGet.
        let pools =
            unsafe { result::device::get_attribute(handle, attribute) }.is_ok_and(|v| v == 1);
        // SAFETY: only looks the symbols up in the driver cudarc opened already.
        let exported = unsafe {
            let lib = sys::culib();
            lib.get::<unsafe extern "C" fn()>(b"cuMemAllocAsync")
                .is_ok()
                && lib.get::<unsafe extern "C" fn()>(b"cuMemFreeAsync").is_ok()
        };
        StreamOrdered {
            supported: pools && exported,
            live: Mutex::default(),
        }
    }

    /// `size` bytes of device memory in stream order; None where this device cannot
    /// (the caller uses `cuMemAlloc`).
    ///
    /// # Safety
    /// The device's context is current.
    pub unsafe fn alloc(&self, size: usize) -> Option<Result<DeviceAddr, BackendError>> {
        if !self.supported {
            return None;
        }
        let mut addr: sys::CUdeviceptr = 0;
        // SAFETY: `addr` is writable; the context is current (the caller's promise); the
        // legacy default stream.
        match unsafe { sys::cuMemAllocAsync(&mut addr, size, std::ptr::null_mut()) } {
            sys::CUresult::CUDA_SUCCESS => {
                lock(&self.live).insert(addr);
                Some(Ok(addr))
            }
            sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Some(Err(BackendError::OutOfMemory(size))),
            _ => None,
        }
    }

    /// Release `addr` in stream order if it came from [`StreamOrdered::alloc`]; None
    /// otherwise (the caller frees it as it was made).
    ///
    /// # Safety
    /// The device's context is current; `addr` came from this device and is dead once
    /// the work queued before this call is done.
    pub unsafe fn free(&self, addr: DeviceAddr) -> Option<Result<(), BackendError>> {
        if !lock(&self.live).remove(&addr) {
            return None;
        }
        // SAFETY: `addr` came from cuMemAllocAsync on this device and left the set just
        // now, so it is freed once; ordered after the queued work (the caller's promise).
        let freed = unsafe { sys::cuMemFreeAsync(addr, std::ptr::null_mut()) };
        Some(freed.result().map_err(|e| driver_err("cuMemFreeAsync", e)))
    }
}
