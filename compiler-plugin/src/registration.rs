//! What the host module and the device module get for each indirect function this
//! translation unit defines, in the convention the host plugin reads on every backend
//! (docs/USER_GUIDE.md, "Indirect entries the plugin understands"): a host offload entry
//! `{&fn, "<holder>", size 8, flags 0x08}` and, in each device module, the holder: a
//! global named `<holder>` holding the device function's address. clang 16 gives device
//! functions hidden visibility, so the loaders find the holder (exported), not the
//! function.
//!
//! Vtable groups follow LLVM 22's convention (llvm-project #159856, #167011), which the
//! host plugin reads: a host entry `{&vtable, "<holder>", size of the whole group, flags
//! 0x20}`, and in each device module a holder of the device vtable's address. The
//! plugin pairs host word i with device word i, so a host vptr (which points inside the
//! group) translates to the same place in the device group.
use crate::ir::{EntryFieldValue, Ir};
use llvm_plugin::inkwell::values::{FunctionValue, GlobalValue};
use offload_formats::entries::{flags, holder, FieldKind, TGT_OFFLOAD_ENTRY_FIELDS};
use std::os::unix::fs::MetadataExt;

/// Itanium C++ ABI vtable symbols (construction vtables, `_ZTC`, are only used while a
/// constructor runs, where the device's own code stores them).
const VTABLE_SYMBOL_PREFIX: &str = "_ZTV";

/// The holder name for each global, in order.
pub fn holder_names<'ctx>(ir: &Ir<'_, 'ctx>, globals: &[GlobalValue<'ctx>]) -> Vec<String> {
    let unit = unit_id(&ir.source_file_name());
    globals
        .iter()
        .map(|&g| {
            let local = ir.has_local_linkage(g);
            holder::name(&ir.name(g), local.then_some(unit.as_str()))
        })
        .collect()
}

/// The translation unit's identity, for holders of symbols with internal linkage
/// ([`holder::name`]): the device and inode numbers of its source file in hex (what
/// clang uses for its own offload names), or a hash of the file name when the file
/// cannot be read (input from a pipe). The host and device compiles of one unit read
/// the same file, so both get the same identity.
fn unit_id(source_file: &str) -> String {
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

/// The vtable groups among `symbols` that this module defines for the link.
pub fn defined_vtables<'ctx>(ir: &Ir<'_, 'ctx>, symbols: &[String]) -> Vec<GlobalValue<'ctx>> {
    symbols
        .iter()
        .filter_map(|s| ir.global(s))
        .filter(|&g| ir.defines_for_link(g))
        .collect()
}

/// Every vtable group this (device) module defines: each gets a holder, whether or not
/// the host registers it (an unregistered holder costs one pointer).
pub fn all_defined_vtables<'ctx>(ir: &Ir<'_, 'ctx>) -> Vec<GlobalValue<'ctx>> {
    ir.globals()
        .into_iter()
        .filter(|&g| ir.name(g).starts_with(VTABLE_SYMBOL_PREFIX) && ir.defines_for_link(g))
        .collect()
}

/// Host module: one entry per vtable group, sized as the whole group. Weak, so the
/// entries several units make for one linkonce_odr vtable become one.
pub fn emit_host_vtable_entries<'ctx>(ir: &Ir<'_, 'ctx>, vtables: &[GlobalValue<'ctx>]) {
    emit_entries(ir, vtables, flags::INDIRECT_VTABLE, |v| ir.global_size(v));
}

/// Host module: one offload entry per function. Weak, like clang's own entries, so an
/// inline function that several translation units define and register gets one entry.
pub fn emit_host_entries<'ctx>(ir: &Ir<'_, 'ctx>, functions: &[FunctionValue<'ctx>]) {
    let functions: Vec<GlobalValue> = functions.iter().map(|f| f.as_global_value()).collect();
    emit_entries(ir, &functions, flags::INDIRECT, |_| holder::SIZE);
}

/// One weak host entry `{&global, "<holder>", size(global), flags}` per global, unless
/// the module has it already (the pipeline may run twice on one module).
fn emit_entries<'ctx>(
    ir: &Ir<'_, 'ctx>,
    globals: &[GlobalValue<'ctx>],
    flags: u32,
    size: impl Fn(GlobalValue<'ctx>) -> u64,
) {
    let mut emitted = Vec::new();
    for (&g, holder) in globals.iter().zip(holder_names(ir, globals)) {
        let entry = format!(".omp_offloading.entry.{holder}");
        if ir.global(&entry).is_some() {
            continue;
        }
        let name = ir.add_c_string(&format!(".omp_offloading.entry_name.{holder}"), &holder);
        let fields = entry_fields(g, name, size(g), flags);
        emitted.push(ir.add_offload_entry(&entry, &fields));
    }
    ir.append_to_used("llvm.compiler.used", &emitted);
}

/// The value of each field of the entry `{&global, "<holder>", size, flags}`, in the
/// order and with the types of offload-formats' `TgtOffloadEntry`.
fn entry_fields<V>(
    global: V,
    name: V,
    size: u64,
    flags: u32,
) -> Vec<(FieldKind, EntryFieldValue<V>)> {
    let mut global = Some(global);
    let mut name = Some(name);
    TGT_OFFLOAD_ENTRY_FIELDS
        .iter()
        .map(|field| {
            let value = match field.name {
                "addr" => global.take().map(EntryFieldValue::Pointer),
                "name" => name.take().map(EntryFieldValue::Pointer),
                "size" => Some(EntryFieldValue::Int(size)),
                "flags" => Some(EntryFieldValue::Int(flags.into())),
                _ => None,
            };
            // `reserved` (and any field a later layout adds) is zero.
            (field.kind, value.unwrap_or(EntryFieldValue::Int(0)))
        })
        .collect()
}

/// Device module: one holder per function or vtable group, kept through every
/// optimization and the device link (`llvm.used`).
pub fn emit_device_holders<'ctx>(ir: &Ir<'_, 'ctx>, globals: &[GlobalValue<'ctx>]) {
    let address_space = ir.globals_address_space();
    let mut emitted = Vec::new();
    for (f, holder) in globals.iter().zip(holder_names(ir, globals)) {
        if ir.global(&holder).is_some() {
            continue;
        }
        emitted.push(ir.add_pointer_global(&holder, *f, address_space));
    }
    ir.append_to_used("llvm.used", &emitted);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_address_name_size_flags_and_zero() {
        assert_eq!(
            entry_fields("&f", "holder", 8, flags::INDIRECT),
            [
                (FieldKind::Pointer, EntryFieldValue::Pointer("&f")),
                (FieldKind::Pointer, EntryFieldValue::Pointer("holder")),
                (FieldKind::I64, EntryFieldValue::Int(8)),
                (FieldKind::I32, EntryFieldValue::Int(0x08)),
                (FieldKind::I32, EntryFieldValue::Int(0)),
            ]
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
