//! NVIDIA GPUs through the CUDA driver API (cudarc's `sys`/`result` layers; device
//! addresses are raw `CUdeviceptr`s here, so cudarc's typed safe layer does not fit).
//!
//! libcuda is opened at run time: without it, or without a GPU, the backend has 0
//! devices and says nothing, and libomptarget carries on with its other plugins.
//!
//! Each device runs in its primary context (shared with any CUDA runtime code in the
//! process, as LLVM's plugin does). A queue (`__tgt_async_info::Queue`) is a CUDA
//! stream: launches, copies and device-to-device copies given a queue are enqueued on
//! its stream and return at once; `queue_finish` waits for the stream and
//! `queue_done` polls it. Work given no queue runs on the legacy default stream and
//! completes before it returns; the queues' streams are blocking streams, so such work
//! is also ordered after what they hold. Finished streams are kept for the next queue
//! instead of being destroyed (LLVM's plugin pools them too). Events are CUDA events;
//! `data_lock` page-locks with cuMemHostRegister.

pub mod image;

use super::{
    unknown, AllocKind, Backend, BackendError, DeviceAddr, DeviceLimit, EventHandle, HandleKind,
    HandleRegistry, InteropHandles, LoadedModule, QueueHandle, StagedImage,
};
use crate::launch_shape::{ExecMode, Limits, Shape};
use crate::locking::lock;
use cudarc::driver::{result, sys, DriverError};
use image::{CudaImage, DefinedSymbols};
use std::collections::{HashMap, HashSet};
use std::ffi::{c_void, CStr};
use std::sync::Mutex;

/// The device environment is written for every GPU kind by the plugin core
/// ([`crate::device_env`]); these names, offload-formats' as the core's are, stay for
/// the tests and tools that asked here.
pub use offload_formats::device_runtime::DeviceEnvironmentLayout;

/// The names of the device-environment global the plugin writes, newest first.
pub fn device_environment_names() -> [&'static CStr; 2] {
    offload_formats::device_runtime::DEVICE_ENVIRONMENT_NAMES
}

/// LLVM 16's NVPTX grid values (OMPGridValues.h): threads per block and blocks without
/// clauses, and the most teams a launch gets (the plugin caps it by the grid limit too).
const DEFAULT_THREADS: u32 = 128;
const DEFAULT_BLOCKS: u32 = 3200;
const MAX_TEAMS: u32 = 1 << 16;
/// The dynamic shared memory a launch gets without opting in: above it, the kernel's
/// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES must be raised first.
const SHARED_MEMORY_WITHOUT_OPT_IN: u32 = 48 << 10;

fn driver_err(call: &'static str, e: DriverError) -> BackendError {
    let name = e
        .error_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("CUresult {}", e.0 as i32));
    BackendError::Driver {
        call,
        code: e.0 as i32,
        name,
    }
}

/// A primary context. Contexts are driver objects usable from any thread.
#[derive(Clone, Copy)]
struct Context(sys::CUcontext);
// SAFETY: a CUcontext is an opaque driver handle; the driver API is thread-safe and a
// context may be made current on any thread.
unsafe impl Send for Context {}
// SAFETY: as above; the handle itself is never mutated.
unsafe impl Sync for Context {}

impl Context {
    fn make_current(self) -> Result<(), BackendError> {
        // SAFETY: the context was retained and is released only when the backend drops.
        unsafe { result::ctx::set_current(self.0) }.map_err(|e| driver_err("cuCtxSetCurrent", e))
    }
}

/// One GPU as the backend sees it: what discovery read, and its primary context once
/// retained.
struct CudaDevice {
    handle: sys::CUdevice,
    compute_capability: (i32, i32),
    name: String,
    max_threads: u32,
    block_limit: u32,
    /// Total device memory in bytes (0 if the driver did not say).
    total_memory: usize,
    multiprocessors: i32,
    /// Resident threads per multiprocessor (for the device environment's parallelism).
    threads_per_multiprocessor: i32,
    /// The most shared memory a block can have once its kernel opts in
    /// (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), static and dynamic.
    shared_memory_per_block: u32,
    context: Mutex<Option<Context>>,
    /// Streams of finished queues, handed out again by `queue_create`.
    idle_streams: Mutex<Vec<QueueHandle>>,
}

