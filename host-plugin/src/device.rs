//! One device, as nextgen's `GenericDeviceTy` sees it: the generic per-device state and
//! rules (the images loaded on it with their indirect tables, its kernel registry, its
//! allocations, copies, queues and events), over the vendor's object for the device
//! ([`BackendDevice`]). libomptarget's calls for a device go to its `Device`
//! through [`crate::Plugin::device`]; what spans devices stays on the `Plugin`. Loading
//! an image is [`crate::load`]'s sequence; this module keeps what it registers.

use crate::backend::{
    AllocKind, Backend, BackendDevice, DeviceAddr, DeviceLimit, EventHandle, InteropHandles,
    LaunchRequest, LoadedModule, QueueHandle,
};
use crate::device_memory::{DeviceBuffer, DeviceMemory};
use crate::device_settings::{DeviceSettings, HEAP_SIZE_ENV, STACK_SIZE_ENV};
use crate::device_table::{DeviceTable, IndexInfo};
use crate::diag;
use crate::error::{backend_err, backend_err_with, PluginError};
use crate::fptr::{self, FptrMapEntry};
use crate::kernels::{KernelRecord, KernelRegistry, LaunchPlan};
use crate::launch_shape::ExecMode;
use crate::locking::lock;
use crate::plugin_kind::PluginKind;
use std::ffi::CStr;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// An image loaded on a device, with everything that lives as long as it does.
pub(crate) struct LoadedImage {
    pub(crate) key: usize,
    pub(crate) name: String,
    /// Dropping it unloads the image.
    pub(crate) module: Box<dyn LoadedModule>,
    /// Its kernels' addresses (not a copy of every entry: a million names cost time).
    pub(crate) kernels: Vec<DeviceAddr>,
    /// Its indirect function table, where it has the device runtime's globals.
    pub(crate) table: Option<DeviceTable>,
    /// What the caller handed to its own caller for this image and must keep in place
    /// until the image is unloaded (the C ABI's `__tgt_target_table`): it lives and dies
    /// with the image, so no second list has to be kept in step with this one.
    pub(crate) published: Option<Box<dyn std::any::Any + Send>>,
}

/// One device of a plugin: its generic state, and the vendor's hooks for it.
pub struct Device {
    /// The device's number: libomptarget's, which is also the vendor's index.
    index: usize,
    kind: PluginKind,
    /// Declared before the vendor's device so the images unload before it drops (a GPU
    /// releases its context then).
    images: Mutex<Vec<LoadedImage>>,
    /// Every kernel of the images loaded here, with what its launches need: launches
    /// are checked against it, so a stale or made-up address fails instead of jumping
    /// anywhere.
    kernels: RwLock<KernelRegistry>,
    /// The vendor's device kind: what is asked of every device alike (how it reads
    /// images, its kernels' default mode).
    backend: Arc<dyn Backend>,
    /// The vendor's object for this device: every per-device call goes to it. Declared
    /// after the images, so they unload before it drops (a GPU releases its context then).
    vendor: Arc<dyn BackendDevice>,
    /// The most threads a load resolves its entries on ([`crate::Plugin::set_load_threads`]).
    load_thread_cap: usize,
    /// libomptarget's settings for the device ([`crate::device_settings`]): read and
    /// checked by [`Device::init_device`], else from the environment on first use.
    settings: OnceLock<DeviceSettings>,
    /// Whether the stack and heap limits were set on the device (once, at its first
    /// successful initialisation).
    limits_set: Mutex<bool>,
    /// What the C ABI handed out for this device that lives as long as the device
    /// (interop's async infos): freed with it.
    kept: Mutex<Vec<Box<dyn std::any::Any + Send>>>,
}

impl Device {
    /// Device `index` of `backend`, `vendor` its object there; its loads resolve on at
    /// most `load_thread_cap` threads.
    pub(crate) fn new(
        index: usize,
        kind: PluginKind,
        backend: Arc<dyn Backend>,
        vendor: Arc<dyn BackendDevice>,
        load_thread_cap: usize,
    ) -> Self {
        Device {
            index,
            kind,
            images: Mutex::default(),
            kernels: RwLock::default(),
            backend,
            vendor,
            load_thread_cap,
            settings: OnceLock::new(),
            limits_set: Mutex::new(false),
            kept: Mutex::default(),
        }
    }

    /// Give the device its settings instead of reading them from the environment (the
    /// Rust API's way; libomptarget's is the environment). Only before they are first
    /// read: by [`Device::init_device`], a load or a launch.
    pub fn configure(&self, settings: DeviceSettings) -> Result<(), PluginError> {
        self.settings
            .set(settings)
            .map_err(|_| PluginError::Invalid {
                device: self.id(),
                what: "its settings were read already: configure it before its first use".into(),
            })
    }

    /// libomptarget's settings for this device (a variable that is not a number counts
    /// as unset here; [`Device::init_device`] refuses it first).
    pub fn settings(&self) -> DeviceSettings {
        *self
            .settings
            .get_or_init(|| DeviceSettings::from_env().unwrap_or_default())
    }

