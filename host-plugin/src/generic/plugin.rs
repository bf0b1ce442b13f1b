//! The plugin: its kind, its vendor's hooks, and one [`Device`] per device the vendor
//! found. Everything libomptarget asks for goes through here and the devices; the
//! `abi` shims only convert C structures to and from these types.

use crate::backend::Backend;
use crate::generic::device::Device;
use crate::generic::error::PluginError;
use crate::generic::plugin_kind::PluginKind;
use crate::generic::resolve::default_load_thread_cap;
use std::sync::Arc;

/// A plugin: its kind, its vendor's hooks, and one [`Device`] per device the vendor
/// found. libomptarget's per-device calls go to [`Plugin::device`].
pub struct Plugin {
    kind: PluginKind,
    /// Declared before the backend so the images unload before the backend drops (a GPU
    /// backend releases its contexts then).
    devices: Vec<Device>,
    backend: Arc<dyn Backend>,
}

impl Plugin {
    pub fn new(kind: PluginKind) -> Self {
        Self::with_backend(kind, kind.backend())
    }

    pub fn with_backend(kind: PluginKind, backend: Box<dyn Backend>) -> Self {
        let backend: Arc<dyn Backend> = Arc::from(backend);
        let load_threads = default_load_thread_cap();
        let devices = (0..backend.device_count())
            .map(|d| {
                Device::new(
                    d,
                    kind,
                    Arc::clone(&backend),
                    backend.device(d),
                    load_threads,
                )
            })
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

    /// At most `threads` (at least 1) threads resolve the entries of a load from now on;
    /// the default is `OMPTARGET_RS_LOAD_THREADS`, else the CPUs this process may use,
    /// at most 8.
    pub fn set_load_threads(&mut self, threads: usize) {
        for device in &mut self.devices {
            device.set_load_thread_cap(threads);
        }
    }

    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    /// Device `device` (libomptarget's number), or [`PluginError::NoSuchDevice`].
    pub fn device(&self, device: i32) -> Result<&Device, PluginError> {
        usize::try_from(device)
            .ok()
            .and_then(|d| self.devices.get(d))
            .ok_or(PluginError::NoSuchDevice {
                device,
                count: self.devices.len(),
            })
    }

    pub fn is_valid_binary(&self, image: &[u8]) -> bool {
        self.backend.is_valid_image(image)
    }

    /// Give every device's pooled free blocks back to its driver (what is in use stays).
    pub fn trim_pools(&self) -> Result<(), PluginError> {
        let mut first_err = Ok(());
        for device in &self.devices {
            let r = device.trim_pool();
            if first_err.is_ok() {
                first_err = r;
            }
        }
        first_err
    }

    /// Unload everything on every device (`__tgt_rtl_deinit_plugin`).
    pub fn unload_all(&self) -> Result<(), PluginError> {
        let mut first_err = Ok(());
        for device in &self.devices {
            let r = device.unload_all();
            if first_err.is_ok() {
                first_err = r;
            }
        }
        first_err
    }

    /// Every loaded image, as (device, key).
    pub fn loaded_image_keys(&self) -> Vec<(i32, usize)> {
        self.devices
            .iter()
            .flat_map(|device| {
                device
                    .loaded_image_keys()
                    .into_iter()
                    .map(|key| (device.id(), key))
            })
            .collect()
    }
}
