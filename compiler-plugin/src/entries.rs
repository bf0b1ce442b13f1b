//! What the host module and the device module get for each indirect function this
//! translation unit defines, in the convention the host plugin reads on every backend
//! (README, "Indirect entries the plugin understands"): a host offload entry
//! `{&fn, "<holder>", size 8, flags 0x08}` and, in each device module, the holder: a
//! global named `<holder>` holding the device function's address. clang 16 gives device
//! functions hidden visibility, so the loaders find the holder (exported), not the
//! function.
use crate::ir::{Ir, Value};
use crate::naming;

/// OMP_DECLARE_TARGET_FPTR in the design (OMP_DECLARE_TARGET_INDIRECT in clang 18+).
pub const INDIRECT_FLAG: u32 = 0x08;
/// A holder is one pointer.
pub const HOLDER_SIZE: u64 = 8;

/// The holder name for each function, in order.
pub fn holder_names(ir: &Ir, functions: &[Value]) -> Vec<String> {
    let unit = naming::unit_id(&ir.source_file_name());
    functions
        .iter()
        .map(|&f| {
            let local = ir.has_local_linkage(f);
            naming::holder_name(&ir.name(f), local.then_some(unit.as_str()))
        })
        .collect()
}

/// Host module: one offload entry per function. Weak, like clang's own entries, so an
/// inline function that several translation units define and register gets one entry.
pub fn emit_host_entries(ir: &Ir, functions: &[Value]) {
    let mut emitted = Vec::new();
    for (f, holder) in functions.iter().zip(holder_names(ir, functions)) {
        if ir
            .global(&format!(".omp_offloading.entry.{holder}"))
            .is_some()
        {
            continue;
        }
        let name = ir.add_c_string(&format!(".omp_offloading.entry_name.{holder}"), &holder);
        emitted.push(ir.add_offload_entry(
            &format!(".omp_offloading.entry.{holder}"),
            *f,
            name,
            HOLDER_SIZE,
            INDIRECT_FLAG,
        ));
    }
    ir.append_to_used("llvm.compiler.used", &emitted);
}

/// Device module: one holder per function, kept through every optimization and the
/// device link (`llvm.used`).
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