impl CudaDevice {
    /// The device's launch limits; `max_threads` is capped per kernel.
    fn limits(&self) -> Limits {
        Limits {
            warp_size: 32,
            max_threads: self.max_threads,
            block_limit: self.block_limit,
            default_threads: DEFAULT_THREADS,
            default_blocks: DEFAULT_BLOCKS,
            max_dynamic_shared_memory: self.shared_memory_per_block,
        }
    }
}

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

pub struct CudaBackend {
    devices: Vec<CudaDevice>,
    /// Why there are no devices, for tests and tools to say (None when there are some).
    unavailable: Option<String>,
    /// Page-locked host allocations (TARGET_ALLOC_HOST): freed with cuMemFreeHost.
    host_allocations: Mutex<HashSet<DeviceAddr>>,
    /// The streams and events handed out: only these reach the driver.
    handles: HandleRegistry,
    /// Host buffers page-locked by `lock_host`, by host address: only these are unlocked.
    locked: Mutex<HashMap<DeviceAddr, LockedBuffer>>,
}

impl Default for CudaBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// Find the devices, or the reason there are none. Never panics: cudarc panics on a
/// driver that lacks a symbol it binds, so discovery runs under catch_unwind.
fn discover() -> Result<Vec<CudaDevice>, String> {
    // SAFETY: is_culib_present only tries to dlopen libcuda under its usual names.
    if !unsafe { sys::is_culib_present() } {
        return Err("libcuda.so could not be loaded".into());
    }
    let found = std::panic::catch_unwind(|| -> Result<Vec<CudaDevice>, String> {
        result::init().map_err(|e| format!("cuInit: {e:?}"))?;
        let count = result::device::get_count().map_err(|e| format!("cuDeviceGetCount: {e:?}"))?;
        let mut devices = Vec::new();
        for ordinal in 0..count {
            let handle = result::device::get(ordinal)
                .map_err(|e| format!("cuDeviceGet({ordinal}): {e:?}"))?;
            let attr = |a| {
                // SAFETY: `handle` came from cuDeviceGet.
                unsafe { result::device::get_attribute(handle, a) }
                    .map_err(|e| format!("cuDeviceGetAttribute({a:?}): {e:?}"))
            };
            use sys::CUdevice_attribute::*;
            devices.push(CudaDevice {
                handle,
                compute_capability: (
                    attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                    attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
                ),
                name: result::device::get_name(handle).unwrap_or_default(),
                max_threads: attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?.max(1) as u32,
                block_limit: (attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?.max(1) as u32)
                    .min(MAX_TEAMS),
                // SAFETY: `handle` came from cuDeviceGet.
                total_memory: unsafe { result::device::total_mem(handle) }.unwrap_or(0),
                multiprocessors: attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
                threads_per_multiprocessor: attr(
                    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                )?,
                shared_memory_per_block: attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
                    .or_else(|_| attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK))?
                    .max(0) as u32,
                context: Mutex::new(None),
                idle_streams: Mutex::new(Vec::new()),
            });
        }
        Ok(devices)
    });
    match found {
        Ok(r) => r,
        Err(_) => Err("the CUDA driver lacks a function this plugin needs".into()),
    }
}

impl CudaBackend {
    pub fn new() -> Self {
        let (devices, unavailable) = match discover() {
            Ok(d) if d.is_empty() => (d, Some("the driver reports no GPU".into())),
            Ok(d) => (d, None),
            Err(reason) => (Vec::new(), Some(reason)),
        };
        CudaBackend {
            devices,
            unavailable,
            host_allocations: Mutex::new(HashSet::new()),
            handles: HandleRegistry::default(),
            locked: Mutex::new(HashMap::new()),
        }
    }

