//! Page-locked host memory: pinned allocations (TARGET_ALLOC_HOST) and the host buffers
//! `__tgt_rtl_data_lock` registers, counted per buffer so that only the last unlock
//! unregisters, and only what this plugin registered.

use super::driver::driver_err;
use crate::backend::{unknown, BackendError, DeviceAddr, HandleKind};
use crate::support::locking::lock;
use cudarc::driver::{sys, DriverError};
use std::collections::HashMap;
use std::sync::Mutex;

/// A host buffer page-locked by `lock_host`.
struct LockedBuffer {
    len: usize,
    /// Where the device reaches it (the host address itself under unified addressing).
    device_ptr: DeviceAddr,
    /// `lock_host` calls not yet undone.
    count: usize,
    /// Registered by this backend (else it was already pinned by other CUDA code in the
    /// process, which unpins it itself).
    registered_here: bool,
}

/// Page-locked host memory (pinned allocations and `lock_host` buffers): the driver
/// pins for every context (CU_MEMHOSTREGISTER_PORTABLE), so the record is the
/// backend's, shared by its devices.
#[derive(Default)]
pub struct PinnedHostMemory {
    /// Page-locked host allocations (TARGET_ALLOC_HOST) and their sizes: freed with
    /// cuMemFreeHost.
    pub(super) host_allocations: Mutex<HashMap<DeviceAddr, usize>>,
    /// Host buffers page-locked by `lock_host`, by host address: only these are unlocked.
    locked: Mutex<HashMap<DeviceAddr, LockedBuffer>>,
}

impl PinnedHostMemory {
    /// cuMemHostRegister (portable, device-mapped), counted per buffer; the address
    /// returned is the one cuMemHostGetDevicePointer gives. Memory from a pinned
    /// allocation (TARGET_ALLOC_HOST) is already locked and returned as it is.
    ///
    /// # Safety
    /// `ptr .. ptr + len` is host memory that stays allocated until it is unlocked; a
    /// device's context is current.
    pub(super) unsafe fn lock(&self, ptr: *mut u8, len: usize) -> Result<*mut u8, BackendError> {
        let key = ptr as DeviceAddr;
        if lock(&self.host_allocations).contains_key(&key) {
            return Ok(ptr);
        }
        if len == 0 || ptr.is_null() {
            return Err(BackendError::Invalid(format!(
                "cannot page-lock {len} bytes at {ptr:?}"
            )));
        }
        let mut locked = lock(&self.locked);
        if let Some(buffer) = locked.get_mut(&key) {
            if len > buffer.len {
                return Err(BackendError::Invalid(format!(
                    "{ptr:?} is locked for {} bytes, not {len}: unlock it first",
                    buffer.len
                )));
            }
            buffer.count += 1;
            return Ok(buffer.device_ptr as *mut u8);
        }
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: the caller promises `ptr .. ptr + len` is host memory that stays
        // allocated until it is unlocked; the device's context is current.
        let registered_here = match unsafe { sys::cuMemHostRegister_v2(ptr.cast(), len, flags) } {
            sys::CUresult::CUDA_SUCCESS => true,
            // Pinned already by other CUDA code in this process: usable as it is.
            sys::CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED => false,
            e => return Err(driver_err("cuMemHostRegister", DriverError(e))),
        };
        let mut device_ptr: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is page-locked host memory now; `device_ptr` is writable.
        let mapped = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device_ptr, ptr.cast(), 0) };
        if let Err(e) = mapped.result() {
            if registered_here {
                // SAFETY: registered just above, and nothing else knows it is.
                let _ = unsafe { sys::cuMemHostUnregister(ptr.cast()) };
            }
            return Err(driver_err("cuMemHostGetDevicePointer", e));
        }
        locked.insert(
            key,
            LockedBuffer {
                len,
                device_ptr,
                count: 1,
                registered_here,
            },
        );
        Ok(device_ptr as *mut u8)
    }

    /// Whether `ptr .. ptr + len` lies in page-locked memory this backend knows: a
    /// pinned allocation or a locked buffer (copied directly, never staged).
    pub(super) fn covers(&self, ptr: *const u8, len: usize) -> bool {
        let (start, end) = (ptr as DeviceAddr, ptr as DeviceAddr + len as DeviceAddr);
        let inside =
            |base: DeviceAddr, size: usize| base <= start && end <= base + size as DeviceAddr;
        lock(&self.host_allocations)
            .iter()
            .any(|(&base, &size)| inside(base, size))
            || lock(&self.locked)
                .iter()
                .any(|(&base, buffer)| inside(base, buffer.len))
    }

    /// Undo one `lock_host`; the last one unregisters (only what this backend
    /// registered). A pointer never locked here is refused before the driver sees it.
    ///
    /// `device` names the device in errors; `enter` makes its context current, asked
    /// only when the driver must unregister.
    pub(super) fn unlock(
        &self,
        ptr: *mut u8,
        device: usize,
        enter: impl FnOnce() -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        let key = ptr as DeviceAddr;
        if lock(&self.host_allocations).contains_key(&key) {
            return Ok(());
        }
        let mut locked = lock(&self.locked);
        let buffer = locked
            .get_mut(&key)
            .ok_or_else(|| unknown(HandleKind::Locked, device, key))?;
        buffer.count -= 1;
        if buffer.count > 0 {
            return Ok(());
        }
        let registered_here = buffer.registered_here;
        locked.remove(&key);
        if !registered_here {
            return Ok(());
        }
        enter()?;
        // SAFETY: `ptr` was registered by lock_host and its last lock is undone here.
        unsafe { sys::cuMemHostUnregister(ptr.cast()) }
            .result()
            .map_err(|e| driver_err("cuMemHostUnregister", e))
    }
}
