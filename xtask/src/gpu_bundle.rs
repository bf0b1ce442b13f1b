//! `cargo xtask gpu-bundle`: everything the CUDA tests need on a GPU machine that has the
//! NVIDIA driver but no Rust and no clang, in one folder under 64 MiB
//! (target/gpu-bundle/): the test executables, the fixture cubins, the CUDA plugin, the
//! libffi it links, the GPU lookup benchmark (`bin/gpu_lookup_bench` and its cubins in
//! `bench/`, docs/BENCHMARKS.md 1b), and run.sh, which runs them all and prints a summary.
//!
//! run.sh has five steps: the three test executables, the plugin's device count, then
//! the benchmark (after the tests: a wrong lookup fails it too). A good run on a GPU
//! machine ends `SUMMARY: 5 step(s) passed, 0 failed, 0 test(s) SKIPPED`; without a GPU
//! the plugin step fails (0 devices) and every GPU test and the benchmark print a
//! `SKIPPED:` line. The benchmark's tables are also written to
//! `$GPU_BENCH_RESULTS` (default `results/` next to run.sh) as gpu_lookup.md and .json.
//!
//! Not in the bundle: a clang-16 OpenMP program run under libomptarget 16, because
//! libomptarget.so.16 links libLLVM-16.so.1 (118 MiB) and libz3 (23 MiB).

use crate::bench::gpu_lookup;
use crate::{device, plugin, util};
use anyhow::{bail, ensure, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args, Default)]
pub struct Args {}

/// The GPU machines lend at most this much to a run's carried files.
const SIZE_LIMIT: u64 = 64 * 1024 * 1024;
/// The test executables of the bundle: (cargo test target, what run.sh runs of it).
const TESTS: &[(&str, &[&str])] = &[
    ("cuda_indirect", &["--test-threads=1", "--nocapture"]),
    ("cuda_abi", &["--nocapture"]),
    (
        "cuda_no_driver",
        &[
            "--exact",
            "backend_reports_a_reason_exactly_when_it_has_no_devices",
            "--nocapture",
        ],
    ),
];

pub fn bundle_dir() -> PathBuf {
    util::target_dir().join("gpu-bundle")
}

pub fn main(_args: Args) -> Result<()> {
    let dir = build_bundle()?;
    println!("GPU bundle in {}", dir.display());
    Ok(())
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(util::root());
    c
}

pub fn build_bundle() -> Result<PathBuf> {
    device::build_all()?;
    let plugins = plugin::build_plugins()?;
    util::section("gpu-bundle: fixture cubins (built and checked by cuda_no_driver)");
    // ptxas comes from the nvidia-cuda-nvcc wheel where CUDA is not installed.
    util::ptxas()?;
    util::llvm22("clang")?;
    util::run(cargo().args([
        "test",
        "-p",
        "e2e-tests",
        "--test",
        "cuda_no_driver",
        "--",
        "--exact",
        "fixture_cubins_keep_every_global_and_kernel",
    ]))?;

    util::section("gpu-bundle: test executables");
    let mut build = cargo();
    build.args([
        "test",
        "-p",
        "e2e-tests",
        "--no-run",
        "--message-format=json",
    ]);
    for (name, _) in TESTS {
        build.args(["--test", name]);
    }
    let json = util::output(&mut build)?;

    let dir = bundle_dir();
    let _ = fs::remove_dir_all(&dir);
    for sub in ["bin", "fixtures", "plugins", "lib", "bench"] {
        fs::create_dir_all(dir.join(sub))?;
    }
    let strip = util::llvm22("llvm-strip")?;
    let stripped = |from: &Path, to: &Path| -> Result<()> {
        util::run(Command::new(&strip).arg(from).arg("-o").arg(to))
    };
    for (name, _) in TESTS {
        let exe = util::cargo_executable(&json, name)
            .with_context(|| format!("cargo reported no executable for test `{name}`"))?;
        stripped(&exe, &dir.join("bin").join(name))?;
    }
    let fixtures = util::target_dir().join("cuda-fixtures");
    let mut cubins = 0;
    for entry in fs::read_dir(&fixtures)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "cubin") {
            fs::copy(&path, dir.join("fixtures").join(path.file_name().unwrap()))?;
            cubins += 1;
        }
    }
    ensure!(cubins > 0, "no cubins in {}", fixtures.display());
    util::section("gpu-bundle: GPU lookup benchmark");
    let (driver, bench_cubins) = gpu_lookup::bundle_files()?;
    stripped(&driver, &dir.join("bin/gpu_lookup_bench"))?;
    for cubin in &bench_cubins {
        fs::copy(cubin, dir.join("bench").join(cubin.file_name().unwrap()))?;
    }
    // The plugin finds its kind in its own file name: keep libomptarget's name for it.
    stripped(
        &plugins.join("libomptarget.rtl.cuda.so"),
        &dir.join("plugins/libomptarget.rtl.cuda.so"),
    )?;
    copy_libffi(&dir.join("lib"))?;
    let script = dir.join("run.sh");
    fs::write(&script, run_script())?;
    util::run(Command::new("chmod").arg("+x").arg(&script))?;

    let size = folder_size(&dir)?;
    println!(
        "gpu-bundle: {} bytes ({:.1} MiB) in {}",
        size,
        size as f64 / (1024.0 * 1024.0),
        dir.display()
    );
    if size > SIZE_LIMIT {
        bail!("the bundle is {size} bytes, over the 64 MiB a GPU run can carry");
    }
    Ok(dir)
}

