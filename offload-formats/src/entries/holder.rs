//! The device global an indirect entry names (the convention the host plugin reads on
//! every backend, docs/USER_GUIDE.md "Indirect entries the plugin understands"): the host entry
//! `{&fn, "<holder>", size 8, flags 0x08}` names it, each device image defines it,
//! holding the device function's (or vtable group's) address.

/// Every holder global's name starts with this.
pub const PREFIX: &str = "__omp_offloading_indirect_";

/// A holder is one (device) pointer: the `size` of a function's entry.
pub const SIZE: u64 = 8;

/// What `OMP_DECLARE_INDIRECT(fn)` of `omp_indirect.h` (the seed convention, for
/// compilers without our plugin) names its holder: this, then the function's name.
pub const MACRO_PREFIX: &str = "__omp_indirect_fn_";

/// The holder `OMP_DECLARE_INDIRECT(function)` defines.
pub fn macro_name(function: &str) -> String {
    format!("{MACRO_PREFIX}{function}")
}

/// The holder's name for `symbol`; `unit` is the translation unit's identity for
/// symbols with internal linkage, None for external ones. It must be the same in
/// the host and device compile of one unit and unique in the program: external
/// symbols are unique by themselves, internal (`static`) ones with the unit, as
/// clang's own offload names do. Characters PTX does not allow in identifiers
/// become `_` (the GPU loaders look the global up by this name).
pub fn name(symbol: &str, unit: Option<&str>) -> String {
    let mut name = String::from(PREFIX);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_symbols_are_named_by_themselves() {
        assert_eq!(name("_Z3addi", None), "__omp_offloading_indirect__Z3addi");
    }

    #[test]
    fn internal_symbols_carry_the_unit_and_lose_characters_ptx_rejects() {
        assert_eq!(
            name("f.1", Some("803_1a2b")),
            "__omp_offloading_indirect_803_1a2b_f_1"
        );
    }
}
