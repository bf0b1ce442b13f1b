//! The vendor API: what the plugin core needs from a device kind. A vendor implements
//! [`Backend`] once (its devices, the images it takes) and hands out one
//! [`BackendDevice`] per device (memory, transfers, images, launches, queues, events),
//! as nextgen's `GenericDeviceTy` gets a vendor's device; the core never knows which
//! vendor it drives. Rules every GPU shares are written once, in the core: the kernel
//! registry, the exec mode and the launch shape ([`crate::generic::kernels`], from what
//! [`LoadedModule::kernel_limits`] reports), the device environment
//! ([`crate::generic::device_env`]); a vendor implements only the calls that differ. This module
//! and its plain types import nothing from the core.

pub mod cuda;
mod device_code;
mod error;
mod facts;
mod handles;
pub mod hip;
pub mod host;
mod host_common;
pub mod isolated;

pub use error::{BackendError, HandleKind};
pub use facts::DeviceFacts;
use std::ffi::CStr;

/// An address in a device's address space (on the host backend, a process address).
pub type DeviceAddr = u64;

/// A capability a backend may offer ([`BackendDevice::host_memory`]): device memory that is
/// this process's own (the host device). The core then builds what it writes for the
/// device in place ([`crate::generic::table::host_index`]) and prefetches globals it is about to
/// read.
#[derive(Debug)]
pub struct HostMemory;

impl HostMemory {
    /// A hint that the memory at `addr` will be read soon (a CPU prefetch: resolving a
    /// million pointer globals scattered over an image otherwise waits for each cache
    /// miss in turn).
    pub fn prefetch(&self, addr: DeviceAddr) {
        crate::support::prefetch::read_address(addr);
    }
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

pub use device_code::{AlignedCopy, DeviceCode};
pub use handles::{unknown, EventHandle, HandleRegistry, QueueHandle};

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
    ) -> Result<Option<crate::support::launch_shape::Limits>, BackendError> {
        Ok(None)
    }
}

/// What a backend prepared for an image before its checks finished
/// ([`BackendDevice::stage_image`]), handed back to [`BackendDevice::load_image`]; dropping it
/// undoes the preparation.
pub type StagedImage = Box<dyn std::any::Any + Send>;

/// What a vendor staged, if it was of the type it stages.
pub fn take_staged<T: 'static>(staged: Option<StagedImage>) -> Option<T> {
    staged
        .and_then(|staged| staged.downcast::<T>().ok())
        .map(|staged| *staged)
}

/// A device kind, as a whole: its devices and the images it takes. One implementation
/// per vendor; each hands out one [`BackendDevice`] per device, which takes every
/// per-device call.
pub trait Backend: Send + Sync {
    /// The ELF `e_machine` of the images this backend runs.
    fn elf_machine(&self) -> u16;
    fn device_count(&self) -> usize;
    /// Device `index` (below [`Backend::device_count`]): asked once per device when the
    /// plugin starts, so it does no driver work ([`BackendDevice::init`] does).
    fn device(&self, index: usize) -> std::sync::Arc<dyn BackendDevice>;
    /// Why this device kind cannot run programs with these `requires` flags
    /// (`__tgt_rtl_init_requires`), if it cannot.
    fn unsupported_requirements(&self, _flags: i64) -> Option<String> {
        None
    }

    /// Validate an image before loading it and read its symbol sizes. `Ok(None)` means
    /// "ask the loaded module" ([`LoadedModule::global_size`]): a GPU image is not a
    /// shared object with a dynamic symbol table.
    fn inspect_image<'a>(
        &self,
        image: &'a [u8],
    ) -> Result<Option<crate::elf::image::ImageSymbols<'a>>, crate::elf::image::ImageError> {
        crate::elf::image::inspect_shared_object(image, self.elf_machine()).map(Some)
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
        crate::elf::image::elf_machine(image) == Some(self.elf_machine())
            && self.is_compatible(image)
    }

    /// The execution mode of a kernel without `<kernel>_exec_mode` (not an OpenMP
    /// kernel), recorded in its [`crate::generic::kernels::KernelRecord`]: None (the default) runs
    /// it once when launched without a request; CUDA launches such kernels with SPMD's
    /// default shape.
    fn untagged_kernel_mode(&self) -> Option<crate::support::launch_shape::ExecMode> {
        None
    }
}

