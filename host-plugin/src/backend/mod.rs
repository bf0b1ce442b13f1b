//! What the plugin core needs from a device kind: memory, transfers, images, symbols,
//! launches. One implementation per kind; the core never knows which one it drives.
//! Rules every GPU shares are written once, in the core: the kernel registry, the exec
//! mode and the launch shape ([`crate::kernels`], from what
//! [`LoadedModule::kernel_limits`] reports), the device environment
//! ([`crate::device_env`]); a vendor implements only the calls that differ.

pub mod cuda;
mod dlopen;
mod facts;
mod ffi_call;
pub mod hip;
pub mod host;
pub mod isolated;

pub use facts::DeviceFacts;
use std::ffi::CStr;
use thiserror::Error;

/// An address in a device's address space (on the host backend, a process address).
pub type DeviceAddr = u64;

/// A capability a backend may offer ([`Backend::host_memory`]): device memory that is
/// this process's own (the host device). The core then builds what it writes for the
/// device in place ([`crate::host_index`]) and prefetches globals it is about to read.
#[derive(Debug)]
pub struct HostMemory;

impl HostMemory {
    /// A hint that the memory at `addr` will be read soon (a CPU prefetch: resolving a
    /// million pointer globals scattered over an image otherwise waits for each cache
    /// miss in turn).
    pub fn prefetch(&self, addr: DeviceAddr) {
        crate::prefetch::read_address(addr);
    }
}

#[derive(Debug, Error)]
pub enum BackendError {
    /// A driver call (CUDA driver API, HIP) failed: which call, the driver's own code and
    /// its name or message. Every driver failure is one of these, so callers and tests
    /// can tell a driver refusal from the plugin's own checks.
    #[error("{call} failed: {name} (error {code})")]
    Driver {
        call: &'static str,
        code: i32,
        name: String,
    },
    /// A queue or event handle this backend did not hand out on this device, or one
    /// already destroyed: refused before any driver call sees it.
    #[error("device {device}: no {kind} {handle:#x} (never created here, or already destroyed)")]
    UnknownHandle {
        kind: HandleKind,
        device: usize,
        handle: u64,
    },
    /// The image or a symbol of it cannot be used (the plugin's own checks).
    #[error("{0}")]
    Load(String),
    #[error("symbol `{0}` not found in the image")]
    MissingSymbol(String),
    #[error("out of device memory allocating {0} bytes")]
    OutOfMemory(usize),
    #[error("kernel launch failed: {0}")]
    Launch(String),
    /// A request the backend refuses before any driver call (e.g. locking 0 bytes).
    #[error("{0}")]
    Invalid(String),
    #[error("this plugin has no {0} devices")]
    NoDevices(&'static str),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// LLVM 16's `TargetAllocTy` (omptarget.h: `TARGET_ALLOC_DEVICE = 0, TARGET_ALLOC_HOST,
/// TARGET_ALLOC_SHARED, TARGET_ALLOC_DEFAULT`): where `__tgt_rtl_data_alloc` puts an
/// allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocKind {
    /// TARGET_ALLOC_DEVICE (0): device memory.
    Device,
    /// TARGET_ALLOC_HOST (1): page-locked host memory the device can reach.
    Host,
    /// TARGET_ALLOC_SHARED (2): managed memory that migrates between host and device.
    Shared,
    /// TARGET_ALLOC_DEFAULT (3): the device's choice (device memory).
    Default,
}

impl AllocKind {
    /// The kind from its LLVM 16 value, None for anything else.
    pub fn from_raw(kind: i32) -> Option<Self> {
        match kind {
            0 => Some(AllocKind::Device),
            1 => Some(AllocKind::Host),
            2 => Some(AllocKind::Shared),
            3 => Some(AllocKind::Default),
            _ => None,
        }
    }
}

/// What libomptarget asks of a launch (`KernelArgsTy`): the geometry's first dimensions,
/// where 0 means "no clause, the plugin chooses", and each block's dynamic shared memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchRequest {
    pub num_teams: u32,
    pub thread_limit: u32,
    pub tripcount: u64,
    /// Bytes of dynamic shared memory per block (`DynCGroupMem`: the
    /// `ompx_dyn_cgroup_mem` clause); the device's own default may raise it.
    pub dynamic_shared_memory: u32,
}

