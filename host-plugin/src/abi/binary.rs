//! libomptarget 18's view of a loaded image: the `__tgt_device_binary` handle that its
//! `load_binary` stores, and the device address of each of the image's entries by name,
//! which it then asks for one entry at a time (`get_global`, `get_function`) to build
//! the table that 16 and 17 took from the plugin ([`super::published`]).

use super::entries::LibomptargetEntry;
use crate::backend::DeviceAddr;
use crate::generic::host_entry::{EntryKind, HostEntry};
use std::collections::HashMap;
use std::ffi::CStr;

/// Kept with the image on its device ([`crate::generic::device::Device::keep_with_image`]); its
/// address is the handle libomptarget holds.
pub(super) struct LoadedBinary {
    /// libomptarget's entries of the image, read in place.
    entries: *const LibomptargetEntry,
    len: usize,
    /// Each entry's device address, in entry order: what the 16/17 table holds.
    addrs: Box<[DeviceAddr]>,
    /// Entry index by the address of its name: libomptarget asks with the names of the
    /// very entries it passed to `load_binary`, so no name is hashed or copied.
    by_name_ptr: HashMap<usize, usize>,
}

/// What the image's entry of a name is.
pub(super) struct EntryAnswer {
    pub kind: Option<EntryKind>,
    /// The device address the 16/17 table holds for it.
    pub addr: DeviceAddr,
}

impl LoadedBinary {
    /// `addrs` are the entries' device addresses, in the same order.
    pub(super) fn new(entries: &[LibomptargetEntry], addrs: &[DeviceAddr]) -> Self {
        let by_name_ptr = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.0.name as usize, i))
            .collect();
        LoadedBinary {
            entries: entries.as_ptr(),
            len: entries.len(),
            addrs: addrs.into(),
            by_name_ptr,
        }
    }

    /// The handle libomptarget 18 gets for this binary: its address, stable while it is
    /// kept (boxed) with the image.
    pub(super) fn handle(&self) -> usize {
        self as *const Self as usize
    }

    /// The image's entry named `name`, if it has one.
    pub(super) fn entry(&self, name: &CStr) -> Option<EntryAnswer> {
        // SAFETY: made from libomptarget's entry array of the image, which stays in the
        // host binary (and unchanged) while the image is registered, and this binary is
        // only asked about while libomptarget initialises that image.
        let entries = unsafe { std::slice::from_raw_parts(self.entries, self.len) };
        let index = self
            .by_name_ptr
            .get(&(name.as_ptr() as usize))
            .copied()
            // A caller with its own copy of a name: compare the text.
            .or_else(|| entries.iter().position(|e| e.name() == name))?;
        Some(EntryAnswer {
            kind: entries[index].kind(),
            addr: self.addrs[index],
        })
    }
}

// SAFETY: the raw pointer is to libomptarget's entries, which nothing here writes and
// libomptarget does not change while the image is registered: any thread may read them.
unsafe impl Send for LoadedBinary {}
