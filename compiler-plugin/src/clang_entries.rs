//! clang 18 registers `declare target indirect` functions itself (docs/LLVM_VERSIONS.md
//! §3.2); clang 16 and 17 emit nothing for `indirect`. For each indirect function it
//! defines, clang 18's host module gets the offload entry
//! `{&f, "__omp_offloading_<devid>_<fileid>_<f>_l<line>", 8, 0x08, 0}` and each device
//! module a protected constant of that name holding the device `f`: the convention our
//! holders follow ([`crate::registration`]), under clang's own name, which the host plugin
//! reads the same way. A function clang registered gets no entry or holder of ours: two
//! entries for one host address would be two table rows for one key.
//!
//! clang 18 registers only the functions marked with a bare `indirect`: it reads the
//! clause's flag, which `indirect(1)` and `indirect(expr)` leave unset (the AST half
//! evaluates the expression), so those still get ours. Seen on Debian 13's clang 18
//! (`cargo xtask debian13-programs --llvm 18`): indirect_standard.c's 7 functions get 7
//! entries, 5 of them clang's.
//!
//! Found in the module itself (not from the compiler's version), so the rule holds for
//! whatever a clang emits: an entry with the indirect flag whose address is the function
//! (host), a global clang named for offloading whose value is the function (device).
use crate::ir::{Ir, Value};
use llvm_plugin::inkwell::values::{FunctionValue, GlobalValue};
use offload_formats::entries::{flags, SECTION_LEGACY, TGT_OFFLOAD_ENTRY_FIELDS};

/// The prefix of every name clang gives its offloading globals (entries, kernels, the
/// holders of indirect functions).
const CLANG_OFFLOADING_PREFIX: &str = "__omp_offloading_";

/// The functions among `functions` that clang did not register itself in this module
/// (host: no entry of clang's; device: no holder of clang's), in order.
pub fn not_registered_by_clang<'ctx>(
    ir: &Ir<'_, 'ctx>,
    functions: &[FunctionValue<'ctx>],
    device: bool,
) -> Vec<FunctionValue<'ctx>> {
    let registered: Vec<Value<'ctx>> = if device {
        clang_holder_targets(ir)
    } else {
        clang_indirect_entry_targets(ir)
    };
    functions
        .iter()
        .copied()
        .filter(|&f| !registered.contains(&Value::of(f)))
        .collect()
}

/// Host module: the address of every offload entry with the indirect flag.
fn clang_indirect_entry_targets<'ctx>(ir: &Ir<'_, 'ctx>) -> Vec<Value<'ctx>> {
    let field = |name: &str| {
        TGT_OFFLOAD_ENTRY_FIELDS
            .iter()
            .position(|f| f.name == name)
            .expect("the entry layout has this field") as u32
    };
    let (addr, flags_field) = (field("addr"), field("flags"));
    ir.globals()
        .into_iter()
        .filter(|&g| ir.section(g).as_deref() == Some(SECTION_LEGACY))
        .filter_map(|g| {
            let entry = ir.initializer(g)?;
            let entry_flags = ir.constant_int(ir.operand(entry, flags_field)?)?;
            if !u32::try_from(entry_flags).is_ok_and(|f| f & flags::INDIRECT != 0) {
                return None;
            }
            Some(ir.strip_casts(ir.operand(entry, addr)?))
        })
        .collect()
}

/// Device module: the value of every global clang named for offloading (our own
/// holders have another prefix and are not among them).
fn clang_holder_targets<'ctx>(ir: &Ir<'_, 'ctx>) -> Vec<Value<'ctx>> {
    ir.globals()
        .into_iter()
        .filter(|&g| is_clang_offloading_global(ir, g))
        .filter_map(|g| Some(ir.strip_casts(ir.initializer(g)?)))
        .collect()
}

fn is_clang_offloading_global<'ctx>(ir: &Ir<'_, 'ctx>, global: GlobalValue<'ctx>) -> bool {
    let name = ir.name(global);
    name.starts_with(CLANG_OFFLOADING_PREFIX)
        && !name.starts_with(offload_formats::entries::holder::PREFIX)
}