/// A per-device resource limit that libomptarget's environment sets at device
/// initialisation (LLVM 16's `LIBOMPTARGET_STACK_SIZE` and `LIBOMPTARGET_HEAP_SIZE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceLimit {
    /// Bytes of stack per device thread (CUDA's `CU_LIMIT_STACK_SIZE`).
    StackSize,
    /// Bytes of heap for device-side `malloc` (CUDA's `CU_LIMIT_MALLOC_HEAP_SIZE`).
    HeapSize,
}

/// A device's handles for a foreign runtime (OpenMP interop's `omp_ipr_device_context`
/// and `omp_ipr_device`): CUDA's context and device; 0 where the device has none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InteropHandles {
    pub context: u64,
    pub device: u64,
}

/// The kinds of handle a backend hands out and must recognise when they come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HandleKind {
    Queue,
    Event,
    /// A host buffer page-locked by `__tgt_rtl_data_lock`.
    Locked,
}

impl std::fmt::Display for HandleKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HandleKind::Queue => "queue",
            HandleKind::Event => "event",
            HandleKind::Locked => "locked host buffer",
        })
    }
}

/// The error for a handle a backend never handed out (or already destroyed).
fn unknown(kind: HandleKind, device: usize, handle: u64) -> BackendError {
    BackendError::UnknownHandle {
        kind,
        device,
        handle,
    }
}

/// The queue and event handles one backend handed out, by device: a handle is checked
/// here before it reaches the driver, and forgotten when it is destroyed.
#[derive(Default)]
pub struct HandleRegistry {
    live: std::sync::Mutex<std::collections::HashSet<(HandleKind, usize, u64)>>,
}

impl HandleRegistry {
    fn live(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashSet<(HandleKind, usize, u64)>> {
        crate::locking::lock(&self.live)
    }

    /// Record a handle the driver just created.
    pub fn insert(&self, kind: HandleKind, device: usize, handle: u64) {
        self.live().insert((kind, device, handle));
    }

    /// `Ok` if `handle` is live on `device`, else [`BackendError::UnknownHandle`].
    pub fn check(&self, kind: HandleKind, device: usize, handle: u64) -> Result<(), BackendError> {
        if self.live().contains(&(kind, device, handle)) {
            Ok(())
        } else {
            Err(unknown(kind, device, handle))
        }
    }

    /// Forget a handle that is about to be destroyed; an error if it was not live (so
    /// it is destroyed at most once).
    pub fn remove(&self, kind: HandleKind, device: usize, handle: u64) -> Result<(), BackendError> {
        if self.live().remove(&(kind, device, handle)) {
            Ok(())
        } else {
            Err(unknown(kind, device, handle))
        }
    }
}

/// An ordered queue of asynchronous operations on one device (a CUDA stream): an opaque,
/// non-zero backend handle that libomptarget keeps in `__tgt_async_info::Queue`.
pub type QueueHandle = u64;
/// A backend event (a CUDA event): an opaque, non-zero handle.
pub type EventHandle = u64;

/// The bytes of the code to load on one device: the image libomptarget handed over, or
/// one code object out of a container in it, copied to 8-byte aligned storage when it
/// sat at an odd offset (the ELF reader and the drivers want aligned headers).
pub enum DeviceCode<'a> {
    Borrowed(&'a [u8]),
    Aligned(AlignedCopy),
}

impl DeviceCode<'_> {
    pub fn bytes(&self) -> &[u8] {
        match self {
            DeviceCode::Borrowed(bytes) => bytes,
            DeviceCode::Aligned(copy) => copy.bytes(),
        }
    }
}