    /// libomptarget's number for this device (what messages and errors name).
    pub fn id(&self) -> i32 {
        self.index as i32
    }

    pub(crate) fn kind(&self) -> PluginKind {
        self.kind
    }

    pub(crate) fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// The vendor's object for this device.
    pub(crate) fn vendor(&self) -> &dyn BackendDevice {
        self.vendor.as_ref()
    }

    /// This device's memory, for the plugin's own buffers.
    pub(crate) fn memory(&self) -> DeviceMemory {
        DeviceMemory::new(Arc::clone(&self.vendor))
    }

    pub(crate) fn load_thread_cap(&self) -> usize {
        self.load_thread_cap
    }

    pub(crate) fn set_load_thread_cap(&mut self, threads: usize) {
        self.load_thread_cap = threads.max(1);
    }

    /// Unload every image (`__tgt_rtl_deinit_plugin`).
    pub fn unload_all(&self) -> Result<(), PluginError> {
        let removed = std::mem::take(&mut *lock(&self.images));
        self.release(removed)
    }

    /// The keys of the images loaded here.
    pub fn loaded_image_keys(&self) -> Vec<usize> {
        lock(&self.images).iter().map(|i| i.key).collect()
    }

    /// Refuse `requires` flags (`__tgt_rtl_init_requires`) this device cannot honour.
    pub fn check_requirements(&self, flags: i64) -> Result<(), PluginError> {
        match self.backend.unsupported_requirements(flags) {
            Some(why) => Err(PluginError::Invalid {
                device: self.id(),
                what: why,
            }),
            None => Ok(()),
        }
    }

    /// Initialise the device, then, once, set the stack and heap limits its settings ask
    /// for, before any launch (LLVM 16's `GenericDeviceTy::init`).
    pub fn init_device(&self) -> Result<(), PluginError> {
        let settings = match self.settings.get() {
            Some(configured) => *configured,
            None => {
                let from_env = DeviceSettings::from_env().map_err(|e| PluginError::Invalid {
                    device: self.id(),
                    what: e.to_string(),
                })?;
                *self.settings.get_or_init(|| from_env)
            }
        };
        self.vendor
            .init()
            .map_err(backend_err(self.id(), "initialising"))?;
        let mut limits_set = lock(&self.limits_set);
        if !*limits_set {
            self.set_limit(DeviceLimit::StackSize, STACK_SIZE_ENV, settings.stack_size)?;
            self.set_limit(DeviceLimit::HeapSize, HEAP_SIZE_ENV, settings.heap_size)?;
            *limits_set = true;
        }
        Ok(())
    }

    /// Set one limit the settings ask for (`variable` names it in messages).
    fn set_limit(
        &self,
        limit: DeviceLimit,
        variable: &str,
        bytes: Option<usize>,
    ) -> Result<(), PluginError> {
        let Some(bytes) = bytes else {
            return Ok(());
        };
        let applies = self
            .vendor
            .set_limit(limit, bytes)
            .map_err(backend_err_with(self.id(), || {
                format!("setting {variable}={bytes}")
            }))?;
        diag::debug(|| {
            let device = self.id();
            match applies {
                true => format!("device {device}: {variable}={bytes}: set"),
                false => {
                    format!("device {device}: {variable}={bytes}: this device has no such limit")
                }
            }
        });
        Ok(())
    }

    /// The device's handles for OpenMP interop (`__tgt_rtl_init_device_info`).
    pub fn interop_handles(&self) -> Result<InteropHandles, PluginError> {
        self.vendor
            .interop_handles()
            .map_err(backend_err(self.id(), "reading its interop handles"))
    }

    /// A queue of its own for an OpenMP interop object (`__tgt_rtl_init_async_info`);
    /// None where the device has no queues (everything completes before it returns).
    pub fn interop_queue(&self) -> Result<Option<QueueHandle>, PluginError> {
        self.queue(&mut AsyncInfo::default())
    }

    /// Keep `value` until the device is dropped (what the C ABI handed out for it and
    /// libomptarget never gives back).
    pub fn keep_with_device(&self, value: Box<dyn std::any::Any + Send>) {
        lock(&self.kept).push(value);
    }

    /// Register a loaded image and its kernels, replacing the image of the same key.
    /// If releasing that one fails, the new one is not registered: dropping it unloads
    /// it and frees its table.
    pub(crate) fn register(
        &self,
        image: LoadedImage,
        kernel_records: Vec<(DeviceAddr, KernelRecord)>,
    ) -> Result<(), PluginError> {
        self.unload(image.key)?;
        lock(&self.images).push(image);
        self.kernels
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .extend(kernel_records);
        Ok(())
    }

    /// Unload one image (if loaded): free its table, close it.
    pub fn unload(&self, key: usize) -> Result<(), PluginError> {
        let removed: Vec<LoadedImage> = {
            let mut images = lock(&self.images);
            let (gone, kept) = std::mem::take(&mut *images)
                .into_iter()
                .partition(|i| i.key == key);
            *images = kept;
            gone
        };
        self.release(removed)
    }

