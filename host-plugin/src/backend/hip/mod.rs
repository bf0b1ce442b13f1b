//! AMD GPUs through the HIP runtime, loaded at run time.
//!
//! `libamdhip64.so` is opened with dlopen when the backend is created: from the path in
//! `OMPTARGET_RS_HIP_LIBRARY` if set (used by the tests to point at a stand-in), else
//! by soname (`libamdhip64.so`, then `libamdhip64.so.6`) through the dynamic loader's
//! search. Without the runtime, or with no AMD GPU, the backend has 0 devices and says
//! nothing (only with the plugin's debug output on), so libomptarget carries on.
//!
//! Layers, as in cudarc: [`sys`] (function pointer types and the loaded table),
//! [`result`] (one `Result`-returning function per call), this module (the [`Backend`]).
//! [`code_object`] picks, among the code objects of an image, the one whose target ID
//! suits the device (xnack/sramecc rules). [`grid`] holds LLVM 16's AMDGPU launch limits.
//!
//! Launch geometry: the plugin core keeps the kernels, reads each one's
//! `<kernel>_exec_mode` and sizes the grid by LLVM 16's rules ([`crate::kernels`]) from
//! the limits `kernel_limits` reports here (the device's, capped by the kernel's own
//! work-group limit); this module only launches the shape it is given, or, for a plain
//! kernel launched without a request, one work-item (`launch`). The device environment
//! is written by the plugin core, as for CUDA.
//!
//! What is known and what is not: this backend has run only against the stand-in HIP
//! library of `tests/tests/amdgpu_hip_contract.rs`, never on AMD hardware.

pub mod code_object;
pub mod grid;
pub mod result;
pub mod sys;

use super::{
    AllocKind, Backend, BackendDevice, BackendError, DeviceAddr, DeviceCode, DeviceLimit,
    InteropHandles, LoadedModule, StagedImage,
};
use crate::diag;
use crate::launch_shape::{Limits, Shape};
use crate::symbols::{ImageSymbols, Symbol};
use grid::{DeviceAttributes, DeviceLimits};
use object::elf;
use offload_formats::target_id::TargetId;
use result::{device, function, launch, memory, module, HipCallError};
use std::collections::HashMap;
use std::ffi::{c_int, CStr, CString};
use std::sync::Arc;
use sys::HipApi;

/// Environment variable naming the HIP runtime library to load instead of the default.
pub const HIP_LIBRARY_ENV: &str = "OMPTARGET_RS_HIP_LIBRARY";
/// The sonames tried, in order, when the variable is not set.
pub const DEFAULT_HIP_LIBRARIES: &[&str] = &["libamdhip64.so", "libamdhip64.so.6"];

/// The geometry of `launch` for a plain kernel: the [`BackendDevice`] contract is "run the
/// kernel once", as the host backend does, so one work-group of one work-item.
const ONCE_GRID: [u32; 3] = [1, 1, 1];
const ONCE_BLOCK: [u32; 3] = [1, 1, 1];

/// One HIP device as the backend sees it.
#[derive(Debug, Clone)]
pub struct HipDevice {
    /// `gcnArchName` as HIP reports it (e.g. `gfx90a:sramecc+:xnack-`), or why it could
    /// not be read.
    pub arch_name: Result<String, String>,
    /// The parsed target ID; None when the name could not be read or parsed.
    pub target_id: Option<TargetId>,
    /// LLVM 16's launch limits for the device (from HIP's attributes, else grid values).
    pub limits: DeviceLimits,
}

/// A device attribute, None when HIP lacks the call, fails, or answers a non-positive
/// value (each then falls back to LLVM 16's grid value).
fn positive_attribute(api: &HipApi, device: usize, attribute: c_int) -> Option<u32> {
    match device::attribute(api, device, attribute) {
        Ok(Some(v)) => u32::try_from(v).ok().filter(|&v| v > 0),
        Ok(None) => None,
        Err(e) => {
            diag::debug(|| format!("device {device}: {e}; using LLVM 16's grid value"));
            None
        }
    }
}

