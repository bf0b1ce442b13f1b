//! Offload entries as the plugin sees them, and what each one asks the plugin to do.

use std::borrow::Cow;
use std::ffi::CStr;

use offload_formats::entries::classify;
pub use offload_formats::entries::{flags, EntryKind};

// The entry flags are offload-formats' (`flags`); these are the same bits typed as the
// `i32` of LLVM 16's `__tgt_offload_entry`.
/// `OMP_DECLARE_TARGET_CTOR`: a global constructor, launched as a kernel by libomptarget.
pub const FLAG_CTOR: i32 = flags::CTOR as i32;
/// `OMP_DECLARE_TARGET_DTOR`: a global destructor, launched as a kernel by libomptarget.
pub const FLAG_DTOR: i32 = flags::DTOR as i32;
/// `OMP_DECLARE_TARGET_INDIRECT` (clang 18+) / `OMP_DECLARE_TARGET_FPTR` (the seed design).
pub const FLAG_INDIRECT: i32 = flags::INDIRECT as i32;
/// `OMP_DECLARE_TARGET_INDIRECT_VTABLE` (newest clang): the entry describes a whole vtable.
pub const FLAG_INDIRECT_VTABLE: i32 = flags::INDIRECT_VTABLE as i32;

/// One host `__tgt_offload_entry`. The name is borrowed where the caller's entries
/// outlive the load (libomptarget's, in the host binary): a million-entry image would
/// otherwise copy a million names per load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostOffloadEntry<'a> {
    /// The host address (function, global or vtable).
    pub host_addr: u64,
    pub name: Cow<'a, CStr>,
    pub size: u64,
    pub flags: i32,
    /// For indirect vtable entries: the host vtable's bytes (`size` of them).
    pub host_vtable: Option<Vec<u8>>,
}

impl HostOffloadEntry<'static> {
    /// An entry without a host vtable, owning a copy of `name`: what a caller of the Rust
    /// API builds from its own names. An error when `name` holds a NUL.
    pub fn named(
        name: &str,
        host_addr: u64,
        size: u64,
        flags: i32,
    ) -> Result<Self, std::ffi::NulError> {
        Ok(HostOffloadEntry {
            host_addr,
            name: Cow::Owned(std::ffi::CString::new(name)?),
            size,
            flags,
            host_vtable: None,
        })
    }
}

/// The entry goes into the indirect function table (function or vtable).
pub fn is_indirect(flags: i32) -> bool {
    flags::is_indirect(flags as u32)
}

/// A host offload entry as the plugin core reads it: [`HostOffloadEntry`] through the Rust
/// API; libomptarget's own entry array, read in place, through the C ABI (a load of a
/// million entries then copies none of them).
pub trait HostEntry {
    /// The host address (function, global or vtable).
    fn host_addr(&self) -> u64;
    fn name(&self) -> &CStr;
    fn size(&self) -> u64;
    fn flags(&self) -> i32;
    /// For indirect vtable entries: the host vtable's bytes (`size` of them).
    fn host_vtable(&self) -> Option<&[u8]>;

    /// What the entry asks for, by its flags and size ([`classify`]); `None` for
    /// combinations no compiler emits.
    fn kind(&self) -> Option<EntryKind> {
        classify(self.flags() as u32, self.size())
    }

    fn name_lossy(&self) -> String {
        self.name().to_string_lossy().into_owned()
    }
}

impl HostEntry for HostOffloadEntry<'_> {
    fn host_addr(&self) -> u64 {
        self.host_addr
    }
    fn name(&self) -> &CStr {
        &self.name
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn flags(&self) -> i32 {
        self.flags
    }
    fn host_vtable(&self) -> Option<&[u8]> {
        self.host_vtable.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(size: u64, flags: i32) -> HostOffloadEntry<'static> {
        HostOffloadEntry {
            host_addr: 0x1000,
            name: Cow::Borrowed(c"f"),
            size,
            flags,
            host_vtable: None,
        }
    }

    /// The plugin classifies through offload-formats' one rule (tested there in full).
    #[test]
    fn classification() {
        assert_eq!(entry(0, 0).kind(), Some(EntryKind::Kernel));
        assert_eq!(entry(0, FLAG_CTOR).kind(), Some(EntryKind::Kernel));
        assert_eq!(entry(4, 0).kind(), Some(EntryKind::Global));
        assert_eq!(
            entry(0, FLAG_INDIRECT).kind(),
            Some(EntryKind::IndirectFunction)
        );
        assert_eq!(
            entry(8, FLAG_INDIRECT).kind(),
            Some(EntryKind::IndirectThroughGlobal)
        );
        assert_eq!(entry(4, FLAG_INDIRECT).kind(), None);
        assert_eq!(
            entry(24, FLAG_INDIRECT | FLAG_INDIRECT_VTABLE).kind(),
            Some(EntryKind::IndirectVtable)
        );
        assert_eq!(entry(12, FLAG_INDIRECT | FLAG_INDIRECT_VTABLE).kind(), None);
        // 0x20 alone: a vtable, as in LLVM's loader (this plugin used to load it as a
        // plain global).
        assert_eq!(
            entry(24, FLAG_INDIRECT_VTABLE).kind(),
            Some(EntryKind::IndirectVtable)
        );
        assert!(is_indirect(FLAG_INDIRECT_VTABLE));
    }
}