impl<'a> From<std::borrow::Cow<'a, [u8]>> for DeviceCode<'a> {
    /// Borrow when already aligned, else copy.
    fn from(bytes: std::borrow::Cow<'a, [u8]>) -> Self {
        match bytes {
            std::borrow::Cow::Borrowed(b) if b.as_ptr().align_offset(8) == 0 => {
                DeviceCode::Borrowed(b)
            }
            other => DeviceCode::Aligned(AlignedCopy::new(&other)),
        }
    }
}

/// A copy of some bytes in 8-byte aligned storage.
pub struct AlignedCopy {
    words: Vec<u64>,
    len: usize,
}

impl AlignedCopy {
    pub fn new(bytes: &[u8]) -> Self {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        AlignedCopy {
            words,
            len: bytes.len(),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..self.len]
    }
}

/// An image loaded on one device. Dropping it unloads the image.
pub trait LoadedModule: Send + Sync {
    /// Device address of a global variable defined by the image.
    fn global(&self, name: &CStr) -> Result<DeviceAddr, BackendError>;
    /// Device address of a function defined by the image.
    fn function(&self, name: &CStr) -> Result<DeviceAddr, BackendError>;
    /// Let go of what loading needed and the loaded module does not (the host: the
    /// image file, whose mapping stays valid without its name). The core calls it once
    /// after the load, while the entries resolve; dropping the module does it too.
    fn release_load_files(&self) {}
    /// Device address of a non-kernel function named by a size-0 indirect entry, asked
    /// only where the core cannot resolve it from the image's own symbol tables (no
    /// [`LoadedModule::load_bias`]: the GPU backends).
    fn indirect_function(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        self.function(name)
    }
    /// What the loader added to every ELF address of the image (its load bias), where
    /// the image was mapped as one block and the backend knows the offset. With it the
    /// core resolves entries from the image's own symbol tables, parsed once, instead
    /// of asking the loader name by name, and finds functions the dynamic symbol table
    /// lacks (hidden ones). None: resolve by name through this module.
    fn load_bias(&self) -> Option<u64> {
        None
    }
    /// Size of a global, for backends whose images are not inspected as ELF shared
    /// objects (see [`Backend::inspect_image`]); None if there is no such global.
    fn global_size(&self, _name: &CStr) -> Option<u64> {
        None
    }
    /// The device's and the kernel's limits for the generic launch rules, asked once
    /// per kernel when its image is loaded. None where launches have no geometry (the
    /// host).
    ///
    /// # Safety
    /// `kernel` is what [`LoadedModule::function`] returned for `name` on this module.
    unsafe fn kernel_limits(
        &self,
        _kernel: DeviceAddr,
        _name: &CStr,
    ) -> Result<Option<crate::launch_shape::Limits>, BackendError> {
        Ok(None)
    }
}

/// What a backend prepared for an image before its checks finished
/// ([`Backend::stage_image`]), handed back to [`Backend::load_image`]; dropping it
/// undoes the preparation.
pub type StagedImage = Box<dyn std::any::Any + Send>;

