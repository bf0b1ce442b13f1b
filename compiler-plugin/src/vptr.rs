//! Device code: every vptr that device code loads goes through
//! `__kmpc_target_translate_fptr` before any slot of its vtable is read. An object built
//! on the host holds a host vptr (an address inside a host vtable group); the host
//! plugin maps every word of each registered group to the same word of the device's
//! group ([`crate::registration`]), so the translated vptr points into the device vtable. A vptr the
//! table does not know (an object built on the device) comes back unchanged.
//!
//! Which loads are vptr loads, at the pipeline start (clang's code as it emitted it):
//! - where clang emits TBAA (-O1 and up without -fno-strict-aliasing), exactly the loads
//!   tagged "vtable pointer" (clang's GetVTablePtr tags every one);
//! - in functions without TBAA (-O0), every pointer load whose result is read through,
//!   directly or at a constant offset, as a pointer or an integer: vtable slots, virtual
//!   base offsets, offset-to-top and RTTI are all read that way. This also translates
//!   some ordinary pointer loads, which is only slower: the lookup is the identity on
//!   anything not in the table. Missing a vptr load is what must not happen.
//!
//! Translating before optimization keeps the optimizer's view whole: the lookup is
//! declared `memory(read) nounwind willreturn`, so repeated translations merge and
//! leave loops, and [`fold_constant_lookups`] removes the lookup of a vtable the
//! optimizer has proven (an object whose constructor it inlined), so the call it
//! devirtualizes stays direct.
use crate::ir::{Ir, Value};
use crate::translate::LOOKUP;
use llvm_plugin::inkwell::values::{FunctionValue, InstructionValue};
use llvm_plugin::inkwell::AddressSpace;

/// clang's TBAA type name for vptr accesses.
const VTABLE_POINTER_TBAA: &str = "vtable pointer";

/// Translate every vptr load of every function this module defines; returns how many.
pub fn translate_vptr_loads(ir: &Ir) -> usize {
    let mut sites = Vec::new();
    let lookup_existing = ir.function(LOOKUP);
    for f in ir.functions() {
        if ir.is_declaration(f.as_global_value()) || Some(f) == lookup_existing {
            continue;
        }
        let loads: Vec<(InstructionValue, Option<String>)> = ir
            .loads(f)
            .into_iter()
            .map(|l| (l, ir.tbaa_access_type(l)))
            .collect();
        let tbaa = loads.iter().any(|(_, access)| access.is_some());
        sites.extend(loads.into_iter().filter_map(|(l, access)| {
            let vptr = if tbaa {
                access.as_deref() == Some(VTABLE_POINTER_TBAA)
            } else {
                read_through(ir, l)
            };
            (vptr
                && ir.pointer_address_space(Value::of(l)) == Some(AddressSpace::default())
                && !already_translated(ir, Value::of(l), lookup_existing))
            .then_some(l)
        }));
    }
    if sites.is_empty() {
        return 0;
    }
    let (lookup, lookup_type) = ir.get_or_declare_ptr_to_ptr(LOOKUP);
    if lookup_existing.is_none() {
        ir.mark_read_only(lookup);
    }
    for &load in &sites {
        ir.translate_after(load, lookup, lookup_type);
    }
    sites.len()
}

/// True when the load's only users already pass it to the lookup (a second run).
fn already_translated<'ctx>(
    ir: &Ir<'_, 'ctx>,
    load: Value<'ctx>,
    lookup: Option<FunctionValue<'ctx>>,
) -> bool {
    let Some(lookup) = lookup else {
        return false;
    };
    let users = ir.users(load);
    !users.is_empty() && users.iter().all(|&u| ir.is_call_to(u, lookup))
}

/// The untagged (-O0) rule: a pointer loaded from memory other than a local variable,
/// then read through as a pointer or integer, directly or at a constant offset.
fn read_through<'ctx>(ir: &Ir<'_, 'ctx>, load: InstructionValue<'ctx>) -> bool {
    if ir
        .load_address(load)
        .is_some_and(|address| ir.is_alloca(address))
    {
        return false;
    }
    let reads = |address: Value<'ctx>| {
        ir.users(address).into_iter().any(|u| {
            ir.as_load(u).is_some_and(|l| {
                ir.load_address(l) == Some(address) && ir.is_pointer_or_integer(Value::of(l))
            })
        })
    };
    let load = Value::of(load);
    reads(load)
        || ir
            .users(load)
            .into_iter()
            .any(|u| ir.constant_offset_base(u) == Some(load) && reads(u))
}

/// Replace each lookup of a constant the device module itself defines (a global's
/// address, possibly offset, or null) with that constant: a device address is never a
/// host address in the table. Returns how many.
pub fn fold_constant_lookups<'ctx>(ir: &Ir<'_, 'ctx>, function: FunctionValue<'ctx>) -> usize {
    let Some(lookup) = ir.function(LOOKUP) else {
        return 0;
    };
    let mut folded = 0;
    for call in ir.call_sites(function) {
        if !ir.is_call_to(Value::of(call), lookup) {
            continue;
        }
        let Some(argument) = ir.first_argument(call) else {
            continue;
        };
        if ir.is_constant(argument)
            && ir.is_global_or_null(ir.underlying_object(argument))
            && ir.replace_and_erase(call, argument)
        {
            folded += 1;
        }
    }
    folded
}
