//! The kit's CUDA tests: the test executables (`cuda_indirect`, `cuda_abi`,
//! `cuda_no_driver`; each GPU test runs with both nvptx device RTL builds), the fixture
//! cubins they load, the GPU lookup benchmark (docs/BENCHMARKS.md 1b) with its cubins,
//! the load_binary benchmark (1d: host-plugin/benches/load_binary.rs `--abi-only`) with
//! its generated cubins, and our plugin file (run.sh makes the copies libomptarget and the tests look for).
//!
//! The tests find their files through environment variables the runner sets:
//! `OMPTARGET_RS_CUDA_FIXTURES`, `OMPTARGET_RS_PLUGIN_DIR`, `OMPTARGET_RS_GPU_BENCH_DIR`.

use super::{relative, Kit, SM};
use crate::bench::{gpu_lookup, load_binary};
use crate::{gpu_programs, util};
use anyhow::{ensure, Context, Result};
use serde_json::json;
use std::fs;
use std::path::Path;
use xshell::{cmd, Shell};

/// The test executables of the kit: (cargo test target, what run.sh passes it).
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

/// Builds and adds the tests, fixtures, benchmark and plugin (`plugins` is
/// target/plugin/).
pub fn add(kit: &mut Kit, plugins: &Path) -> Result<()> {
    util::section("gpu-bundle: fixture cubins (built and checked by cuda_no_driver)");
    // ptxas comes from the nvidia-cuda-nvcc wheel where CUDA is not installed.
    util::ptxas()?;
    util::llvm22("clang")?;
    let sh = Shell::new()?;
    sh.change_dir(util::root());
    let cargo = util::cargo();
    cmd!(
        sh,
        "{cargo} test -p e2e-tests --test cuda_no_driver -- --exact fixture_cubins_keep_every_global_and_kernel"
    )
    .run()?;

    util::section("gpu-bundle: test executables");
    let mut build = vec!["test", "-p", "e2e-tests", "--no-run"];
    build.extend(TESTS.iter().flat_map(|(name, _)| ["--test", name]));
    let json = util::cargo_messages(&build)?;
    let mut tests = Vec::new();
    for (name, args) in TESTS {
        let exe = util::cargo_executable(&json, name)
            .with_context(|| format!("cargo reported no executable for test `{name}`"))?;
        let to = kit.path(&format!("bin/{name}"))?;
        strip(&exe, &to)?;
        tests.push(json!({"name": name, "exe": relative(kit, &to)?, "args": args}));
    }
    kit.set("tests", json!(tests));

    let fixtures = util::target_dir().join("cuda-fixtures");
    let mut cubins = 0;
    for entry in fs::read_dir(&fixtures)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "cubin") {
            let name = path.file_name().unwrap().to_string_lossy();
            fs::copy(&path, kit.path(&format!("fixtures/{name}"))?)?;
            cubins += 1;
        }
    }
    ensure!(cubins > 0, "no cubins in {}", fixtures.display());
    kit.set("fixtures", json!("fixtures"));

    util::section("gpu-bundle: GPU lookup benchmark");
    let (driver, bench_cubins) = gpu_lookup::bundle_files()?;
    let bench = kit.path("bin/gpu_lookup_bench")?;
    strip(&driver, &bench)?;
    for cubin in &bench_cubins {
        let name = cubin.file_name().unwrap().to_string_lossy();
        fs::copy(cubin, kit.path(&format!("bench/{name}"))?)?;
    }
    kit.set(
        "bench",
        // Shortened: 3 timed launches of at least 10 ms a case instead of 5 of 20 (run.sh
        // --full-lookup-bench drops these), so that part 1 fits 4 minutes.
        json!({
            "exe": relative(kit, &bench)?,
            "cubins": "bench",
            "args": ["--reps", "3", "--min-ms", "10"],
        }),
    );

    util::section("gpu-bundle: load_binary benchmark");
    let load = kit.path("bin/load_binary_bench")?;
    strip(&load_binary::bench_binary()?, &load)?;
    // The file gpu-programs makes too (tests/tests/cuda_standin_load_bench.rs loads it).
    let n = gpu_programs::LOAD_BENCH_ENTRIES;
    let copy = kit.path(&format!("load/entries-{n}.{SM}.cubin"))?;
    fs::copy(load_binary::generate_cubin(n, SM)?, &copy)?;
    let images = vec![json!({"entries": n, "cubin": relative(kit, &copy)?})];
    kit.set(
        "load_bench",
        json!({"exe": relative(kit, &load)?, "images": images, "reps": 5}),
    );

    // One file: the plugin takes its kind from its file name, so the runner copies it
    // to each name libomptarget 16 and the tests look for.
    let plugin = kit.path("plugins/libomptarget.rtl.cuda.so")?;
    strip(&plugins.join("libomptarget.rtl.cuda.so"), &plugin)?;
    kit.set("plugin", json!(relative(kit, &plugin)?));
    Ok(())
}

/// `from` without its symbol tables and debug info, at `to`.
pub(super) fn strip(from: &Path, to: &Path) -> Result<()> {
    let strip = util::llvm22("llvm-strip")?;
    let sh = Shell::new()?;
    cmd!(sh, "{strip} {from} -o {to}").run()?;
    Ok(())
}
