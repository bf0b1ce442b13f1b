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
//!
//! [`CudaBackend`] finds the devices and judges images; each device is a
//! [`CudaDevice`] ([`device`]), whose loaded images are [`module`]'s.

mod device;
mod driver;
pub mod image;
mod launch;
mod module;
mod ordered;
mod pinned;
pub mod staging;

pub use device::CudaDevice;

use super::{Backend, BackendDevice};
use crate::support::launch_shape::ExecMode;
use cudarc::driver::{result, sys};
use driver::MAX_TEAMS;
use image::CudaImage;
use pinned::PinnedHostMemory;
use std::ffi::CStr;
use std::sync::{Arc, Mutex};

/// The device environment is written for every GPU kind by the plugin core
/// ([`crate::generic::device_env`]); these names, offload-formats' as the core's are, stay for
/// the tests and tools that asked here.
pub use offload_formats::device_runtime::DeviceEnvironmentLayout;

/// The names of the device-environment global the plugin writes, newest first.
pub fn device_environment_names() -> [&'static CStr; 2] {
    offload_formats::device_runtime::DEVICE_ENVIRONMENT_NAMES
}

pub struct CudaBackend {
    devices: Vec<Arc<CudaDevice>>,
    /// Why there are no devices, for tests and tools to say (None when there are some).
    unavailable: Option<String>,
}

impl Default for CudaBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// Find the devices, or the reason there are none. Never panics: cudarc panics on a
/// driver that lacks a symbol it binds, so discovery runs under catch_unwind.
fn discover() -> Result<Vec<CudaDevice>, String> {
    let pinned = Arc::new(PinnedHostMemory::default());
    // SAFETY: is_culib_present only tries to dlopen libcuda under its usual names.
    if !unsafe { sys::is_culib_present() } {
        return Err("libcuda.so could not be loaded".into());
    }
    let found = std::panic::catch_unwind(|| -> Result<Vec<CudaDevice>, String> {
        result::init().map_err(|e| format!("cuInit: {e:?}"))?;
        let count = result::device::get_count().map_err(|e| format!("cuDeviceGetCount: {e:?}"))?;
        let mut devices = Vec::new();
        // Read once: every device stages alike.
        let staging_settings = staging::StagingSettings::from_env();
        for ordinal in 0..count {
            let index = ordinal as usize;
            let handle = result::device::get(ordinal)
                .map_err(|e| format!("cuDeviceGet({ordinal}): {e:?}"))?;
            let attr = |a| {
                // SAFETY: `handle` came from cuDeviceGet.
                unsafe { result::device::get_attribute(handle, a) }
                    .map_err(|e| format!("cuDeviceGetAttribute({a:?}): {e:?}"))
            };
            use sys::CUdevice_attribute::*;
            devices.push(CudaDevice {
                index,
                of: count as usize,
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
                idle_events: Mutex::new(Vec::new()),
                ordered: ordered::StreamOrdered::for_device(handle),
                staging: staging::Staging::new(staging_settings),
                handles: super::HandleRegistry::new(index),
                pinned: Arc::clone(&pinned),
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
            devices: devices.into_iter().map(Arc::new).collect(),
            unavailable,
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
}

impl Backend for CudaBackend {
    fn elf_machine(&self) -> u16 {
        object::elf::EM_CUDA
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn device(&self, index: usize) -> Arc<dyn BackendDevice> {
        Arc::clone(&self.devices[index]) as Arc<dyn BackendDevice>
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
    ) -> Result<Option<crate::elf::image::ImageSymbols<'a>>, crate::elf::image::ImageError> {
        match image::classify(image) {
            Some(_) => Ok(None),
            None => match crate::elf::image::elf_machine(image) {
                Some(found) => Err(crate::elf::image::ImageError::WrongMachine {
                    found,
                    expected: object::elf::EM_CUDA,
                }),
                None => Err(crate::elf::image::ImageError::NotElf(
                    "not a cubin, fatbinary or PTX".into(),
                )),
            },
        }
    }

    /// A plain CUDA kernel is run by every thread: SPMD's rules.
    fn untagged_kernel_mode(&self) -> Option<ExecMode> {
        Some(ExecMode::Spmd)
    }
}
