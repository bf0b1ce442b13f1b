//! The isolated host device (`OMPTARGET_RS_ISOLATED=1`): the x86_64 device in a process
//! of its own, so that it sees what a discrete GPU sees. Images, libomp and the device
//! RTL load there; all device memory lives there; and every address of the host
//! process faults there, reported with what it is in the host (`_ZTV5Child+16`, a
//! heap address, a host function) and whether it was read, written or called.
//!
//! Beside [`super::host`], it shares the ELF checks and the whole load path of the core
//! (entries resolve from the image's symbol tables and the load bias the device
//! process reports), and dlopen and the libffi call ([`super::host_common`]) with the
//! in-process host device.
//!
//! [`IsolatedBackend`] (this module) offers the devices and judges images; each device is
//! an [`IsolatedDevice`] ([`device`]) over the one device process they share ([`running`]:
//! started on first use, its window, memory and copies), whose loaded images are
//! [`module`]'s.
//!
//! - [`address_space`]: the window, reservations, and why no host address can be
//!   reached on the device;
//! - [`arena`]: device memory, shared with the plugin for copies;
//! - [`protocol`]: the messages; [`process`]: the plugin's side of the device process;
//!   [`server`]: the device process itself; [`fault`]: the fault report.

pub mod address_space;
mod arena;
pub mod args;
mod c_streams;
mod device;
pub mod doorbell;
pub mod fault;
mod module;
pub mod process;
pub mod protocol;
mod running;
pub mod server;

pub use args::ISOLATED_ENV;
pub use device::IsolatedDevice;
pub use running::Isolated;

use super::host_common::HOST_DEVICE_COUNT;
use super::{Backend, BackendDevice};
use running::ProcessOnFirstUse;
use std::sync::Arc;

/// Whether this process asked for the isolated device.
pub fn requested() -> bool {
    std::env::var(ISOLATED_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `OMP_REQ_UNIFIED_SHARED_MEMORY` of `__tgt_rtl_init_requires`.
const REQUIRES_UNIFIED_SHARED_MEMORY: i64 = 0x008;

/// The backend: the device process is started on the first device's use.
#[derive(Default)]
pub struct IsolatedBackend {
    process: Arc<ProcessOnFirstUse>,
}

impl IsolatedBackend {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Backend for IsolatedBackend {
    fn elf_machine(&self) -> u16 {
        object::elf::EM_X86_64
    }

    fn inspect_image<'a>(
        &self,
        image: &'a [u8],
    ) -> Result<Option<crate::elf::image::ImageSymbols<'a>>, crate::elf::image::ImageError> {
        super::host::inspect_loadable(image).map(Some)
    }

    fn device_count(&self) -> usize {
        HOST_DEVICE_COUNT
    }

    fn device(&self, index: usize) -> Arc<dyn BackendDevice> {
        Arc::new(IsolatedDevice {
            index,
            process: Arc::clone(&self.process),
        })
    }

    fn unsupported_requirements(&self, flags: i64) -> Option<String> {
        (flags & REQUIRES_UNIFIED_SHARED_MEMORY != 0).then(|| {
            "`requires unified_shared_memory`: the isolated host device, like a discrete \
             GPU, shares no memory with the host process (run without \
             OMPTARGET_RS_ISOLATED for the in-process host device)"
                .to_owned()
        })
    }
}
