//! One device, as nextgen's `GenericDeviceTy` sees it: the generic per-device state and
//! rules (the images loaded on it with their indirect tables, its kernel registry, its
//! allocations, copies, queues and events), over the vendor's hooks ([`Backend`], called
//! with this device's index). libomptarget's calls for a device go to its `Device`
//! through [`crate::Plugin::device`]; what spans devices stays on the `Plugin`. Loading
//! an image is [`crate::load`]'s sequence; this module keeps what it registers.

use crate::backend::{
    AllocKind, Backend, DeviceAddr, EventHandle, LaunchRequest, LoadedModule, QueueHandle,
};
use crate::device_memory::DeviceMemory;
use crate::device_table::{DeviceTable, IndexInfo};
use crate::diag;
use crate::error::{backend_err, backend_err_with, PluginError};
use crate::fptr::{self, FptrMapEntry};
use crate::kernels::{KernelRecord, KernelRegistry, LaunchPlan};
use crate::locking::lock;
use crate::plugin_kind::PluginKind;
use std::sync::{Arc, Mutex, RwLock};

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
    /// Declared before the backend so the images unload before the last reference to
    /// the backend drops (a GPU backend releases its contexts then).
    images: Mutex<Vec<LoadedImage>>,
    /// Every kernel of the images loaded here, with what its launches need: launches
    /// are checked against it, so a stale or made-up address fails instead of jumping
    /// anywhere.
    kernels: RwLock<KernelRegistry>,
    backend: Arc<dyn Backend>,
    /// The most threads a load resolves its entries on ([`crate::Plugin::set_load_threads`]).
    load_thread_cap: usize,
}

impl Device {
    /// Device `index` of `backend`; its loads resolve on at most `load_thread_cap` threads.
    pub(crate) fn new(
        index: usize,
        kind: PluginKind,
        backend: Arc<dyn Backend>,
        load_thread_cap: usize,
    ) -> Self {
        Device {
            index,
            kind,
            images: Mutex::default(),
            kernels: RwLock::default(),
            backend,
            load_thread_cap,
        }
    }

    /// libomptarget's number for this device (what messages and errors name).
    pub fn id(&self) -> i32 {
        self.index as i32
    }

    /// The vendor's index of this device (what its hooks take).
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    pub(crate) fn kind(&self) -> PluginKind {
        self.kind
    }

    pub(crate) fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// This device's memory, for the plugin's own buffers.
    pub(crate) fn memory(&self) -> DeviceMemory {
        DeviceMemory::new(Arc::clone(&self.backend), self.index)
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

    pub fn init_device(&self) -> Result<(), PluginError> {
        self.backend
            .init_device(self.index)
            .map_err(backend_err(self.id(), "initialising"))
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

    /// The indirect function table installed for an image (for tools and tests).
    pub fn fptr_table(&self, key: usize) -> Option<Vec<FptrMapEntry>> {
        let images = lock(&self.images);
        let image = images.iter().find(|i| i.key == key)?;
        image.table.as_ref().map(|t| t.rows().to_vec())
    }

    /// The index header global of an image and what was written into it; None when the
    /// image has no table or its device runtime has no index global.
    pub fn fptr_index(&self, key: usize) -> Option<IndexInfo> {
        let images = lock(&self.images);
        images
            .iter()
            .find(|i| i.key == key)?
            .table
            .as_ref()?
            .index_info()
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

    /// The record of a kernel of an image loaded here.
    fn loaded_kernel(&self, kernel: DeviceAddr) -> Result<KernelRecord, PluginError> {
        let record = self
            .kernels
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&kernel)
            .copied();
        record.ok_or_else(|| PluginError::Invalid {
            device: self.id(),
            what: format!("{kernel:#x} is not a kernel of any image loaded on it"),
        })
    }

    /// Run a kernel of a loaded image with pointer arguments, once (an OpenMP kernel of
    /// a GPU: with the default shape, see [`KernelRecord::plan`]).
    ///
    /// # Safety
    /// The arguments are device addresses valid for what the kernel does with them.
    pub unsafe fn launch(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
    ) -> Result<(), PluginError> {
        let device = self.id();
        let record = self.loaded_kernel(kernel)?;
        diag::debug(|| {
            format!(
                "device {device}: launching {kernel:#x} with {} args",
                args.len()
            )
        });
        // SAFETY: `kernel` is a kernel of an image loaded on this device (its record was
        // found); the caller vouches for the arguments.
        unsafe { self.run_kernel(kernel, args, record.plan(None)) }
    }

    /// Run a kernel of a loaded image with the team and thread counts libomptarget asks
    /// for (0: the default), shaped by LLVM 16's rules ([`KernelRecord::plan`]).
    ///
    /// # Safety
    /// The arguments are device addresses valid for what the kernel does with them.
    pub unsafe fn launch_teams(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        request: LaunchRequest,
    ) -> Result<(), PluginError> {
        let device = self.id();
        let record = self.loaded_kernel(kernel)?;
        diag::debug(|| {
            format!(
                "device {device}: launching {kernel:#x} with {} args, {request:?}",
                args.len()
            )
        });
        // SAFETY: as in `launch`.
        unsafe { self.run_kernel(kernel, args, record.plan(Some(request))) }
    }

    /// Hand a planned launch to the vendor.
    ///
    /// # Safety
    /// `kernel` is a kernel of an image loaded on this device, and the arguments are
    /// valid for it.
    unsafe fn run_kernel(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        plan: LaunchPlan,
    ) -> Result<(), PluginError> {
        let launched = match plan {
            // SAFETY: forwarded caller contract.
            LaunchPlan::Once => unsafe { self.backend.launch(self.index, kernel, args) },
            LaunchPlan::Shaped(mode, shape) => {
                diag::debug(|| {
                    format!(
                        "device {}: launching {kernel:#x} ({mode:?}) as {shape:?}",
                        self.id()
                    )
                });
                // SAFETY: forwarded caller contract.
                unsafe { self.backend.launch_shaped(self.index, kernel, args, shape) }
            }
        };
        launched.map_err(backend_err_with(self.id(), || {
            format!("kernel {kernel:#x}")
        }))
    }

    /// Allocate memory of one of LLVM 16's kinds (device, pinned host, managed).
    pub fn alloc_kind(&self, size: usize, kind: AllocKind) -> Result<DeviceAddr, PluginError> {
        self.backend
            .alloc_kind(self.index, size, kind)
            .map_err(backend_err_with(self.id(), || {
                format!("allocating {kind:?} memory")
            }))
    }

    pub fn alloc(&self, size: usize) -> Result<DeviceAddr, PluginError> {
        self.backend
            .alloc(self.index, size)
            .map_err(backend_err(self.id(), "allocating"))
    }

    /// # Safety
    /// `addr` came from `alloc` on this device and is dead.
    pub unsafe fn free(&self, addr: DeviceAddr) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.backend.free(self.index, addr) }.map_err(backend_err(self.id(), "freeing"))
    }

