//! libomptarget's host entries as the core reads them ([`HostEntry`]), in place.

use super::types::TgtOffloadEntry;
use crate::generic::host_entry::{EntryKind, HostEntry};
use std::ffi::CStr;

/// One of libomptarget's host entries, read in place: its array lives in the host binary
/// as long as the image is registered, so a load copies none of its entries.
/// Only `host_entries` ([`super::images`]) makes these, after checking what the accessors
/// rely on.
#[repr(transparent)]
pub(super) struct LibomptargetEntry(pub(super) TgtOffloadEntry);

// SAFETY: an entry is only ever read (its fields, the name and host vtable it points
// to), and libomptarget neither writes nor frees any of it while the image is
// registered, which spans every load that reads it: threads of one load may share it.
unsafe impl Sync for LibomptargetEntry {}

impl LibomptargetEntry {
    pub(super) fn is_vtable(&self) -> bool {
        self.kind() == Some(EntryKind::IndirectVtable) && !self.0.addr.is_null()
    }
}

impl HostEntry for LibomptargetEntry {
    fn host_addr(&self) -> u64 {
        self.0.addr as u64
    }

    fn name(&self) -> &CStr {
        // SAFETY: `host_entries` checked the name is not null; libomptarget's entry names
        // are NUL-terminated strings of the host binary that outlive the entry array.
        unsafe { CStr::from_ptr(self.0.name) }
    }

    fn size(&self) -> u64 {
        self.0.size as u64
    }

    fn flags(&self) -> i32 {
        self.0.flags
    }

    fn host_vtable(&self) -> Option<&[u8]> {
        // SAFETY: an indirect vtable entry's address is the host vtable, `size` bytes long
        // (the contract of `host_entries`), and `host_entries` bounded the size.
        self.is_vtable()
            .then(|| unsafe { std::slice::from_raw_parts(self.0.addr as *const u8, self.0.size) })
    }
}
