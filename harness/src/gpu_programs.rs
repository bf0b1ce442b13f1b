//! The clang-16 OpenMP programs for one NVIDIA GPU architecture that the GPU kit runs,
//! built once, with their image checks, into target/gpu-programs/<sm>/ beside a
//! `manifest.json` (`cargo xtask gpu-programs [--sm sm_90]`; `cargo xtask test` builds
//! them before `cargo test`, the kit copies them):
//!
//! - four built with the device RTL linked into their images ([`NvptxBuild`], the
//!   demo's build path), using the project's `omp_indirect.h` macros:
//!   `indirect_calls`, `virtual_calls`, `function_ptr_map`, `stress`; each prints
//!   `<name>: PASSED` or `FAILED` (tests/gpu_programs/kit_program.h);
//! - four standard-source programs built through the installed nvptx64 config file
//!   ([`indirect_programs::build_gpu_programs`]): `virtual_calls-O0`,
//!   `virtual_calls-O2`, `indirect_standard`, `test_target_declare_indirect`, each with
//!   the line a passing run prints.
//!
//! - two benchmarks built through the same config ([`BENCHMARKS`]): `runtime` (launch
//!   latency and copy throughput, run under both cuda plugins) and `virtual_calls_bench`
//!   (ns per virtual call, translated, device-built and direct; ours only);
//! - the load_binary benchmark's generated cubin (`bench::load_binary::generate_cubin`).
//!
//! The manifest: `{"format": 1, "sm": "sm_90", "programs": [{"name", "file" (below the
//! folder), "source", "checks", "kind": "macro"|"standard", "expect",
//! "expect_fallback"}], "benchmarks": [{"name", "file", "source", "measures", "args",
//! "fallback_args", "plugins", "unit"}]}` (`expect*` only for the standard programs).
//! tests/tests/cuda_standin_load.rs runs every program and every benchmark (with its
//! `args`) through the CUDA driver stand-in, one test each, and fails when the manifest
//! names a program or benchmark that none of its tests runs.

use crate::nvptx_program::{check_image, NvptxBuild};
use crate::{indirect_programs, util};
use anyhow::{Context, Result};
use offload_formats::entries::holder;
use serde_json::json;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(clap::Args)]
pub struct Args {
    /// The NVIDIA GPU architecture (clang 16 targets at most sm_90).
    #[arg(long, default_value = "sm_90")]
    pub sm: String,
}

/// One program built for the kit.
#[derive(Clone)]
pub struct Program {
    pub name: String,
    /// The executable, in [`dir`].
    pub path: PathBuf,
    /// Its source, below the workspace root (or how it was built).
    pub source: String,
    /// What it checks, for the kit's summary.
    pub checks: String,
    /// For the standard programs: the line a passing run prints on a GPU and on
    /// libomptarget's host fallback.
    pub expect: Option<(&'static str, &'static str)>,
}

/// A program built with the device RTL linked in ([`NvptxBuild`]).
pub struct MacroProgram {
    pub name: &'static str,
    /// Below the workspace root.
    pub source: &'static str,
    /// Its `OMP_DECLARE_INDIRECT` functions, whose holders its image must define.
    indirect_functions: &'static [&'static str],
    /// Other device symbols its image must define besides the device RTL's.
    device_symbols: &'static [&'static str],
    /// What it checks, for the summary.
    pub checks: &'static str,
}

pub const MACRO_PROGRAMS: &[MacroProgram] = &[
    MacroProgram {
        name: "indirect_calls",
        source: "examples/indirect_calls.c",
        indirect_functions: &["add_one", "twice", "square"],
        device_symbols: &[],
        checks: "examples/indirect_calls.c: three indirect functions, an unregistered and a \
                 null pointer",
    },
    MacroProgram {
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
    MacroProgram {
        name: "function_ptr_map",
        source: "tests/gpu_programs/function_ptr_map.c",
        indirect_functions: &[],
        device_symbols: &[],
        checks: "a table handed over through __tgt_rtl_set_function_ptr_map, then \
                 replaced",
    },
    MacroProgram {
        name: "stress",
        source: "tests/gpu_programs/stress.c",
        indirect_functions: &["f10", "f87"],
        device_symbols: &[],
        checks: "1024 teams x 256 threads, 64 functions chosen pseudo-randomly, stray \
                 pointers, 3 rounds",
    },
];

/// A benchmark program for the kit, built through the installed nvptx64 config at -O2.
pub struct Benchmark {
    /// Also the line it ends with on success: `<name>: PASSED`.
    pub name: &'static str,
    /// Below the workspace root.
    pub source: &'static str,
    /// What it measures, for the summary.
    pub measures: &'static str,
    /// Its arguments on a GPU, and on libomptarget's host fallback (a short run that
    /// proves it works).
    pub args: &'static [&'static str],
    pub fallback_args: &'static [&'static str],
    /// The cuda plugins it runs under: both, or ours alone (a program that LLVM 16's
    /// plugin cannot run: it builds no table).
    pub plugins: &'static [&'static str],
    /// The unit of the numbers its lines print when the lines do not say it.
    pub unit: &'static str,
}