    /// Why this backend has no devices (no driver, no GPU), None if it has some.
    pub fn unavailable_reason(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// A device's compute capability (major, minor) and name.
    pub fn describe(&self, device: usize) -> Option<((i32, i32), &str)> {
        self.devices
            .get(device)
            .map(|d| (d.compute_capability, d.name.as_str()))
    }

    fn device(&self, device: usize) -> Result<&CudaDevice, BackendError> {
        self.devices
            .get(device)
            .ok_or(BackendError::NoDevices("cuda"))
    }

    /// An event and the queue it is recorded on or waited from must both be live.
    fn check_event_and_queue(
        &self,
        device: usize,
        event: EventHandle,
        queue: Option<QueueHandle>,
    ) -> Result<(), BackendError> {
        self.handles.check(HandleKind::Event, device, event)?;
        queue.map_or(Ok(()), |q| self.handles.check(HandleKind::Queue, device, q))
    }

    /// Retain the device's primary context on first use and make it current here.
    fn enter(&self, device: usize) -> Result<Context, BackendError> {
        let dev = self.device(device)?;
        let mut slot = lock(&dev.context);
        let ctx = match *slot {
            Some(c) => c,
            None => {
                // SAFETY: `dev.handle` came from cuDeviceGet; the retain is balanced by
                // the release in Drop.
                let c = unsafe { result::primary_ctx::retain(dev.handle) }
                    .map_err(|e| driver_err("cuDevicePrimaryCtxRetain", e))?;
                *slot = Some(Context(c));
                Context(c)
            }
        };
        ctx.make_current()?;
        Ok(ctx)
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        for dev in &self.devices {
            let idle = std::mem::take(&mut *lock(&dev.idle_streams));
            if let Some(context) = *lock(&dev.context) {
                if context.make_current().is_ok() {
                    for stream in idle {
                        // SAFETY: an idle stream was created by queue_create in this
                        // context, finished, and is referenced nowhere else.
                        let _ = unsafe { result::stream::destroy(stream as sys::CUstream) };
                    }
                }
            }
            if lock(&dev.context).take().is_some() {
                // SAFETY: balances the retain in `enter`; modules were unloaded first
                // (the plugin drops its images before its backend).
                let _ = unsafe { result::primary_ctx::release(dev.handle) };
            }
        }
    }
}

/// An image loaded in a device's primary context.
struct CudaModule {
    module: sys::CUmodule,
    context: Context,
    /// The device's launch limits (the kernel's own cap is asked per kernel).
    device_limits: Limits,
    /// What the image defines, where its symbol table could be read (a cubin): names
    /// it lacks are never asked of the driver.
    defined: Option<DefinedSymbols>,
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

impl Backend for CudaBackend {
    fn elf_machine(&self) -> u16 {
        object::elf::EM_CUDA
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn init_device(&self, device: usize) -> Result<(), BackendError> {
        self.enter(device).map(|_| ())
    }

    fn is_compatible(&self, bytes: &[u8]) -> bool {
        match image::classify(bytes) {
            Some(CudaImage::Cubin { sm }) => self.devices.iter().any(|d| {
                let (major, minor) = d.compute_capability;
                image::cubin_runs_on(sm, major, minor)
            }),
            Some(CudaImage::Fatbin | CudaImage::Ptx) => true,
            None => false,
        }
    }

    /// Accept cubins (checked for the ELF machine; symbols come from the module).
    fn inspect_image<'a>(
        &self,
        image: &'a [u8],
    ) -> Result<Option<crate::image::ImageSymbols<'a>>, crate::image::ImageError> {
        match image::classify(image) {
            Some(_) => Ok(None),
            None => match crate::image::elf_machine(image) {
                Some(found) => Err(crate::image::ImageError::WrongMachine {
                    found,
                    expected: object::elf::EM_CUDA,
                }),
                None => Err(crate::image::ImageError::NotElf(
                    "not a cubin, fatbinary or PTX".into(),
                )),
            },
        }
    }

