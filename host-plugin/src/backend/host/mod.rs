//! The host CPU as an offload device, as LLVM's generic-elf-64bit plugin does it: images
//! are x86-64 shared objects loaded with dlopen, memory is malloc'd process memory,
//! kernels are called through libffi with one pointer argument per mapped variable.
//!
//! [`HostBackend`] offers the devices and judges images ([`inspect_loadable`], glibc's
//! loader's rule in [`loadable`]); each device is a [`HostDevice`] ([`device`]), whose
//! loaded images are [`module`]'s. dlopen and the libffi call are the isolated device's
//! too ([`super::host_common`]).

mod device;
mod loadable;
mod module;

pub use super::host_common::HOST_DEVICE_COUNT;
pub use device::HostDevice;

use super::{Backend, BackendDevice};
use std::sync::Arc;

/// Whether glibc's loader can map and relocate an x86-64 image safely (the rule the
/// host backends need of every image they dlopen); the error says what is inconsistent.
pub(crate) use loadable::check as check_loadable;

/// The host devices' image check: a well-formed x86-64 shared object that glibc's
/// loader can map ([`check_loadable`]), and its symbols. Other machines' code objects
/// (AMDGPU through HIP) go to their vendor's loader, which reads them itself.
pub fn inspect_loadable(
    image: &[u8],
) -> Result<crate::elf::image::ImageSymbols<'_>, crate::elf::image::ImageError> {
    crate::elf::image::inspect_shared_object_for(image, object::elf::EM_X86_64, &check_loadable)
}

#[derive(Default)]
pub struct HostBackend;

impl Backend for HostBackend {
    fn elf_machine(&self) -> u16 {
        object::elf::EM_X86_64
    }

    fn inspect_image<'a>(
        &self,
        image: &'a [u8],
    ) -> Result<Option<crate::elf::image::ImageSymbols<'a>>, crate::elf::image::ImageError> {
        inspect_loadable(image).map(Some)
    }

    fn device_count(&self) -> usize {
        HOST_DEVICE_COUNT
    }

    fn device(&self, index: usize) -> Arc<dyn BackendDevice> {
        Arc::new(HostDevice { index })
    }
}
