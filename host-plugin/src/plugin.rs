//! The safe core: devices, the images loaded on them, their entry and fptr tables.
//!
//! Everything libomptarget asks for goes through here; the `abi` shims only convert
//! C structures to and from these types.

use crate::backend::launch_shape::{self, ExecMode};
use crate::backend::{
    cuda::CudaBackend, hip::HipBackend, host::HostBackend, AllocKind, Backend, DeviceAddr,
    EventHandle, LaunchRequest, LoadedModule, QueueHandle,
};
use crate::entries::{EntryKind, HostEntry, OffloadEntry};
use crate::error::PluginError;
use crate::fptr::{self, FptrMapEntry, Origin};
use crate::fptr_index::{self, FptrIndex, BUCKET_BYTES, INDEX_GLOBAL};
use crate::kernels::{KernelRecord, KernelRegistry, LaunchPlan};
use crate::symbols::{Symbol, Wanted};
use crate::{diag, image};
use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::{Mutex, MutexGuard, RwLock};

/// The device runtime's table pointer and size (see device-rtl).
pub const FPTR_MAP_P: &CStr = c"__omp_offloading_fptr_map_p";
pub const FPTR_MAP_SIZE: &CStr = c"__omp_offloading_fptr_map_size";

/// Which libomptarget plugin this is: its name and the device kind it drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PluginKind {
    X86_64,
    Cuda,
    Amdgpu,
}

impl PluginKind {
    /// GPU images carry LLVM's device runtime, which reads a device environment the
    /// plugin writes ([`crate::device_env`]); the host device has none.
    pub fn has_device_environment(self) -> bool {
        self.is_gpu()
    }

    /// A GPU kind: its kernels carry an exec mode and launch with a shape.
    pub fn is_gpu(self) -> bool {
        matches!(self, PluginKind::Cuda | PluginKind::Amdgpu)
    }

    /// The part of `libomptarget.rtl.<name>.so` libomptarget loads this kind by.
    pub fn name(self) -> &'static str {
        match self {
            PluginKind::X86_64 => "x86_64",
            PluginKind::Cuda => "cuda",
            PluginKind::Amdgpu => "amdgpu",
        }
    }

    pub fn all() -> [PluginKind; 3] {
        [PluginKind::X86_64, PluginKind::Cuda, PluginKind::Amdgpu]
    }

    /// The backend that runs this kind's devices. CUDA and AMDGPU find no devices,
    /// quietly, where there is no driver or runtime.
    pub fn backend(self) -> Box<dyn Backend> {
        match self {
            PluginKind::X86_64 => Box::new(HostBackend),
            PluginKind::Cuda => Box::new(CudaBackend::new()),
            PluginKind::Amdgpu => Box::new(HipBackend::new()),
        }
    }
}

/// One entry of the table returned to libomptarget: the device side of a host entry,
/// whose name it shares (the C ABI returns the host entry's name pointer, as LLVM's
/// plugins do).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceEntry {
    pub addr: DeviceAddr,
    pub size: u64,
    pub flags: i32,
}

/// Where an image's fptr table lives on the device, if the image can hold one.
struct InstalledTable {
    map_p: DeviceAddr,
    map_size: DeviceAddr,
    /// The device copy of the table (None when the table is empty).
    allocation: Option<DeviceAddr>,
    table: Vec<FptrMapEntry>,
    /// The image's index header global, when its device runtime has one (device
    /// runtimes from before the index do not).
    index_global: Option<DeviceAddr>,
    /// The index installed beside the table, if any.
    index: Option<InstalledIndex>,
}

/// An index on the device: the header written into the image's global, and the
/// allocation holding its buckets (aligned inside it).
#[derive(Clone, Copy, Debug)]
struct InstalledIndex {
    header: FptrIndex,
    allocation: DeviceAddr,
}

/// What [`Plugin::fptr_index`] reports about an image's index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexInfo {
    /// Device address of the image's `__omptarget_rs_fptr_index`.
    pub global: DeviceAddr,
    /// What the plugin wrote into it: the empty header when there is no index.
    pub header: FptrIndex,
}

struct LoadedImage {
    key: usize,
    name: String,
    /// Kept alive while the image is loaded; dropping it unloads the image.
    _module: Box<dyn LoadedModule>,
    /// Its kernels' addresses (not a copy of every entry: a million names cost time).
    kernels: Vec<DeviceAddr>,
    fptr: Option<InstalledTable>,
    /// What the caller handed to its own caller for this image and must keep in place
    /// until the image is unloaded (the C ABI's `__tgt_target_table`): it lives and dies
    /// with the image, so no second list has to be kept in step with this one.
    published: Option<Box<dyn std::any::Any + Send>>,
}

#[derive(Default)]
struct DeviceState {
    images: Mutex<Vec<LoadedImage>>,
    /// Every kernel of the images loaded here, with what its launches need: launches
    /// are checked against it, so a stale or made-up address fails instead of jumping
    /// anywhere.
    kernels: RwLock<KernelRegistry>,
}

pub struct Plugin {
    kind: PluginKind,
    /// Declared before the backend so the images unload before the backend drops (a GPU
    /// backend releases its contexts then).
    devices: Vec<DeviceState>,
    backend: Box<dyn Backend>,
}