fn device_attributes(api: &HipApi, device: usize) -> DeviceAttributes {
    DeviceAttributes {
        warp_size: positive_attribute(api, device, sys::HIP_DEVICE_ATTRIBUTE_WARP_SIZE),
        max_block_dim_x: positive_attribute(api, device, sys::HIP_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X),
        max_grid_dim_x: positive_attribute(api, device, sys::HIP_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
        compute_units: positive_attribute(
            api,
            device,
            sys::HIP_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        ),
    }
}

struct Runtime {
    api: Arc<HipApi>,
    devices: Vec<HipDevice>,
}

/// The AMDGPU backend over the HIP runtime. With no runtime it has no devices.
pub struct HipBackend {
    runtime: Option<Runtime>,
}

/// A failed HIP call as the typed driver error.
fn driver_failed(e: HipCallError) -> BackendError {
    BackendError::Driver {
        call: e.call,
        code: e.code,
        name: e.message,
    }
}

impl Default for HipBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl HipBackend {
    /// The backend of the installed HIP runtime (or of `OMPTARGET_RS_HIP_LIBRARY`).
    /// Never fails: any problem leaves it with 0 devices, reported only as debug output.
    pub fn new() -> Self {
        let candidates: Vec<String> = match std::env::var(HIP_LIBRARY_ENV) {
            Ok(path) if !path.is_empty() => vec![path],
            _ => DEFAULT_HIP_LIBRARIES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        };
        let mut reasons = Vec::new();
        for path in &candidates {
            match Self::from_library(path) {
                Ok(backend) => return backend,
                Err(e) => reasons.push(format!("{path}: {e}")),
            }
        }
        diag::debug(|| format!("no HIP runtime, 0 AMDGPU devices ({})", reasons.join("; ")));
        HipBackend { runtime: None }
    }

    /// The backend of the HIP runtime at `path` (a path, or a soname to search for).
    /// Fails if the library cannot be opened, lacks an entry point, or cannot count its
    /// devices; a runtime that reports no devices is a backend with 0 devices.
    pub fn from_library(path: &str) -> Result<Self, String> {
        let api = HipApi::load(path)?;
        let count = device::count(&api).map_err(|e| e.to_string())?;
        let teams_per_cu = grid::teams_per_cu_from_env();
        let devices = (0..count)
            .map(|d| {
                let arch_name = device::gcn_arch_name(&api, d).map_err(|e| e.to_string());
                let target_id = arch_name
                    .as_ref()
                    .ok()
                    .and_then(|name| TargetId::parse(name).ok());
                let limits = DeviceLimits::new(
                    device_attributes(&api, d),
                    target_id.as_ref().map(|id| id.processor.as_str()),
                    teams_per_cu,
                );
                HipDevice {
                    arch_name,
                    target_id,
                    limits,
                }
            })
            .collect();
        Ok(HipBackend {
            runtime: Some(Runtime {
                api: Arc::new(api),
                devices,
            }),
        })
    }

    /// The devices found (empty without a runtime).
    pub fn devices(&self) -> &[HipDevice] {
        self.runtime.as_ref().map_or(&[], |r| &r.devices)
    }

    /// Does `image` hold a code object that can run on at least one of the devices?
    /// (What `is_valid_binary` should ask, so that libomptarget hands each device an
    /// image built for it.)
    pub fn accepts_image(&self, image: &[u8]) -> bool {
        let Ok(objects) = code_object::code_objects(image) else {
            return false;
        };
        self.devices().iter().any(|d| {
            d.target_id
                .as_ref()
                .is_some_and(|id| code_object::select(&objects, id).is_ok())
        })
    }
}

/// One HIP device: its ordinal, made current on this thread before each call.
pub struct HipGpu {
    ordinal: usize,
    /// How many devices the runtime has (for what `print_device_info` says).
    of: usize,
    api: Arc<HipApi>,
    info: HipDevice,
}

impl HipGpu {
    /// The runtime with this device made current on this thread.
    fn current(&self) -> Result<&Arc<HipApi>, BackendError> {
        device::set(&self.api, self.ordinal).map_err(driver_failed)?;
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
            launch::module_launch_kernel(
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
        device::synchronize(api).map_err(driver_failed)
    }
}

/// A variable's symbol (`STT_OBJECT`, `STT_COMMON`): kernel descriptors `k.kd` are ones
/// too.
fn is_data(sym: &Symbol) -> bool {
    matches!(sym.kind, elf::STT_OBJECT | elf::STT_COMMON)
}

/// A code object loaded on one device.
struct HipModule {
    api: Arc<HipApi>,
    device: usize,
    /// `hipModule_t`, kept as an integer so the type is Send + Sync (HIP modules may be
    /// used from any thread).
    handle: usize,
    /// Defined dynamic symbols of the code object, by name.
    symbols: HashMap<Vec<u8>, Symbol>,
    /// The device's launch limits (capped per kernel by `kernel_limits`).
    limits: DeviceLimits,
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
            function::attribute(&self.api, f, sys::HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
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
            function::attribute(&self.api, f, sys::HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
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
        device::set(&self.api, self.device).map_err(driver_failed)?;
        // SAFETY: the module is live for as long as `self`.
        let (addr, _) =
            unsafe { module::get_global(&self.api, self.raw(), &name) }.map_err(driver_failed)?;
        Ok(addr.wrapping_sub(sym.value))
    }
}

impl LoadedModule for HipModule {
    fn global(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        let missing = || BackendError::MissingSymbol(name.to_string_lossy().into_owned());
        device::set(&self.api, self.device).map_err(driver_failed)?;
        // SAFETY: the module is live for as long as `self`.
        let (addr, _size) =
            unsafe { module::get_global(&self.api, self.raw(), name) }.map_err(|_| missing())?;
        if addr == 0 {
            return Err(missing());
        }
        Ok(addr)
    }

    /// A kernel's `hipFunction_t` (what [`HipGpu::launch`](crate::backend::BackendDevice::launch) takes).
    fn function(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        let missing = || BackendError::MissingSymbol(name.to_string_lossy().into_owned());
        // HIP would also answer for a name that is no kernel (hipErrorNotFound), but
        // the descriptor check keeps device functions from being launched.
        if !self.is_kernel(name) {
            return Err(missing());
        }
        device::set(&self.api, self.device).map_err(driver_failed)?;
        // SAFETY: the module is live for as long as `self`.
        let f =
            unsafe { module::get_function(&self.api, self.raw(), name) }.map_err(|_| missing())?;
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
        if device::set(&self.api, self.device).is_ok() {
            // SAFETY: the module came from hipModuleLoadData and dies with `self`.
            let _ = unsafe { module::unload(&self.api, self.raw()) };
        }
    }
}

/// The defined dynamic symbols of a code object (HIP looks names up in the same table),
/// by name, from the symbol tables the core parsed for the load.
fn dynamic_symbols(symbols: &ImageSymbols<'_>) -> HashMap<Vec<u8>, Symbol> {
    symbols
        .dynamic_definitions()
        .into_iter()
        .map(|(name, sym)| (name.to_vec(), sym))
        .collect()
}

impl Backend for HipBackend {
    fn elf_machine(&self) -> u16 {
        object::elf::EM_AMDGPU
    }

    /// libomptarget offers every AMDGPU image to every device: take only code objects
    /// whose target ID (gfx, xnack, sramecc) this device can run.
    fn is_compatible(&self, image: &[u8]) -> bool {
        HipBackend::accepts_image(self, image)
    }

    fn device_count(&self) -> usize {
        self.devices().len()
    }

    /// Device `index` of the runtime (the plugin asks only below the device count, which
    /// is 0 without a runtime).
    fn device(&self, index: usize) -> Arc<dyn BackendDevice> {
        let runtime = self
            .runtime
            .as_ref()
            .expect("HIP devices exist only with a runtime");
        Arc::new(HipGpu {
            ordinal: index,
            of: runtime.devices.len(),
            api: Arc::clone(&runtime.api),
            info: runtime.devices[index].clone(),
        })
    }

    fn is_valid_image(&self, image: &[u8]) -> bool {
        self.accepts_image(image)
    }
}

impl BackendDevice for HipGpu {
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
        let handle = module::load_data(api, code).map_err(driver_failed)?;
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
        match memory::malloc(api, size.max(1)) {
            Ok(0) => Err(BackendError::OutOfMemory(size)),
            Ok(p) => Ok(p),
            Err(e) if e.code == 2 => Err(BackendError::OutOfMemory(size)),
            Err(e) => Err(driver_failed(e)),
        }
    }

    unsafe fn free(&self, addr: DeviceAddr) -> Result<(), BackendError> {
        let api = self.current()?;
        // SAFETY: forwarded caller contract (`addr` came from `alloc` and is dead).
        unsafe { memory::free(api, addr) }.map_err(driver_failed)
    }

    unsafe fn write(&self, dst: DeviceAddr, src: &[u8]) -> Result<(), BackendError> {
        if src.is_empty() {
            return Ok(());
        }
        let api = self.current()?;
        // SAFETY: forwarded caller contract (dst..dst+len is this device's memory).
        unsafe { memory::copy_to_device(api, dst, src) }.map_err(driver_failed)
    }

    unsafe fn read(&self, src: DeviceAddr, dst: &mut [u8]) -> Result<(), BackendError> {
        if dst.is_empty() {
            return Ok(());
        }
        let api = self.current()?;
        // SAFETY: forwarded caller contract (src..src+len is this device's memory).
        unsafe { memory::copy_to_host(api, dst, src) }.map_err(driver_failed)
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
        let to = super::peer::<HipGpu>(to)?;
        self.current()?;
        let api = to.current()?;
        // SAFETY: forwarded caller contract (both ranges are memory of their devices).
        unsafe {
            if to.ordinal == self.ordinal {
                memory::copy_on_device(api, dst, src, len)
            } else {
                memory::copy_peer(api, dst, to.ordinal, src, self.ordinal, len)
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
        device::synchronize(api).map_err(driver_failed)
    }

    /// hipDeviceSetLimit on the device; a runtime without it refuses the setting.
    fn set_limit(&self, limit: DeviceLimit, bytes: usize) -> Result<bool, BackendError> {
        let api = self.current()?;
        let (limit, name) = match limit {
            DeviceLimit::StackSize => (sys::HIP_LIMIT_STACK_SIZE, "hipLimitStackSize"),
            DeviceLimit::HeapSize => (sys::HIP_LIMIT_MALLOC_HEAP_SIZE, "hipLimitMallocHeapSize"),
        };
        match device::set_limit(api, limit, bytes).map_err(driver_failed)? {
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