/// The kit's benchmarks; each prints `<measure> <best> <median> [unit]` lines
/// (docs/BENCHMARKS.md section 1g).
pub const BENCHMARKS: &[Benchmark] = &[
    Benchmark {
        name: "runtime",
        source: "tests/fixtures/bench/runtime.c",
        measures: "launch latency (empty, 8 mapped scalars), copy throughput (update \
                   to/from, enter/exit data) at 4 KiB, 1 MiB and 256 MiB, loops of regions \
                   mapping 4 KiB and of enter/exit data of 1 MiB, and the 256 MiB round \
                   trip from pageable and from pinned memory",
        args: &[],
        fallback_args: &["20"],
        plugins: &["ours", "llvm"],
        unit: "",
    },
    Benchmark {
        name: "virtual_calls",
        source: "tests/fixtures/bench/virtual_calls.cpp",
        measures: "ns per virtual call on one GPU thread: host-built objects (vptr \
                   translated by the devicertl archive's lookup), device-built, direct",
        args: &["200000", "5"],
        fallback_args: &["20000", "2"],
        plugins: &["ours"],
        unit: "ns per call",
    },
];

/// target/gpu-programs/<sm>/
pub fn dir(sm: &str) -> PathBuf {
    util::target_dir().join("gpu-programs").join(sm)
}

pub fn main(args: Args) -> Result<()> {
    let programs = build_with_install(&args.sm)?;
    println!(
        "{} programs for {} in {}",
        programs.len(),
        args.sm,
        dir(&args.sm).display()
    );
    Ok(())
}

/// `cargo xtask test`'s step: the programs for `sm`, the standard ones through the
/// install under target/install (which the step before made).
pub fn build_with_install(sm: &str) -> Result<Vec<Program>> {
    let prefix = util::target_dir().join("install");
    let nvptx = NvptxBuild::prepare(sm, &util::target_dir().join("gpu-kit-build/nvptx"))?;
    build(&nvptx, &prefix, sm)
}

/// Build every program for `sm` into [`dir`] (emptied first) and write its manifest;
/// once per process for each `sm` and `prefix` (`cargo xtask test` builds them in a
/// build step and its GPU kit copies them).
pub fn build(nvptx: &NvptxBuild, prefix: &Path, sm: &str) -> Result<Vec<Program>> {
    /// What this process built: (sm, prefix) and its programs.
    type Built = Vec<((String, PathBuf), Vec<Program>)>;
    static BUILT: Mutex<Built> = Mutex::new(Vec::new());
    let key = (sm.to_owned(), prefix.to_path_buf());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, programs)) = built.iter().find(|(k, _)| *k == key) {
        eprintln!("gpu-programs: the {sm} programs were built by this process already");
        return Ok(programs.clone());
    }
    let programs = build_now(nvptx, prefix, sm)?;
    built.push((key, programs.clone()));
    Ok(programs)
}

fn build_now(nvptx: &NvptxBuild, prefix: &Path, sm: &str) -> Result<Vec<Program>> {
    util::section(&format!("gpu-programs: clang-16 programs for {sm}"));
    let out = dir(sm);
    if out.exists() {
        fs::remove_dir_all(&out).with_context(|| format!("clearing {}", out.display()))?;
    }
    fs::create_dir_all(&out)?;
    let mut programs = Vec::new();
    for p in MACRO_PROGRAMS {
        programs.push(build_macro_program(nvptx, p, &out, sm)?);
    }
    util::section(&format!(
        "gpu-programs: standard declare-target-indirect programs for {sm} (installed config)"
    ));
    for built in indirect_programs::build_gpu_programs(prefix, &out, sm)? {
        let name = built
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .context("program without a name")?
            .trim_end_matches(&format!(".{sm}"))
            .to_owned();
        programs.push(Program {
            name,
            path: built.path,
            source: "standard source through share/omptarget-indirect/nvptx64-nvidia-cuda.cfg"
                .into(),
            checks: "standard OpenMP 5.1 declare target indirect (compiler plugin)".into(),
            expect: Some((built.expect, built.expect_fallback)),
        });
    }
    let benchmarks = build_benchmarks(prefix, &out, sm)?;
    write_manifest(&out, sm, &programs, &benchmarks)?;
    // The load_binary benchmark's image (generated, not compiled from C), made here too
    // so that tests/tests/cuda_standin_load_bench.rs loads what the kit carries.
    crate::bench::load_binary::generate_cubin(LOAD_BENCH_ENTRIES, sm)?;
    Ok(programs)
}

