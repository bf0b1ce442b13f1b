//! An image loaded on a host device: the library dlopen opened in this process, its
//! load bias, and the image file it was opened from until the load lets it go.

use crate::backend::host_common::dlopen::{self, ImageFile};
use crate::backend::{BackendError, DeviceAddr, LoadedModule};
use libloading::os::unix::Library;
use std::ffi::CStr;
use std::sync::Mutex;

/// An image dlopen loaded in this process.
pub(super) struct HostModule {
    pub(super) library: Library,
    /// `l_addr` of the image's link map: image address + this = process address.
    pub(super) load_bias: u64,
    /// The image file dlopen mapped, until [`LoadedModule::release_load_files`].
    pub(super) file: Mutex<Option<ImageFile>>,
}

impl LoadedModule for HostModule {
    fn release_load_files(&self) {
        let file = crate::support::locking::lock(&self.file).take();
        drop(file);
    }

    fn global(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        dlopen::symbol(&self.library, name)
    }
    fn function(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        dlopen::symbol(&self.library, name)
    }
    fn load_bias(&self) -> Option<u64> {
        Some(self.load_bias)
    }
}
