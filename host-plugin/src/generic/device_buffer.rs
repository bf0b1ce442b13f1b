//! Device memory the plugin owns: a [`DeviceBuffer`] frees its allocation when dropped
//! (cudarc's safe layer, in small), so no error path between an allocation and its
//! hand-over can leak it. [`DeviceBuffer::into_raw`] gives up ownership where the C ABI
//! hands memory to libomptarget (`__tgt_rtl_data_alloc`), which frees it by address.

use crate::backend::{AllocKind, BackendDevice, BackendError, DeviceAddr};
use crate::generic::memory_pool::MemoryPool;
use crate::support::diag;
use std::sync::Arc;

/// One device of a backend, as allocations see it: where they come from and where they
/// go back to (the device's pool, when it has one and the allocation is of a kind and
/// size it keeps; else the driver).
#[derive(Clone)]
pub struct DeviceMemory {
    device: Arc<dyn BackendDevice>,
    pool: Option<Arc<MemoryPool>>,
}

impl DeviceMemory {
    /// The driver's memory, unpooled (the plugin's own buffers: tables, environments).
    pub fn new(device: Arc<dyn BackendDevice>) -> Self {
        DeviceMemory { device, pool: None }
    }

    /// The device's memory through `pool` (libomptarget's allocations).
    pub fn pooled(device: Arc<dyn BackendDevice>, pool: Arc<MemoryPool>) -> Self {
        DeviceMemory {
            device,
            pool: Some(pool),
        }
    }

    /// The vendor's object for the device.
    pub fn vendor(&self) -> &dyn BackendDevice {
        self.device.as_ref()
    }

    /// The device's number.
    pub fn device(&self) -> usize {
        self.device.index()
    }

    /// `len` bytes of memory of `kind`, owned by the returned buffer.
    pub fn alloc(&self, len: usize, kind: AllocKind) -> Result<DeviceBuffer, BackendError> {
        let addr = match &self.pool {
            Some(pool) => pool.alloc(self.device.as_ref(), len, kind)?,
            None => self.device.alloc(len, kind)?,
        };
        Ok(DeviceBuffer {
            memory: self.clone(),
            addr,
            len,
            owned: true,
        })
    }

    /// Give `addr` back: to the pool it came from, else to the driver.
    ///
    /// # Safety
    /// `addr` came from [`DeviceMemory::alloc`] on this device (or the driver's
    /// allocation on it) and is dead.
    pub unsafe fn release(&self, addr: DeviceAddr) -> Result<(), BackendError> {
        match &self.pool {
            // SAFETY: forwarded caller contract.
            Some(pool) => unsafe { pool.free(self.device.as_ref(), addr) },
            // SAFETY: forwarded caller contract.
            None => unsafe { self.device.free(addr) },
        }
    }

    /// Write `bytes` at `dst`.
    ///
    /// # Safety
    /// `dst .. dst + bytes.len()` is memory of this device (a resolved global, or the
    /// inside of an allocation).
    pub unsafe fn write(&self, dst: DeviceAddr, bytes: &[u8]) -> Result<(), BackendError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.device.write(dst, bytes) }
    }

    /// Read `dst.len()` bytes at `src`.
    ///
    /// # Safety
    /// `src .. src + dst.len()` is memory of this device.
    pub unsafe fn read(&self, src: DeviceAddr, dst: &mut [u8]) -> Result<(), BackendError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.device.read(src, dst) }
    }
}

/// An allocation on one device, freed when dropped.
pub struct DeviceBuffer {
    memory: DeviceMemory,
    addr: DeviceAddr,
    len: usize,
    /// False once freed or handed out: Drop then leaves the address alone.
    owned: bool,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer {{ device: {}, addr: {:#x}, len: {} }}",
            self.memory.device(),
            self.addr,
            self.len
        )
    }
}

impl DeviceBuffer {
    pub fn addr(&self) -> DeviceAddr {
        self.addr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copy `bytes` into the buffer at byte offset `at`; a range past the end is
    /// refused before the driver sees it.
    pub fn write_at(&self, at: usize, bytes: &[u8]) -> Result<(), BackendError> {
        let fits = at
            .checked_add(bytes.len())
            .is_some_and(|end| end <= self.len);
        if !fits {
            return Err(BackendError::Bounds(format!(
                "internal error: writing {} bytes at offset {at} of a {}-byte device buffer",
                bytes.len(),
                self.len
            )));
        }
        // SAFETY: `addr .. addr + len` is this live allocation of the device, and the
        // range written was just checked to lie inside it.
        unsafe { self.memory.write(self.addr + at as u64, bytes) }
    }

    /// Free the allocation now and say whether the driver took it back (dropping the
    /// buffer frees it too, but can only log a refusal).
    pub fn free(mut self) -> Result<(), BackendError> {
        self.owned = false;
        // SAFETY: the buffer owns the allocation (from `DeviceMemory::alloc` on this
        // device), which nothing is left to use: the buffer is consumed here, and with
        // `owned` cleared its Drop frees nothing a second time.
        unsafe { self.memory.release(self.addr) }
    }

    /// Give up ownership: the caller (libomptarget, through the C ABI) frees the
    /// address with `__tgt_rtl_data_delete`.
    pub fn into_raw(mut self) -> DeviceAddr {
        self.owned = false;
        self.addr
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: the buffer owns the allocation (from `DeviceMemory::alloc` on this
        // device, neither freed nor handed out with `into_raw`), and it is going away.
        let freed = unsafe { self.memory.release(self.addr) };
        if let Err(e) = freed {
            diag::debug(|| format!("device {}: freeing {self:?}: {e}", self.memory.device()));
        }
    }
}
