//! One AMD GPU (nextgen's per-device object): its ordinal, made current on the calling
//! thread before each HIP call; memory, copies, the code object it loads and launches,
//! waited for (it hands out no queues).

use super::code_object;
use super::grid::DeviceLimits;
use super::module::{dynamic_symbols, HipModule};
use super::result::{self, driver_failed};
use super::sys::{self, HipApi};
use crate::backend::{
    peer, AllocKind, BackendDevice, BackendError, DeviceAddr, DeviceCode, DeviceLimit,
    InteropHandles, LoadedModule, StagedImage,
};
use crate::elf::symbols::ImageSymbols;
use crate::support::diag;
use crate::support::launch_shape::Shape;
use offload_formats::target_id::TargetId;
use std::sync::Arc;

/// The geometry of `launch` for a plain kernel: the [`BackendDevice`] contract is "run the
/// kernel once", as the host backend does, so one work-group of one work-item.
const ONCE_GRID: [u32; 3] = [1, 1, 1];
const ONCE_BLOCK: [u32; 3] = [1, 1, 1];

/// One HIP device as discovery found it (what [`super::HipBackend::devices`] lists).
#[derive(Debug, Clone)]
pub struct HipDeviceInfo {
    /// `gcnArchName` as HIP reports it (e.g. `gfx90a:sramecc+:xnack-`), or why it could
    /// not be read.
    pub arch_name: Result<String, String>,
    /// The parsed target ID; None when the name could not be read or parsed.
    pub target_id: Option<TargetId>,
    /// LLVM 16's launch limits for the device (from HIP's attributes, else grid values).
    pub limits: DeviceLimits,
}

/// One HIP device: its ordinal, made current on this thread before each call.
pub struct HipDevice {
    pub(super) ordinal: usize,
    /// How many devices the runtime has (for what `print_device_info` says).
    pub(super) of: usize,
    pub(super) api: Arc<HipApi>,
    pub(super) info: HipDeviceInfo,
}

impl HipDevice {
    /// The runtime with this device made current on this thread.
    fn current(&self) -> Result<&Arc<HipApi>, BackendError> {
        result::device::set(&self.api, self.ordinal).map_err(driver_failed)?;
        Ok(&self.api)
    }

    /// Launch with the given geometry and wait for the kernel (the [`BackendDevice`]
    /// contract is "run to completion").
    ///
    /// # Safety
    /// `kernel` is a kernel (hipFunction_t) of an image loaded on this device taking
    /// `args.len()` pointers.
    unsafe fn launch_with(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        grid: [u32; 3],
        block: [u32; 3],
        shared_memory: u32,
    ) -> Result<(), BackendError> {
        let api = self.current()?;
        // Pointer arguments packed back to back, 8-byte aligned, as the kernel's
        // parameter segment lays them out.
        let mut packed: Vec<u8> = args.iter().flat_map(|a| a.to_ne_bytes()).collect();
        // SAFETY: the caller's contract (see above).
        unsafe {
            result::launch::module_launch_kernel(
                api,
                kernel as sys::HipFunction,
                grid,
                block,
                shared_memory,
                &mut packed,
            )
        }
        .map_err(|e| {
            BackendError::Launch(format!(
                "{e} (grid {grid:?}, block {block:?}, {shared_memory} bytes of dynamic LDS)"
            ))
        })?;
        result::device::synchronize(api).map_err(driver_failed)
    }
}

impl BackendDevice for HipDevice {
    fn index(&self) -> usize {
        self.ordinal
    }

    fn init(&self) -> Result<(), BackendError> {
        self.current().map(drop)
    }

