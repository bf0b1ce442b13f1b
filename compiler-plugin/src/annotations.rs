//! What the AST half (glue/ast_plugin.cpp) hands the IR passes, inside the module:
//! clang lists every `annotate("...")` of a definition it emits in
//! `llvm.global.annotations` as `{ptr global, ptr text, ptr file, i32 line, ptr args}`.
//! - each `declare target indirect` function carries [`INDIRECT_ANNOTATION`];
//! - the host compile's carrier variable [`VTABLE_CARRIER`] carries one
//!   [`VTABLE_ANNOTATION_PREFIX`]`<vtable symbol>` per device class (a dynamic class
//!   whose virtual functions device code may call), whose vtable group gets an entry.
use crate::ir::{Ir, Value};
use llvm_plugin::inkwell::values::FunctionValue;

/// The annotation text; the glue's `IndirectAnnotation` is the same string.
pub const INDIRECT_ANNOTATION: &str = "omp_declare_target_indirect";
/// Followed by a vtable symbol; the glue's `VtableAnnotationPrefix`.
pub const VTABLE_ANNOTATION_PREFIX: &str = "omp_declare_target_vtable:";
/// The variable that carries the vtable annotations; the glue's `VtableCarrierName`.
pub const VTABLE_CARRIER: &str = "__omp_indirect_vtables";

const ANNOTATIONS: &str = "llvm.global.annotations";

/// What the AST half asked for in this module.
#[derive(Default, Debug)]
pub struct Requests<'ctx> {
    /// The indirect functions this module defines, in annotation order, each once.
    pub indirect_functions: Vec<FunctionValue<'ctx>>,
    /// The symbols of device classes' vtable groups, in annotation order, each once.
    pub vtables: Vec<String>,
}

impl Requests<'_> {
    pub fn is_empty(&self) -> bool {
        self.indirect_functions.is_empty() && self.vtables.is_empty()
    }
}

/// Take our annotations out of the module: they are removed (and the carrier variable
/// deleted), so a second run of the pipeline on the same module (clang's host backend
/// job re-reads the host bitcode) adds nothing twice.
pub fn take_requests<'ctx>(ir: &Ir<'_, 'ctx>) -> Requests<'ctx> {
    let mut requests = Requests::default();
    let Some(global) = ir.global(ANNOTATIONS) else {
        return requests;
    };
    let Some(array) = ir.initializer(global) else {
        return requests;
    };
    let mut kept = Vec::new();
    let mut changed = false;
    let entries: Vec<Value> = (0..ir.num_operands(array))
        .filter_map(|i| ir.operand(array, i))
        .collect();
    for entry in entries {
        let text = (ir.num_operands(entry) >= 2)
            .then(|| ir.c_string_of_global(ir.operand(entry, 1)?))
            .flatten();
        let target = ir.operand(entry, 0).map(|t| ir.strip_casts(t));
        match text.as_deref() {
            Some(INDIRECT_ANNOTATION) => {
                if let Some(f) = target.and_then(Value::function) {
                    let declaration = ir.is_declaration(f.as_global_value());
                    if !declaration && !requests.indirect_functions.contains(&f) {
                        requests.indirect_functions.push(f);
                    }
                }
            }
            Some(t) if t.starts_with(VTABLE_ANNOTATION_PREFIX) => {
                let symbol = t[VTABLE_ANNOTATION_PREFIX.len()..].to_string();
                if !requests.vtables.contains(&symbol) {
                    requests.vtables.push(symbol);
                }
            }
            _ => {
                kept.push(entry);
                continue;
            }
        }
        changed = true;
    }
    if changed {
        ir.replace_array_global(global, &kept);
    }
    if let Some(carrier) = ir.global(VTABLE_CARRIER) {
        ir.remove_from_used("llvm.used", carrier);
        ir.remove_from_used("llvm.compiler.used", carrier);
        ir.delete_global_with_dead_users(carrier);
    }
    requests
}
