//! The GPU data path as the driver sees it, on a CPU: a clang-16 sm_90 program that
//! maps arrays in a loop runs through the real libomptarget 16 and our cuda plugin with
//! the CUDA driver stand-in (launches skipped), whose report ends with every driver
//! function called and how often. Run once with 1 iteration and once with 1,000: what
//! the loop's later iterations ask of the driver is the difference.

use e2e_tests::compile::compile_nvptx_program;
use e2e_tests::cuda_standin::{self, Log};
use e2e_tests::paths::{fixture, scratch};
use e2e_tests::plugin::built_plugin_dir;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const ITERATIONS: u64 = 1000;
/// The calls that allocate or free device memory, and the one that waits for the whole
/// device.
const ALLOCATION_CALLS: &[&str] = &["cuMemAlloc", "cuMemFree"];
const DEVICE_WAIT_CALLS: &[&str] = &["cuCtxSynchronize"];

/// tests/fixtures/cuda/map_loop.c for sm_90, built once.
fn map_loop() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let exe = scratch("standin-data-path", "map-loop").join("map_loop");
        compile_nvptx_program(&fixture("cuda/map_loop.c"), &exe, "sm_90", &[]);
        exe
    })
}

/// The report of one run of the loop for `iterations`, with `env`.
fn run(name: &str, iterations: u64, env: &[(&str, &str)]) -> Log {
    let log = scratch("standin-data-path", name).join("standin.jsonl");
    let output = cuda_standin::command(map_loop(), &built_plugin_dir(), &log)
        .arg(iterations.to_string())
        .envs(env.iter().copied())
        .env(cuda_standin::LAUNCH_ENV, "skip")
        .env("OMP_TARGET_OFFLOAD", "MANDATORY")
        .output()
        .expect("running map_loop");
    let shown = format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{shown}");
    let expected = format!("map_loop: {iterations} iterations");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(&expected),
        "{shown}"
    );
    let log = Log::read(&log, None);
    assert!(
        log.calls().is_some(),
        "the report has no calls line\n{shown}"
    );
    assert!(log.errors_but_cannot_run().is_empty(), "{:?}", log.errors());
    log
}

/// After the first iteration the loop allocates and frees nothing with the driver and
/// never waits for the whole device: the pool serves every map.
#[test]
fn a_loop_of_maps_makes_no_driver_allocation_after_its_first_iteration() {
    let once = run("pooled-1", 1, &[]);
    let many = run("pooled-1000", ITERATIONS, &[]);
    assert_eq!(
        many.calls_to(ALLOCATION_CALLS),
        once.calls_to(ALLOCATION_CALLS),
        "driver allocations and frees: 1 iteration {:?}, {ITERATIONS} iterations {:?}",
        once.calls(),
        many.calls()
    );
    assert_eq!(
        many.calls_to(DEVICE_WAIT_CALLS),
        once.calls_to(DEVICE_WAIT_CALLS),
        "device-wide waits grew with the iterations: {:?}",
        many.calls()
    );
    // The copies did happen on every iteration: the counts are of a loop that ran.
    assert!(
        many.calls_to(&["cuMemcpyHtoD"]) >= once.calls_to(&["cuMemcpyHtoD"]) + 2 * (ITERATIONS - 1)
    );
}

/// The same loop with pooling off (`LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=0`, LLVM's
/// meaning), as the plugin was before the pool: every iteration allocates and frees
/// both arrays with the driver. This is what the test above would see without the pool.
#[test]
fn without_the_pool_every_iteration_allocates_and_frees() {
    let off = [("LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD", "0")];
    let once = run("unpooled-1", 1, &off);
    let many = run("unpooled-1000", ITERATIONS, &off);
    let grown = many.calls_to(ALLOCATION_CALLS) - once.calls_to(ALLOCATION_CALLS);
    assert!(
        grown >= 4 * (ITERATIONS - 1),
        "{grown} more allocations and frees for {} more iterations: {:?}",
        ITERATIONS - 1,
        many.calls()
    );
}
