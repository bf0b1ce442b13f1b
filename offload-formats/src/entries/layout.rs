//! The entry structs as the C side lays them out, the sections that hold them, the
//! field list code in other languages builds them from, and [`EntryLayout`].

use std::ffi::{c_char, c_void};
use std::mem::{offset_of, size_of};

/// Section of LLVM 20+ entries.
pub const SECTION_LLVM: &str = "llvm_offload_entries";
/// Section of LLVM <= 19 entries (libomptarget 16 collects these; our compiler plugin
/// and `omp_indirect.h` emit them).
pub const SECTION_LEGACY: &str = "omp_offloading_entries";

/// `__tgt_offload_entry` of LLVM <= 19, as the C side lays it out: libomptarget 16's
/// plugin ABI, what clang 16 emits into [`SECTION_LEGACY`]. The one definition of this
/// layout: the host plugin's ABI, the compiler plugin's IR ([`TGT_OFFLOAD_ENTRY_FIELDS`])
/// and this crate's table reader all take it from here; a test checks `omp_indirect.h`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TgtOffloadEntry {
    pub addr: *mut c_void,
    pub name: *mut c_char,
    pub size: usize,
    pub flags: i32,
    pub reserved: i32,
}

/// The LLVM 20+ offload entry (`llvm::offloading::EntryTy`), as stored in
/// [`SECTION_LLVM`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct LlvmOffloadEntry {
    pub reserved: u64,
    /// Always 1.
    pub version: u16,
    /// The offload kind (1 = OpenMP).
    pub kind: u16,
    pub flags: u32,
    pub addr: *mut c_void,
    pub name: *mut c_char,
    pub size: u64,
    pub data: u64,
    pub aux: *mut c_void,
}

// The sizes LLVM's static_asserts fix (on the 64-bit targets the readers accept).
const _: () = assert!(size_of::<TgtOffloadEntry>() == 32);
const _: () = assert!(size_of::<LlvmOffloadEntry>() == 56);

/// How a field of an entry is typed in C and in LLVM IR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// A pointer in address space 0 (`ptr`).
    Pointer,
    I64,
    I32,
}

impl FieldKind {
    pub const fn size(self) -> usize {
        match self {
            FieldKind::Pointer | FieldKind::I64 => 8,
            FieldKind::I32 => 4,
        }
    }
}

/// One field of [`TgtOffloadEntry`], for code that builds the entry in another language
/// (LLVM IR, C).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub kind: FieldKind,
    pub offset: usize,
}

/// [`TgtOffloadEntry`]'s fields in order, offsets taken from the struct.
pub const TGT_OFFLOAD_ENTRY_FIELDS: [Field; 5] = [
    Field {
        name: "addr",
        kind: FieldKind::Pointer,
        offset: offset_of!(TgtOffloadEntry, addr),
    },
    Field {
        name: "name",
        kind: FieldKind::Pointer,
        offset: offset_of!(TgtOffloadEntry, name),
    },
    Field {
        name: "size",
        kind: FieldKind::I64,
        offset: offset_of!(TgtOffloadEntry, size),
    },
    Field {
        name: "flags",
        kind: FieldKind::I32,
        offset: offset_of!(TgtOffloadEntry, flags),
    },
    Field {
        name: "reserved",
        kind: FieldKind::I32,
        offset: offset_of!(TgtOffloadEntry, reserved),
    },
];

/// The field list covers the struct with no gaps: a packed struct of these kinds (what
/// an IR emitter builds) has the same offsets and size as the Rust one.
const _: () = {
    let mut next = 0;
    let mut i = 0;
    while i < TGT_OFFLOAD_ENTRY_FIELDS.len() {
        assert!(TGT_OFFLOAD_ENTRY_FIELDS[i].offset == next);
        next += TGT_OFFLOAD_ENTRY_FIELDS[i].kind.size();
        i += 1;
    }
    assert!(next == size_of::<TgtOffloadEntry>());
};

/// Which entry layout a table uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum EntryLayout {
    /// 32 bytes, LLVM <= 19: [`TgtOffloadEntry`].
    Legacy32,
    /// 56 bytes, LLVM 20+: [`LlvmOffloadEntry`].
    Llvm56,
}

impl EntryLayout {
    pub fn size(self) -> u64 {
        match self {
            EntryLayout::Legacy32 => size_of::<TgtOffloadEntry>() as u64,
            EntryLayout::Llvm56 => size_of::<LlvmOffloadEntry>() as u64,
        }
    }

    /// Offsets of the `addr` and `name` pointer fields of the entry at `at`.
    pub(super) fn pointer_offsets(self, at: u64) -> (u64, u64) {
        match self {
            EntryLayout::Llvm56 => (
                at + field!(LlvmOffloadEntry, addr),
                at + field!(LlvmOffloadEntry, name),
            ),
            EntryLayout::Legacy32 => (
                at + field!(TgtOffloadEntry, addr),
                at + field!(TgtOffloadEntry, name),
            ),
        }
    }
}