    /// Forget the images' kernels, free their tables, unload them; the first failure
    /// to free is reported (after everything was tried).
    fn release(&self, removed: Vec<LoadedImage>) -> Result<(), PluginError> {
        let device = self.id();
        let mut result = Ok(());
        for image in removed {
            {
                let mut kernels = self.kernels.write().unwrap_or_else(|e| e.into_inner());
                for addr in &image.kernels {
                    kernels.remove(addr);
                }
            }
            let LoadedImage {
                name,
                module,
                table,
                ..
            } = image;
            if let Some(Err(source)) = table.map(DeviceTable::release) {
                if result.is_ok() {
                    result = Err(PluginError::Backend {
                        device,
                        what: format!("freeing the indirect table of {name}"),
                        source,
                    });
                }
            }
            drop(module);
            diag::debug(|| format!("device {device}: unloaded {name}"));
        }
        result
    }

    /// Keep `table` with the loaded image `key` until it is unloaded (the C ABI's
    /// published entry table, which libomptarget reads until then).
    pub fn keep_with_image(
        &self,
        key: usize,
        table: Box<dyn std::any::Any + Send>,
    ) -> Result<(), PluginError> {
        let device = self.id();
        let mut images = lock(&self.images);
        let image =
            images
                .iter_mut()
                .find(|i| i.key == key)
                .ok_or_else(|| PluginError::Invalid {
                    device,
                    what: format!("no image {key:#x} is loaded"),
                })?;
        image.published = Some(table);
        Ok(())
    }

    /// What `find` makes of the first loaded image (its key, and what was kept with it)
    /// whose kept object is a `T` it accepts. The C ABI finds the image behind a handle
    /// it gave out this way, so a stale or made-up handle matches nothing.
    pub fn find_kept<T: 'static, R>(
        &self,
        mut find: impl FnMut(usize, &T) -> Option<R>,
    ) -> Option<R> {
        let images = lock(&self.images);
        images.iter().find_map(|image| {
            let kept = image.published.as_ref()?.downcast_ref::<T>()?;
            find(image.key, kept)
        })
    }

    /// The device address of global `name` of the image loaded under `key`.
    pub fn image_global(&self, key: usize, name: &CStr) -> Result<DeviceAddr, PluginError> {
        let images = lock(&self.images);
        let image = images
            .iter()
            .find(|i| i.key == key)
            .ok_or_else(|| PluginError::Invalid {
                device: self.id(),
                what: format!("no image {key:#x} is loaded"),
            })?;
        image.module.global(name).map_err(backend_err(
            self.id(),
            format!(
                "finding global `{}` of {}",
                name.to_string_lossy(),
                image.name
            ),
        ))
    }

    /// `read` of the table installed for an image; None when the image is not loaded
    /// here or has no table.
    fn with_table<R>(&self, key: usize, read: impl FnOnce(&DeviceTable) -> Option<R>) -> Option<R> {
        let images = lock(&self.images);
        read(images.iter().find(|i| i.key == key)?.table.as_ref()?)
    }

    /// The indirect function table installed for an image (for tools and tests).
    pub fn fptr_table(&self, key: usize) -> Option<Vec<FptrMapEntry>> {
        self.with_table(key, |t| Some(t.rows().to_vec()))
    }

    /// The index header global of an image and what was written into it; None when the
    /// image has no table or its device runtime has no index global.
    pub fn fptr_index(&self, key: usize) -> Option<IndexInfo> {
        self.with_table(key, DeviceTable::index_info)
    }

    /// The head global of an image and the head the plugin wrote into it; None when the
    /// image has no table or its device runtime has no head global.
    pub fn fptr_head(&self, key: usize) -> Option<(DeviceAddr, device_rtl::FptrHead)> {
        self.with_table(key, DeviceTable::head_info)
    }

    /// Number of images loaded here.
    pub fn loaded_images(&self) -> usize {
        lock(&self.images).len()
    }

    /// `__tgt_rtl_set_function_ptr_map`: install a whole table, handed over by the host
    /// runtime, in every image loaded on the device that has the table globals.
    pub fn set_function_ptr_map(&self, rows: &[FptrMapEntry]) -> Result<usize, PluginError> {
        let device = self.id();
        let table = fptr::from_rows(rows).map_err(|source| PluginError::Fptr {
            image: "the table given to __tgt_rtl_set_function_ptr_map".into(),
            device,
            source,
        })?;
        let memory = self.memory();
        let mut images = lock(&self.images);
        let mut patched = 0;
        for image in images.iter_mut() {
            let Some(installed) = image.table.as_mut() else {
                continue;
            };
            let note = installed.replace(&memory, table.clone())?;
            diag::debug(|| format!("device {device}: {}: {note}", image.name));
            patched += 1;
        }
        Ok(patched)
    }

    /// What `__tgt_rtl_print_device_info` prints: the backend's facts about the device.
    pub fn info_lines(&self) -> Vec<String> {
        self.vendor.device_info()
    }
}

