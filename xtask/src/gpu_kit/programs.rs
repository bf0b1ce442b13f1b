//! The kit's clang-16 OpenMP programs, built here for the GPU with the device RTL linked
//! into their images (the demo's build path, [`NvptxBuild`]). run.sh runs each twice
//! under libomptarget 16: with our cuda plugin and with LLVM 16's own.
//!
//! Each prints what it checked and ends with `<name>: PASSED` or `FAILED`, exiting
//! non-zero on any wrong result (tests/gpu_programs/kit_program.h); tests/tests/
//! kit_programs.rs runs the same sources on the host device here.
//!
//! Beside them, the standard `declare target indirect` programs (no project header: the
//! compiler plugin does the work) built through the installed nvptx64 config file
//! ([`indirect_programs`]): their manifest entries name the line a passing run prints, on
//! the GPU and on libomptarget's host fallback.

use super::{relative, Kit, SM};
use crate::nvptx_program::{check_image, NvptxBuild};
use crate::{indirect_programs, install, util};
use anyhow::{Context, Result};
use offload_formats::entries::holder;
use serde_json::json;

/// A program of the kit.
struct Program {
    name: &'static str,
    /// Below the workspace root.
    source: &'static str,
    /// Its `OMP_DECLARE_INDIRECT` functions, whose holders its image must define.
    indirect_functions: &'static [&'static str],
    /// Other device symbols its image must define besides the device RTL's.
    device_symbols: &'static [&'static str],
    /// What it checks, for the summary.
    checks: &'static str,
}

const PROGRAMS: &[Program] = &[
    Program {
        name: "indirect_calls",
        source: "examples/indirect_calls.c",
        indirect_functions: &["add_one", "twice", "square"],
        device_symbols: &[],
        checks: "the README's example: three indirect functions, an unregistered and a \
                 null pointer",
    },
    Program {
        name: "virtual_calls",
        source: "tests/gpu_programs/virtual_calls.cpp",
        indirect_functions: &[],
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
        indirect_functions: &[],
        device_symbols: &[],
        checks: "a table handed over through __tgt_rtl_set_function_ptr_map, then \
                 replaced",
    },
    Program {
        name: "stress",
        source: "tests/gpu_programs/stress.c",
        indirect_functions: &["f10", "f87"],
        device_symbols: &[],
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
        let holders: Vec<String> = p
            .indirect_functions
            .iter()
            .map(|function| holder::macro_name(function))
            .collect();
        let symbols: Vec<&str> = holders
            .iter()
            .map(String::as_str)
            .chain(p.device_symbols.iter().copied())
            .collect();
        check_image(&exe, SM, &symbols)?;
        programs.push(json!({
            "name": p.name,
            "exe": relative(kit, &exe)?,
            "source": p.source,
            "checks": p.checks,
        }));
    }
    programs.extend(standard_programs(kit)?);
    kit.set("programs", json!(programs));
    Ok(())
}

/// The standard-source programs, built with clang-16 through the config files of an
/// install under target/install (made here).
fn standard_programs(kit: &Kit) -> Result<Vec<serde_json::Value>> {
    util::section(&format!(
        "gpu-bundle: standard declare-target-indirect programs for {SM} (installed config)"
    ));
    let prefix = install::install(&util::target_dir().join("install"))?;
    let out = kit.path("programs")?;
    let mut entries = Vec::new();
    for program in indirect_programs::build_gpu_programs(&prefix, &out, SM)? {
        let name = program
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .context("program without a name")?
            .trim_end_matches(&format!(".{SM}"))
            .to_owned();
        entries.push(json!({
            "name": name,
            "exe": relative(kit, &program.path)?,
            "source": "standard source through share/omptarget-indirect/nvptx64-nvidia-cuda.cfg",
            "checks": "standard OpenMP 5.1 declare target indirect (compiler plugin)",
            "expect": program.expect,
            "expect_fallback": program.expect_fallback,
        }));
    }
    Ok(entries)
}
