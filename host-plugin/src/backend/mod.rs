//! What the plugin core needs from a device kind: memory, transfers, images, symbols,
//! launches. One implementation per kind; the core never knows which one it drives.

pub mod absent;
pub mod host;

use std::ffi::CStr;
use thiserror::Error;

/// An address in a device's address space (on the host backend, a process address).
pub type DeviceAddr = u64;

#[derive(Debug, Error)]
pub enum BackendError {
    #[error("{0}")]
    Load(String),
    #[error("symbol `{0}` not found in the image")]
    MissingSymbol(String),
    #[error("out of device memory allocating {0} bytes")]
    OutOfMemory(usize),
    #[error("kernel launch failed: {0}")]
    Launch(String),
    #[error("this plugin has no {0} devices")]
    NoDevices(&'static str),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// An image loaded on one device. Dropping it unloads the image.
pub trait LoadedModule: Send + Sync {
    /// Device address of a global variable defined by the image.
    fn global(&self, name: &CStr) -> Result<DeviceAddr, BackendError>;
    /// Device address of a function defined by the image.
    fn function(&self, name: &CStr) -> Result<DeviceAddr, BackendError>;
}

/// A device kind. Methods taking raw device addresses are `unsafe`: the caller promises
/// the addresses came from this backend (an allocation or a resolved symbol) and the
/// ranges lie inside it.
pub trait Backend: Send + Sync {
    /// The ELF `e_machine` of the images this backend runs.
    fn elf_machine(&self) -> u16;
    fn device_count(&self) -> usize;
    fn init_device(&self, device: usize) -> Result<(), BackendError>;
    fn load_image(
        &self,
        device: usize,
        image: &[u8],
    ) -> Result<Box<dyn LoadedModule>, BackendError>;
    fn alloc(&self, device: usize, size: usize) -> Result<DeviceAddr, BackendError>;
    /// # Safety
    /// `addr` came from `alloc` on this device and is not used afterwards.
    unsafe fn free(&self, device: usize, addr: DeviceAddr) -> Result<(), BackendError>;
    /// # Safety
    /// `dst .. dst + src.len()` is device memory of `device`.
    unsafe fn write(&self, device: usize, dst: DeviceAddr, src: &[u8]) -> Result<(), BackendError>;
    /// # Safety
    /// `src .. src + dst.len()` is device memory of `device`.
    unsafe fn read(
        &self,
        device: usize,
        src: DeviceAddr,
        dst: &mut [u8],
    ) -> Result<(), BackendError>;
    /// # Safety
    /// Both ranges of `len` bytes are device memory of their devices.
    unsafe fn copy(
        &self,
        src_device: usize,
        src: DeviceAddr,
        dst_device: usize,
        dst: DeviceAddr,
        len: usize,
    ) -> Result<(), BackendError>;
    /// Run `kernel(args...)` to completion; each argument is one pointer-sized value.
    ///
    /// # Safety
    /// `kernel` is a kernel of an image loaded on `device`, taking `args.len()` pointers.
    unsafe fn launch(
        &self,
        device: usize,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
    ) -> Result<(), BackendError>;
    fn synchronize(&self, device: usize) -> Result<(), BackendError>;
}
