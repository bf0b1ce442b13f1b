//! clang 16/17/18 compiler plugin for OpenMP 5.1 `declare target indirect` (issue 17) and
//! C++ virtual functions on the device (issue 23). One build per LLVM version (the
//! crate's feature `llvm16`, `llvm17` or `llvm18`, [`host_llvm`]).
//!
//! One shared library, loaded by clang-N twice (the install's config files pass both):
//! - `-fplugin=`: the AST half (glue/ast_plugin.cpp, C++ because clang's plugin API is)
//!   annotates every indirect function before code generation, has clang emit the
//!   vtable groups of device classes in both compiles, and names them for the IR half
//!   ([`annotations`]); it also rejects, at the construct, what device code cannot run
//!   (`dynamic_cast` through the C++ runtime; `typeid` on GPUs);
//! - `-fpass-plugin=`: the IR half (this crate) turns those annotations into
//!   - host modules: one offload entry per indirect function and per device class's
//!     vtable group ([`registration`]), in the convention our libomptarget plugin reads on
//!     every backend (LLVM 22's for vtables), except for the functions clang 18
//!     registered itself ([`clang_entries`]);
//!   - device modules: the global each entry names ([`registration`]), a lookup of every vptr
//!     device code loads ([`vptr`]), and a call to `__kmpc_target_translate_fptr` before
//!     every other indirect call ([`translate`]).
//!
//! Where the passes run (LLVM's new pass manager, clang's default pipelines; the same
//! extension points in LLVM 16, 17 and 18):
//! entries, holders and vptr lookups at the pipeline start (it runs at -O0 too), right
//! after clang's code generation, where every vptr load still looks as clang emitted
//! it; the fold of lookups of proven vtables after each instruction combiner run; the
//! call rewrite at the optimizer's last extension point, so a call that optimization
//! made direct is left alone. At -O0 clang builds a minimal pipeline that runs the
//! pipeline-start and optimizer-last extension points (tests/tests/compiler_plugin.rs
//! checks both rewrites at -O0 and -O2).
pub mod annotations;
pub mod clang_entries;
pub mod host_llvm;
pub mod inline_lookup;
pub mod ir;
pub mod registration;
pub mod translate;
pub mod vptr;

use llvm_plugin::inkwell::module::Module;
use llvm_plugin::inkwell::values::FunctionValue;
use llvm_plugin::{
    FunctionAnalysisManager, LlvmFunctionPass, LlvmModulePass, ModuleAnalysisManager, PassBuilder,
    PassPluginLibraryInfo, PreservedAnalyses,
};

/// clang marks device modules (`-fopenmp-is-device`) with this module flag.
const DEVICE_FLAG: &str = "openmp-device";
/// and every OpenMP module with this one.
const OPENMP_FLAG: &str = "openmp";

/// Entries (host) or holders (device) for the unit's indirect functions and vtable
/// groups; on the device, the vptr translations ([`vptr`]).
struct EmitIndirectEntries;

impl LlvmModulePass for EmitIndirectEntries {
    fn run_pass(&self, module: &mut Module, _: &ModuleAnalysisManager) -> PreservedAnalyses {
        let ir = ir::Ir::new(module);
        let requests = annotations::take_requests(&ir);
        let mut changed = !requests.is_empty();
        let device = ir.has_module_flag(DEVICE_FLAG);
        // clang 18 registers indirect functions itself: those get nothing of ours.
        let unregistered =
            clang_entries::not_registered_by_clang(&ir, &requests.indirect_functions, device);
        if device {
            let mut holders: Vec<_> = unregistered.iter().map(|f| f.as_global_value()).collect();
            holders.extend(registration::all_defined_vtables(&ir));
            registration::emit_device_holders(&ir, &holders);
            if ir.has_module_flag(OPENMP_FLAG) {
                let translated = vptr::translate_vptr_loads(&ir);
                debug_line(&ir, &format!("{translated} vptr load(s) translated"));
                changed |= translated > 0 || !holders.is_empty();
            }
        } else {
            registration::emit_host_entries(&ir, &unregistered);
            let vtables = registration::defined_vtables(&ir, &requests.vtables);
            registration::emit_host_vtable_entries(&ir, &vtables);
        }
        if changed {
            PreservedAnalyses::None
        } else {
            PreservedAnalyses::All
        }
    }
}