    fn load_image(
        &self,
        device: usize,
        bytes: &[u8],
        _staged: Option<StagedImage>,
    ) -> Result<Box<dyn LoadedModule>, BackendError> {
        let dev = self.device(device)?;
        let kind = image::classify(bytes)
            .ok_or_else(|| BackendError::Load("not a cubin, fatbinary or PTX".into()))?;
        if let CudaImage::Cubin { sm } = kind {
            let (major, minor) = dev.compute_capability;
            if !image::cubin_runs_on(sm, major, minor) {
                return Err(BackendError::Load(format!(
                    "the cubin is for sm_{sm}; device {device} ({}) is sm_{major}{minor}",
                    dev.name
                )));
            }
        }
        // cuModuleLoadData reads PTX up to its NUL; give it one. Every image is copied to
        // an aligned buffer the driver may read as 8-byte words.
        let mut words = vec![0u64; bytes.len() / 8 + 1];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        let context = self.enter(device)?;
        // SAFETY: `words` holds the whole image plus a terminating zero byte and lives
        // across the call; the context is current.
        let module = unsafe { result::module::load_data(words.as_ptr().cast::<c_void>()) }
            .map_err(|e| driver_err("cuModuleLoadData", e))?;
        let loaded = CudaModule {
            module,
            context,
            device_limits: dev.limits(),
            defined: DefinedSymbols::of_image(bytes),
        };
        Ok(Box::new(loaded))
    }

    fn alloc(
        &self,
        device: usize,
        size: usize,
        kind: AllocKind,
    ) -> Result<DeviceAddr, BackendError> {
        self.enter(device)?;
        // The driver refuses zero-byte allocations; a one-byte one keeps the address unique.
        let size = size.max(1);
        let oom = |_| BackendError::OutOfMemory(size);
        // SAFETY: the device's context is current; the memory is returned uninitialised,
        // which is what data_alloc promises.
        unsafe {
            match kind {
                AllocKind::Default | AllocKind::Device => result::malloc_sync(size).map_err(oom),
                AllocKind::Shared => {
                    result::malloc_managed(size, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL)
                        .map_err(oom)
                }
                AllocKind::Host => {
                    let p = result::malloc_host(size, 0).map_err(oom)? as DeviceAddr;
                    lock(&self.host_allocations).insert(p);
                    Ok(p)
                }
            }
        }
    }

    unsafe fn free(&self, device: usize, addr: DeviceAddr) -> Result<(), BackendError> {
        self.enter(device)?;
        let pinned = lock(&self.host_allocations).remove(&addr);
        // SAFETY: the caller promises `addr` came from alloc on this device and is
        // dead; pinned host memory is told apart by the set it was recorded in.
        unsafe {
            if pinned {
                result::free_host(addr as *mut c_void)
            } else {
                result::free_sync(addr)
            }
        }
        .map_err(|e| driver_err("freeing", e))
    }

    unsafe fn write(&self, device: usize, dst: DeviceAddr, src: &[u8]) -> Result<(), BackendError> {
        self.enter(device)?;
        // SAFETY: the caller promises dst..dst+len is memory of this device; `src` is a
        // live slice; the copy is synchronous.
        unsafe { result::memcpy_htod_sync(dst, src) }.map_err(|e| driver_err("cuMemcpyHtoD", e))
    }

    unsafe fn read(
        &self,
        device: usize,
        src: DeviceAddr,
        dst: &mut [u8],
    ) -> Result<(), BackendError> {
        self.enter(device)?;
        // SAFETY: the caller promises src..src+len is memory of this device; the copy is
        // synchronous.
        unsafe { result::memcpy_dtoh_sync(dst, src) }.map_err(|e| driver_err("cuMemcpyDtoH", e))
    }

    unsafe fn copy(
        &self,
        src_device: usize,
        src: DeviceAddr,
        dst_device: usize,
        dst: DeviceAddr,
        len: usize,
    ) -> Result<(), BackendError> {
        self.enter(dst_device)?;
        self.device(src_device)?;
        // SAFETY: the caller promises both ranges are device memory; with unified
        // addressing cuMemcpy finds each side's device from the address.
        unsafe { sys::cuMemcpy(dst, src, len) }
            .result()
            .map_err(|e| driver_err("cuMemcpy", e))
    }