impl Device {
    /// The record of a kernel of an image loaded here.
    pub(crate) fn loaded_kernel(&self, kernel: DeviceAddr) -> Result<KernelRecord, PluginError> {
        let record = self
            .kernels
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&kernel)
            .cloned();
        record.ok_or_else(|| PluginError::Invalid {
            device: self.id(),
            what: format!("{kernel:#x} is not a kernel of any image loaded on it"),
        })
    }

    /// Run a kernel of a loaded image with pointer arguments, once (an OpenMP kernel of
    /// a GPU: with the default shape, see [`KernelRecord::plan`]), to completion.
    ///
    /// # Safety
    /// The arguments are device addresses valid for what the kernel does with them.
    pub unsafe fn launch(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
    ) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.launch_planned(kernel, args, None, None) }
    }

    /// Run a kernel of a loaded image with the team and thread counts libomptarget asks
    /// for (0: the default), shaped by LLVM 16's rules ([`KernelRecord::plan`]), to
    /// completion.
    ///
    /// # Safety
    /// The arguments are device addresses valid for what the kernel does with them.
    pub unsafe fn launch_teams(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        request: LaunchRequest,
    ) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.launch_planned(kernel, args, Some(request), None) }
    }

    /// [`Device::launch_teams`] on the async info's queue (created on first use): where
    /// the device has queues the launch is only enqueued, and completes when the queue
    /// is synchronized ([`Device::synchronize_queue`]); elsewhere it completes here.
    ///
    /// # Safety
    /// The arguments are device addresses valid for what the kernel does with them until
    /// the queue is synchronized.
    pub unsafe fn launch_async(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        request: LaunchRequest,
        info: &mut AsyncInfo,
    ) -> Result<(), PluginError> {
        let queue = self.queue(info)?;
        // SAFETY: forwarded caller contract.
        unsafe { self.launch_planned(kernel, args, Some(request), queue) }
    }

    /// Check the kernel, plan its launch and hand it to the vendor.
    ///
    /// # Safety
    /// The arguments are valid for the kernel (until `queue` is finished, if any);
    /// `queue` came from this device's backend.
    unsafe fn launch_planned(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        request: Option<LaunchRequest>,
        queue: Option<QueueHandle>,
    ) -> Result<(), PluginError> {
        let device = self.id();
        let record = self.loaded_kernel(kernel)?;
        if record.reduction_buffer_bytes != 0 {
            // LLVM 18's device runtime would write the reduction through the implicit
            // launch-environment argument: refuse rather than let it write through ~0.
            return Err(PluginError::Invalid {
                device,
                what: format!(
                    "kernel {} is a clang 18 teams reduction: it needs a launch environment \
                     with a {}-byte reduction buffer, which omptarget-rs does not provide yet",
                    record
                        .name
                        .as_deref()
                        .map_or("?".into(), |n| n.to_string_lossy()),
                    record.reduction_buffer_bytes
                ),
            });
        }
        let device_shared = self.settings().dynamic_shared_memory;
        let plan = record
            .plan(request, device_shared)
            .map_err(|e| PluginError::Invalid {
                device,
                what: format!(
                    "kernel {}: its blocks would get {} bytes of dynamic shared memory (the \
                 larger of the launch's ompx_dyn_cgroup_mem, {} bytes, and \
                 LIBOMPTARGET_SHARED_MEMORY_SIZE, {device_shared}), more than the {} bytes \
                 this device gives a block of this kernel",
                    record
                        .name
                        .as_deref()
                        .map_or("?".into(), |n| n.to_string_lossy()),
                    e.asked,
                    request.map_or(0, |r| r.dynamic_shared_memory),
                    e.limit
                ),
            })?;
        diag::debug(|| {
            format!(
                "device {device}: launching {kernel:#x} with {} args, {request:?} as \
                 {plan:?}{}",
                args.len(),
                queue.map_or(String::new(), |q| format!(" on queue {q:#x}"))
            )
        });
        let shape = match plan {
            LaunchPlan::Once => None,
            LaunchPlan::Shaped(_, shape) => Some(shape),
        };
        // What LLVM's plugins print (`GenericKernelTy::printLaunchInfo`), which LLVM 17's
        // lit tests check (api/omp_env_vars.c, offloading/info.c). A kernel run once (the
        // host) is what LLVM's host plugin says of every kernel: 1 block of 1 thread, in
        // Generic mode (`GenELF64KernelTy` is made with OMP_TGT_EXEC_MODE_GENERIC).
        diag::info(diag::INFO_PLUGIN, || {
            let (blocks, threads) = shape.map_or((1, 1), |s| (u64::from(s.blocks), s.threads));
            let mode = match plan {
                LaunchPlan::Shaped(mode, _) => mode,
                LaunchPlan::Once => record.mode.unwrap_or(ExecMode::Generic),
            };
            let mode = match mode {
                ExecMode::Generic => "Generic",
                ExecMode::Spmd => "SPMD",
                ExecMode::GenericSpmd => "Generic-SPMD",
            };
            let name = record.name.as_ref().map_or_else(
                || format!("{kernel:#x}"),
                |n| n.to_string_lossy().into_owned(),
            );
            format!(
                "Launching kernel {name} with {blocks} blocks and {threads} threads in {mode} mode"
            )
        });
        // SAFETY: `kernel` is a kernel of an image loaded on this device (its record was
        // found); the caller vouches for the arguments and the queue.
        unsafe {
            match queue {
                None => self.vendor.launch(kernel, args, shape),
                Some(queue) => self.vendor.launch_on(kernel, args, shape, queue),
            }
        }
        .map_err(backend_err_with(self.id(), || {
            format!("kernel {kernel:#x}")
        }))
    }
}

