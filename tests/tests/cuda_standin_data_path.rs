//! The GPU data path as the driver sees it, on a CPU: clang-16 sm_90 programs run
//! through the real libomptarget 16 and our cuda plugin with the CUDA driver stand-in
//! (launches skipped), whose report ends with every driver function called and how
//! often (and, for copies, the bytes).
//! - The memory pool: a loop of maps run for 1 iteration and for 1,000: what the later
//!   iterations ask of the driver is the difference; a device that runs out.
//! - Pinned staging: large `target update`s from pageable memory, in chunks, the bytes
//!   checked by the program; several threads at once; a copy that fails mid-way.

use e2e_tests::compile::compile_nvptx_program;
use e2e_tests::cuda_standin::{self, Log};
use e2e_tests::paths::{fixture, scratch};
use e2e_tests::plugin::built_plugin_dir;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The stand-in's variables: each device's memory, and the copy it fails.
const MEMORY_ENV: &str = "OMPTARGET_RS_CUDA_STANDIN_MEMORY";
const FAIL_COPY_ENV: &str = "OMPTARGET_RS_CUDA_STANDIN_FAIL_COPY";
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

/// A fixture built for sm_90.
fn program(name: &str) -> PathBuf {
    let exe = scratch("standin-data-path", name).join(name);
    compile_nvptx_program(&fixture(&format!("cuda/{name}.c")), &exe, "sm_90", &[]);
    exe
}

/// tests/fixtures/cuda/staged_update.c for sm_90, built once.
fn staged_update() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| program("staged_update"))
}

/// What a run printed, and its report.
struct Run {
    output: std::process::Output,
    log: Log,
}

impl Run {
    fn shown(&self) -> String {
        format!(
            "{}\nstdout:\n{}\nstderr:\n{}",
            self.output.status,
            String::from_utf8_lossy(&self.output.stdout),
            String::from_utf8_lossy(&self.output.stderr)
        )
    }

    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    /// (count, bytes) of the driver calls whose names start with `prefix`.
    fn copies(&self, prefix: &str) -> (u64, u64) {
        (self.log.calls_to(&[prefix]), self.log.bytes_to(&[prefix]))
    }
}

/// Run `exe args` with the stand-in (launches skipped) and `env`.
fn run_program(name: &str, exe: &Path, args: &[String], env: &[(&str, &str)]) -> Run {
    let log = scratch("standin-data-path", name).join("standin.jsonl");
    let output = cuda_standin::command(exe, &built_plugin_dir(), &log)
        .args(args)
        .envs(env.iter().copied())
        .env(cuda_standin::LAUNCH_ENV, "skip")
        .env("OMP_TARGET_OFFLOAD", "MANDATORY")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    Run {
        output,
        log: Log::read(&log, None),
    }
}

/// A run that must succeed with no driver error.
fn run_ok(name: &str, exe: &Path, args: &[String], env: &[(&str, &str)]) -> Run {
    let run = run_program(name, exe, args, env);
    assert!(run.output.status.success(), "{}", run.shown());
    assert!(
        run.log.calls().is_some(),
        "the report has no calls line\n{}",
        run.shown()
    );
    assert!(
        run.log.errors_but_cannot_run().is_empty(),
        "{:?}",
        run.log.errors()
    );
    run
}