    /// A plain CUDA kernel is run by every thread: SPMD's rules.
    fn untagged_kernel_mode(&self) -> Option<ExecMode> {
        Some(ExecMode::Spmd)
    }

    /// Without a shape: one block of one thread (the core asks for that only for a
    /// kernel without an exec mode launched without a request, and CUDA records those as
    /// SPMD, [`Backend::untagged_kernel_mode`], so through the core every CUDA launch is
    /// shaped). On a queue: enqueued on its stream, not waited for.
    unsafe fn launch(
        &self,
        device: usize,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        shape: Option<Shape>,
        queue: Option<QueueHandle>,
    ) -> Result<(), BackendError> {
        if let Some(queue) = queue {
            self.handles.check(HandleKind::Queue, device, queue)?;
        }
        self.enter(device)?;
        let shape = shape.unwrap_or(Shape {
            blocks: 1,
            threads: 1,
            dynamic_shared_memory: 0,
        });
        if shape.dynamic_shared_memory > SHARED_MEMORY_WITHOUT_OPT_IN {
            // SAFETY: as for the launch below: `kernel` is a live CUfunction of this
            // device; the core checked the size against the kernel's limit.
            unsafe {
                result::function::set_function_attribute(
                    kernel as sys::CUfunction,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shape.dynamic_shared_memory as i32,
                )
            }
            .map_err(|e| driver_err("cuFuncSetAttribute", e))?;
        }
        // cuLaunchKernel takes a pointer to each argument's value and copies the values
        // before it returns (the driver API's contract for kernelParams; LLVM's plugin
        // also launches from a local array without waiting), so these may drop while
        // the kernel is still queued.
        let mut values: Vec<u64> = args.to_vec();
        let mut params: Vec<*mut c_void> = values
            .iter_mut()
            .map(|v| (v as *mut u64).cast::<c_void>())
            .collect();
        // The legacy default stream without a queue.
        let stream = queue.map_or(std::ptr::null_mut(), |q| q as sys::CUstream);
        // SAFETY: the caller promises `kernel` is a kernel (the CUfunction handle
        // `CudaModule::function` returned) of an image loaded on this device, taking
        // `args.len()` pointer-sized arguments; `stream` is null or a live stream of this
        // device (checked in the registry above); `values` outlives the call, which
        // copies them.
        unsafe {
            result::launch_kernel(
                kernel as sys::CUfunction,
                (shape.blocks, 1, 1),
                (shape.threads, 1, 1),
                shape.dynamic_shared_memory,
                stream,
                &mut params,
            )
        }
        .map_err(|e| BackendError::Launch(format!("cuLaunchKernel {shape:?}: {e:?}")))?;
        if queue.is_some() {
            // Its completion and any fault are seen when the queue is finished.
            return Ok(());
        }
        // SAFETY: the null stream is the legacy default stream of the current context.
        unsafe { result::stream::synchronize(std::ptr::null_mut()) }
            .map_err(|e| BackendError::Launch(format!("kernel {shape:?} failed: {e:?}")))
    }

    fn synchronize(&self, device: usize) -> Result<(), BackendError> {
        self.enter(device)?;
        result::ctx::synchronize().map_err(|e| driver_err("cuCtxSynchronize", e))
    }

    fn queue_create(&self, device: usize) -> Result<Option<QueueHandle>, BackendError> {
        let idle = lock(&self.device(device)?.idle_streams).pop();
        let stream = match idle {
            Some(stream) => stream,
            None => {
                self.enter(device)?;
                // A blocking stream: work without a queue, on the legacy default stream,
                // is ordered after it.
                result::stream::create(result::stream::StreamKind::Default)
                    .map_err(|e| driver_err("cuStreamCreate", e))? as QueueHandle
            }
        };
        self.handles.insert(HandleKind::Queue, device, stream);
        Ok(Some(stream))
    }