/// Lets a device find its own kind's state in a peer device ([`BackendDevice::copy`]
/// between two devices of one backend).
pub trait AsAny: std::any::Any {
    fn as_any(&self) -> &dyn std::any::Any;
}

impl<T: std::any::Any> AsAny for T {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// One device of a backend (nextgen's per-device object): memory, transfers, images,
/// launches, queues and events, with no device number to pass. Methods taking raw device
/// addresses are `unsafe`: the caller promises the addresses came from this device (an
/// allocation or a resolved symbol) and the ranges lie inside it.
pub trait BackendDevice: AsAny + Send + Sync {
    /// The device's number among its backend's (what errors name).
    fn index(&self) -> usize;
    /// Make the device ready for work (`__tgt_rtl_init_device`).
    fn init(&self) -> Result<(), BackendError>;

    /// The code to inspect and load out of `image`: the image itself, unless the backend
    /// chooses among several code objects in it (HIP).
    fn device_code<'a>(&self, image: &'a [u8]) -> Result<DeviceCode<'a>, BackendError> {
        Ok(DeviceCode::Borrowed(image))
    }
    /// Work on the device code that needs nothing of its checks
    /// ([`Backend::inspect_image`]), which the core runs on another thread while they
    /// run, for big images: the host writes the file dlopen will open. Nothing is loaded
    /// or run here. `None`: nothing to do ahead.
    fn stage_image(&self, _code: &[u8]) -> Result<Option<StagedImage>, BackendError> {
        Ok(None)
    }
    /// Load the device code ([`BackendDevice::device_code`]); `symbols` are its symbol
    /// tables as [`Backend::inspect_image`] parsed them (None where it reads none: a
    /// vendor that needs them asks its loaded module instead of parsing them again);
    /// `staged` is what [`BackendDevice::stage_image`] returned for it (None: not
    /// staged, the backend does the work itself).
    fn load_image(
        &self,
        code: &[u8],
        symbols: Option<&crate::elf::symbols::ImageSymbols<'_>>,
        staged: Option<StagedImage>,
    ) -> Result<Box<dyn LoadedModule>, BackendError>;

    /// Allocate `size` bytes of one of LLVM 16's kinds of memory. A backend with one
    /// kind of memory gives it for every kind; one that cannot give a kind refuses it.
    fn alloc(&self, size: usize, kind: AllocKind) -> Result<DeviceAddr, BackendError>;
    /// Whether libomptarget's device memory on this device comes through a pool
    /// ([`crate::generic::memory_pool`]): a GPU's, whose driver allocation and release are slow
    /// and whose release waits for the whole device. The host devices' memory is
    /// ordinary memory.
    fn pools_memory(&self) -> bool {
        false
    }
    /// Where device memory is this process's own (the host device): the host-only steps
    /// the core may take on it. None elsewhere.
    fn host_memory(&self) -> Option<&HostMemory> {
        None
    }
    /// # Safety
    /// `addr` came from `alloc` on this device and is not used afterwards.
    unsafe fn free(&self, addr: DeviceAddr) -> Result<(), BackendError>;
    /// # Safety
    /// `dst .. dst + src.len()` is memory of this device.
    unsafe fn write(&self, dst: DeviceAddr, src: &[u8]) -> Result<(), BackendError>;
    /// # Safety
    /// `src .. src + dst.len()` is memory of this device.
    unsafe fn read(&self, src: DeviceAddr, dst: &mut [u8]) -> Result<(), BackendError>;
    /// Copy `len` bytes from this device to device `to` of the same backend (this one,
    /// or a peer).
    ///
    /// # Safety
    /// `src .. src + len` is memory of this device, `dst .. dst + len` of `to`.
    unsafe fn copy(
        &self,
        src: DeviceAddr,
        to: &dyn BackendDevice,
        dst: DeviceAddr,
        len: usize,
    ) -> Result<(), BackendError>;

    /// Run `kernel(args...)` to completion; each argument is one pointer-sized value.
    /// `shape`: the geometry the generic rules computed ([`crate::generic::kernels`]), None to run
    /// the kernel once (the host; a GPU runs one thread). `args` may be dropped as soon
    /// as this returns.
    ///
    /// # Safety
    /// `kernel` is a kernel of an image loaded on this device, taking `args.len()`
    /// pointers.
    unsafe fn launch(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        shape: Option<crate::support::launch_shape::Shape>,
    ) -> Result<(), BackendError>;
    /// Enqueue the launch of [`BackendDevice::launch`] on `queue` and return (it
    /// completes when the queue is finished). A device without queues handed none out:
    /// whatever comes back is unknown.
    ///
    /// # Safety
    /// As for [`BackendDevice::launch`]; `queue` came from
    /// [`BackendDevice::queue_create`].
    unsafe fn launch_on(
        &self,
        _kernel: DeviceAddr,
        _args: &[DeviceAddr],
        _shape: Option<crate::support::launch_shape::Shape>,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Queue, self.index(), queue))
    }
    /// Wait until everything this device was asked to do (on every queue) is done.
    fn synchronize(&self) -> Result<(), BackendError>;

    /// A new queue for asynchronous copies, or None where every operation completes
    /// before it returns (the host): callers then copy synchronously.
    fn queue_create(&self) -> Result<Option<QueueHandle>, BackendError> {
        Ok(None)
    }
    /// Wait until everything on the queue is done, then destroy it.
    fn queue_finish(&self, queue: QueueHandle) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Queue, self.index(), queue))
    }
    /// Is everything on the queue done (without waiting)?
    fn queue_done(&self, queue: QueueHandle) -> Result<bool, BackendError> {
        Err(unknown(HandleKind::Queue, self.index(), queue))
    }
    /// Enqueue a host-to-device copy.
    ///
    /// # Safety
    /// `dst .. dst + len` is memory of this device; `src .. src + len` is host memory
    /// that stays readable, and unwritten, until the queue is finished.
    unsafe fn write_async(
        &self,
        _dst: DeviceAddr,
        _src: *const u8,
        _len: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Queue, self.index(), queue))
    }
    /// Enqueue a device-to-host copy.
    ///
    /// # Safety
    /// `src .. src + len` is memory of this device; `dst .. dst + len` is host memory
    /// that nothing else reads or writes until the queue is finished.
    unsafe fn read_async(
        &self,
        _src: DeviceAddr,
        _dst: *mut u8,
        _len: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Queue, self.index(), queue))
    }
    /// Enqueue a copy from this device to `to` on `queue`, a queue of this device (LLVM
    /// 16 passes the source device's async info to `__tgt_rtl_data_exchange_async`).
    ///
    /// # Safety
    /// As for [`BackendDevice::copy`]; both ranges stay allocated until the queue is
    /// finished.
    unsafe fn copy_async(
        &self,
        _src: DeviceAddr,
        _to: &dyn BackendDevice,
        _dst: DeviceAddr,
        _len: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Queue, self.index(), queue))
    }

    /// A new event, or None where operations complete at once and events are tokens.
    fn event_create(&self) -> Result<Option<EventHandle>, BackendError> {
        Ok(None)
    }
    /// Mark the point reached by `queue` (None: the device's default ordering).
    fn event_record(
        &self,
        event: EventHandle,
        _queue: Option<QueueHandle>,
    ) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Event, self.index(), event))
    }
    /// Make later work on `queue` (None: the device's default ordering) wait for the event.
    fn event_wait(
        &self,
        event: EventHandle,
        _queue: Option<QueueHandle>,
    ) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Event, self.index(), event))
    }
    /// Block until the event has happened.
    fn event_sync(&self, event: EventHandle) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Event, self.index(), event))
    }
    fn event_destroy(&self, event: EventHandle) -> Result<(), BackendError> {
        Err(unknown(HandleKind::Event, self.index(), event))
    }

    /// Page-lock `len` host bytes at `ptr` for fast copies (`__tgt_rtl_data_lock`) and
    /// return the address the device reaches them at. Where device memory needs no
    /// locking (the host) the address is `ptr` itself, once the device is idle.
    ///
    /// # Safety
    /// `ptr .. ptr + len` is host memory that stays allocated until it is unlocked.
    unsafe fn lock_host(&self, ptr: *mut u8, _len: usize) -> Result<*mut u8, BackendError> {
        self.synchronize()?;
        Ok(ptr)
    }
    /// Undo [`BackendDevice::lock_host`] of `ptr` (`__tgt_rtl_data_unlock`).
    fn unlock_host(&self, _ptr: *mut u8) -> Result<(), BackendError> {
        self.synchronize()
    }

    /// Facts about the device for `__tgt_rtl_print_device_info`, one line each.
    fn device_info(&self) -> Vec<String>;
    /// Set one of the device's resource limits (at its initialisation, before any
    /// launch). `Ok(false)`: the device has no such limit and the value has no effect
    /// (the host devices).
    fn set_limit(&self, _limit: DeviceLimit, _bytes: usize) -> Result<bool, BackendError> {
        Ok(false)
    }
    /// The device's handles for OpenMP interop (`__tgt_rtl_init_device_info`): none by
    /// default, as LLVM's host plugin gives none.
    fn interop_handles(&self) -> Result<InteropHandles, BackendError> {
        Ok(InteropHandles::default())
    }
    /// What the device environment of LLVM 17's and 18's device runtimes says about the
    /// device beyond its number ([`crate::generic::device_env`]); LLVM's generic defaults unless
    /// the vendor knows better.
    fn device_facts(&self) -> DeviceFacts {
        DeviceFacts::default()
    }
}

