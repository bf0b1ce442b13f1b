//! The name of the device global that holds an indirect function's device address: the
//! host entry names it, the device module defines it. It must be the same in the host
//! and device compile of one translation unit, and unique in the program: functions with
//! external linkage are unique by their symbol; functions with internal linkage
//! (`static`) get the translation unit's identity too, as clang does for its own offload
//! names (`__omp_offloading_<device>_<inode>_...`).
use std::os::unix::fs::MetadataExt;

/// Every holder global starts with this.
pub const HOLDER_PREFIX: &str = "__omp_offloading_indirect_";

/// The holder's name for `symbol`; `unit` is the translation unit's identity for
/// functions with internal linkage, None for external ones. Characters PTX does not
/// allow in identifiers become `_` (the GPU loaders look the global up by this name).
pub fn holder_name(symbol: &str, unit: Option<&str>) -> String {
    let mut name = String::from(HOLDER_PREFIX);
    if let Some(unit) = unit {
        name.push_str(unit);
        name.push('_');
    }
    name.extend(symbol.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' || c == '$' {
            c
        } else {
            '_'
        }
    }));
    name
}

/// The translation unit's identity: the device and inode numbers of its source file in
/// hex (what clang uses for its own offload names), or a hash of the file name when the
/// file cannot be read (input from a pipe).
pub fn unit_id(source_file: &str) -> String {
    match std::fs::metadata(source_file) {
        Ok(meta) => format!("{:x}_{:x}", meta.dev(), meta.ino()),
        Err(_) => format!("h{:016x}", fnv1a(source_file.as_bytes())),
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_functions_are_named_by_their_symbol() {
        assert_eq!(
            holder_name("_Z3addi", None),
            "__omp_offloading_indirect__Z3addi"
        );
    }

    #[test]
    fn internal_functions_carry_the_unit_and_lose_characters_ptx_rejects() {
        assert_eq!(
            holder_name("f.1", Some("803_1a2b")),
            "__omp_offloading_indirect_803_1a2b_f_1"
        );
    }

    #[test]
    fn a_file_is_identified_by_device_and_inode_and_a_missing_one_by_its_name() {
        let here = file!();
        let id = unit_id(&format!("{}/../{here}", env!("CARGO_MANIFEST_DIR")));
        assert!(id.contains('_') && !id.starts_with('h'), "{id}");
        let missing = unit_id("/no/such/file.c");
        assert!(missing.starts_with('h'));
        assert_ne!(missing, unit_id("/no/such/other.c"));
    }
}