/// The plugin links the system libffi (the host backend calls kernels through it); the
/// GPU machine may not have the same soname.
fn copy_libffi(lib: &Path) -> Result<()> {
    let found = util::output(Command::new("ldconfig").arg("-p"))?
        .lines()
        .filter_map(|l| l.split(" => ").nth(1))
        .map(PathBuf::from)
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libffi.so."))
        })
        .context("libffi is not installed (libffi-dev)")?;
    let real = fs::canonicalize(&found)?;
    fs::copy(&real, lib.join(found.file_name().unwrap()))?;
    Ok(())
}

fn folder_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            folder_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

fn run_script() -> String {
    let mut steps = String::new();
    for (name, args) in TESTS {
        steps.push_str(&format!(
            "step {name} \"$here/bin/{name}\" {}\n",
            args.join(" ")
        ));
    }
    format!(
        r#"#!/usr/bin/env bash
# The CUDA tests of the declare-target-indirect runtime, prebuilt by `cargo xtask
# gpu-bundle`. Needs the NVIDIA driver (libcuda) and python3; no Rust, no clang.
set -u
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
export OMPTARGET_RS_CUDA_FIXTURES="$here/fixtures"
export OMPTARGET_RS_CUDA_PLUGIN="$here/plugins/libomptarget.rtl.cuda.so"
export OMPTARGET_RS_GPU_BENCH_DIR="$here/bench"
results="${{GPU_BENCH_RESULTS:-$here/results}}"
export LD_LIBRARY_PATH="$here/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
passed=0; failed=0; skipped=0; failures=""

step() {{
  local name=$1; shift
  echo "=== $name"
  local out rc
  out=$("$@" 2>&1); rc=$?
  echo "$out"
  skipped=$((skipped + $(grep -o 'SKIPPED: ' <<<"$out" | wc -l)))
  if [ "$rc" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failures="$failures $name"; fi
}}

nvidia-smi -L 2>&1 || echo "nvidia-smi: not available"
{steps}
# The plugin file itself, as libomptarget would open it: init, then count devices.
step plugin_reports_devices python3 -c '
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
assert lib.__tgt_rtl_init_plugin() == 0, "init_plugin failed"
n = lib.__tgt_rtl_number_of_devices()
print("libomptarget.rtl.cuda.so reports", n, "device(s)")
sys.exit(0 if n > 0 else 1)
' "$here/plugins/libomptarget.rtl.cuda.so"

# The GPU lookup benchmark (docs/BENCHMARKS.md 1b), after the tests; it checks every
# thread's result too, so a wrong lookup fails this step.
mkdir -p "$results"
step bench_gpu_lookup "$here/bin/gpu_lookup_bench" --cubins "$here/bench" \
  --json "$results/gpu_lookup.json" --markdown "$results/gpu_lookup.md"

echo "SUMMARY: $passed step(s) passed, $failed failed${{failures:+ (${{failures# }})}}, $skipped test(s) SKIPPED"
[ "$failed" -eq 0 ]
"#
    )
}
