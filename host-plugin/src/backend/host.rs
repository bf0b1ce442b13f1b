//! The host CPU as an offload device, as LLVM's generic-elf-64bit plugin does it: images
//! are x86-64 shared objects loaded with dlopen, memory is malloc'd process memory,
//! kernels are called through libffi with one pointer argument per mapped variable.

use super::{Backend, BackendError, DeviceAddr, LoadedModule};
use libffi::middle::{arg, Cif, CodePtr, Type};
use libloading::os::unix::{Library, RTLD_LAZY, RTLD_LOCAL};
use std::ffi::{c_void, CStr};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// LLVM's host plugin offers four devices; tests in LLVM's suite use more than one.
pub const HOST_DEVICE_COUNT: usize = 4;

extern "C" {
    fn malloc(size: usize) -> *mut c_void;
    fn free(ptr: *mut c_void);
}

#[derive(Default)]
pub struct HostBackend;

struct HostModule {
    library: Library,
}

impl HostModule {
    fn symbol(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        let missing = || BackendError::MissingSymbol(name.to_string_lossy().into_owned());
        // SAFETY: we only take the symbol's address (a `*mut c_void` read out of dlsym's
        // answer); nothing is called or dereferenced here.
        let sym = unsafe { self.library.get::<*mut c_void>(name.to_bytes_with_nul()) }
            .map_err(|_| missing())?;
        let addr = *sym as DeviceAddr;
        if addr == 0 {
            return Err(missing());
        }
        Ok(addr)
    }
}

impl LoadedModule for HostModule {
    fn global(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        self.symbol(name)
    }
    fn function(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        self.symbol(name)
    }
}

/// A unique path for the image file: dlopen needs a file, and the same image may be
/// loaded on several devices at once.
fn temp_image_path() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "omptarget-rs-image-{}-{}.so",
        std::process::id(),
        n
    ))
}

impl Backend for HostBackend {
    fn elf_machine(&self) -> u16 {
        object::elf::EM_X86_64
    }

    fn device_count(&self) -> usize {
        HOST_DEVICE_COUNT
    }

    fn init_device(&self, _device: usize) -> Result<(), BackendError> {
        Ok(())
    }

    fn load_image(
        &self,
        _device: usize,
        image: &[u8],
    ) -> Result<Box<dyn LoadedModule>, BackendError> {
        let path = temp_image_path();
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| f.write_all(image));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&path);
            return Err(e.into());
        }
        // Local binding, like separate GPU modules: two images never interpose each
        // other's globals (each has its own `__omp_offloading_fptr_map_p`).
        // SAFETY: loading runs the image's ELF constructors; the image is a device image
        // libomptarget handed us to run, exactly what this device exists to execute.
        let opened = unsafe { Library::open(Some(&path), RTLD_LAZY | RTLD_LOCAL) };
        // The mapping stays valid after the name is gone; nothing is left in /tmp.
        let _ = std::fs::remove_file(&path);
        let library = opened.map_err(|e| BackendError::Load(e.to_string()))?;
        Ok(Box::new(HostModule { library }))
    }

    fn alloc(&self, _device: usize, size: usize) -> Result<DeviceAddr, BackendError> {
        // SAFETY: malloc has no preconditions; a zero-size request asks for one byte so a
        // successful allocation is never null.
        let ptr = unsafe { malloc(size.max(1)) };
        if ptr.is_null() {
            return Err(BackendError::OutOfMemory(size));
        }
        Ok(ptr as DeviceAddr)
    }

    unsafe fn free(&self, _device: usize, addr: DeviceAddr) -> Result<(), BackendError> {
        // SAFETY: the caller promises `addr` came from `alloc` (malloc) and is dead.
        unsafe { free(addr as *mut c_void) };
        Ok(())
    }

    unsafe fn write(&self, _: usize, dst: DeviceAddr, src: &[u8]) -> Result<(), BackendError> {
        // SAFETY: the caller promises dst..dst+len is device (= process) memory; `src` is a
        // live slice; `copy` tolerates overlap.
        unsafe { std::ptr::copy(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    unsafe fn read(&self, _: usize, src: DeviceAddr, dst: &mut [u8]) -> Result<(), BackendError> {
        // SAFETY: the caller promises src..src+len is device (= process) memory.
        unsafe { std::ptr::copy(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    unsafe fn copy(
        &self,
        _: usize,
        src: DeviceAddr,
        _: usize,
        dst: DeviceAddr,
        len: usize,
    ) -> Result<(), BackendError> {
        // SAFETY: the caller promises both ranges are device (= process) memory.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
        Ok(())
    }

    unsafe fn launch(
        &self,
        _device: usize,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
    ) -> Result<(), BackendError> {
        // Outlined OpenMP regions take every argument as a pointer and return nothing.
        let cif = Cif::new(args.iter().map(|_| Type::pointer()), Type::void());
        let pointers: Vec<*mut c_void> = args.iter().map(|&a| a as *mut c_void).collect();
        let ffi_args: Vec<_> = pointers.iter().map(arg).collect();
        // SAFETY: the caller promises `kernel` is a loaded kernel taking `args.len()`
        // pointers; `pointers` outlives the call.
        unsafe { cif.call::<()>(CodePtr(kernel as *mut c_void), &ffi_args) };
        Ok(())
    }

    fn synchronize(&self, _device: usize) -> Result<(), BackendError> {
        // Every operation on the host device completes before it returns.
        Ok(())
    }
}