/// A device kind. Methods taking raw device addresses are `unsafe`: the caller promises
/// the addresses came from this backend (an allocation or a resolved symbol) and the
/// ranges lie inside it.
pub trait Backend: Send + Sync {
    /// The ELF `e_machine` of the images this backend runs.
    fn elf_machine(&self) -> u16;
    fn device_count(&self) -> usize;
    fn init_device(&self, device: usize) -> Result<(), BackendError>;
    /// Why this device cannot run programs with these `requires` flags
    /// (`__tgt_rtl_init_requires`), if it cannot.
    fn unsupported_requirements(&self, _flags: i64) -> Option<String> {
        None
    }
    /// Work on an image that needs nothing of its checks ([`Backend::inspect_image`]),
    /// which the core runs on another thread while they run, for big images: the host
    /// writes the file dlopen will open. Nothing is loaded or run here. `None`: nothing
    /// to do ahead.
    fn stage_image(
        &self,
        _device: usize,
        _image: &[u8],
    ) -> Result<Option<StagedImage>, BackendError> {
        Ok(None)
    }
    /// Load an image on `device`; `staged` is what [`Backend::stage_image`] returned
    /// for it (None: not staged, the backend does the work itself).
    fn load_image(
        &self,
        device: usize,
        image: &[u8],
        staged: Option<StagedImage>,
    ) -> Result<Box<dyn LoadedModule>, BackendError>;
    /// Allocate `size` bytes of one of LLVM 16's kinds of memory. A backend with one
    /// kind of memory gives it for every kind; one that cannot give a kind refuses it.
    fn alloc(
        &self,
        device: usize,
        size: usize,
        kind: AllocKind,
    ) -> Result<DeviceAddr, BackendError>;
    /// Where device memory is this process's own (the host device): the host-only steps
    /// the core may take on it. None elsewhere.
    fn host_memory(&self) -> Option<&HostMemory> {
        None
    }
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
    /// Launch `kernel(args...)`; each argument is one pointer-sized value. `shape`: the
    /// geometry the generic rules computed ([`crate::kernels`]), None to run the kernel
    /// once (the host; a GPU runs one thread). `queue`: enqueue the launch there and
    /// return (it completes when the queue is finished); None: the kernel has completed
    /// when this returns. `args` may be dropped as soon as this returns.
    ///
    /// # Safety
    /// `kernel` is a kernel of an image loaded on `device`, taking `args.len()` pointers;
    /// `queue`, if any, came from [`Backend::queue_create`] on `device`.
    unsafe fn launch(
        &self,
        device: usize,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        shape: Option<crate::launch_shape::Shape>,
        queue: Option<QueueHandle>,
    ) -> Result<(), BackendError>;
    /// Wait until everything this device was asked to do (on every queue) is done.
    fn synchronize(&self, device: usize) -> Result<(), BackendError>;

