//! A code object loaded on one device: its kernels and variables by name, as HIP
//! resolves them, its indirect functions' code addresses, and each kernel's limits.

use super::grid::DeviceLimits;
use super::result::{self, driver_failed};
use super::sys::{self, HipApi};
use crate::backend::{BackendError, DeviceAddr, LoadedModule};
use crate::elf::symbols::{ImageSymbols, Symbol};
use crate::support::diag;
use crate::support::launch_shape::Limits;
use object::elf;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::Arc;

/// A variable's symbol (`STT_OBJECT`, `STT_COMMON`): kernel descriptors `k.kd` are ones
/// too.
fn is_data(sym: &Symbol) -> bool {
    matches!(sym.kind, elf::STT_OBJECT | elf::STT_COMMON)
}

/// A code object loaded on one device.
pub(super) struct HipModule {
    pub(super) api: Arc<HipApi>,
    pub(super) device: usize,
    /// `hipModule_t`, kept as an integer so the type is Send + Sync (HIP modules may be
    /// used from any thread).
    pub(super) handle: usize,
    /// Defined dynamic symbols of the code object, by name.
    pub(super) symbols: HashMap<Vec<u8>, Symbol>,
    /// The device's launch limits (capped per kernel by `kernel_limits`).
    pub(super) limits: DeviceLimits,
}

impl HipModule {
    fn raw(&self) -> sys::HipModule {
        self.handle as sys::HipModule
    }

    fn symbol(&self, name: &CStr) -> Option<Symbol> {
        self.symbols.get(name.to_bytes()).copied()
    }

    /// An AMDGPU kernel `k` comes with its kernel descriptor `k.kd`.
    fn is_kernel(&self, name: &CStr) -> bool {
        let mut kd = name.to_bytes().to_vec();
        kd.extend_from_slice(b".kd");
        self.symbols.contains_key(&kd)
    }