/// The report of one run of the loop for `iterations`, with `env`.
fn run(name: &str, iterations: u64, env: &[(&str, &str)]) -> Log {
    let run = run_ok(name, map_loop(), &[iterations.to_string()], env);
    let expected = format!("map_loop: {iterations} iterations");
    assert!(run.stdout().contains(&expected), "{}", run.shown());
    run.log
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
    // Nothing kept at the end: libomptarget's deinit_plugin has the pool give its free
    // blocks back, so every driver allocation was freed.
    for log in [&once, &many] {
        assert_eq!(
            log.calls_to(&["cuMemFree"]),
            log.calls_to(&["cuMemAlloc"]),
            "{:?}",
            log.calls()
        );
    }
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

/// A device with 64 MiB: a 48 MiB array mapped and released leaves its block in the
/// pool; a 40 MiB one then does not fit beside it, so the pool gives its blocks back
/// and the allocation is tried again, and the program goes on. Without the give-back
/// the second map would fail (the program would stop with libomptarget's error).
#[test]
fn when_the_device_runs_out_the_pool_gives_back_and_the_allocation_succeeds() {
    let exe = program("pool_pressure");
    let limit = (64u64 << 20).to_string();
    let run = run_program("pool-pressure", &exe, &[], &[(MEMORY_ENV, &limit)]);
    assert!(run.output.status.success(), "{}", run.shown());
    assert!(
        run.stdout().contains("pool_pressure: done"),
        "{}",
        run.shown()
    );
    // The one refusal: the driver's out-of-memory (cuMemAllocAsync where the device has
    // memory pools, as the stand-in's has), then the retry that worked.
    let refusals = run.log.errors_of_calls("cuMemAlloc");
    assert_eq!(refusals.len(), 1, "{:?}", run.log.errors());
    assert_eq!(refusals[0].1, "CUDA_ERROR_OUT_OF_MEMORY");
    assert!(
        run.log.calls_to(&["cuMemFree"]) >= 1,
        "{:?}",
        run.log.calls()
    );
}

/// 256 MiB (and 123 bytes, at an odd address) there and back from pageable memory:
/// through the pinned buffers in 16 MiB chunks, the bytes intact (the program checks
/// every one), against the same copies with staging off, which go whole.
#[test]
fn a_large_pageable_update_goes_through_pinned_chunks_and_arrives_intact() {
    let n: u64 = (256 << 20) + 123;
    let chunks = n.div_ceil(16 << 20);
    let args = ["256".to_string(), "1".to_string()];
    let staged = run_ok("staged-256", staged_update(), &args, &[]);
    let intact = format!("1 thread(s) x {n} bytes intact");
    assert!(staged.stdout().contains(&intact), "{}", staged.shown());
    assert_eq!(
        staged.copies("cuMemcpyHtoD"),
        (chunks, n),
        "{:?}",
        staged.log.calls()
    );
    assert_eq!(
        staged.copies("cuMemcpyDtoH"),
        (chunks, n),
        "{:?}",
        staged.log.calls()
    );
    // Three pinned buffers for the device, made once.
    assert_eq!(staged.log.calls_to(&["cuMemHostAlloc"]), 3);
    // No hidden wait for the whole device: the 256 MiB block (past the pool's
    // threshold) and the pool's blocks at the end go back in stream order.
    assert!(
        staged.log.calls_to(&["cuMemFreeAsync"]) >= 1,
        "{:?}",
        staged.log.calls()
    );
    assert_eq!(
        staged.log.calls_to(&["cuMemFree_v2", "cuCtxSynchronize"]),
        0,
        "{:?}",
        staged.log.calls()
    );

    let off = [("OMPTARGET_RS_PINNED_STAGING", "0")];
    let direct = run_ok("unstaged-256", staged_update(), &args, &off);
    assert!(direct.stdout().contains(&intact), "{}", direct.shown());
    assert_eq!(
        direct.copies("cuMemcpyHtoD"),
        (1, n),
        "{:?}",
        direct.log.calls()
    );
    assert_eq!(direct.log.calls_to(&["cuMemHostAlloc"]), 0);
}

/// Four host threads update their own 40 MiB buffers at once through the one device's
/// buffers: every byte of every buffer intact.
#[test]
fn threads_staging_at_once_each_get_their_own_bytes() {
    let args = ["40".to_string(), "4".to_string()];
    let run = run_ok("staged-threads", staged_update(), &args, &[]);
    let each: u64 = (40 << 20) + 123;
    let intact = format!("4 thread(s) x {each} bytes intact");
    assert!(run.stdout().contains(&intact), "{}", run.shown());
    assert_eq!(
        run.copies("cuMemcpyHtoD").1,
        4 * each,
        "{:?}",
        run.log.calls()
    );
    assert_eq!(run.log.calls_to(&["cuMemHostAlloc"]), 3);
}

/// The 5th chunk's copy fails: the update fails with the driver's error, named as our
/// staged copy's, and libomptarget stops the program (offloading is mandatory). The
/// stand-in fails exactly that copy and touches no memory for it.
#[test]
fn a_copy_that_fails_mid_pipeline_fails_the_update() {
    let args = ["256".to_string(), "1".to_string()];
    let run = run_program(
        "staged-failure",
        staged_update(),
        &args,
        &[(FAIL_COPY_ENV, "5")],
    );
    assert!(!run.output.status.success(), "{}", run.shown());
    let stderr = String::from_utf8_lossy(&run.output.stderr);
    for says in [
        "cuMemcpyHtoDAsync (staged) failed: CUDA_ERROR_ILLEGAL_ADDRESS",
        "Libomptarget error: Copying data to device failed",
    ] {
        assert!(stderr.contains(says), "no {says:?} in\n{}", run.shown());
    }
    let failed: Vec<_> = run
        .log
        .errors()
        .into_iter()
        .filter(|(_, _, detail)| detail.contains("told to fail"))
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", run.log.errors());
    assert_eq!(failed[0].0, "cuMemcpyHtoDAsync_v2");
}