    /// The code object for the device's target ID, out of a bare code object or a
    /// container of several (a clang offload bundle).
    fn device_code<'a>(&self, image: &'a [u8]) -> Result<DeviceCode<'a>, BackendError> {
        let device = self.ordinal;
        let info = &self.info;
        let device_id = info.target_id.as_ref().ok_or_else(|| {
            BackendError::Load(format!(
                "device {device}: unknown target ID ({}), cannot choose a code object",
                match &info.arch_name {
                    Ok(name) => format!("gcnArchName `{name}` does not parse"),
                    Err(e) => e.clone(),
                }
            ))
        })?;
        let objects =
            code_object::code_objects(image).map_err(|e| BackendError::Load(e.to_string()))?;
        let chosen = code_object::select(&objects, device_id)
            .map_err(|e| BackendError::Load(format!("device {device}: {e}")))?;
        diag::debug(|| {
            format!(
                "device {device} ({device_id}): loading the {} code object ({} bytes)",
                chosen.target_id,
                chosen.bytes.len()
            )
        });
        Ok(DeviceCode::from(chosen.bytes.clone()))
    }

    /// `code` is the code object [`BackendDevice::device_code`] chose: loaded as it is.
    fn load_image(
        &self,
        code: &[u8],
        symbols: Option<&ImageSymbols<'_>>,
        _staged: Option<StagedImage>,
    ) -> Result<Box<dyn LoadedModule>, BackendError> {
        let symbols = symbols.map(dynamic_symbols).ok_or_else(|| {
            BackendError::Load(
                "a HIP code object loads with the symbol tables Backend::inspect_image read".into(),
            )
        })?;
        let api = self.current()?;
        let handle = result::module::load_data(api, code).map_err(driver_failed)?;
        Ok(Box::new(HipModule {
            api: Arc::clone(api),
            device: self.ordinal,
            handle: handle as usize,
            symbols,
            limits: self.info.limits,
        }))
    }

    /// Device memory for every kind, as before pinned and managed memory were asked of
    /// HIP here.
    fn alloc(&self, size: usize, _kind: AllocKind) -> Result<DeviceAddr, BackendError> {
        let api = self.current()?;
        // A zero-size request asks for one byte so a successful allocation is non-null.
        match result::memory::malloc(api, size.max(1)) {
            Ok(0) => Err(BackendError::OutOfMemory(size)),
            Ok(p) => Ok(p),
            Err(e) if e.code == 2 => Err(BackendError::OutOfMemory(size)),
            Err(e) => Err(driver_failed(e)),
        }
    }

    fn pools_memory(&self) -> bool {
        true
    }

    unsafe fn free(&self, addr: DeviceAddr) -> Result<(), BackendError> {
        let api = self.current()?;
        // SAFETY: forwarded caller contract (`addr` came from `alloc` and is dead).
        unsafe { result::memory::free(api, addr) }.map_err(driver_failed)
    }

    unsafe fn write(&self, dst: DeviceAddr, src: &[u8]) -> Result<(), BackendError> {
        if src.is_empty() {
            return Ok(());
        }
        let api = self.current()?;
        // SAFETY: forwarded caller contract (dst..dst+len is this device's memory).
        unsafe { result::memory::copy_to_device(api, dst, src) }.map_err(driver_failed)
    }

    unsafe fn read(&self, src: DeviceAddr, dst: &mut [u8]) -> Result<(), BackendError> {
        if dst.is_empty() {
            return Ok(());
        }
        let api = self.current()?;
        // SAFETY: forwarded caller contract (src..src+len is this device's memory).
        unsafe { result::memory::copy_to_host(api, dst, src) }.map_err(driver_failed)
    }

    unsafe fn copy(
        &self,
        src: DeviceAddr,
        to: &dyn BackendDevice,
        dst: DeviceAddr,
        len: usize,
    ) -> Result<(), BackendError> {
        if len == 0 {
            return Ok(());
        }
        let to = peer::<HipDevice>(to)?;
        self.current()?;
        let api = to.current()?;
        // SAFETY: forwarded caller contract (both ranges are memory of their devices).
        unsafe {
            if to.ordinal == self.ordinal {
                result::memory::copy_on_device(api, dst, src, len)
            } else {
                result::memory::copy_peer(api, dst, to.ordinal, src, self.ordinal, len)
            }
        }
        .map_err(driver_failed)
    }

    /// With a shape, its grid; without, once: one work-group of one work-item. Waited
    /// for (and no queues: this backend hands none out).
    unsafe fn launch(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        shape: Option<Shape>,
    ) -> Result<(), BackendError> {
        let (grid, block, shared) = shape.map_or((ONCE_GRID, ONCE_BLOCK, 0), |shape| {
            (
                [shape.blocks, 1, 1],
                [shape.threads, 1, 1],
                shape.dynamic_shared_memory,
            )
        });
        // SAFETY: forwarded caller contract.
        unsafe { self.launch_with(kernel, args, grid, block, shared) }
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        let api = self.current()?;
        result::device::synchronize(api).map_err(driver_failed)
    }

    /// hipDeviceSetLimit on the device; a runtime without it refuses the setting.
    fn set_limit(&self, limit: DeviceLimit, bytes: usize) -> Result<bool, BackendError> {
        let api = self.current()?;
        let (limit, name) = match limit {
            DeviceLimit::StackSize => (sys::HIP_LIMIT_STACK_SIZE, "hipLimitStackSize"),
            DeviceLimit::HeapSize => (sys::HIP_LIMIT_MALLOC_HEAP_SIZE, "hipLimitMallocHeapSize"),
        };
        match result::device::set_limit(api, limit, bytes).map_err(driver_failed)? {
            true => Ok(true),
            false => Err(BackendError::Invalid(format!(
                "this HIP runtime has no hipDeviceSetLimit to set {name}"
            ))),
        }
    }

    /// HIP has no contexts: the device is its ordinal.
    fn interop_handles(&self) -> Result<InteropHandles, BackendError> {
        self.current()?;
        Ok(InteropHandles {
            context: 0,
            device: self.ordinal as u64,
        })
    }

    fn device_info(&self) -> Vec<String> {
        let info = &self.info;
        vec![
            format!(
                "device {} of {}: an AMD GPU through HIP (libamdhip64)",
                self.ordinal, self.of
            ),
            match &info.arch_name {
                Ok(name) => format!("gcnArchName: {name}"),
                Err(e) => format!("gcnArchName: unknown ({e})"),
            },
            format!("launch limits: {:?}", info.limits),
            "queues: none (copies and launches complete before they return)".into(),
        ]
    }
}
