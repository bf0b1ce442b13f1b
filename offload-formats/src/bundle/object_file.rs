//! Object-file bundles (`clang-offload-bundler -type=o`): each code object in an ELF
//! section of its own.

use super::BundleEntry;
use crate::error::Result;

/// Prefix of the ELF sections in which `clang-offload-bundler -type=o` stores each
/// code object of an object-file bundle (`__CLANG_OFFLOAD_BUNDLE__<entry ID>`).
pub const OBJECT_SECTION_PREFIX: &str = "__CLANG_OFFLOAD_BUNDLE__";

/// The entries of an object-file bundle, in section order. The host entry's data is
/// the bundler's 1-byte placeholder: the host code is the object itself.
pub fn object_bundle_entries(elf: &[u8]) -> Result<Vec<BundleEntry<'_>>> {
    use object::{Object, ObjectSection};
    let file = object::File::parse(elf)?;
    let mut out = Vec::new();
    for section in file.sections() {
        let Ok(name) = section.name() else { continue };
        let Some(id) = name.strip_prefix(OBJECT_SECTION_PREFIX) else {
            continue;
        };
        let offset = section.file_range().map_or(0, |(o, _)| o);
        out.push(BundleEntry {
            id,
            offset,
            data: section.data()?,
        });
    }
    Ok(out)
}
