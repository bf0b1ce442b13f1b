//! An image loaded in the device process: its symbols, asked of the process's loader,
//! and its load bias; dropping it unloads the image there.

use super::protocol::{Reply, Request};
use super::running::{unexpected, Isolated};
use crate::backend::{BackendError, DeviceAddr, LoadedModule};
use std::ffi::CStr;
use std::sync::Arc;

/// An image loaded in the device process.
pub(super) struct IsolatedModule {
    pub(super) device: Arc<Isolated>,
    pub(super) module: u64,
    pub(super) load_bias: u64,
    /// The name of the image's memory file (see [`Isolated::images`]).
    pub(super) name: String,
}

impl IsolatedModule {
    fn symbol(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        let request = Request::Symbol {
            module: self.module,
            name: name.to_bytes().to_vec(),
        };
        match self.device.request(&request)? {
            Reply::Address { addr } => Ok(addr),
            Reply::Failed { missing: true, .. } => Err(BackendError::MissingSymbol(
                name.to_string_lossy().into_owned(),
            )),
            other => Err(unexpected(other)),
        }
    }
}

impl LoadedModule for IsolatedModule {
    fn global(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        self.symbol(name)
    }
    fn function(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        self.symbol(name)
    }
    fn load_bias(&self) -> Option<u64> {
        Some(self.load_bias)
    }
}

impl Drop for IsolatedModule {
    fn drop(&mut self) {
        crate::support::locking::lock(&self.device.images).remove(&self.name);
        if !self.device.process.ended() {
            let _ = self.device.request(&Request::Unload {
                module: self.module,
            });
        }
    }
}