/// The entry count of the load_binary benchmark's cubin that the kit carries (ptxas
/// takes 0.5 s for 10,000 holders and 206 s for 100,000: it grows faster than linearly).
pub const LOAD_BENCH_ENTRIES: usize = 10_000;

/// [`BENCHMARKS`] into `out` (`<name>.bench.<sm>`), with their executables.
fn build_benchmarks<'a>(
    prefix: &Path,
    out: &Path,
    sm: &str,
) -> Result<Vec<(&'a Benchmark, PathBuf)>> {
    util::section(&format!(
        "gpu-programs: benchmarks for {sm} (installed config)"
    ));
    let config = install_layout::Prefix::new(prefix).config(install_layout::NVPTX_TRIPLE);
    let mut args = release::cuda::cuda_args(sm)?;
    args.push("-O2".into());
    BENCHMARKS
        .iter()
        .map(|b| {
            let exe = benchmark_path(out, b, sm);
            indirect_programs::compile(&config, &args, &[util::root().join(b.source)], &exe)?;
            Ok((b, exe))
        })
        .collect()
}

/// The benchmarks of target/gpu-programs/<sm>/ (built by [`build`]), with their
/// executables.
pub fn benchmarks(sm: &str) -> Vec<(&'static Benchmark, PathBuf)> {
    BENCHMARKS
        .iter()
        .map(|b| (b, benchmark_path(&dir(sm), b, sm)))
        .collect()
}

/// `<name>.bench.<sm>` in `folder`.
fn benchmark_path(folder: &Path, b: &Benchmark, sm: &str) -> PathBuf {
    folder.join(format!("{}.bench.{sm}", b.name))
}

fn build_macro_program(
    nvptx: &NvptxBuild,
    p: &MacroProgram,
    out: &Path,
    sm: &str,
) -> Result<Program> {
    let exe = out.join(p.name);
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
    check_image(&exe, sm, &symbols)?;
    Ok(Program {
        name: p.name.into(),
        path: exe,
        source: p.source.into(),
        checks: p.checks.into(),
        expect: None,
    })
}

fn write_manifest(
    out: &Path,
    sm: &str,
    programs: &[Program],
    benchmarks: &[(&Benchmark, PathBuf)],
) -> Result<()> {
    let entries: Vec<serde_json::Value> = programs
        .iter()
        .map(|p| {
            let file = p
                .path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let mut entry = json!({
                "name": p.name,
                "file": file,
                "source": p.source,
                "checks": p.checks,
                "kind": if p.expect.is_some() { "standard" } else { "macro" },
            });
            if let Some((expect, fallback)) = p.expect {
                entry["expect"] = json!(expect);
                entry["expect_fallback"] = json!(fallback);
            }
            entry
        })
        .collect();
    let benchmarks: Vec<serde_json::Value> = benchmarks
        .iter()
        .map(|(b, exe)| {
            let mut entry = benchmark_entry(b);
            entry["file"] = json!(exe.file_name().and_then(|n| n.to_str()));
            entry
        })
        .collect();
    let manifest = json!({"format": 1, "sm": sm, "programs": entries, "benchmarks": benchmarks});
    fs::write(
        out.join("manifest.json"),
        serde_json::to_string_pretty(&manifest)? + "\n",
    )?;
    Ok(())
}

/// What the kit's runner needs to know of a benchmark (the executable is added by the
/// caller, as it names it).
pub fn benchmark_entry(b: &Benchmark) -> serde_json::Value {
    json!({
        "name": b.name,
        "source": b.source,
        "measures": b.measures,
        "args": b.args,
        "fallback_args": b.fallback_args,
        "plugins": b.plugins,
        "unit": b.unit,
    })
}