/// `to` as a device of the kind `T` (a peer of the same backend), or why not.
pub fn peer<T: BackendDevice>(to: &dyn BackendDevice) -> Result<&T, BackendError> {
    to.as_any().downcast_ref::<T>().ok_or_else(|| {
        BackendError::Invalid(format!(
            "device {} belongs to another plugin: no copy between them",
            to.index()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host hands out no queues or events (everything completes at once): any handle
    /// that comes back is refused, clearly, instead of being ignored.
    #[test]
    fn a_device_without_queues_refuses_every_handle() {
        let host = host::HostBackend.device(0);
        let peer = host::HostBackend.device(1);
        let refused = |r: Result<(), BackendError>| {
            assert!(
                matches!(
                    r,
                    Err(BackendError::UnknownHandle {
                        handle: 0x77,
                        device: 0,
                        ..
                    })
                ),
                "{r:?}"
            )
        };
        assert_eq!(host.queue_create().unwrap(), None);
        assert_eq!(host.event_create().unwrap(), None);
        refused(host.queue_finish(0x77));
        refused(host.queue_done(0x77).map(drop));
        let mut byte = 0u8;
        // SAFETY: refused before any copy: nothing is read or written.
        refused(unsafe { host.write_async(0x1000, &byte, 1, 0x77) });
        // SAFETY: as above.
        refused(unsafe { host.read_async(0x1000, &mut byte, 1, 0x77) });
        // SAFETY: as above.
        refused(unsafe { host.copy_async(0x1000, peer.as_ref(), 0x2000, 1, 0x77) });
        // SAFETY: refused before the call: no kernel runs.
        refused(unsafe { host.launch_on(0x1000, &[], None, 0x77) });
        refused(host.event_record(0x77, None));
        refused(host.event_wait(0x77, None));
        refused(host.event_sync(0x77));
        refused(host.event_destroy(0x77));
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
}