/// After each instruction combiner run on a device function: the lookups of vtables the
/// optimizer has proven go away ([`vptr::fold_constant_lookups`]).
struct FoldConstantLookups;

impl LlvmFunctionPass for FoldConstantLookups {
    fn run_pass(
        &self,
        function: &mut FunctionValue,
        _: &FunctionAnalysisManager,
    ) -> PreservedAnalyses {
        let ir = ir::Ir::of_function(*function);
        if !ir.has_module_flag(DEVICE_FLAG) {
            return PreservedAnalyses::All;
        }
        match vptr::fold_constant_lookups(&ir, *function) {
            0 => PreservedAnalyses::All,
            _ => PreservedAnalyses::None,
        }
    }
}

/// OMPTARGET_INDIRECT_DEBUG=1: one line per device module and step, to see what was done.
fn debug_line(ir: &ir::Ir, what: &str) {
    if std::env::var_os("OMPTARGET_INDIRECT_DEBUG").is_some() {
        eprintln!(
            "omptarget-indirect: {} ({}): {what}",
            ir.source_file_name(),
            ir.triple()
        );
    }
}

/// The lookup before every indirect call of a device module; then, for the host device,
/// every lookup written out inline ([`inline_lookup`]).
struct TranslateIndirectCalls;

impl LlvmModulePass for TranslateIndirectCalls {
    fn run_pass(&self, module: &mut Module, _: &ModuleAnalysisManager) -> PreservedAnalyses {
        let ir = ir::Ir::new(module);
        if !ir.has_module_flag(DEVICE_FLAG) || !ir.has_module_flag(OPENMP_FLAG) {
            return PreservedAnalyses::All;
        }
        let translated = translate::translate_indirect_calls(&ir);
        debug_line(&ir, &format!("{translated} indirect call(s) translated"));
        let inlined = if inline_lookup::wanted(&ir) {
            let n = inline_lookup::inline_lookups(&ir);
            debug_line(&ir, &format!("{n} lookup(s) written out inline"));
            n
        } else {
            0
        };
        match translated + inlined {
            0 => PreservedAnalyses::All,
            _ => PreservedAnalyses::None,
        }
    }
}

fn register(builder: &mut PassBuilder) {
    builder.add_pipeline_start_ep_callback(|manager, _| {
        manager.add_pass(EmitIndirectEntries);
    });
    builder.add_peephole_ep_callback(|manager, _| {
        manager.add_pass(FoldConstantLookups);
    });
    builder.add_optimizer_last_ep_callback(|manager, _| {
        manager.add_pass(TranslateIndirectCalls);
    });
}

extern "C" fn register_raw(builder: *mut std::ffi::c_void) {
    // SAFETY: LLVM calls the registrar with its live PassBuilder (of the LLVM this
    // library is built for, checked in llvmGetPassPluginInfo before this can be reached).
    let mut builder = unsafe { PassBuilder::from_raw(builder) };
    register(&mut builder);
}

/// LLVM's pass-plugin entry point. In a compiler that does not run the LLVM this library
/// is built for ([`host_llvm::BUILT_FOR_MAJOR`]) it reports
/// API version 0, which the compiler refuses with "Wrong API version" after our message,
/// instead of calling into a pass builder of another version.
#[no_mangle]
pub extern "C" fn llvmGetPassPluginInfo() -> PassPluginLibraryInfo {
    let api_version = match host_llvm::check(host_llvm::process_llvm_version()) {
        Ok(()) => llvm_plugin::get_llvm_plugin_api_version__(),
        Err(message) => {
            eprintln!("error: {message}");
            0
        }
    };
    PassPluginLibraryInfo {
        api_version,
        plugin_name: c"omptarget-indirect".as_ptr().cast(),
        plugin_version: concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr(),
        plugin_registrar: register_raw,
    }
}

/// For the AST glue's load-time check: null when the process runs the LLVM this library
/// is built for, else the message (leaked: the glue prints it and ends the process).
#[no_mangle]
pub extern "C" fn omp_indirect_host_llvm_error() -> *const std::ffi::c_char {
    match host_llvm::check(host_llvm::process_llvm_version()) {
        Ok(()) => std::ptr::null(),
        Err(message) => std::ffi::CString::new(message)
            .map(|m| m.into_raw().cast_const())
            .unwrap_or(
                c"the omptarget-indirect compiler plugin needs the clang it was built for".as_ptr(),
            ),
    }
}
