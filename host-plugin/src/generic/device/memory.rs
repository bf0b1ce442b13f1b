//! A device's memory as libomptarget asks for it: allocations, synchronous copies, and
//! page-locked host buffers.

use super::Device;
use crate::backend::{AllocKind, DeviceAddr};
use crate::generic::device_buffer::DeviceBuffer;
use crate::generic::error::{backend_err, backend_err_with, PluginError};

impl Device {
    /// Allocate memory of one of LLVM 16's kinds (device, pinned host, managed), freed
    /// when the buffer is dropped ([`DeviceBuffer::into_raw`] hands it over instead).
    pub fn alloc(&self, size: usize, kind: AllocKind) -> Result<DeviceBuffer, PluginError> {
        self.user_memory()
            .alloc(size, kind)
            .map_err(backend_err_with(self.id(), || {
                format!("allocating {size} bytes of {kind:?} memory")
            }))
    }

    /// Free what `alloc` gave: back to the device's pool (no driver call, no wait for
    /// the device) or to the driver.
    ///
    /// # Safety
    /// `addr` came from `alloc` on this device and is dead.
    pub unsafe fn free(&self, addr: DeviceAddr) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.user_memory().release(addr) }.map_err(backend_err(self.id(), "freeing"))
    }

    /// Copy host bytes to the device, to completion.
    ///
    /// # Safety
    /// `dst .. dst + src.len()` is device memory of this device.
    pub unsafe fn write(&self, dst: DeviceAddr, src: &[u8]) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.vendor.write(dst, src) }
            .map_err(backend_err(self.id(), "copying to the device"))
    }

    /// Copy device bytes to the host, to completion.
    ///
    /// # Safety
    /// `src .. src + dst.len()` is device memory of this device.
    pub unsafe fn read(&self, src: DeviceAddr, dst: &mut [u8]) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.vendor.read(src, dst) }
            .map_err(backend_err(self.id(), "copying from the device"))
    }

    /// `__tgt_rtl_data_lock`: page-lock host memory for fast copies; the address the
    /// device reaches it at.
    ///
    /// # Safety
    /// `ptr .. ptr + len` is host memory that stays allocated until it is unlocked.
    pub unsafe fn lock_host(&self, ptr: *mut u8, len: usize) -> Result<*mut u8, PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.vendor.lock_host(ptr, len) }.map_err(backend_err_with(self.id(), || {
            format!("locking {len} host bytes at {ptr:?}")
        }))
    }

    /// `__tgt_rtl_data_unlock`: undo [`Device::lock_host`].
    pub fn unlock_host(&self, ptr: *mut u8) -> Result<(), PluginError> {
        self.vendor
            .unlock_host(ptr)
            .map_err(backend_err_with(self.id(), || {
                format!("unlocking host memory at {ptr:?}")
            }))
    }
}
