//! Host offload entry tables, read from an x86-64 (or other 64-bit little-endian) ELF
//! executable, shared object or relocatable object, with relocations applied.
//!
//! * LLVM 20+: section `llvm_offload_entries`, 56-byte entries ([`LlvmOffloadEntry`])
//!   `{u64 reserved; u16 version = 1; u16 kind; u32 flags; void *addr; char *name;
//!   u64 size; u64 data; void *aux}`.
//! * LLVM <= 19: section `omp_offloading_entries`, 32-byte entries ([`TgtOffloadEntry`])
//!   `{void *addr; char *name; u64 size; i32 flags; i32 reserved}`.
//!
//! In a relocatable object or a position-independent executable `addr` and `name` hold
//! 0 until relocated, so the reader applies the section's `R_X86_64_64` relocations
//! (objects) or the dynamic `R_X86_64_RELATIVE` / `R_X86_64_64` relocations (PIE).
//!
//! The submodules, each re-exported here:
//! * `layout`: the entry structs as C lays them out ([`TgtOffloadEntry`],
//!   [`LlvmOffloadEntry`]), their sections, their field list for IR emitters and
//!   [`EntryLayout`].
//! * `table`: a section's bytes as [`RawEntry`]s, decoded ([`parse_table`]) and
//!   encoded ([`write_table`]).
//! * [`flags`]: the flag bits and their names.
//! * [`holder`]: the naming rule of the device global an indirect entry names.
//! * `classification`: what an entry is ([`EntryRole`]) and what a loader does with
//!   it ([`EntryKind`], [`classify`]).
//! * `host_entries`: [`read_host_entries`], the relocated [`OffloadEntry`]s of an ELF
//!   file.

/// The offset of a field of an entry struct, as a file offset.
macro_rules! field {
    ($entry:ty, $field:ident) => {
        offset_of!($entry, $field) as u64
    };
}

mod classification;
pub mod flags;
pub mod holder;
mod host_entries;
mod layout;
mod table;

pub use classification::{classify, EntryKind, EntryRole};
pub use host_entries::{read_host_entries, OffloadEntry};
pub use layout::{
    EntryLayout, Field, FieldKind, LlvmOffloadEntry, TgtOffloadEntry, SECTION_LEGACY, SECTION_LLVM,
    TGT_OFFLOAD_ENTRY_FIELDS,
};
pub use table::{parse_table, write_table, RawEntry};
