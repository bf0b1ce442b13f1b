//! One device, as nextgen's `GenericDeviceTy` sees it: the generic per-device state and
//! rules (the images loaded on it with their indirect tables, its kernel registry, its
//! allocations, copies, queues and events), over the vendor's object for the device
//! ([`BackendDevice`]). libomptarget's calls for a device go to its `Device`
//! through [`crate::Plugin::device`]; what spans devices stays on the `Plugin`. Loading
//! an image is [`crate::generic::load`]'s sequence; this module keeps what it registers.

use crate::backend::{
    Backend, BackendDevice, DeviceAddr, DeviceLimit, EventHandle, InteropHandles, LoadedModule,
    QueueHandle,
};
use crate::generic::device_buffer::DeviceMemory;
use crate::generic::device_settings::{DeviceSettings, HEAP_SIZE_ENV, STACK_SIZE_ENV};
use crate::generic::error::{backend_err, backend_err_with, PluginError};
use crate::generic::kernels::{KernelRecord, KernelRegistry};
use crate::generic::memory_pool::MemoryPool;
use crate::generic::plugin_kind::PluginKind;
use crate::generic::table::device_table::{DeviceTable, IndexInfo};
use crate::generic::table::fptr::{self, FptrMapEntry};
use crate::support::diag;
use crate::support::locking::lock;
use std::ffi::CStr;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

mod launch;
mod memory;
mod queues;

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
    /// libomptarget's settings for the device ([`crate::generic::device_settings`]): read and
    /// checked by [`Device::init_device`], else from the environment on first use.
    settings: OnceLock<DeviceSettings>,
    /// Whether the stack and heap limits were set on the device (once, at its first
    /// successful initialisation).
    limits_set: Mutex<bool>,
    /// What the C ABI handed out for this device that lives as long as the device
    /// (interop's async infos): freed with it.
    kept: Mutex<Vec<Box<dyn std::any::Any + Send>>>,
    /// libomptarget's device memory, pooled where the vendor pools
    /// ([`BackendDevice::pools_memory`]); made on first use, from the settings.
    pool: OnceLock<Option<Arc<MemoryPool>>>,
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
            pool: OnceLock::new(),
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

    /// This device's memory as libomptarget allocates it: through the pool, where the
    /// device has one.
    pub(crate) fn user_memory(&self) -> DeviceMemory {
        match self.pool() {
            Some(pool) => DeviceMemory::pooled(Arc::clone(&self.vendor), Arc::clone(pool)),
            None => self.memory(),
        }
    }

    /// The device's pool, made on first use where the vendor pools and the settings'
    /// threshold is not 0.
    pub fn pool(&self) -> Option<&Arc<MemoryPool>> {
        self.pool
            .get_or_init(|| {
                let settings = self.settings().pool;
                (self.vendor.pools_memory() && settings.threshold > 0)
                    .then(|| Arc::new(MemoryPool::new(settings)))
            })
            .as_ref()
    }

    /// Give the pool's free blocks back to the driver (at the end of the device's use,
    /// and when the plugin unloads everything).
    pub(crate) fn trim_pool(&self) -> Result<(), PluginError> {
        match self.pool.get() {
            Some(Some(pool)) => pool
                .trim(self.vendor.as_ref())
                .map(|_| ())
                .map_err(backend_err(self.id(), "giving the memory pool back")),
            _ => Ok(()),
        }
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
        let unloaded = self.release(removed);
        let trimmed = self.trim_pool();
        unloaded.and(trimmed)
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

impl Drop for Device {
    /// The pool's free blocks go back to the driver before the vendor's device (and
    /// with it a GPU's context) goes.
    fn drop(&mut self) {
        if let Err(e) = self.trim_pool() {
            diag::debug(|| format!("{e}"));
        }
    }
}

#[cfg(test)]
mod tests;
