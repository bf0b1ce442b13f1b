//! The AST half (glue/ast_plugin.cpp) marks each `declare target indirect` function with
//! `annotate("omp_declare_target_indirect")`; clang lists the definitions it emits in
//! `llvm.global.annotations` as `{ptr fn, ptr text, ptr file, i32 line, ptr args}`.
use crate::ir::{Ir, Value};

/// The annotation text; the glue's `IndirectAnnotation` is the same string.
pub const INDIRECT_ANNOTATION: &str = "omp_declare_target_indirect";

const ANNOTATIONS: &str = "llvm.global.annotations";

/// The functions this module defines that are annotated indirect, in annotation order,
/// each once. Their annotations are removed, so a second run of the pipeline on the
/// same module (clang's host backend job re-reads the host bitcode) adds nothing twice.
pub fn take_indirect_functions(ir: &Ir) -> Vec<Value> {
    let Some(global) = ir.global(ANNOTATIONS) else {
        return Vec::new();
    };
    let Some(array) = ir.initializer(global) else {
        return Vec::new();
    };
    let mut indirect = Vec::new();
    let mut kept = Vec::new();
    let mut changed = false;
    for i in 0..ir.num_operands(array) {
        let entry = ir.operand(array, i);
        let is_ours = ir.num_operands(entry) >= 2
            && ir.c_string_of_global(ir.operand(entry, 1)).as_deref() == Some(INDIRECT_ANNOTATION);
        if !is_ours {
            kept.push(entry);
            continue;
        }
        changed = true;
        let target = ir.strip_casts(ir.operand(entry, 0));
        if let Some(f) = ir.as_function(target) {
            if !ir.is_declaration(f) && !indirect.contains(&f) {
                indirect.push(f);
            }
        }
    }
    if changed {
        let element_type = ir.array_element_type(array);
        ir.replace_array_global(global, element_type, &kept);
    }
    indirect
}