    /// Validate an image before loading it and read its symbol sizes. `Ok(None)` means
    /// "ask the loaded module" ([`LoadedModule::global_size`]): a GPU image is not a
    /// shared object with a dynamic symbol table.
    fn inspect_image<'a>(
        &self,
        image: &'a [u8],
    ) -> Result<Option<crate::image::ImageSymbols<'a>>, crate::image::ImageError> {
        crate::image::inspect_shared_object(image, self.elf_machine()).map(Some)
    }

    /// Can some device of this backend run the image (e.g. a cubin's SM)? Asked after
    /// the ELF machine matched, so libomptarget can pick another image of a fat binary.
    fn is_compatible(&self, _image: &[u8]) -> bool {
        true
    }

    /// `__tgt_rtl_is_valid_binary`: an ELF file of this backend's machine that some
    /// device can run. A backend that also takes containers (HIP: clang offload bundles
    /// of several code objects) says so here.
    fn is_valid_image(&self, image: &[u8]) -> bool {
        crate::image::elf_machine(image) == Some(self.elf_machine()) && self.is_compatible(image)
    }

    /// The code to inspect and load on `device` out of `image`: the image itself, unless
    /// the backend chooses among several code objects in it (HIP).
    fn device_code<'a>(
        &self,
        _device: usize,
        image: &'a [u8],
    ) -> Result<DeviceCode<'a>, BackendError> {
        Ok(DeviceCode::Borrowed(image))
    }

    /// A new queue for asynchronous copies, or None where every operation completes
    /// before it returns (the host): callers then copy synchronously.
    fn queue_create(&self, _device: usize) -> Result<Option<QueueHandle>, BackendError> {
        Ok(None)
    }

    /// Wait until everything on the queue is done, then destroy it. A backend without
    /// queues handed none out: whatever comes back is unknown.
    fn queue_finish(&self, device: usize, queue: QueueHandle) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Queue, device, queue))
    }

    /// Is everything on the queue done (without waiting)?
    fn queue_done(&self, device: usize, queue: QueueHandle) -> Result<bool, BackendError> {
        Err(unknown(HandleKind::Queue, device, queue))
    }

    /// Enqueue a host-to-device copy.
    ///
    /// # Safety
    /// `dst .. dst + len` is device memory of `device`; `src .. src + len` is host memory
    /// that stays readable, and unwritten, until the queue is finished.
    unsafe fn write_async(
        &self,
        device: usize,
        _dst: DeviceAddr,
        _src: *const u8,
        _len: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Queue, device, queue))
    }

    /// Enqueue a device-to-host copy.
    ///
    /// # Safety
    /// `src .. src + len` is device memory of `device`; `dst .. dst + len` is host memory
    /// that nothing else reads or writes until the queue is finished.
    unsafe fn read_async(
        &self,
        device: usize,
        _src: DeviceAddr,
        _dst: *mut u8,
        _len: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Queue, device, queue))
    }

    /// A new event, or None where operations complete at once and events are tokens.
    fn event_create(&self, _device: usize) -> Result<Option<EventHandle>, BackendError> {
        Ok(None)
    }

    /// Mark the point reached by `queue` (None: the device's default ordering).
    fn event_record(
        &self,
        device: usize,
        event: EventHandle,
        _queue: Option<QueueHandle>,
    ) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Event, device, event))
    }

    /// Make later work on `queue` (None: the device's default ordering) wait for the event.
    fn event_wait(
        &self,
        device: usize,
        event: EventHandle,
        _queue: Option<QueueHandle>,
    ) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Event, device, event))
    }

    /// Block until the event has happened.
    fn event_sync(&self, device: usize, event: EventHandle) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Event, device, event))
    }

    fn event_destroy(&self, device: usize, event: EventHandle) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Event, device, event))
    }

    /// Enqueue a device-to-device copy on `queue`, a queue of `src_device` (LLVM 16 passes
    /// the source device's async info to `__tgt_rtl_data_exchange_async`).
    ///
    /// # Safety
    /// As for [`Backend::copy`]; both ranges stay allocated until the queue is finished.
    unsafe fn copy_async(
        &self,
        src_device: usize,
        _src: DeviceAddr,
        _dst_device: usize,
        _dst: DeviceAddr,
        _len: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Queue, src_device, queue))
    }

    /// Page-lock `len` host bytes at `ptr` for fast copies (`__tgt_rtl_data_lock`) and
    /// return the address the device reaches them at. Where device memory needs no
    /// locking (the host) the address is `ptr` itself, once the device is idle.
    ///
    /// # Safety
    /// `ptr .. ptr + len` is host memory that stays allocated until it is unlocked.
    unsafe fn lock_host(
        &self,
        device: usize,
        ptr: *mut u8,
        _len: usize,
    ) -> Result<*mut u8, BackendError> {
        self.synchronize(device)?;
        Ok(ptr)
    }

    /// Undo [`Backend::lock_host`] of `ptr` (`__tgt_rtl_data_unlock`).
    fn unlock_host(&self, device: usize, _ptr: *mut u8) -> Result<(), BackendError> {
        self.synchronize(device)
    }

    /// Facts about the device for `__tgt_rtl_print_device_info`, one line each.
    fn device_info(&self, device: usize) -> Vec<String>;

    /// Set one of the device's resource limits (at its initialisation, before any
    /// launch). `Ok(false)`: the device has no such limit and the value has no effect
    /// (the host devices).
    fn set_limit(
        &self,
        _device: usize,
        _limit: DeviceLimit,
        _bytes: usize,
    ) -> Result<bool, BackendError> {
        Ok(false)
    }

    /// The device's handles for OpenMP interop (`__tgt_rtl_init_device_info`): none by
    /// default, as LLVM's host plugin gives none.
    fn interop_handles(&self, _device: usize) -> Result<InteropHandles, BackendError> {
        Ok(InteropHandles::default())
    }

    /// What the device environment of LLVM 17's and 18's device runtimes says about the
    /// device beyond its number ([`crate::device_env`]); LLVM's generic defaults unless
    /// the vendor knows better.
    fn device_facts(&self, _device: usize) -> DeviceFacts {
        DeviceFacts::default()
    }

    /// The execution mode of a kernel without `<kernel>_exec_mode` (not an OpenMP
    /// kernel), recorded in its [`crate::kernels::KernelRecord`]: None (the default) runs
    /// it once when launched without a request; CUDA launches such kernels with SPMD's
    /// default shape.
    fn untagged_kernel_mode(&self) -> Option<crate::launch_shape::ExecMode> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host hands out no queues or events (everything completes at once): any handle
    /// that comes back is refused, clearly, instead of being ignored.
    #[test]
    fn a_backend_without_queues_refuses_every_handle() {
        let host = host::HostBackend;
        let refused = |r: Result<(), BackendError>| {
            assert!(
                matches!(r, Err(BackendError::UnknownHandle { handle: 0x77, .. })),
                "{r:?}"
            )
        };
        assert_eq!(host.queue_create(0).unwrap(), None);
        assert_eq!(host.event_create(0).unwrap(), None);
        refused(host.queue_finish(0, 0x77));
        refused(host.queue_done(0, 0x77).map(drop));
        let mut byte = 0u8;
        // SAFETY: refused before any copy: nothing is read or written.
        refused(unsafe { host.write_async(0, 0x1000, &byte, 1, 0x77) });
        // SAFETY: as above.
        refused(unsafe { host.read_async(0, 0x1000, &mut byte, 1, 0x77) });
        // SAFETY: as above.
        refused(unsafe { host.copy_async(0, 0x1000, 1, 0x2000, 1, 0x77) });
        // SAFETY: refused before the call: no kernel runs.
        refused(unsafe { host.launch(0, 0x1000, &[], None, Some(0x77)) });
        refused(host.event_record(0, 0x77, None));
        refused(host.event_wait(0, 0x77, None));
        refused(host.event_sync(0, 0x77));
        refused(host.event_destroy(0, 0x77));
    }

    /// The values of LLVM 16's `TargetAllocTy`, device first (a swap went unnoticed
    /// once: every backend gives device memory for both DEVICE and DEFAULT).
    #[test]
    fn alloc_kinds_have_llvm_16s_values() {
        assert_eq!(AllocKind::from_raw(0), Some(AllocKind::Device));
        assert_eq!(AllocKind::from_raw(1), Some(AllocKind::Host));
        assert_eq!(AllocKind::from_raw(2), Some(AllocKind::Shared));
        assert_eq!(AllocKind::from_raw(3), Some(AllocKind::Default));
        assert_eq!(AllocKind::from_raw(4), None);
        assert_eq!(AllocKind::from_raw(-1), None);
    }

    #[test]
    fn a_handle_is_live_from_insert_to_remove_on_its_own_device_only() {
        let handles = HandleRegistry::default();
        handles.insert(HandleKind::Queue, 0, 0x10);
        assert!(handles.check(HandleKind::Queue, 0, 0x10).is_ok());
        // Another device, another kind, another value: unknown.
        assert!(handles.check(HandleKind::Queue, 1, 0x10).is_err());
        assert!(handles.check(HandleKind::Event, 0, 0x10).is_err());
        assert!(handles.check(HandleKind::Queue, 0, 0x11).is_err());
        assert!(handles.remove(HandleKind::Queue, 0, 0x10).is_ok());
        // Destroyed once: a second destroy is refused, not passed on.
        let err = handles.remove(HandleKind::Queue, 0, 0x10).unwrap_err();
        assert!(
            err.to_string().contains("no queue 0x10") && err.to_string().contains("device 0"),
            "{err}"
        );
    }
}
