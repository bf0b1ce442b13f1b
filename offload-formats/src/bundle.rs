//! Clang offload bundles (`__CLANG_OFFLOAD_BUNDLE__`), the binary form written by
//! `clang-offload-bundler` for `-type=bc`, `gch`, `ast` and as the payload of `-compress`.
//!
//! ```text
//! "__CLANG_OFFLOAD_BUNDLE__" | u64 entry count
//! per entry: u64 offset | u64 size | u64 ID length | ID bytes (no NUL)
//! code objects at their offsets (padded to the bundle alignment)
//! ```
//! An entry ID is `<offload kind>-<triple>-<target ID>` (see [`BundleEntryId`]).
//!
//! The submodules, each re-exported here:
//! * `parse`: a bundle in memory ([`Bundle::parse`], [`BundleEntry`], [`is_bundle`]).
//! * `writer`: a bundle's bytes ([`write()`]) and its header from the code objects'
//!   sizes alone ([`header`]).
//! * `entry_table`: the entry table read from a stream ([`read_entry_table`],
//!   [`EntryRange`]).
//! * `entry_id`: entry IDs parsed, normalized and matched like the bundler
//!   ([`BundleEntryId`], [`OFFLOAD_KINDS`]).
//! * [`text`]: text bundles (code objects between comment marker lines).
//! * `object_file`: object-file bundles (one ELF section per code object,
//!   [`object_bundle_entries`]).

pub const MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
const CONTAINER: &str = "offload bundle";
/// Bytes of one entry's fixed fields (offset, size, ID length).
const ENTRY_FIXED: u64 = 24;

mod entry_id;
mod entry_table;
mod object_file;
mod parse;
pub mod text;
mod writer;

pub use entry_id::{BundleEntryId, OFFLOAD_KINDS};
pub use entry_table::{read_entry_table, EntryRange};
pub use object_file::{object_bundle_entries, OBJECT_SECTION_PREFIX};
pub use parse::{is_bundle, Bundle, BundleEntry};
pub use writer::{header, write};
