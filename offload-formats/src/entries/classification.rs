//! What an entry describes ([`EntryRole`]) and what a loader must do with it
//! ([`EntryKind`]), from its flags and size.

use super::{flags, OffloadEntry};

/// What an entry describes, from its flags and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum EntryRole {
    /// A target region (kernel): size 0, no ctor/dtor/indirect flag.
    Kernel,
    Ctor,
    Dtor,
    /// A `declare target indirect` function: its address may be called on the device.
    IndirectFunction,
    /// An indirect vtable.
    IndirectVtable,
    /// A global variable (`size` bytes); `link` globals have the link flag.
    Global,
    /// The `requires` flags record.
    Requires,
}

/// What a loader must do with an entry: the one classification the plugin and the
/// inspector share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum EntryKind {
    /// A kernel (also ctor/dtor thunks): resolve the device function.
    Kernel,
    /// A declare-target global of `size` bytes: resolve the device global.
    Global,
    /// Seed convention: the device symbol is the indirect function itself (size 0).
    IndirectFunction,
    /// clang 18+ convention: an 8-byte device global holds the device function's address.
    IndirectThroughGlobal,
    /// Indirect vtable (`size` bytes of host vtable): a device global holds the device
    /// vtable's address.
    IndirectVtable,
}

/// Classify an entry by flags and size; `None` for combinations no compiler emits.
/// [`flags::INDIRECT_VTABLE`] wins over [`flags::INDIRECT`], as in LLVM's loader.
pub fn classify(flags: u32, size: u64) -> Option<EntryKind> {
    if !flags::is_indirect(flags) {
        return Some(if size == 0 {
            EntryKind::Kernel
        } else {
            EntryKind::Global
        });
    }
    if flags & flags::INDIRECT_VTABLE != 0 {
        return (size != 0 && size.is_multiple_of(8)).then_some(EntryKind::IndirectVtable);
    }
    match size {
        0 => Some(EntryKind::IndirectFunction),
        8 => Some(EntryKind::IndirectThroughGlobal),
        _ => None,
    }
}

impl OffloadEntry {
    pub fn role(&self) -> EntryRole {
        let f = self.flags;
        if f & flags::INDIRECT_VTABLE != 0 {
            EntryRole::IndirectVtable
        } else if f & flags::INDIRECT != 0 {
            EntryRole::IndirectFunction
        } else if f & flags::REQUIRES != 0 {
            EntryRole::Requires
        } else if f & flags::CTOR != 0 {
            EntryRole::Ctor
        } else if f & flags::DTOR != 0 {
            EntryRole::Dtor
        } else if self.size == 0 {
            EntryRole::Kernel
        } else {
            EntryRole::Global
        }
    }

    pub fn is_indirect(&self) -> bool {
        flags::is_indirect(self.flags)
    }

    /// What a loader does with it ([`classify`]).
    pub fn load_kind(&self) -> Option<EntryKind> {
        classify(self.flags, self.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entries::EntryLayout;

    #[test]
    fn classification() {
        use flags::{CTOR, INDIRECT, INDIRECT_VTABLE};
        assert_eq!(classify(0, 0), Some(EntryKind::Kernel));
        assert_eq!(classify(CTOR, 0), Some(EntryKind::Kernel));
        assert_eq!(classify(0, 4), Some(EntryKind::Global));
        assert_eq!(classify(INDIRECT, 0), Some(EntryKind::IndirectFunction));
        assert_eq!(
            classify(INDIRECT, 8),
            Some(EntryKind::IndirectThroughGlobal)
        );
        assert_eq!(classify(INDIRECT, 4), None);
        assert_eq!(
            classify(INDIRECT | INDIRECT_VTABLE, 24),
            Some(EntryKind::IndirectVtable)
        );
        assert_eq!(classify(INDIRECT | INDIRECT_VTABLE, 12), None);
        // 0x20 without 0x08 is a vtable too: LLVM's loader tests either bit, and the
        // inspector's role() says the same.
        assert_eq!(
            classify(INDIRECT_VTABLE, 24),
            Some(EntryKind::IndirectVtable)
        );
        assert_eq!(classify(INDIRECT_VTABLE, 0), None);
        let vtable_only = OffloadEntry {
            layout: EntryLayout::Llvm56,
            offset: 0,
            version: 1,
            kind: 1,
            flags: INDIRECT_VTABLE,
            addr: 0x1000,
            host_symbol: None,
            name: "vt".into(),
            size: 24,
            data: 0,
            aux: 0,
        };
        assert_eq!(vtable_only.role(), EntryRole::IndirectVtable);
        assert!(vtable_only.is_indirect());
        assert_eq!(vtable_only.load_kind(), Some(EntryKind::IndirectVtable));
    }
}
