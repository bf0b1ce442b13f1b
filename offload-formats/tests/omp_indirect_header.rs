//! `host-plugin/include/omp_indirect.h` lays the offload entry out again for C programs
//! (`struct omp_indirect_offload_entry`), with its flag and section: this holds it to
//! the definitions in `offload_formats::entries`, so the two cannot drift apart unseen.
use offload_formats::entries::{
    flags, holder, FieldKind, SECTION_LEGACY, TGT_OFFLOAD_ENTRY_FIELDS,
};
use std::path::Path;

fn header() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../host-plugin/include/omp_indirect.h");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The kind of a C field type on the 64-bit targets the header is for.
fn kind_of(c_type: &str) -> FieldKind {
    match c_type {
        "void *" | "char *" | "const char *" => FieldKind::Pointer,
        "size_t" | "uint64_t" | "int64_t" => FieldKind::I64,
        "int32_t" | "uint32_t" => FieldKind::I32,
        other => panic!("omp_indirect.h: no rule for the C type `{other}`"),
    }
}

/// `(name, kind)` of each field of `struct <name> { ... };`, in order.
fn c_struct_fields(text: &str, name: &str) -> Vec<(String, FieldKind)> {
    let open = format!("struct {name} {{");
    let start = text.find(&open).expect("the struct is in the header") + open.len();
    let body = &text[start..start + text[start..].find("};").expect("the struct ends")];
    body.split(';')
        .map(str::trim)
        .filter(|declaration| !declaration.is_empty())
        .map(|declaration| {
            // `void *addr` -> type `void *`, name `addr`.
            let split = declaration.rfind([' ', '*']).expect("a type and a name");
            let (c_type, field) = declaration.split_at(split + 1);
            (field.to_owned(), kind_of(c_type.trim()))
        })
        .collect()
}

#[test]
fn the_c_entry_has_the_rust_entry_fields_in_order() {
    let fields = c_struct_fields(&header(), "omp_indirect_offload_entry");
    let expected: Vec<(String, FieldKind)> = TGT_OFFLOAD_ENTRY_FIELDS
        .iter()
        .map(|f| (f.name.to_owned(), f.kind))
        .collect();
    assert_eq!(fields, expected);
}

#[test]
fn the_c_flag_and_section_are_the_rust_ones() {
    let text = header();
    let flag = text
        .lines()
        .find_map(|l| l.strip_prefix("#define OMP_DECLARE_TARGET_FPTR "))
        .expect("the header defines OMP_DECLARE_TARGET_FPTR");
    let flag = u32::from_str_radix(flag.trim().trim_start_matches("0x"), 16).expect("hex");
    assert_eq!(flag, flags::INDIRECT);
    assert!(
        text.contains(&format!("section(\"{SECTION_LEGACY}\")")),
        "the entries go to section {SECTION_LEGACY}"
    );
}

#[test]
fn the_parser_sees_a_changed_field() {
    let changed = "struct e {\n  void *addr;\n  size_t name;\n};";
    assert_eq!(
        c_struct_fields(changed, "e"),
        [
            ("addr".to_owned(), FieldKind::Pointer),
            ("name".to_owned(), FieldKind::I64)
        ]
    );
}

#[test]
fn the_c_macro_names_its_holders_by_the_rust_rule() {
    let text = header();
    // The holder's C name and the entry's name string, both built from the prefix.
    let prefix = holder::MACRO_PREFIX;
    assert!(
        text.contains(&format!("OMP_INDIRECT_CONCAT_({prefix}, fn)")),
        "the holder global is {prefix}<fn>"
    );
    assert!(
        text.contains(&format!("\"{prefix}\" #fn")),
        "the entry names the holder {prefix}<fn>"
    );
    assert_eq!(holder::macro_name("add_one"), format!("{prefix}add_one"));
}