/// A name for an image in messages: where libomptarget keeps it and how big it is.
pub fn image_name(key: usize, len: usize) -> String {
    format!("image {key:#x} ({len} bytes)")
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock was already reported; the data stays usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Plugin {
    pub fn new(kind: PluginKind) -> Self {
        Self::with_backend(kind, kind.backend())
    }

    pub fn with_backend(kind: PluginKind, backend: Box<dyn Backend>) -> Self {
        let devices = (0..backend.device_count())
            .map(|_| DeviceState::default())
            .collect();
        Plugin {
            kind,
            backend,
            devices,
        }
    }

    pub fn kind(&self) -> PluginKind {
        self.kind
    }

    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn device(&self, device: i32) -> Result<(usize, &DeviceState), PluginError> {
        usize::try_from(device)
            .ok()
            .and_then(|d| self.devices.get(d).map(|s| (d, s)))
            .ok_or(PluginError::NoSuchDevice {
                device,
                count: self.devices.len(),
            })
    }

    /// An error mapper for a backend call. `what` becomes a String only on failure:
    /// these run on every transfer and launch, where an allocation per call showed up.
    fn backend_err(
        device: i32,
        what: impl Into<String>,
    ) -> impl FnOnce(crate::BackendError) -> PluginError {
        move |source| PluginError::Backend {
            device,
            what: what.into(),
            source,
        }
    }

    /// As [`Self::backend_err`], for a message that has to be formatted (only on failure).
    fn backend_err_with(
        device: i32,
        what: impl FnOnce() -> String,
    ) -> impl FnOnce(crate::BackendError) -> PluginError {
        move |source| PluginError::Backend {
            device,
            what: what(),
            source,
        }
    }

    pub fn is_valid_binary(&self, image: &[u8]) -> bool {
        self.backend.is_valid_image(image)
    }

    pub fn init_device(&self, device: i32) -> Result<(), PluginError> {
        let (d, _) = self.device(device)?;
        self.backend
            .init_device(d)
            .map_err(Self::backend_err(device, "initialising"))
    }

    /// Load an image on a device, resolve its entries (one device entry per host entry,
    /// in order), and install its indirect function table. `key` identifies the image
    /// (libomptarget's address of it); loading the same key again replaces it.
    pub fn load_binary(
        &self,
        device: i32,
        key: usize,
        image_bytes: &[u8],
        entries: &[OffloadEntry],
    ) -> Result<Vec<DeviceEntry>, PluginError> {
        let mut out: Vec<DeviceEntry> = entries
            .iter()
            .map(|e| DeviceEntry {
                addr: 0,
                size: e.size,
                flags: e.flags,
            })
            .collect();
        self.load_entries(device, key, image_bytes, entries, |i, addr| {
            out[i].addr = addr
        })?;
        Ok(out)
    }

    /// [`Plugin::load_binary`] for any kind of host entry (the C ABI reads
    /// libomptarget's in place): `record(i, address)` gets entry `i`'s device address
    /// as it is resolved, straight into the caller's table (no list of a million
    /// addresses in between). If the load fails, what was recorded means nothing.
    pub fn load_entries<E: HostEntry>(
        &self,
        device: i32,
        key: usize,
        image_bytes: &[u8],
        entries: &[E],
        record: impl FnMut(usize, DeviceAddr),
    ) -> Result<(), PluginError> {
        let (d, state) = self.device(device)?;
        let name = image_name(key, image_bytes.len());
        // The code for this device: the image, or its code object for the device.
        let code =
            self.backend
                .device_code(d, image_bytes)
                .map_err(|source| PluginError::Load {
                    image: name.clone(),
                    device,
                    source,
                })?;
        let image_bytes = code.bytes();
        let symbols =
            self.backend
                .inspect_image(image_bytes)
                .map_err(|source| PluginError::Image {
                    image: name.clone(),
                    device,
                    source,
                })?;
        let module =
            self.backend
                .load_image(d, image_bytes)
                .map_err(|source| PluginError::Load {
                    image: name.clone(),
                    device,
                    source,
                })?;
        if self.kind.has_device_environment() {
            crate::device_env::install(self.backend.as_ref(), module.as_ref(), d).map_err(
                |source| PluginError::Load {
                    image: name.clone(),
                    device,
                    source,
                },
            )?;
        }
        let ctx = LoadContext {
            plugin: self,
            device,
            d,
            image: &name,
            module: module.as_ref(),
            symbols: symbols.as_ref(),
            bias: module.load_bias(),
            kernel_records: Mutex::new(Vec::new()),
        };
        let (kernels, rows) = ctx.resolve_entries(entries, record)?;
        let kernel_records = std::mem::take(&mut *lock(&ctx.kernel_records));
        // Entry names by host address, for the table dump: only built when the dump will
        // be printed. A name copy and a hash insert per entry cost 18 % of a 1M-entry
        // load (docs/BENCHMARKS.md 1d); error messages find their origin lazily instead.
        let dump =
            diag::info_enabled(diag::INFO_PLUGIN | diag::INFO_DUMP_TABLE) || diag::debug_enabled();
        let origins: HashMap<u64, String> = if dump {
            row_origins(entries)
                .map(|(host, origin)| (host, origin.to_string()))
                .collect()
        } else {
            HashMap::new()
        };
        let nth_origin = |host, rank| {
            row_origins(entries)
                .filter(|&(h, _)| h == host)
                .nth(rank)
                .map(|(_, origin)| origin)
        };
        let table = fptr::build_rows(rows, nth_origin).map_err(|source| PluginError::Fptr {
            image: name.clone(),
            device,
            source,
        })?;
        let has_indirect = entries
            .iter()
            .any(|e| crate::entries::is_indirect(e.flags()));
        let fptr = ctx.install_table(table, &origins, has_indirect)?;

        let loaded = LoadedImage {
            key,
            name,
            _module: module,
            kernels: kernels.clone(),
            fptr,
            published: None,
        };
        self.unload(device, key)?;
        lock(&state.images).push(loaded);
        state
            .kernels
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .extend(kernel_records);
        Ok(())
    }

    /// Unload one image (if loaded): free its table, close it.
    pub fn unload(&self, device: i32, key: usize) -> Result<(), PluginError> {
        let (d, state) = self.device(device)?;
        let removed: Vec<LoadedImage> = {
            let mut images = lock(&state.images);
            let (gone, kept) = std::mem::take(&mut *images)
                .into_iter()
                .partition(|i| i.key == key);
            *images = kept;
            gone
        };
        self.release(device, d, state, removed)
    }

    /// Unload everything on every device (`__tgt_rtl_deinit_plugin`).
    pub fn unload_all(&self) -> Result<(), PluginError> {
        let mut first_err = Ok(());
        for (d, state) in self.devices.iter().enumerate() {
            let removed = std::mem::take(&mut *lock(&state.images));
            let r = self.release(d as i32, d, state, removed);
            if first_err.is_ok() {
                first_err = r;
            }
        }
        first_err
    }

    fn release(
        &self,
        device: i32,
        d: usize,
        state: &DeviceState,
        removed: Vec<LoadedImage>,
    ) -> Result<(), PluginError> {
        let mut result = Ok(());
        for img in removed {
            {
                let mut kernels = state.kernels.write().unwrap_or_else(|e| e.into_inner());
                for addr in &img.kernels {
                    kernels.remove(addr);
                }
            }
            let table = img.fptr.as_ref();
            let allocations = [
                table.and_then(|t| t.allocation),
                table.and_then(|t| t.index).map(|i| i.allocation),
            ];
            for alloc in allocations.into_iter().flatten() {
                // SAFETY: `alloc` came from `backend.alloc` on this device when the table
                // or its index was installed, and the image using it is being unloaded.
                let r = unsafe { self.backend.free(d, alloc) };
                if let Err(source) = r {
                    result = Err(PluginError::Backend {
                        device,
                        what: format!("freeing the indirect table of {}", img.name),
                        source,
                    });
                }
            }
            diag::debug(|| format!("device {device}: unloaded {}", img.name));
        }
        result
    }

    /// Keep `table` with the loaded image `key` until it is unloaded (the C ABI's
    /// published entry table, which libomptarget reads until then).
    pub fn keep_with_image(
        &self,
        device: i32,
        key: usize,
        table: Box<dyn std::any::Any + Send>,
    ) -> Result<(), PluginError> {
        let (_, state) = self.device(device)?;
        let mut images = lock(&state.images);
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

    /// Every loaded image, as (device, key).
    pub fn loaded_image_keys(&self) -> Vec<(i32, usize)> {
        self.devices
            .iter()
            .enumerate()
            .flat_map(|(d, state)| {
                lock(&state.images)
                    .iter()
                    .map(|i| (d as i32, i.key))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The indirect function table installed for an image (for tools and tests).
    pub fn fptr_table(&self, device: i32, key: usize) -> Option<Vec<FptrMapEntry>> {
        let (_, state) = self.device(device).ok()?;
        let images = lock(&state.images);
        let img = images.iter().find(|i| i.key == key)?;
        img.fptr.as_ref().map(|t| t.table.clone())
    }

    /// The index header global of an image and what was written into it; None when the
    /// image has no table or its device runtime has no index global.
    pub fn fptr_index(&self, device: i32, key: usize) -> Option<IndexInfo> {
        let (_, state) = self.device(device).ok()?;
        let images = lock(&state.images);
        let table = images.iter().find(|i| i.key == key)?.fptr.as_ref()?;
        Some(IndexInfo {
            global: table.index_global?,
            header: table.index.map_or(FptrIndex::NONE, |i| i.header),
        })
    }

    /// Number of images loaded on a device.
    pub fn loaded_images(&self, device: i32) -> usize {
        self.device(device)
            .map(|(_, s)| lock(&s.images).len())
            .unwrap_or(0)
    }

    /// `__tgt_rtl_set_function_ptr_map`: install a whole table, handed over by the host
    /// runtime, in every image loaded on the device that has the table globals.
    pub fn set_function_ptr_map(
        &self,
        device: i32,
        rows: &[FptrMapEntry],
    ) -> Result<usize, PluginError> {
        let (d, state) = self.device(device)?;
        let table = fptr::from_rows(rows).map_err(|source| PluginError::Fptr {
            image: "the table given to __tgt_rtl_set_function_ptr_map".into(),
            device,
            source,
        })?;
        let mut images = lock(&state.images);
        let mut patched = 0;
        for img in images.iter_mut() {
            let Some(installed) = img.fptr.as_mut() else {
                continue;
            };
            // The old index describes the old table: off first, so that no step below
            // can leave the device with an index of another table.
            if let Some(global) = installed.index_global {
                self.write_index_header(device, d, global, &FptrIndex::NONE)?;
                if let Some(old) = installed.index.take() {
                    // SAFETY: `old.allocation` came from `backend.alloc` on this device
                    // and the image's header no longer points into it.
                    unsafe { self.backend.free(d, old.allocation) }
                        .map_err(Self::backend_err(device, "freeing the previous index"))?;
                }
            }
            let new_alloc = self.upload(device, d, &table, installed.map_p, installed.map_size)?;
            let old_table = std::mem::replace(&mut installed.allocation, new_alloc);
            installed.table = table.clone();
            if let Some(old) = old_table {
                // SAFETY: `old` came from `backend.alloc` on this device and the image
                // now points at the new table.
                unsafe { self.backend.free(d, old) }
                    .map_err(Self::backend_err(device, "freeing the previous table"))?;
            }
            if let Some(global) = installed.index_global {
                let (index, note) = self.upload_index(device, d, &table, global)?;
                diag::debug(|| format!("device {device}: {}: {note}", img.name));
                installed.index = index;
            }
            patched += 1;
        }
        Ok(patched)
    }

    /// Copy a table to the device and point the image's globals at it.
    fn upload(
        &self,
        device: i32,
        d: usize,
        table: &[FptrMapEntry],
        map_p: DeviceAddr,
        map_size: DeviceAddr,
    ) -> Result<Option<DeviceAddr>, PluginError> {
        let bytes = fptr::as_bytes(table);
        let allocation = if table.is_empty() {
            None
        } else {
            let a = self
                .backend
                .alloc(d, bytes.len())
                .map_err(Self::backend_err(device, "allocating the indirect table"))?;
            // SAFETY: `a` is a fresh allocation of exactly `bytes.len()` bytes.
            unsafe { self.backend.write(d, a, bytes) }
                .map_err(Self::backend_err(device, "copying the indirect table"))?;
            Some(a)
        };
        let p = allocation.unwrap_or(0).to_ne_bytes();
        let n = (table.len() as u64).to_ne_bytes();
        // SAFETY: `map_p` and `map_size` are the addresses of the image's 8-byte table
        // globals, resolved through the backend and size-checked against the ELF symbols.
        unsafe {
            self.backend
                .write(d, map_p, &p)
                .and_then(|()| self.backend.write(d, map_size, &n))
        }
        .map_err(Self::backend_err(
            device,
            "writing the indirect table globals",
        ))?;
        Ok(allocation)
    }

    /// Build the index of `table`, copy its buckets to the device and write its header
    /// into the image's index global; without an index (turned off, the builder gave up,
    /// no device memory for it) the global gets the empty header, so the device searches
    /// the table. Returns the index and a line for the log; an error only when the header
    /// cannot be written (then nothing of the index is left allocated).
    fn upload_index(
        &self,
        device: i32,
        d: usize,
        table: &[FptrMapEntry],
        global: DeviceAddr,
    ) -> Result<(Option<InstalledIndex>, String), PluginError> {
        let built = if fptr_index::enabled() {
            fptr_index::build(table).map_err(fptr_index::describe)
        } else {
            Err("turned off by OMPTARGET_RS_FPTR_INDEX=0".to_string())
        };
        let (index, note) = match built {
            Ok(built) => match self.copy_index(d, &built) {
                Ok(index) => {
                    let note = format!(
                        "index: {} buckets of {} pairs ({} bytes) at {:#x}, seed pair {}",
                        index.header.bucket_count,
                        fptr_index::SLOTS,
                        built.as_bytes().len(),
                        index.header.buckets,
                        built.attempts
                    );
                    (Some(index), note)
                }
                Err(e) => (
                    None,
                    format!(
                        "no index (copying it to the device failed: {e}): lookups search \
                         the table"
                    ),
                ),
            },
            Err(reason) => (
                None,
                format!("no index ({reason}): lookups search the table"),
            ),
        };
        let header = index.map_or(FptrIndex::NONE, |i| i.header);
        if let Err(e) = self.write_index_header(device, d, global, &header) {
            if let Some(index) = index {
                // SAFETY: the allocation is fresh and the header does not point into it.
                let _ = unsafe { self.backend.free(d, index.allocation) };
            }
            return Err(e);
        }
        Ok((index, note))
    }

    /// Allocate device memory for an index's buckets (32-byte aligned inside it) and copy
    /// them there; nothing stays allocated on failure.
    fn copy_index(
        &self,
        d: usize,
        built: &fptr_index::HostIndex,
    ) -> Result<InstalledIndex, crate::BackendError> {
        let bytes = built.as_bytes();
        // Room to start the buckets on a 32-byte boundary.
        let allocation = self.backend.alloc(d, bytes.len() + BUCKET_BYTES - 1)?;
        let buckets = fptr_index::aligned_buckets(allocation);
        // SAFETY: `buckets .. buckets + bytes.len()` lies inside the fresh allocation of
        // bytes.len() + 31 bytes at `allocation` (aligned_buckets moves the start by at
        // most 31).
        if let Err(e) = unsafe { self.backend.write(d, buckets, bytes) } {
            // SAFETY: nothing points at the fresh allocation.
            let _ = unsafe { self.backend.free(d, allocation) };
            return Err(e);
        }
        Ok(InstalledIndex {
            header: built.header(buckets),
            allocation,
        })
    }

    /// Write an index header into an image's index global.
    fn write_index_header(
        &self,
        device: i32,
        d: usize,
        global: DeviceAddr,
        header: &FptrIndex,
    ) -> Result<(), PluginError> {
        // SAFETY: `global` is the address of an image's index header global, resolved
        // through the backend and size-checked (fptr_index::HEADER_BYTES) against its
        // symbol.
        unsafe { self.backend.write(d, global, bytemuck::bytes_of(header)) }
            .map_err(Self::backend_err(device, "writing the index global"))
    }

    /// The device index and the record of a kernel of an image loaded on `device`.
    fn loaded_kernel(
        &self,
        device: i32,
        kernel: DeviceAddr,
    ) -> Result<(usize, KernelRecord), PluginError> {
        let (d, state) = self.device(device)?;
        let record = state
            .kernels
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&kernel)
            .copied();
        let record = record.ok_or_else(|| PluginError::Invalid {
            device,
            what: format!("{kernel:#x} is not a kernel of any image loaded on it"),
        })?;
        Ok((d, record))
    }

    /// Run a kernel of a loaded image with pointer arguments, once (an OpenMP kernel of
    /// a GPU: with the default shape, see [`KernelRecord::plan`]).
    ///
    /// # Safety
    /// The arguments are device addresses valid for what the kernel does with them.
    pub unsafe fn launch(
        &self,
        device: i32,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
    ) -> Result<(), PluginError> {
        let (d, record) = self.loaded_kernel(device, kernel)?;
        diag::debug(|| {
            format!(
                "device {device}: launching {kernel:#x} with {} args",
                args.len()
            )
        });
        // SAFETY: `kernel` is a kernel of an image loaded on this device (its record was
        // found); the caller vouches for the arguments.
        unsafe { self.run_kernel(device, d, kernel, args, record.plan(None)) }
    }

    /// Run a kernel of a loaded image with the team and thread counts libomptarget asks
    /// for (0: the default), shaped by LLVM 16's rules ([`KernelRecord::plan`]).
    ///
    /// # Safety
    /// The arguments are device addresses valid for what the kernel does with them.
    pub unsafe fn launch_teams(
        &self,
        device: i32,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        request: LaunchRequest,
    ) -> Result<(), PluginError> {
        let (d, record) = self.loaded_kernel(device, kernel)?;
        diag::debug(|| {
            format!(
                "device {device}: launching {kernel:#x} with {} args, {request:?}",
                args.len()
            )
        });
        // SAFETY: as in `launch`.
        unsafe { self.run_kernel(device, d, kernel, args, record.plan(Some(request))) }
    }

    /// Hand a planned launch to the vendor.
    ///
    /// # Safety
    /// `kernel` is a kernel of an image loaded on device `d`, and the arguments are
    /// valid for it.
    unsafe fn run_kernel(
        &self,
        device: i32,
        d: usize,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        plan: LaunchPlan,
    ) -> Result<(), PluginError> {
        let launched = match plan {
            // SAFETY: forwarded caller contract.
            LaunchPlan::Once => unsafe { self.backend.launch(d, kernel, args) },
            LaunchPlan::Shaped(mode, shape) => {
                diag::debug(|| {
                    format!("device {device}: launching {kernel:#x} ({mode:?}) as {shape:?}")
                });
                // SAFETY: forwarded caller contract.
                unsafe { self.backend.launch_shaped(d, kernel, args, shape) }
            }
        };
        launched.map_err(Self::backend_err_with(device, || {
            format!("kernel {kernel:#x}")
        }))
    }

    /// Allocate memory of one of LLVM 16's kinds (device, pinned host, managed).
    pub fn alloc_kind(
        &self,
        device: i32,
        size: usize,
        kind: AllocKind,
    ) -> Result<DeviceAddr, PluginError> {
        let (d, _) = self.device(device)?;
        self.backend
            .alloc_kind(d, size, kind)
            .map_err(Self::backend_err_with(device, || {
                format!("allocating {kind:?} memory")
            }))
    }

    pub fn alloc(&self, device: i32, size: usize) -> Result<DeviceAddr, PluginError> {
        let (d, _) = self.device(device)?;
        self.backend
            .alloc(d, size)
            .map_err(Self::backend_err(device, "allocating"))
    }

    /// # Safety
    /// `addr` came from `alloc` on this device and is dead.
    pub unsafe fn free(&self, device: i32, addr: DeviceAddr) -> Result<(), PluginError> {
        let (d, _) = self.device(device)?;
        // SAFETY: forwarded caller contract.
        unsafe { self.backend.free(d, addr) }.map_err(Self::backend_err(device, "freeing"))
    }

    /// # Safety
    /// `dst .. dst + src.len()` is device memory of `device`.
    pub unsafe fn submit(
        &self,
        device: i32,
        dst: DeviceAddr,
        src: &[u8],
    ) -> Result<(), PluginError> {
        let (d, _) = self.device(device)?;
        // SAFETY: forwarded caller contract.
        unsafe { self.backend.write(d, dst, src) }
            .map_err(Self::backend_err(device, "copying to the device"))
    }

    /// # Safety
    /// `src .. src + dst.len()` is device memory of `device`.
    pub unsafe fn retrieve(
        &self,
        device: i32,
        dst: &mut [u8],
        src: DeviceAddr,
    ) -> Result<(), PluginError> {
        let (d, _) = self.device(device)?;
        // SAFETY: forwarded caller contract.
        unsafe { self.backend.read(d, src, dst) }
            .map_err(Self::backend_err(device, "copying from the device"))
    }

    /// # Safety
    /// Both ranges of `len` bytes are device memory of their devices.
    pub unsafe fn exchange(
        &self,
        src_device: i32,
        src: DeviceAddr,
        dst_device: i32,
        dst: DeviceAddr,
        len: usize,
    ) -> Result<(), PluginError> {
        let (s, _) = self.device(src_device)?;
        let (t, _) = self.device(dst_device)?;
        // SAFETY: forwarded caller contract.
        unsafe { self.backend.copy(s, src, t, dst, len) }
            .map_err(Self::backend_err_with(dst_device, || {
                format!("copying from device {src_device}")
            }))
    }

    pub fn synchronize(&self, device: i32) -> Result<(), PluginError> {
        let (d, _) = self.device(device)?;
        self.backend
            .synchronize(d)
            .map_err(Self::backend_err(device, "synchronizing"))
    }

    /// A queue for asynchronous copies, None where the device copies synchronously.
    pub fn queue_create(&self, device: i32) -> Result<Option<QueueHandle>, PluginError> {
        let (d, _) = self.device(device)?;
        self.backend
            .queue_create(d)
            .map_err(Self::backend_err(device, "creating a queue"))
    }

    /// Wait for a queue's work and destroy it.
    pub fn queue_finish(&self, device: i32, queue: QueueHandle) -> Result<(), PluginError> {
        let (d, _) = self.device(device)?;
        self.backend
            .queue_finish(d, queue)
            .map_err(Self::backend_err_with(device, || {
                format!("finishing queue {queue:#x}")
            }))
    }

    pub fn queue_done(&self, device: i32, queue: QueueHandle) -> Result<bool, PluginError> {
        let (d, _) = self.device(device)?;
        self.backend
            .queue_done(d, queue)
            .map_err(Self::backend_err_with(device, || {
                format!("querying queue {queue:#x}")
            }))
    }

    /// # Safety
    /// As [`Backend::write_async`].
    pub unsafe fn submit_async(
        &self,
        device: i32,
        dst: DeviceAddr,
        src: *const u8,
        len: usize,
        queue: QueueHandle,
    ) -> Result<(), PluginError> {
        let (d, _) = self.device(device)?;
        // SAFETY: forwarded caller contract.
        unsafe { self.backend.write_async(d, dst, src, len, queue) }
            .map_err(Self::backend_err(device, "queueing a copy to the device"))
    }

    /// # Safety
    /// As [`Backend::read_async`].
    pub unsafe fn retrieve_async(
        &self,
        device: i32,
        dst: *mut u8,
        src: DeviceAddr,
        len: usize,
        queue: QueueHandle,
    ) -> Result<(), PluginError> {
        let (d, _) = self.device(device)?;
        // SAFETY: forwarded caller contract.
        unsafe { self.backend.read_async(d, src, dst, len, queue) }
            .map_err(Self::backend_err(device, "queueing a copy from the device"))
    }

    /// A new event, None where events are only tokens (everything is already complete).
    pub fn event_create(&self, device: i32) -> Result<Option<EventHandle>, PluginError> {
        let (d, _) = self.device(device)?;
        self.backend
            .event_create(d)
            .map_err(Self::backend_err(device, "creating an event"))
    }

    pub fn event_record(
        &self,
        device: i32,
        event: EventHandle,
        queue: Option<QueueHandle>,
    ) -> Result<(), PluginError> {
        let (d, _) = self.device(device)?;
        self.backend
            .event_record(d, event, queue)
            .map_err(Self::backend_err(device, "recording an event"))
    }

    pub fn event_wait(
        &self,
        device: i32,
        event: EventHandle,
        queue: Option<QueueHandle>,
    ) -> Result<(), PluginError> {
        let (d, _) = self.device(device)?;
        self.backend
            .event_wait(d, event, queue)
            .map_err(Self::backend_err(device, "waiting for an event"))
    }

    pub fn event_sync(&self, device: i32, event: EventHandle) -> Result<(), PluginError> {
        let (d, _) = self.device(device)?;
        self.backend
            .event_sync(d, event)
            .map_err(Self::backend_err(device, "synchronizing an event"))
    }

    pub fn event_destroy(&self, device: i32, event: EventHandle) -> Result<(), PluginError> {
        let (d, _) = self.device(device)?;
        self.backend
            .event_destroy(d, event)
            .map_err(Self::backend_err(device, "destroying an event"))
    }
}

/// The (host address, origin) of every table row the entries give, in the order
/// [`LoadContext::resolve_entries`] gathers them: the rows carry no names, so a conflict
/// or the table dump finds them again from the host side alone.
fn row_origins<'e, E: HostEntry>(entries: &'e [E]) -> impl Iterator<Item = (u64, Origin<'e>)> {
    entries.iter().flat_map(|e| {
        let name = e.name().to_bytes();
        let kind = e.kind();
        let function = matches!(
            kind,
            Some(EntryKind::IndirectFunction | EntryKind::IndirectThroughGlobal)
        )
        .then(|| (e.host_addr(), Origin::Entry(name)));
        // The slots vtable_pairs pairs up (the host vtable stands in for the device one:
        // only the host side is named).
        let slots = e
            .host_vtable()
            .filter(|_| kind == Some(EntryKind::IndirectVtable))
            .map(|host| fptr::vtable_pairs(name, host, host))
            .unwrap_or_default();
        function
            .into_iter()
            .chain(slots.into_iter().map(|p| (p.host_ptr, p.origin)))
    })
}

/// What resolving one image's entries needs to know.
struct LoadContext<'a> {
    plugin: &'a Plugin,
    device: i32,
    d: usize,
    image: &'a str,
    module: &'a dyn LoadedModule,
    /// The image's symbol sizes from its ELF file; None: ask the loaded module.
    symbols: Option<&'a image::ImageSymbols<'a>>,
    /// Where the backend's loader put the image (see [`LoadedModule::load_bias`]).
    bias: Option<u64>,
    /// The image's kernels and their records, as they are resolved.
    kernel_records: Mutex<Vec<(DeviceAddr, KernelRecord)>>,
}

impl<'a> LoadContext<'a> {
    /// The image's own symbol tables and its load bias, where both are known (the
    /// host): entries then resolve from the tables parsed once, not name by name
    /// through the loader.
    fn own_tables(&self) -> Option<(&'a image::ImageSymbols<'a>, u64)> {
        Some((self.symbols?, self.bias?))
    }

    /// A kernel's or a global's device address: an exported symbol of the image.
    /// `dynamic`: the entry's name looked up in the image's dynamic symbol table, where
    /// the tables are known ([`Self::look_up`]).
    fn exported(
        &self,
        entry: &impl HostEntry,
        kind: EntryKind,
        dynamic: Option<Symbol>,
    ) -> Result<DeviceAddr, PluginError> {
        if let Some((_, bias)) = self.own_tables() {
            if let Some(sym) = dynamic.filter(Symbol::is_plain) {
                let addr = bias.wrapping_add(sym.value);
                if kind == EntryKind::Kernel {
                    self.record_kernel(entry, addr, None)?;
                }
                return Ok(addr);
            }
        }
        // No tables, or not an ordinary symbol the image defines and exports (TLS, an
        // ifunc, one from a library it depends on): the loader answers, as for LLVM's
        // plugin.
        if kind != EntryKind::Kernel {
            return self
                .module
                .global(entry.name())
                .map_err(|e| self.entry_err(entry, e.to_string()));
        }
        let addr = self
            .module
            .function(entry.name())
            .map_err(|e| self.entry_err(entry, e.to_string()))?;
        self.record_kernel(entry, addr, Some(self.module))?;
        Ok(addr)
    }

    /// Record a kernel with what its launches need: on a GPU its exec mode and the
    /// vendor's limits for it (`function_of`: the module whose `function` returned
    /// `addr`); on the host, nothing (it runs kernels once).
    fn record_kernel(
        &self,
        entry: &impl HostEntry,
        addr: DeviceAddr,
        function_of: Option<&dyn LoadedModule>,
    ) -> Result<(), PluginError> {
        let record = match function_of {
            Some(module) if self.plugin.kind.is_gpu() => {
                let mode = self
                    .exec_mode(entry)?
                    .or_else(|| self.plugin.backend.untagged_kernel_mode());
                // SAFETY: `addr` is what `module.function` returned for this entry's name.
                let limits = unsafe { module.kernel_limits(addr, entry.name()) }
                    .map_err(|e| self.entry_err(entry, e.to_string()))?;
                KernelRecord { mode, limits }
            }
            _ => KernelRecord {
                mode: None,
                limits: None,
            },
        };
        lock(&self.kernel_records).push((addr, record));
        Ok(())
    }

    /// The kernel's `<kernel>_exec_mode` ([`launch_shape::read_exec_mode`]): None when
    /// the image has no such global (not an OpenMP kernel).
    fn exec_mode(&self, entry: &impl HostEntry) -> Result<Option<ExecMode>, PluginError> {
        let global = |name: &CStr| {
            let Some(size) = self.symbol_size(name) else {
                return Ok(None);
            };
            if size != 1 {
                // Refused by the size alone, before the driver is asked for its address.
                return Ok(Some((0, size)));
            }
            self.module.global(name).map(|addr| Some((addr, size)))
        };
        let read_byte = |addr| {
            let mut value = [0u8; 1];
            // SAFETY: `addr` is the device address of a global of this image whose size
            // was just checked to be 1 byte.
            unsafe { self.plugin.backend.read(self.d, addr, &mut value) }?;
            Ok(value[0])
        };
        launch_shape::read_exec_mode(entry.name(), global, read_byte)
            .map_err(|e| self.entry_err(entry, e.to_string()))
    }

    /// The device symbol an indirect entry names, by the rule of
    /// [`image::ImageSymbols::indirect_target`] where the image's tables are known;
    /// else (GPU drivers) through the loaded module. Returns the address and, where the
    /// tables are known, the symbol.
    fn indirect_target(
        &self,
        entry: &impl HostEntry,
        name: &[u8],
        wanted: Wanted,
        dynamic: Option<Symbol>,
    ) -> Result<(DeviceAddr, Option<Symbol>), PluginError> {
        let Some((symbols, bias)) = self.own_tables() else {
            let found = match wanted {
                Wanted::Function => self.module.indirect_function(entry.name()),
                Wanted::Data => self.module.global(entry.name()),
            };
            return found
                .map(|addr| (addr, None))
                .map_err(|e| self.entry_err(entry, e.to_string()));
        };
        let sym = symbols
            .indirect_target_given(name, wanted, dynamic)
            .map_err(|e| self.entry_err(entry, e.to_string()))?;
        Ok((bias.wrapping_add(sym.value), Some(sym)))
    }

    fn symbol_size(&self, name: &CStr) -> Option<u64> {
        match self.symbols {
            Some(symbols) => symbols.size_of(name.to_bytes()),
            None => self.module.global_size(name),
        }
    }

    fn entry_err(&self, entry: &impl HostEntry, reason: impl Into<String>) -> PluginError {
        PluginError::Entry {
            image: self.image.to_string(),
            device: self.device,
            entry: entry.name_lossy(),
            reason: reason.into(),
        }
    }

    fn read_word(&self, entry: &impl HostEntry, addr: DeviceAddr) -> Result<u64, PluginError> {
        let mut word = [0u8; 8];
        // SAFETY: callers pass the address of an image global whose ELF symbol size was
        // checked to be 8 bytes.
        unsafe { self.plugin.backend.read(self.d, addr, &mut word) }
            .map_err(|e| self.entry_err(entry, format!("reading its device global: {e}")))?;
        Ok(u64::from_ne_bytes(word))
    }

    /// Before reading `len` bytes of a device vtable: it must not be null, and where the
    /// backend reads the image's symbols (the host, whose device reads are plain memory
    /// reads) it must lie inside one symbol of the image. GPU drivers check their own
    /// device addresses and fail the copy instead.
    fn check_device_vtable(
        &self,
        entry: &impl HostEntry,
        global: DeviceAddr,
        device_vtable: DeviceAddr,
        len: usize,
    ) -> Result<(), PluginError> {
        if device_vtable == 0 {
            return Err(self.entry_err(entry, "its device global holds a null vtable pointer"));
        }
        let Some(symbols) = self.symbols else {
            return Ok(());
        };
        // The image's load bias: known, or from where its own global landed.
        let inside = self
            .bias
            .or_else(|| {
                symbols
                    .address_of(entry.name().to_bytes())
                    .map(|image_addr| global.wrapping_sub(image_addr))
            })
            .is_some_and(|bias| {
                symbols.within_one_symbol(device_vtable.wrapping_sub(bias), len as u64)
            });
        if inside {
            Ok(())
        } else {
            Err(self.entry_err(
                entry,
                format!(
                    "its device global points to {device_vtable:#x}, which is not inside a \
                     symbol of the image with room for the {len}-byte vtable"
                ),
            ))
        }
    }

    /// An 8-byte global of the image, address and size checked.
    fn pointer_global(
        &self,
        entry: &impl HostEntry,
        name: &[u8],
        dynamic: Option<Symbol>,
    ) -> Result<DeviceAddr, PluginError> {
        if self.own_tables().is_some() {
            let (addr, sym) = self.indirect_target(entry, name, Wanted::Data, dynamic)?;
            return match sym.map(|s| s.size) {
                Some(8) => Ok(addr),
                n => Err(self.entry_err(
                    entry,
                    format!(
                        "its device global is {} bytes, an indirect entry needs 8 (a pointer)",
                        n.unwrap_or(0)
                    ),
                )),
            };
        }
        match self.symbol_size(entry.name()) {
            Some(8) => {}
            Some(n) => {
                return Err(self.entry_err(
                    entry,
                    format!(
                        "its device global is {n} bytes, an indirect entry needs 8 (a pointer)"
                    ),
                ))
            }
            None => {
                return Err(self.entry_err(entry, "the image does not export its device global"))
            }
        }
        self.module
            .global(entry.name())
            .map_err(|e| self.entry_err(entry, e.to_string()))
    }

    /// Each entry's device address, to `record`; returns the kernels' addresses and the
    /// table's (host, device) rows, in the order [`row_origins`] names them.
    fn resolve_entries<E: HostEntry>(
        &self,
        entries: &[E],
        mut record: impl FnMut(usize, DeviceAddr),
    ) -> Result<(Vec<DeviceAddr>, Vec<FptrMapEntry>), PluginError> {
        let mut kernels = Vec::new();
        // Sized once: growing by doubling copied and page-faulted it several times over.
        let indirect = entries
            .iter()
            .filter(|e| crate::entries::is_indirect(e.flags()))
            .count();
        let mut rows = Vec::with_capacity(indirect);
        let (mut names, mut found) = (Vec::new(), Vec::new());
        // In the batches the symbol tables look names up in: their pointer globals are
        // then requested together too.
        let batches = entries.chunks(crate::symbols::LOOKUP_BATCH);
        for (b, batch) in batches.enumerate() {
            self.look_up(batch, &mut names, &mut found);
            for (j, ((entry, name), &dynamic)) in batch.iter().zip(&names).zip(&found).enumerate() {
                let addr = self.resolve(entry, name, dynamic, &mut rows)?;
                if entry.kind() == Some(EntryKind::Kernel) {
                    kernels.push(addr);
                }
                record(b * crate::symbols::LOOKUP_BATCH + j, addr);
            }
        }
        Ok((kernels, rows))
    }

    /// The batch's names (each read once: through the C ABI every read is a strlen),
    /// looked up in the image's dynamic symbol table where its tables are known (else
    /// `None` each), and the pointer globals among them announced to the backend as
    /// about to be read: the batch's cache misses then overlap.
    fn look_up<'e, E: HostEntry>(
        &self,
        batch: &'e [E],
        names: &mut Vec<&'e [u8]>,
        found: &mut Vec<Option<Symbol>>,
    ) {
        names.clear();
        names.extend(batch.iter().map(|e| e.name().to_bytes()));
        found.clear();
        let Some((symbols, bias)) = self.own_tables() else {
            found.resize(batch.len(), None);
            return;
        };
        symbols.dynamic_batch(names, found);
        for (entry, sym) in batch.iter().zip(found.iter()) {
            let holds_pointer = matches!(
                entry.kind(),
                Some(EntryKind::IndirectThroughGlobal | EntryKind::IndirectVtable)
            );
            if let (Some(sym), true) = (sym, holds_pointer) {
                self.plugin
                    .backend
                    .prefetch(self.d, bias.wrapping_add(sym.value));
            }
        }
    }

    /// One entry's device address (`name` is its name); its (host, device) function
    /// pairs go to `rows`.
    fn resolve<E: HostEntry>(
        &self,
        entry: &E,
        name: &[u8],
        dynamic: Option<Symbol>,
        rows: &mut Vec<FptrMapEntry>,
    ) -> Result<DeviceAddr, PluginError> {
        let kind = entry.kind().ok_or_else(|| {
            self.entry_err(
                entry,
                format!(
                    "flags {:#x} with size {} is not a known kind of offload entry",
                    entry.flags(),
                    entry.size()
                ),
            )
        })?;
        let addr =
            match kind {
                EntryKind::Kernel | EntryKind::Global => self.exported(entry, kind, dynamic)?,
                EntryKind::IndirectFunction => {
                    let (f, _) = self.indirect_target(entry, name, Wanted::Function, dynamic)?;
                    rows.push(FptrMapEntry {
                        host_ptr: entry.host_addr(),
                        tgt_ptr: f,
                    });
                    f
                }
                EntryKind::IndirectThroughGlobal => {
                    let global = self.pointer_global(entry, name, dynamic)?;
                    let f = self.read_word(entry, global)?;
                    if f == 0 {
                        return Err(self.entry_err(
                            entry,
                            "its device global holds a null pointer: there is no device \
                             function to call",
                        ));
                    }
                    rows.push(FptrMapEntry {
                        host_ptr: entry.host_addr(),
                        tgt_ptr: f,
                    });
                    // libomptarget 16 maps a size-8 entry's host address to what we
                    // return here, and translates pointers through that map (a function
                    // pointer captured by a target region): so return the device
                    // function, not the global that holds it.
                    f
                }
                EntryKind::IndirectVtable => {
                    let global = self.pointer_global(entry, name, dynamic)?;
                    let device_vtable = self.read_word(entry, global)?;
                    let host = entry.host_vtable().ok_or_else(|| {
                        self.entry_err(entry, "the host vtable's contents were not provided")
                    })?;
                    self.check_device_vtable(entry, global, device_vtable, host.len())?;
                    let mut dev = vec![0u8; host.len()];
                    // SAFETY: the device global holds the device vtable's address, which
                    // is not null and, where the image's symbols are known, lies inside
                    // one of its symbols with room for the whole vtable
                    // (check_device_vtable); the device vtable has the host one's layout.
                    unsafe { self.plugin.backend.read(self.d, device_vtable, &mut dev) }.map_err(
                        |e| self.entry_err(entry, format!("reading the device vtable: {e}")),
                    )?;
                    rows.extend(fptr::vtable_pairs(name, host, &dev).iter().map(|p| {
                        FptrMapEntry {
                            host_ptr: p.host_ptr,
                            tgt_ptr: p.tgt_ptr,
                        }
                    }));
                    // The device counterpart of the host vtable object.
                    device_vtable
                }
            };
        Ok(addr)
    }

    /// Upload the table and patch the device runtime's globals, if the image has them.
    fn install_table(
        &self,
        table: Vec<FptrMapEntry>,
        origins: &HashMap<u64, String>,
        has_indirect: bool,
    ) -> Result<Option<InstalledTable>, PluginError> {
        let global = |name: &CStr| -> Result<Option<DeviceAddr>, PluginError> {
            match self.symbol_size(name) {
                None => Ok(None),
                Some(8) => self
                    .own_tables()
                    .and_then(|(symbols, bias)| {
                        let sym = symbols.dynamic(name.to_bytes()).filter(Symbol::is_plain)?;
                        Some(Ok(bias.wrapping_add(sym.value)))
                    })
                    .unwrap_or_else(|| self.module.global(name))
                    .map(Some)
                    .map_err(|source| PluginError::Load {
                        image: self.image.to_string(),
                        device: self.device,
                        source,
                    }),
                Some(n) => Err(PluginError::Entry {
                    image: self.image.to_string(),
                    device: self.device,
                    entry: name.to_string_lossy().into_owned(),
                    reason: format!("the device runtime's table global is {n} bytes, not 8"),
                }),
            }
        };
        let (Some(map_p), Some(map_size)) = (global(FPTR_MAP_P)?, global(FPTR_MAP_SIZE)?) else {
            if has_indirect {
                diag::info(diag::INFO_PLUGIN | diag::INFO_DUMP_TABLE, || {
                    format!(
                        "device {}: {} has indirect functions but no {} / {}: its indirect \
                         calls will not be translated (link the device runtime into it)",
                        self.device,
                        self.image,
                        FPTR_MAP_P.to_string_lossy(),
                        FPTR_MAP_SIZE.to_string_lossy()
                    )
                });
            }
            return Ok(None);
        };
        let allocation = self
            .plugin
            .upload(self.device, self.d, &table, map_p, map_size)?;
        let index_global = self.index_global()?;
        let (index, index_note) = match index_global {
            Some(global) => {
                match self
                    .plugin
                    .upload_index(self.device, self.d, &table, global)
                {
                    Ok(done) => done,
                    Err(e) => {
                        if let Some(a) = allocation {
                            // SAFETY: the table was allocated just above for this image,
                            // which fails to load and is never used.
                            let _ = unsafe { self.plugin.backend.free(self.d, a) };
                        }
                        return Err(e);
                    }
                }
            }
            None => (
                None,
                format!("no index: no {}", INDEX_GLOBAL.to_string_lossy()),
            ),
        };
        diag::info(diag::INFO_PLUGIN | diag::INFO_DUMP_TABLE, || {
            let mut s = format!(
                "device {}: {}: indirect function table, {} entries at {:#x}; {index_note}",
                self.device,
                self.image,
                table.len(),
                allocation.unwrap_or(0)
            );
            for row in &table {
                s.push_str(&format!(
                    "\n  host {:#018x} -> device {:#018x}  {}",
                    row.host_ptr,
                    row.tgt_ptr,
                    origins.get(&row.host_ptr).map_or("", String::as_str)
                ));
            }
            s
        });
        Ok(Some(InstalledTable {
            map_p,
            map_size,
            allocation,
            table,
            index_global,
            index,
        }))
    }

    /// The image's index header global, if its device runtime has one of the size this
    /// plugin writes. Images linked with a device runtime from before the index have none
    /// and keep working with the search (said in the debug log).
    fn index_global(&self) -> Result<Option<DeviceAddr>, PluginError> {
        let name = INDEX_GLOBAL.to_string_lossy();
        match self.symbol_size(INDEX_GLOBAL) {
            Some(fptr_index::HEADER_BYTES) => {
                self.module
                    .global(INDEX_GLOBAL)
                    .map(Some)
                    .map_err(|source| PluginError::Load {
                        image: self.image.to_string(),
                        device: self.device,
                        source,
                    })
            }
            None => {
                diag::debug(|| {
                    format!(
                        "device {}: {} has no {name} (a device runtime from before the \
                         index): its lookups search the sorted table",
                        self.device, self.image
                    )
                });
                Ok(None)
            }
            Some(n) => {
                diag::debug(|| {
                    format!(
                        "device {}: {}: {name} is {n} bytes, not the {} this plugin writes: \
                         left alone, its lookups search the sorted table",
                        self.device,
                        self.image,
                        fptr_index::HEADER_BYTES
                    )
                });
                Ok(None)
            }
        }
    }
}