    fn queue_finish(&self, device: usize, queue: QueueHandle) -> Result<(), BackendError> {
        self.handles.check(HandleKind::Queue, device, queue)?;
        self.enter(device)?;
        self.handles.remove(HandleKind::Queue, device, queue)?;
        let stream = queue as sys::CUstream;
        // SAFETY: the registry held `queue` from queue_create on this device, and it was
        // just removed there, so it is finished once.
        match unsafe { result::stream::synchronize(stream) } {
            Ok(()) => {
                // Idle and empty: the next queue of this device reuses it.
                lock(&self.device(device)?.idle_streams).push(queue);
                Ok(())
            }
            Err(e) => {
                // A failed stream (a faulting kernel) is not reused.
                // SAFETY: as above; nothing refers to the stream any more.
                let _ = unsafe { result::stream::destroy(stream) };
                Err(driver_err("cuStreamSynchronize", e))
            }
        }
    }

    fn queue_done(&self, device: usize, queue: QueueHandle) -> Result<bool, BackendError> {
        self.handles.check(HandleKind::Queue, device, queue)?;
        self.enter(device)?;
        // SAFETY: the registry holds `queue`: a live stream of this device.
        match unsafe { sys::cuStreamQuery(queue as sys::CUstream) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            e => Err(driver_err("cuStreamQuery", DriverError(e))),
        }
    }

