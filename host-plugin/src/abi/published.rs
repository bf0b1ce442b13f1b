//! The table `__tgt_rtl_load_binary` hands to libomptarget for one loaded image, built
//! here from the image's host entries and their device addresses.

use super::entries::LibomptargetEntry;
use super::types::{TgtOffloadEntry, TgtTargetTable};
use crate::backend::DeviceAddr;
use std::ffi::c_void;

/// It must stay put until the image is unloaded, so it is boxed and kept with the image
/// in the plugin ([`crate::generic::device::Device::keep_with_image`]). Entry names point at
/// libomptarget's own host entries, as LLVM's plugins return them.
pub(super) struct PublishedTable {
    _raw: Box<[TgtOffloadEntry]>,
    table: Box<TgtTargetTable>,
}

impl PublishedTable {
    /// The host entries, each with its device address (`addrs`, in the same order).
    /// A million-entry table goes on huge pages where it is large enough.
    pub(super) fn new(entries: &[LibomptargetEntry], addrs: &[DeviceAddr]) -> Self {
        let mut raw = crate::support::huge_pages::boxed_from_iter(entries.iter().zip(addrs).map(
            |(h, &addr)| TgtOffloadEntry {
                addr: addr as *mut c_void,
                ..h.0
            },
        ));
        let range = raw.as_mut_ptr_range();
        let table = Box::new(TgtTargetTable {
            entries_begin: range.start,
            entries_end: range.end,
        });
        // Moving `raw` below moves the box, not the entries the table points at.
        PublishedTable { _raw: raw, table }
    }

    /// What libomptarget gets: valid while this table is kept.
    pub(super) fn table_ptr(&mut self) -> *mut TgtTargetTable {
        &mut *self.table
    }
}

// SAFETY: the raw pointers point into this struct's own boxed data (the table into
// `_raw`) or at libomptarget's host entry names, which live in the host binary; nothing
// here writes through them, and libomptarget only reads them.
unsafe impl Send for PublishedTable {}
