//! Device code: every indirect call goes through `__kmpc_target_translate_fptr`, which
//! maps the host address of an indirect function to its device address and returns any
//! other pointer unchanged (the seed design's "Run-time dispatch in device code").
use crate::ir::{Ir, Value};
use llvm_plugin::inkwell::values::FunctionValue;
use llvm_plugin::inkwell::AddressSpace;

/// The device runtime's lookup.
pub const LOOKUP: &str = device_rtl::symbols::LOOKUP;

/// Rewrite every call and invoke whose callee is only known at run time; returns how
/// many. Direct calls (functions, aliases, any constant), inline asm (and so intrinsics,
/// which are functions) stay as they are, and so do calls already made through the
/// lookup, so running twice changes nothing. So do virtual calls through a translated
/// vptr (vptr.rs): the device vtable already holds device functions.
pub fn translate_indirect_calls(ir: &Ir) -> usize {
    let mut sites = Vec::new();
    let lookup_existing = ir.function(LOOKUP);
    for f in ir.functions() {
        if ir.is_declaration(f.as_global_value()) || Some(f) == lookup_existing {
            continue;
        }
        for call in ir.call_sites(f) {
            let Some(callee) = ir.callee(call) else {
                continue;
            };
            if ir.is_constant(callee) || ir.is_inline_asm(callee) {
                continue;
            }
            if lookup_existing.is_some_and(|l| {
                ir.is_call_to(callee, l) || read_from_translated_vtable(ir, callee, l)
            }) {
                continue;
            }
            // Function pointers live in address space 0 on every target we build for.
            if ir.pointer_address_space(callee) != Some(AddressSpace::default()) {
                continue;
            }
            sites.push(call);
        }
    }
    if sites.is_empty() {
        return 0;
    }
    let (lookup, lookup_type) = ir.get_or_declare_ptr_to_ptr(LOOKUP);
    for &call in &sites {
        ir.translate_callee(call, lookup, lookup_type);
    }
    sites.len()
}

/// True when `callee` is a slot loaded from a vtable whose vptr went through the lookup.
fn read_from_translated_vtable<'ctx>(
    ir: &Ir<'_, 'ctx>,
    callee: Value<'ctx>,
    lookup: FunctionValue<'ctx>,
) -> bool {
    ir.as_load(callee)
        .and_then(|slot| ir.load_address(slot))
        .is_some_and(|address| ir.is_call_to(ir.underlying_object(address), lookup))
}