    /// The kernel's largest work-group as HIP reports it (None where it cannot).
    ///
    /// # Safety
    /// `f` came from hipModuleGetFunction on this module.
    unsafe fn max_threads(&self, f: sys::HipFunction, name: &CStr) -> Option<u32> {
        // SAFETY: `f` came from hipModuleGetFunction on this module (the caller's
        // promise), which is live for as long as `self`.
        match unsafe {
            result::function::attribute(&self.api, f, sys::HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        } {
            Ok(v) => v.and_then(|v| u32::try_from(v).ok()).filter(|&v| v > 0),
            Err(e) => {
                diag::debug(|| format!("{}: {e}; no per-kernel limit", name.to_string_lossy()));
                None
            }
        }
    }

    /// The kernel's static LDS in bytes (0 where HIP cannot say).
    ///
    /// # Safety
    /// `f` came from hipModuleGetFunction on this module.
    unsafe fn static_lds(&self, f: sys::HipFunction, name: &CStr) -> u32 {
        // SAFETY: forwarded caller contract; the module is live for as long as `self`.
        match unsafe {
            result::function::attribute(&self.api, f, sys::HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
        } {
            Ok(v) => v.and_then(|v| u32::try_from(v).ok()).unwrap_or(0),
            Err(e) => {
                diag::debug(|| format!("{}: {e}; no static LDS assumed", name.to_string_lossy()));
                0
            }
        }
    }

    /// Where the code object was loaded. HIP resolves only kernels and variables by
    /// name, but an indirect function named by a size-0 entry needs its code address.
    /// ROCr's loader places a code object (ET_DYN) as one block, every segment at its
    /// ELF address plus one offset (the same offset its R_AMDGPU_RELATIVE64 relocations
    /// add), so the offset is a variable's device address minus its ELF address.
    /// Inferred from the loader's design, not yet checked on AMD hardware; size-8
    /// entries (clang 18+) do not depend on it.
    fn load_offset(&self) -> Result<u64, BackendError> {
        let mut anchors: Vec<(&Vec<u8>, &Symbol)> = self
            .symbols
            .iter()
            // Variables only: kernel descriptors (`k.kd`) are data symbols too, but HIP
            // looks up variables, not descriptors, by name.
            .filter(|(n, s)| is_data(s) && !n.ends_with(b".kd"))
            .collect();
        // Deterministic choice (HashMap order is not).
        anchors.sort_by(|a, b| a.0.cmp(b.0));
        let (name, sym) = anchors.first().ok_or_else(|| {
            BackendError::Load("the code object exports no variable to locate it by".into())
        })?;
        let name = CString::new(name.as_slice())
            .map_err(|_| BackendError::Load("a symbol name holds a NUL byte".into()))?;
        result::device::set(&self.api, self.device).map_err(driver_failed)?;
        // SAFETY: the module is live for as long as `self`.
        let (addr, _) = unsafe { result::module::get_global(&self.api, self.raw(), &name) }
            .map_err(driver_failed)?;
        Ok(addr.wrapping_sub(sym.value))
    }
}

impl LoadedModule for HipModule {
    fn global(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        let missing = || BackendError::MissingSymbol(name.to_string_lossy().into_owned());
        result::device::set(&self.api, self.device).map_err(driver_failed)?;
        // SAFETY: the module is live for as long as `self`.
        let (addr, _size) = unsafe { result::module::get_global(&self.api, self.raw(), name) }
            .map_err(|_| missing())?;
        if addr == 0 {
            return Err(missing());
        }
        Ok(addr)
    }

    /// A kernel's `hipFunction_t` (what [`HipDevice::launch`](crate::backend::BackendDevice::launch) takes).
    fn function(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        let missing = || BackendError::MissingSymbol(name.to_string_lossy().into_owned());
        // HIP would also answer for a name that is no kernel (hipErrorNotFound), but
        // the descriptor check keeps device functions from being launched.
        if !self.is_kernel(name) {
            return Err(missing());
        }
        result::device::set(&self.api, self.device).map_err(driver_failed)?;
        // SAFETY: the module is live for as long as `self`.
        let f = unsafe { result::module::get_function(&self.api, self.raw(), name) }
            .map_err(|_| missing())?;
        if f.is_null() {
            return Err(missing());
        }
        Ok(f as DeviceAddr)
    }

    /// The device's limits, capped by the kernel's own largest work-group.
    unsafe fn kernel_limits(
        &self,
        kernel: DeviceAddr,
        name: &CStr,
    ) -> Result<Option<Limits>, BackendError> {
        let f = kernel as sys::HipFunction;
        // SAFETY: forwarded caller contract (`kernel` is this module's hipFunction_t).
        let max_threads = unsafe { self.max_threads(f, name) };
        // SAFETY: as above.
        let static_lds = unsafe { self.static_lds(f, name) };
        Ok(Some(self.limits.for_kernel(max_threads, static_lds)))
    }

    /// A device function's code address (what an indirect call jumps to).
    fn indirect_function(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        match self.symbol(name) {
            Some(sym) if matches!(sym.kind, elf::STT_FUNC | elf::STT_GNU_IFUNC) => {
                Ok(self.load_offset()?.wrapping_add(sym.value))
            }
            _ => Err(BackendError::MissingSymbol(
                name.to_string_lossy().into_owned(),
            )),
        }
    }

    fn global_size(&self, name: &CStr) -> Option<u64> {
        self.symbol(name).map(|s| s.size)
    }
}

impl Drop for HipModule {
    fn drop(&mut self) {
        // Errors cannot be reported from a drop; the runtime reclaims modules at exit.
        if result::device::set(&self.api, self.device).is_ok() {
            // SAFETY: the module came from hipModuleLoadData and dies with `self`.
            let _ = unsafe { result::module::unload(&self.api, self.raw()) };
        }
    }
}

/// The defined dynamic symbols of a code object (HIP looks names up in the same table),
/// by name, from the symbol tables the core parsed for the load.
pub(super) fn dynamic_symbols(symbols: &ImageSymbols<'_>) -> HashMap<Vec<u8>, Symbol> {
    symbols
        .dynamic_definitions()
        .into_iter()
        .map(|(name, sym)| (name.to_vec(), sym))
        .collect()
}
