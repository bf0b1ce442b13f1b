//! What the host module and the device module get for each indirect function this
//! translation unit defines, in the convention the host plugin reads on every backend
//! (README, "Indirect entries the plugin understands"): a host offload entry
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
use crate::ir::{Ir, Value};
use crate::naming;

/// OMP_DECLARE_TARGET_FPTR in the design (OMP_DECLARE_TARGET_INDIRECT in clang 18+).
pub const INDIRECT_FLAG: u32 = 0x08;
/// OMP_DECLARE_TARGET_INDIRECT_VTABLE (LLVM 22).
pub const VTABLE_FLAG: u32 = 0x20;
/// A holder is one pointer.
pub const HOLDER_SIZE: u64 = 8;
/// Itanium C++ ABI vtable symbols (construction vtables, `_ZTC`, are only used while a
/// constructor runs, where the device's own code stores them).
const VTABLE_SYMBOL_PREFIX: &str = "_ZTV";

/// The holder name for each global, in order.
pub fn holder_names(ir: &Ir, globals: &[Value]) -> Vec<String> {
    let unit = naming::unit_id(&ir.source_file_name());
    globals
        .iter()
        .map(|&g| {
            let local = ir.has_local_linkage(g);
            naming::holder_name(&ir.name(g), local.then_some(unit.as_str()))
        })
        .collect()
}

/// The vtable groups among `symbols` that this module defines for the link.
pub fn defined_vtables(ir: &Ir, symbols: &[String]) -> Vec<Value> {
    symbols
        .iter()
        .filter_map(|s| ir.global(s))
        .filter(|&g| ir.defines_for_link(g))
        .collect()
}

/// Every vtable group this (device) module defines: each gets a holder, whether or not
/// the host registers it (an unregistered holder costs one pointer).
pub fn all_defined_vtables(ir: &Ir) -> Vec<Value> {
    ir.globals()
        .into_iter()
        .filter(|&g| ir.name(g).starts_with(VTABLE_SYMBOL_PREFIX) && ir.defines_for_link(g))
        .collect()
}

/// Host module: one entry per vtable group, sized as the whole group. Weak, so the
/// entries several units make for one linkonce_odr vtable become one.
pub fn emit_host_vtable_entries(ir: &Ir, vtables: &[Value]) {
    emit_entries(ir, vtables, VTABLE_FLAG, |v| ir.global_size(v));
}

/// Host module: one offload entry per function. Weak, like clang's own entries, so an
/// inline function that several translation units define and register gets one entry.
pub fn emit_host_entries(ir: &Ir, functions: &[Value]) {
    emit_entries(ir, functions, INDIRECT_FLAG, |_| HOLDER_SIZE);
}

/// One weak host entry `{&global, "<holder>", size(global), flags}` per global, unless
/// the module has it already (the pipeline may run twice on one module).
fn emit_entries(ir: &Ir, globals: &[Value], flags: u32, size: impl Fn(Value) -> u64) {
    let mut emitted = Vec::new();
    for (&g, holder) in globals.iter().zip(holder_names(ir, globals)) {
        let entry = format!(".omp_offloading.entry.{holder}");
        if ir.global(&entry).is_some() {
            continue;
        }
        let name = ir.add_c_string(&format!(".omp_offloading.entry_name.{holder}"), &holder);
        emitted.push(ir.add_offload_entry(&entry, g, name, size(g), flags));
    }
    ir.append_to_used("llvm.compiler.used", &emitted);
}

/// Device module: one holder per function or vtable group, kept through every
/// optimization and the device link (`llvm.used`).
pub fn emit_device_holders(ir: &Ir, functions: &[Value]) {
    let address_space = ir.globals_address_space();
    let mut emitted = Vec::new();
    for (f, holder) in functions.iter().zip(holder_names(ir, functions)) {
        if ir.global(&holder).is_some() {
            continue;
        }
        emitted.push(ir.add_pointer_global(&holder, *f, address_space));
    }
    ir.append_to_used("llvm.used", &emitted);
}
