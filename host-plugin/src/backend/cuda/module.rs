//! An image loaded in one device's primary context: its kernels, globals and limits by
//! name, as the CUDA driver resolves them.

use super::driver::{driver_err, Context};
use super::image::DefinedSymbols;
use crate::backend::{BackendError, DeviceAddr, LoadedModule};
use crate::support::launch_shape::Limits;
use cudarc::driver::{result, sys};
use std::ffi::CStr;

/// An image loaded in a device's primary context.
pub(super) struct CudaModule {
    pub(super) module: sys::CUmodule,
    pub(super) context: Context,
    /// The device's launch limits (the kernel's own cap is asked per kernel).
    pub(super) device_limits: Limits,
    /// What the image defines, where its symbol table could be read (a cubin): names
    /// it lacks are never asked of the driver.
    pub(super) defined: Option<DefinedSymbols>,
}

// SAFETY: the module handle is an opaque driver object usable from any thread (with its
// context current, which every method arranges); the rest is synchronised.
unsafe impl Send for CudaModule {}
// SAFETY: as above.
unsafe impl Sync for CudaModule {}

impl CudaModule {
    /// False when the image's symbol table says it does not define `name`.
    fn may_define(&self, name: &CStr) -> bool {
        self.defined
            .as_ref()
            .is_none_or(|d| d.may_define(name.to_bytes()))
    }

    fn lookup_global(&self, name: &CStr) -> Option<(DeviceAddr, usize)> {
        if !self.may_define(name) {
            return None;
        }
        self.context.make_current().ok()?;
        // SAFETY: the module is loaded until self drops.
        unsafe { result::module::get_global(self.module, name.to_owned()) }.ok()
    }
}

impl LoadedModule for CudaModule {
    fn global(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        self.lookup_global(name)
            .map(|(addr, _)| addr)
            .ok_or_else(|| BackendError::MissingSymbol(name.to_string_lossy().into_owned()))
    }

    fn global_size(&self, name: &CStr) -> Option<u64> {
        self.lookup_global(name).map(|(_, size)| size as u64)
    }

    /// A kernel, by name; its "address" is its CUfunction handle, as in LLVM's plugin.
    fn function(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        if !self.may_define(name) {
            return Err(BackendError::MissingSymbol(
                name.to_string_lossy().into_owned(),
            ));
        }
        self.context.make_current()?;
        // SAFETY: the module is loaded until self drops.
        let function = unsafe { result::module::get_function(self.module, name.to_owned()) }
            .map_err(|_| BackendError::MissingSymbol(name.to_string_lossy().into_owned()))?;
        Ok(function as DeviceAddr)
    }

    /// The device's limits, threads capped by the kernel's MAX_THREADS_PER_BLOCK and
    /// dynamic shared memory by what its static shared memory leaves.
    unsafe fn kernel_limits(
        &self,
        kernel: DeviceAddr,
        _name: &CStr,
    ) -> Result<Option<Limits>, BackendError> {
        self.context.make_current()?;
        let attribute = |attribute| {
            // SAFETY: the caller promises `kernel` is the handle `function` returned for
            // this module, which stays loaded until self drops.
            unsafe {
                result::function::get_function_attribute(kernel as sys::CUfunction, attribute)
            }
            .map_err(|e| driver_err("cuFuncGetAttribute", e))
        };
        use sys::CUfunction_attribute::*;
        let kernel_max = attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?;
        let static_shared = attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?.max(0) as u32;
        let mut limits = self.device_limits;
        limits.max_threads = (kernel_max.max(1) as u32).min(limits.max_threads);
        limits.max_dynamic_shared_memory = limits
            .max_dynamic_shared_memory
            .saturating_sub(static_shared);
        Ok(Some(limits))
    }

    fn indirect_function(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        Err(BackendError::Load(format!(
            "`{}` is a size-0 indirect entry (the function's own symbol): CUDA resolves \
             only kernels and globals by name, so a device function's address cannot be \
             looked up; emit a size-8 entry whose device global holds the function's \
             address (clang 18+ does)",
            name.to_string_lossy()
        )))
    }
}

impl Drop for CudaModule {
    fn drop(&mut self) {
        if self.context.make_current().is_ok() {
            // SAFETY: the module was loaded by load_image and is unloaded once, here.
            let _ = unsafe { result::module::unload(self.module) };
        }
    }
}
