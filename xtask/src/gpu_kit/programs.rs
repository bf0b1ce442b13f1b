//! The kit's clang-16 OpenMP programs, built here for the GPU with the device RTL linked
//! into their images (the demo's build path, [`NvptxBuild`]). run.sh runs each twice
//! under libomptarget 16: with our cuda plugin and with LLVM 16's own.
//!
//! Each prints what it checked and ends with `<name>: PASSED` or `FAILED`, exiting
//! non-zero on any wrong result (tests/gpu_programs/kit_program.h); tests/tests/
//! kit_programs.rs runs the same sources on the host device here.

use super::{relative, Kit, SM};
use crate::nvptx_program::{check_image, NvptxBuild};
use crate::util;
use anyhow::Result;
use serde_json::json;

/// A program of the kit.
struct Program {
    name: &'static str,
    /// Below the workspace root.
    source: &'static str,
    /// Device symbols its image must define besides the device RTL's.
    device_symbols: &'static [&'static str],
    /// What it checks, for the summary.
    checks: &'static str,
}

const PROGRAMS: &[Program] = &[
    Program {
        name: "indirect_calls",
        source: "examples/indirect_calls.c",
        device_symbols: &[
            "__omp_indirect_fn_add_one",
            "__omp_indirect_fn_twice",
            "__omp_indirect_fn_square",
        ],
        checks: "the README's example: three indirect functions, an unregistered and a \
                 null pointer",
    },
    Program {
        name: "virtual_calls",
        source: "tests/gpu_programs/virtual_calls.cpp",
        device_symbols: &[
            "__omp_indirect_vtable_Shape",
            "__omp_indirect_vtable_Scaled",
            "__omp_indirect_vtable_Shifted",
        ],
        checks: "C++ virtual functions through indirect-vtable entries (flag 0x20)",
    },
    Program {
        name: "function_ptr_map",
        source: "tests/gpu_programs/function_ptr_map.c",
        device_symbols: &[],
        checks: "a table handed over through __tgt_rtl_set_function_ptr_map, then \
                 replaced",
    },
    Program {
        name: "stress",
        source: "tests/gpu_programs/stress.c",
        device_symbols: &["__omp_indirect_fn_f10", "__omp_indirect_fn_f87"],
        checks: "1024 teams x 256 threads, 64 functions chosen pseudo-randomly, stray \
                 pointers, 3 rounds",
    },
];

pub fn add(kit: &mut Kit, nvptx: &NvptxBuild) -> Result<()> {
    util::section(&format!("gpu-bundle: clang-16 programs for {SM}"));
    let mut programs = Vec::new();
    for p in PROGRAMS {
        let exe = kit.path(&format!("programs/{}", p.name))?;
        nvptx.compile(&util::root().join(p.source), &exe)?;
        check_image(&exe, SM, p.device_symbols)?;
        programs.push(json!({
            "name": p.name,
            "exe": relative(kit, &exe)?,
            "source": p.source,
            "checks": p.checks,
        }));
    }
    kit.set("programs", json!(programs));
    Ok(())
}
