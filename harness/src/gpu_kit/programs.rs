//! The kit's clang-16 OpenMP programs: the ones [`gpu_programs`] builds (and checks)
//! into target/gpu-programs/<sm>/, copied into the kit's `programs/`. run.sh runs each
//! twice under libomptarget 16: with our cuda plugin and with LLVM 16's own.
//!
//! The macro programs print what they checked and end with `<name>: PASSED` or
//! `FAILED`, exiting non-zero on any wrong result (tests/gpu_programs/kit_program.h);
//! tests/tests/kit_programs.rs runs the same sources on the host device here. The
//! standard `declare target indirect` programs (no project header: the compiler plugin
//! does the work) are built through the installed nvptx64 config file: their manifest
//! entries name the line a passing run prints, on the GPU and on libomptarget's host
//! fallback.
//!
//! The benchmarks ([`gpu_programs::BENCHMARKS`]) go to `benchmarks/`: the runner's
//! `bench_runtime` step runs them under each plugin they name, alternately.

use super::{relative, Kit, SM};
use crate::nvptx_program::NvptxBuild;
use crate::{gpu_programs, install, util};
use anyhow::{Context, Result};
use serde_json::json;
use std::fs;
use std::path::PathBuf;

/// Adds the programs and benchmarks; returns the install prefix the standard programs
/// were built through ([`super::doctor`] carries part of it).
pub fn add(kit: &mut Kit, nvptx: &NvptxBuild) -> Result<PathBuf> {
    // The standard programs build through the config files of an install under
    // target/install (made here).
    let prefix = install::install(&util::target_dir().join("install"))?;
    let built = gpu_programs::build(nvptx, &prefix, SM)?;
    util::section(&format!(
        "gpu-bundle: the {} programs for {SM}",
        built.len()
    ));
    let mut programs = Vec::new();
    for p in &built {
        let file = p
            .path
            .file_name()
            .context("program without a file name")?
            .to_string_lossy()
            .into_owned();
        let exe = kit.path(&format!("programs/{file}"))?;
        fs::copy(&p.path, &exe).with_context(|| format!("copying {}", p.path.display()))?;
        let mut entry = json!({
            "name": p.name,
            "exe": relative(kit, &exe)?,
            "source": p.source,
            "checks": p.checks,
        });
        if let Some((expect, fallback)) = p.expect {
            entry["expect"] = json!(expect);
            entry["expect_fallback"] = json!(fallback);
        }
        programs.push(entry);
    }
    kit.set("programs", json!(programs));

    let mut benchmarks = Vec::new();
    for (b, built) in gpu_programs::benchmarks(SM) {
        let file = built
            .file_name()
            .context("benchmark without a file name")?
            .to_string_lossy()
            .into_owned();
        let exe = kit.path(&format!("benchmarks/{file}"))?;
        fs::copy(&built, &exe).with_context(|| format!("copying {}", built.display()))?;
        let mut entry = gpu_programs::benchmark_entry(b);
        entry["exe"] = json!(relative(kit, &exe)?);
        benchmarks.push(entry);
    }
    kit.set("benchmarks", json!(benchmarks));
    Ok(prefix)
}