impl Device {
    /// Allocate memory of one of LLVM 16's kinds (device, pinned host, managed), freed
    /// when the buffer is dropped ([`DeviceBuffer::into_raw`] hands it over instead).
    pub fn alloc(&self, size: usize, kind: AllocKind) -> Result<DeviceBuffer, PluginError> {
        self.memory()
            .alloc(size, kind)
            .map_err(backend_err_with(self.id(), || {
                format!("allocating {size} bytes of {kind:?} memory")
            }))
    }

    /// # Safety
    /// `addr` came from `alloc` on this device and is dead.
    pub unsafe fn free(&self, addr: DeviceAddr) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.vendor.free(addr) }.map_err(backend_err(self.id(), "freeing"))
    }

    /// Copy host bytes to the device, to completion.
    ///
    /// # Safety
    /// `dst .. dst + src.len()` is device memory of this device.
    pub unsafe fn write(&self, dst: DeviceAddr, src: &[u8]) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.vendor.write(dst, src) }
            .map_err(backend_err(self.id(), "copying to the device"))
    }

    /// Copy device bytes to the host, to completion.
    ///
    /// # Safety
    /// `src .. src + dst.len()` is device memory of this device.
    pub unsafe fn read(&self, src: DeviceAddr, dst: &mut [u8]) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.vendor.read(src, dst) }
            .map_err(backend_err(self.id(), "copying from the device"))
    }

    /// `__tgt_rtl_data_lock`: page-lock host memory for fast copies; the address the
    /// device reaches it at.
    ///
    /// # Safety
    /// `ptr .. ptr + len` is host memory that stays allocated until it is unlocked.
    pub unsafe fn lock_host(&self, ptr: *mut u8, len: usize) -> Result<*mut u8, PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.vendor.lock_host(ptr, len) }.map_err(backend_err_with(self.id(), || {
            format!("locking {len} host bytes at {ptr:?}")
        }))
    }

    /// `__tgt_rtl_data_unlock`: undo [`Device::lock_host`].
    pub fn unlock_host(&self, ptr: *mut u8) -> Result<(), PluginError> {
        self.vendor
            .unlock_host(ptr)
            .map_err(backend_err_with(self.id(), || {
                format!("unlocking host memory at {ptr:?}")
            }))
    }
}

impl Device {
    /// [`Device::write`] on the async info's queue (created on first use), or to
    /// completion where the device has no queues.
    ///
    /// # Safety
    /// `dst .. dst + len` is device memory of this device; `src .. src + len` is host
    /// memory that stays readable, and unwritten, until the queue is synchronized.
    pub unsafe fn write_async(
        &self,
        dst: DeviceAddr,
        src: *const u8,
        len: usize,
        info: &mut AsyncInfo,
    ) -> Result<(), PluginError> {
        let Some(queue) = self.queue(info)? else {
            // SAFETY: caller contract: `src` holds `len` readable bytes.
            let src = unsafe { std::slice::from_raw_parts(src, len) };
            // SAFETY: forwarded caller contract.
            return unsafe { self.write(dst, src) };
        };
        // SAFETY: forwarded caller contract; `queue` is this device's.
        unsafe { self.vendor.write_async(dst, src, len, queue) }
            .map_err(backend_err(self.id(), "queueing a copy to the device"))
    }

    /// [`Device::read`] on the async info's queue (created on first use), or to
    /// completion where the device has no queues.
    ///
    /// # Safety
    /// `src .. src + len` is device memory of this device; `dst .. dst + len` is host
    /// memory that nothing else reads or writes until the queue is synchronized.
    pub unsafe fn read_async(
        &self,
        src: DeviceAddr,
        dst: *mut u8,
        len: usize,
        info: &mut AsyncInfo,
    ) -> Result<(), PluginError> {
        let Some(queue) = self.queue(info)? else {
            // SAFETY: caller contract: `dst` holds `len` bytes nothing else uses now.
            let dst = unsafe { std::slice::from_raw_parts_mut(dst, len) };
            // SAFETY: forwarded caller contract.
            return unsafe { self.read(src, dst) };
        };
        // SAFETY: forwarded caller contract; `queue` is this device's.
        unsafe { self.vendor.read_async(src, dst, len, queue) }
            .map_err(backend_err(self.id(), "queueing a copy from the device"))
    }