    unsafe fn write_async(
        &self,
        device: usize,
        dst: DeviceAddr,
        src: *const u8,
        len: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        self.handles.check(HandleKind::Queue, device, queue)?;
        self.enter(device)?;
        // SAFETY: the caller promises `dst` is device memory and `src` stays readable
        // until the queue (a live stream of this device, checked above) is finished.
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, queue as sys::CUstream) }
            .result()
            .map_err(|e| driver_err("cuMemcpyHtoDAsync", e))
    }

    unsafe fn read_async(
        &self,
        device: usize,
        src: DeviceAddr,
        dst: *mut u8,
        len: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        self.handles.check(HandleKind::Queue, device, queue)?;
        self.enter(device)?;
        // SAFETY: the caller promises `src` is device memory and `dst` stays writable and
        // otherwise unused until the queue (a live stream of this device, checked above)
        // is finished.
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, queue as sys::CUstream) }
            .result()
            .map_err(|e| driver_err("cuMemcpyDtoHAsync", e))
    }

    /// On the source device's stream: cuMemcpyDtoDAsync within a device,
    /// cuMemcpyPeerAsync between two.
    unsafe fn copy_async(
        &self,
        src_device: usize,
        src: DeviceAddr,
        dst_device: usize,
        dst: DeviceAddr,
        len: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        self.handles.check(HandleKind::Queue, src_device, queue)?;
        let dst_context = self.enter(dst_device)?;
        let src_context = self.enter(src_device)?;
        let stream = queue as sys::CUstream;
        // SAFETY: the caller promises both ranges are device memory of their devices and
        // stay allocated until the queue is finished; the stream is a live stream of the
        // source device (checked above), whose context is current; both contexts were
        // retained by `enter`.
        unsafe {
            if src_device == dst_device {
                sys::cuMemcpyDtoDAsync_v2(dst, src, len, stream)
                    .result()
                    .map_err(|e| driver_err("cuMemcpyDtoDAsync", e))
            } else {
                sys::cuMemcpyPeerAsync(dst, dst_context.0, src, src_context.0, len, stream)
                    .result()
                    .map_err(|e| driver_err("cuMemcpyPeerAsync", e))
            }
        }
    }

    /// cuMemHostRegister (portable, device-mapped), counted per buffer; the address
    /// returned is the one cuMemHostGetDevicePointer gives. Memory from a pinned
    /// allocation (TARGET_ALLOC_HOST) is already locked and returned as it is.
    unsafe fn lock_host(
        &self,
        device: usize,
        ptr: *mut u8,
        len: usize,
    ) -> Result<*mut u8, BackendError> {
        self.enter(device)?;
        let key = ptr as DeviceAddr;
        if lock(&self.host_allocations).contains(&key) {
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

    /// Undo one `lock_host`; the last one unregisters (only what this backend
    /// registered). A pointer never locked here is refused before the driver sees it.
    fn unlock_host(&self, device: usize, ptr: *mut u8) -> Result<(), BackendError> {
        let key = ptr as DeviceAddr;
        if lock(&self.host_allocations).contains(&key) {
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
        self.enter(device)?;
        // SAFETY: `ptr` was registered by lock_host and its last lock is undone here.
        unsafe { sys::cuMemHostUnregister(ptr.cast()) }
            .result()
            .map_err(|e| driver_err("cuMemHostUnregister", e))
    }

    /// cuCtxSetLimit in the device's primary context (LLVM 16's `setDeviceStackSize`
    /// and `setDeviceHeapSize`).
    fn set_limit(
        &self,
        device: usize,
        limit: DeviceLimit,
        bytes: usize,
    ) -> Result<bool, BackendError> {
        self.enter(device)?;
        let (limit, call) = match limit {
            DeviceLimit::StackSize => (
                sys::CUlimit::CU_LIMIT_STACK_SIZE,
                "cuCtxSetLimit(CU_LIMIT_STACK_SIZE)",
            ),
            DeviceLimit::HeapSize => (
                sys::CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE,
                "cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE)",
            ),
        };
        result::ctx::set_limit(limit, bytes).map_err(|e| driver_err(call, e))?;
        Ok(true)
    }

    /// The primary context and the CUdevice, as LLVM's plugin gives them.
    fn interop_handles(&self, device: usize) -> Result<InteropHandles, BackendError> {
        let context = self.enter(device)?;
        Ok(InteropHandles {
            context: context.0 as u64,
            device: self.device(device)?.handle as u64,
        })
    }

    /// LLVM 18's CUDA plugin: a 1 GHz clock (the device runtime reads the nanosecond
    /// global timer) and warps resident per multiprocessor x multiprocessors.
    fn device_facts(&self, device: usize) -> super::DeviceFacts {
        let Some(d) = self.devices.get(device) else {
            return Default::default();
        };
        let warps_per_multiprocessor = (d.threads_per_multiprocessor.max(0) / 32) as u64;
        super::DeviceFacts {
            clock_frequency: 1_000_000_000,
            hardware_parallelism: d.multiprocessors.max(0) as u64 * warps_per_multiprocessor,
        }
    }

    fn device_info(&self, device: usize) -> Vec<String> {
        let Some(d) = self.devices.get(device) else {
            let why = self.unavailable.as_deref().unwrap_or("no such device");
            return vec![format!("device {device}: none ({why})")];
        };
        let mut version = 0;
        // SAFETY: the driver is loaded (it reported this device); `version` is writable.
        let driver = match unsafe { sys::cuDriverGetVersion(&mut version) }.result() {
            Ok(()) => format!("CUDA {}.{}", version / 1000, version % 1000 / 10),
            Err(e) => format!("unknown ({e:?})"),
        };
        let (major, minor) = d.compute_capability;
        vec![
            format!(
                "device {device} of {}: {}, an NVIDIA GPU through the CUDA driver API",
                self.devices.len(),
                d.name
            ),
            format!("compute capability: {major}.{minor} (sm_{major}{minor})"),
            format!("global memory: {} MiB", d.total_memory >> 20),
            format!("multiprocessors: {}", d.multiprocessors),
            format!(
                "threads per block: {}, blocks per launch: at most {}",
                d.max_threads, d.block_limit
            ),
            format!("driver: {driver}"),
            "queues: CUDA streams (launches and copies on a queue do not wait)".into(),
        ]
    }

    fn event_create(&self, device: usize) -> Result<Option<EventHandle>, BackendError> {
        self.enter(device)?;
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| driver_err("cuEventCreate", e))?;
        self.handles
            .insert(HandleKind::Event, device, event as EventHandle);
        Ok(Some(event as EventHandle))
    }

    fn event_record(
        &self,
        device: usize,
        event: EventHandle,
        queue: Option<QueueHandle>,
    ) -> Result<(), BackendError> {
        self.check_event_and_queue(device, event, queue)?;
        self.enter(device)?;
        let stream = queue.map_or(std::ptr::null_mut(), |q| q as sys::CUstream);
        // SAFETY: the registry holds `event` and `queue`, if any, live on this device;
        // the null stream is the legacy default stream.
        unsafe { result::event::record(event as sys::CUevent, stream) }
            .map_err(|e| driver_err("cuEventRecord", e))
    }

    fn event_wait(
        &self,
        device: usize,
        event: EventHandle,
        queue: Option<QueueHandle>,
    ) -> Result<(), BackendError> {
        self.check_event_and_queue(device, event, queue)?;
        self.enter(device)?;
        let stream = queue.map_or(std::ptr::null_mut(), |q| q as sys::CUstream);
        // SAFETY: as in event_record.
        unsafe {
            result::stream::wait_event(
                stream,
                event as sys::CUevent,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .map_err(|e| driver_err("cuStreamWaitEvent", e))
    }

    fn event_sync(&self, device: usize, event: EventHandle) -> Result<(), BackendError> {
        self.handles.check(HandleKind::Event, device, event)?;
        self.enter(device)?;
        // SAFETY: the registry holds `event`: live on this device.
        unsafe { result::event::synchronize(event as sys::CUevent) }
            .map_err(|e| driver_err("cuEventSynchronize", e))
    }

    fn event_destroy(&self, device: usize, event: EventHandle) -> Result<(), BackendError> {
        self.handles.check(HandleKind::Event, device, event)?;
        self.enter(device)?;
        self.handles.remove(HandleKind::Event, device, event)?;
        // SAFETY: the registry held `event` from event_create on this device and it was
        // just removed there, so it is destroyed once.
        unsafe { result::event::destroy(event as sys::CUevent) }
            .map_err(|e| driver_err("cuEventDestroy", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handle the backend never handed out is refused before any driver call (with or
    /// without a driver and a GPU: the check comes first).
    #[test]
    fn unknown_queue_and_event_handles_never_reach_the_driver() {
        let backend = CudaBackend::new();
        let unknown = |r: Result<(), BackendError>, want: HandleKind| match r {
            Err(BackendError::UnknownHandle { kind, handle, .. }) => {
                assert_eq!((kind, handle), (want, 0xdead_0000));
            }
            other => panic!("expected an unknown {want} error, got {other:?}"),
        };
        unknown(backend.queue_finish(0, 0xdead_0000), HandleKind::Queue);
        unknown(
            backend.queue_done(0, 0xdead_0000).map(drop),
            HandleKind::Queue,
        );
        let mut byte = 0u8;
        // SAFETY: refused before the copy: the queue is unknown, so nothing is read.
        let write = unsafe { backend.write_async(0, 0x1000, &byte, 1, 0xdead_0000) };
        unknown(write, HandleKind::Queue);
        // SAFETY: as above, nothing is written.
        let read = unsafe { backend.read_async(0, 0x1000, &mut byte, 1, 0xdead_0000) };
        unknown(read, HandleKind::Queue);
        unknown(backend.event_sync(0, 0xdead_0000), HandleKind::Event);
        unknown(
            backend.event_record(0, 0xdead_0000, None),
            HandleKind::Event,
        );
        unknown(backend.event_wait(0, 0xdead_0000, None), HandleKind::Event);
        unknown(backend.event_destroy(0, 0xdead_0000), HandleKind::Event);
        // SAFETY: refused before the launch: the queue is unknown, so nothing runs.
        let launch = unsafe { backend.launch(0, 0x1000, &[], None, Some(0xdead_0000)) };
        unknown(launch, HandleKind::Queue);
        // SAFETY: refused before the copy: the queue is unknown.
        let copy = unsafe { backend.copy_async(0, 0x1000, 0, 0x2000, 1, 0xdead_0000) };
        unknown(copy, HandleKind::Queue);
        unknown(
            backend.unlock_host(0, 0xdead_0000 as *mut u8),
            HandleKind::Locked,
        );
    }
}
