//! AMD GPUs through the HIP runtime, loaded at run time.
//!
//! `libamdhip64.so` is opened with dlopen when the backend is created: from the path in
//! `OMPTARGET_RS_HIP_LIBRARY` if set (used by the tests to point at a stand-in), else
//! by soname (`libamdhip64.so`, then `libamdhip64.so.6`) through the dynamic loader's
//! search. Without the runtime, or with no AMD GPU, the backend has 0 devices and says
//! nothing (only with the plugin's debug output on), so libomptarget carries on.
//!
//! Layers, as in cudarc: [`sys`] (function pointer types and the loaded table),
//! [`result`] (one `Result`-returning function per call), then the vendor API's objects,
//! shaped like `cuda`'s: [`HipBackend`] (this module) finds the devices and judges
//! images; each device is a [`HipDevice`] ([`device`]), whose loaded code objects are
//! [`module`]'s. [`code_object`] picks, among the code objects of an image, the one
//! whose target ID suits the device (xnack/sramecc rules). [`grid`] holds LLVM 16's
//! AMDGPU launch limits.
//!
//! Launch geometry: the plugin core keeps the kernels, reads each one's
//! `<kernel>_exec_mode` and sizes the grid by LLVM 16's rules ([`crate::generic::kernels`]) from
//! the limits `kernel_limits` reports ([`module`]: the device's, capped by the kernel's
//! own work-group limit); the device only launches the shape it is given, or, for a
//! plain kernel launched without a request, one work-item (`launch`). The device
//! environment is written by the plugin core, as for CUDA.
//!
//! What is known and what is not: this backend has run only against the stand-in HIP
//! library of `tests/tests/amdgpu_hip_contract.rs`, never on AMD hardware.

pub mod code_object;
mod device;
pub mod grid;
mod module;
pub mod result;
pub mod sys;

pub use device::{HipDevice, HipDeviceInfo};

use super::{Backend, BackendDevice};
use crate::support::diag;
use grid::{DeviceAttributes, DeviceLimits};
use offload_formats::target_id::TargetId;
use std::ffi::c_int;
use std::sync::Arc;
use sys::HipApi;

/// Environment variable naming the HIP runtime library to load instead of the default.
pub const HIP_LIBRARY_ENV: &str = "OMPTARGET_RS_HIP_LIBRARY";
/// The sonames tried, in order, when the variable is not set.
pub const DEFAULT_HIP_LIBRARIES: &[&str] = &["libamdhip64.so", "libamdhip64.so.6"];

/// A device attribute, None when HIP lacks the call, fails, or answers a non-positive
/// value (each then falls back to LLVM 16's grid value).
fn positive_attribute(api: &HipApi, device: usize, attribute: c_int) -> Option<u32> {
    match result::device::attribute(api, device, attribute) {
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
    devices: Vec<HipDeviceInfo>,
}

/// The AMDGPU backend over the HIP runtime. With no runtime it has no devices.
pub struct HipBackend {
    runtime: Option<Runtime>,
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
        let count = result::device::count(&api).map_err(|e| e.to_string())?;
        let teams_per_cu = grid::teams_per_cu_from_env();
        let devices = (0..count)
            .map(|d| {
                let arch_name = result::device::gcn_arch_name(&api, d).map_err(|e| e.to_string());
                let target_id = arch_name
                    .as_ref()
                    .ok()
                    .and_then(|name| TargetId::parse(name).ok());
                let limits = DeviceLimits::new(
                    device_attributes(&api, d),
                    target_id.as_ref().map(|id| id.processor.as_str()),
                    teams_per_cu,
                );
                HipDeviceInfo {
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
    pub fn devices(&self) -> &[HipDeviceInfo] {
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
        Arc::new(HipDevice {
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