    /// Copy `len` bytes from this device to `to` (`__tgt_rtl_data_exchange[_async]`): on
    /// the async info's queue of this, the source, device when there is one (LLVM 16
    /// passes the source's), else to completion.
    ///
    /// # Safety
    /// `src .. src + len` is memory of this device and `dst .. dst + len` of `to`, both
    /// allocated until the copy completes (until the queue is synchronized).
    pub unsafe fn copy_to(
        &self,
        src: DeviceAddr,
        to: &Device,
        dst: DeviceAddr,
        len: usize,
        info: Option<&mut AsyncInfo>,
    ) -> Result<(), PluginError> {
        let what = || format!("copying {len} bytes to device {}", to.id());
        let queue = match info {
            Some(info) => self.queue(info)?,
            None => None,
        };
        // SAFETY: forwarded caller contract; `queue` is this device's.
        unsafe {
            match queue {
                Some(q) => self.vendor.copy_async(src, to.vendor.as_ref(), dst, len, q),
                None => self.vendor.copy(src, to.vendor.as_ref(), dst, len),
            }
        }
        .map_err(backend_err_with(self.id(), what))
    }

    /// Wait until everything asked of the device is done.
    pub fn synchronize(&self) -> Result<(), PluginError> {
        self.vendor
            .synchronize()
            .map_err(backend_err(self.id(), "synchronizing"))
    }

    /// The async info's queue, created on first use and kept in `info`; None where the
    /// device has no queues (everything then completes before it returns).
    pub(super) fn queue(&self, info: &mut AsyncInfo) -> Result<Option<QueueHandle>, PluginError> {
        if info.queue.is_none() {
            info.queue = self
                .vendor
                .queue_create()
                .map_err(backend_err(self.id(), "creating a queue"))?;
        }
        Ok(info.queue)
    }

    /// `__tgt_rtl_synchronize`: wait for the async info's queue and let it go (the info
    /// is empty afterwards, libomptarget's "complete"); without a queue, wait for the
    /// device.
    pub fn synchronize_queue(&self, info: &mut AsyncInfo) -> Result<(), PluginError> {
        match info.queue.take() {
            Some(queue) => self.finish_queue(queue),
            None => self.synchronize(),
        }
    }

    /// `__tgt_rtl_query_async`: if the async info's queue is done, let it go as
    /// [`Device::synchronize_queue`] does; if not, leave it. Without a queue (or an async
    /// info) everything is complete once the device is idle.
    pub fn query_queue(&self, info: Option<&mut AsyncInfo>) -> Result<(), PluginError> {
        let Some(info) = info else {
            return self.synchronize();
        };
        let Some(queue) = info.queue else {
            return self.synchronize();
        };
        let done = self
            .vendor
            .queue_done(queue)
            .map_err(backend_err_with(self.id(), || {
                format!("querying queue {queue:#x}")
            }))?;
        if done {
            info.queue = None;
            self.finish_queue(queue)?;
        }
        Ok(())
    }

    fn finish_queue(&self, queue: QueueHandle) -> Result<(), PluginError> {
        self.vendor
            .queue_finish(queue)
            .map_err(backend_err_with(self.id(), || {
                format!("finishing queue {queue:#x}")
            }))
    }

    /// A new event: the backend's, or [`token_event`] where every operation completes
    /// before it returns and there is nothing to wait for.
    pub fn event_create(&self) -> Result<EventHandle, PluginError> {
        let event = self
            .vendor
            .event_create()
            .map_err(backend_err(self.id(), "creating an event"))?;
        Ok(event.unwrap_or_else(token_event))
    }

    /// Mark the point the async info's queue (created on first use) has reached; without
    /// an async info, the device's default ordering.
    pub fn event_record(
        &self,
        event: EventHandle,
        info: Option<&mut AsyncInfo>,
    ) -> Result<(), PluginError> {
        if event == token_event() {
            return Ok(());
        }
        let queue = match info {
            Some(info) => self.queue(info)?,
            None => None,
        };
        self.vendor
            .event_record(event, queue)
            .map_err(backend_err(self.id(), "recording an event"))
    }

    /// Make later work on the async info's queue (created on first use) wait for the
    /// event.
    pub fn event_wait(
        &self,
        event: EventHandle,
        info: Option<&mut AsyncInfo>,
    ) -> Result<(), PluginError> {
        if event == token_event() {
            return Ok(());
        }
        let queue = match info {
            Some(info) => self.queue(info)?,
            None => None,
        };
        self.vendor
            .event_wait(event, queue)
            .map_err(backend_err(self.id(), "waiting for an event"))
    }

    pub fn event_sync(&self, event: EventHandle) -> Result<(), PluginError> {
        if event == token_event() {
            return Ok(());
        }
        self.vendor
            .event_sync(event)
            .map_err(backend_err(self.id(), "synchronizing an event"))
    }