    /// # Safety
    /// `dst .. dst + src.len()` is device memory of `device`.
    pub unsafe fn submit(&self, dst: DeviceAddr, src: &[u8]) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.backend.write(self.index, dst, src) }
            .map_err(backend_err(self.id(), "copying to the device"))
    }

    /// # Safety
    /// `src .. src + dst.len()` is device memory of `device`.
    pub unsafe fn retrieve(&self, dst: &mut [u8], src: DeviceAddr) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.backend.read(self.index, src, dst) }
            .map_err(backend_err(self.id(), "copying from the device"))
    }

    pub fn synchronize(&self) -> Result<(), PluginError> {
        self.backend
            .synchronize(self.index)
            .map_err(backend_err(self.id(), "synchronizing"))
    }

    /// A queue for asynchronous copies, None where the device copies synchronously.
    pub fn queue_create(&self) -> Result<Option<QueueHandle>, PluginError> {
        self.backend
            .queue_create(self.index)
            .map_err(backend_err(self.id(), "creating a queue"))
    }

    /// Wait for a queue's work and destroy it.
    pub fn queue_finish(&self, queue: QueueHandle) -> Result<(), PluginError> {
        self.backend
            .queue_finish(self.index, queue)
            .map_err(backend_err_with(self.id(), || {
                format!("finishing queue {queue:#x}")
            }))
    }

    pub fn queue_done(&self, queue: QueueHandle) -> Result<bool, PluginError> {
        self.backend
            .queue_done(self.index, queue)
            .map_err(backend_err_with(self.id(), || {
                format!("querying queue {queue:#x}")
            }))
    }

    /// # Safety
    /// As [`Backend::write_async`].
    pub unsafe fn submit_async(
        &self,
        dst: DeviceAddr,
        src: *const u8,
        len: usize,
        queue: QueueHandle,
    ) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.backend.write_async(self.index, dst, src, len, queue) }
            .map_err(backend_err(self.id(), "queueing a copy to the device"))
    }

    /// # Safety
    /// As [`Backend::read_async`].
    pub unsafe fn retrieve_async(
        &self,
        dst: *mut u8,
        src: DeviceAddr,
        len: usize,
        queue: QueueHandle,
    ) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.backend.read_async(self.index, src, dst, len, queue) }
            .map_err(backend_err(self.id(), "queueing a copy from the device"))
    }

    /// A new event, None where events are only tokens (everything is already complete).
    pub fn event_create(&self) -> Result<Option<EventHandle>, PluginError> {
        self.backend
            .event_create(self.index)
            .map_err(backend_err(self.id(), "creating an event"))
    }

    pub fn event_record(
        &self,
        event: EventHandle,
        queue: Option<QueueHandle>,
    ) -> Result<(), PluginError> {
        self.backend
            .event_record(self.index, event, queue)
            .map_err(backend_err(self.id(), "recording an event"))
    }

    pub fn event_wait(
        &self,
        event: EventHandle,
        queue: Option<QueueHandle>,
    ) -> Result<(), PluginError> {
        self.backend
            .event_wait(self.index, event, queue)
            .map_err(backend_err(self.id(), "waiting for an event"))
    }

    pub fn event_sync(&self, event: EventHandle) -> Result<(), PluginError> {
        self.backend
            .event_sync(self.index, event)
            .map_err(backend_err(self.id(), "synchronizing an event"))
    }

    pub fn event_destroy(&self, event: EventHandle) -> Result<(), PluginError> {
        self.backend
            .event_destroy(self.index, event)
            .map_err(backend_err(self.id(), "destroying an event"))
    }
}