    pub fn event_destroy(&self, event: EventHandle) -> Result<(), PluginError> {
        if event == token_event() {
            return Ok(());
        }
        self.vendor
            .event_destroy(event)
            .map_err(backend_err(self.id(), "destroying an event"))
    }
}

/// libomptarget's `__tgt_async_info` as the device sees it: the queue its operations go
/// on, empty until the first operation that needs one creates it, and emptied again when
/// the queue is synchronized.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AsyncInfo {
    pub queue: Option<QueueHandle>,
}

/// The one byte every token event points at.
static EVENT_TOKEN: u8 = 0;

/// The event handed out where the backend has no events (everything completes before it
/// returns, so there is nothing to wait for): an address no backend event can have.
pub fn token_event() -> EventHandle {
    &EVENT_TOKEN as *const u8 as EventHandle
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::host;
    use crate::backend::{AllocKind, DeviceAddr, LaunchRequest, QueueHandle};
    use crate::launch_shape::Shape;
    use crate::BackendError;

    /// A backend with queues, as CUDA has them, that records what it is asked (no
    /// driver: nothing runs). `done` is what `queue_done` answers.
    #[derive(Default)]
    struct QueueBackend {
        calls: Mutex<Vec<String>>,
        done: std::sync::atomic::AtomicBool,
    }

    const QUEUE: QueueHandle = 0x5100;
    const KERNEL: DeviceAddr = 0x4000;

    impl QueueBackend {
        fn record(&self, call: String) {
            self.calls.lock().unwrap().push(call);
        }
        fn calls(&self) -> Vec<String> {
            std::mem::take(&mut *self.calls.lock().unwrap())
        }
    }

    impl Backend for QueueBackend {
        fn elf_machine(&self) -> u16 {
            0
        }
        fn device_count(&self) -> usize {
            1
        }
        fn device(&self, _: usize) -> Arc<dyn BackendDevice> {
            unreachable!("the tests make the device themselves")
        }
    }

    impl BackendDevice for QueueBackend {
        fn index(&self) -> usize {
            0
        }
        fn init(&self) -> Result<(), BackendError> {
            Ok(())
        }
        fn load_image(
            &self,
            _: &[u8],
            _: Option<crate::backend::StagedImage>,
        ) -> Result<Box<dyn LoadedModule>, BackendError> {
            Err(BackendError::Load("no images here".into()))
        }
        fn alloc(&self, _: usize, _: AllocKind) -> Result<DeviceAddr, BackendError> {
            Err(BackendError::OutOfMemory(0))
        }
        unsafe fn free(&self, _: DeviceAddr) -> Result<(), BackendError> {
            Ok(())
        }
        unsafe fn write(&self, _: DeviceAddr, _: &[u8]) -> Result<(), BackendError> {
            self.record("write".into());
            Ok(())
        }
        unsafe fn read(&self, _: DeviceAddr, _: &mut [u8]) -> Result<(), BackendError> {
            self.record("read".into());
            Ok(())
        }
        unsafe fn copy(
            &self,
            _: DeviceAddr,
            _: &dyn BackendDevice,
            _: DeviceAddr,
            _: usize,
        ) -> Result<(), BackendError> {
            self.record("copy".into());
            Ok(())
        }
        unsafe fn launch(
            &self,
            kernel: DeviceAddr,
            _: &[DeviceAddr],
            shape: Option<Shape>,
        ) -> Result<(), BackendError> {
            self.record(format!("launch {kernel:#x} {shape:?} to completion"));
            Ok(())
        }
        unsafe fn launch_on(
            &self,
            kernel: DeviceAddr,
            _: &[DeviceAddr],
            shape: Option<Shape>,
            queue: QueueHandle,
        ) -> Result<(), BackendError> {
            self.record(format!("launch {kernel:#x} {shape:?} on {queue:#x}"));
            Ok(())
        }
        fn synchronize(&self) -> Result<(), BackendError> {
            self.record("synchronize".into());
            Ok(())
        }
        fn device_info(&self) -> Vec<String> {
            vec!["a recording backend".into()]
        }
        fn queue_create(&self) -> Result<Option<QueueHandle>, BackendError> {
            self.record("queue_create".into());
            Ok(Some(QUEUE))
        }
        fn queue_finish(&self, queue: QueueHandle) -> Result<(), BackendError> {
            self.record(format!("queue_finish {queue:#x}"));
            Ok(())
        }
        fn queue_done(&self, _: QueueHandle) -> Result<bool, BackendError> {
            Ok(self.done.load(std::sync::atomic::Ordering::SeqCst))
        }
        unsafe fn write_async(
            &self,
            _: DeviceAddr,
            _: *const u8,
            _: usize,
            queue: QueueHandle,
        ) -> Result<(), BackendError> {
            self.record(format!("write_async {queue:#x}"));
            Ok(())
        }
        unsafe fn read_async(
            &self,
            _: DeviceAddr,
            _: *mut u8,
            _: usize,
            queue: QueueHandle,
        ) -> Result<(), BackendError> {
            self.record(format!("read_async {queue:#x}"));
            Ok(())
        }
        unsafe fn copy_async(
            &self,
            _: DeviceAddr,
            _: &dyn BackendDevice,
            _: DeviceAddr,
            _: usize,
            queue: QueueHandle,
        ) -> Result<(), BackendError> {
            self.record(format!("copy_async {queue:#x}"));
            Ok(())
        }
    }

    /// Device 0 of `backend`, with one kernel (no exec mode, no limits: run once).
    fn device_with_kernel(backend: Arc<QueueBackend>) -> Device {
        let device = Device::new(0, PluginKind::Cuda, backend.clone(), backend, 1);
        device.kernels.write().unwrap().insert(
            KERNEL,
            KernelRecord {
                mode: None,
                limits: None,
                name: None,
                reduction_buffer_bytes: 0,
            },
        );
        device
    }

    /// The queue is created by the first operation that needs one and kept in the async
    /// info; the launch and the copies go on it, nothing waits, and synchronize lets it
    /// go and empties the info.
    #[test]
    fn an_async_info_gets_its_queue_on_first_use_and_keeps_it_until_synchronized() {
        let backend = Arc::new(QueueBackend::default());
        let device = device_with_kernel(backend.clone());
        let mut info = AsyncInfo::default();
        let mut byte = 0u8;
        // SAFETY: the recording backend reads and writes nothing.
        unsafe {
            device.write_async(0x10, &byte, 1, &mut info).unwrap();
            device
                .launch_async(KERNEL, &[], LaunchRequest::default(), &mut info)
                .unwrap();
            device.read_async(0x10, &mut byte, 1, &mut info).unwrap();
            device
                .copy_to(0x10, &device, 0x20, 1, Some(&mut info))
                .unwrap();
        }
        assert_eq!(info.queue, Some(QUEUE));
        device.synchronize_queue(&mut info).unwrap();
        assert_eq!(info.queue, None, "synchronized: the info is empty again");
        assert_eq!(
            backend.calls(),
            [
                "queue_create",
                "write_async 0x5100",
                "launch 0x4000 None on 0x5100",
                "read_async 0x5100",
                "copy_async 0x5100",
                "queue_finish 0x5100",
            ]
        );
        // Without an async info: to completion, no queue.
        // SAFETY: as above.
        unsafe {
            device.launch(KERNEL, &[]).unwrap();
            device.copy_to(0x10, &device, 0x20, 1, None).unwrap();
        }
        device.synchronize_queue(&mut info).unwrap();
        assert_eq!(
            backend.calls(),
            ["launch 0x4000 None to completion", "copy", "synchronize"]
        );
    }

    /// query_async leaves an unfinished queue in place and lets a finished one go.
    #[test]
    fn a_query_lets_only_a_finished_queue_go() {
        let backend = Arc::new(QueueBackend::default());
        let device = device_with_kernel(backend.clone());
        let mut info = AsyncInfo { queue: Some(QUEUE) };
        device.query_queue(Some(&mut info)).unwrap();
        assert_eq!(info.queue, Some(QUEUE), "not done: still queued");
        assert_eq!(backend.calls(), Vec::<String>::new());
        backend
            .done
            .store(true, std::sync::atomic::Ordering::SeqCst);
        device.query_queue(Some(&mut info)).unwrap();
        assert_eq!(info.queue, None);
        assert_eq!(backend.calls(), ["queue_finish 0x5100"]);
        device.query_queue(None).unwrap();
        assert_eq!(backend.calls(), ["synchronize"]);
    }

    /// Where the backend has no queues (the host) the async calls complete at once and
    /// leave the info empty, and events are tokens no backend call sees.
    #[test]
    fn without_queues_async_calls_complete_at_once_and_events_are_tokens() {
        let backend = Arc::new(host::HostBackend);
        let device = Device::new(0, PluginKind::X86_64, backend.clone(), backend.device(0), 1);
        let mut info = AsyncInfo::default();
        let source = [7u8; 4];
        let mut target = [0u8; 4];
        let mut back = [0u8; 4];
        // SAFETY: on the host device, device memory is process memory: the arrays.
        unsafe {
            let at = target.as_mut_ptr() as DeviceAddr;
            device
                .write_async(at, source.as_ptr(), 4, &mut info)
                .unwrap();
            device
                .read_async(at, back.as_mut_ptr(), 4, &mut info)
                .unwrap();
        }
        assert_eq!(back, source, "both copies completed before they returned");
        assert_eq!(info.queue, None);
        let event = device.event_create().unwrap();
        assert_eq!(event, token_event());
        device.event_record(event, Some(&mut info)).unwrap();
        device.event_wait(event, Some(&mut info)).unwrap();
        device.event_sync(event).unwrap();
        device.event_destroy(event).unwrap();
        assert_eq!(info.queue, None, "a token event creates no queue");
    }
}
