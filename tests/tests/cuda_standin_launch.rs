//! What a launch and an interop object get from our cuda plugin under the real
//! libomptarget 16, on a CPU: clang-16 sm_90 programs run with the CUDA driver stand-in
//! (target/cuda-standin/) as libcuda, whose report shows every launch's dynamic shared
//! memory and every stream it made. The first GPU run failed lit's
//! omp_dynamic_shared_memory*.c (the kernel got none) and offloading/interop.c (no
//! interop object) on exactly these.

use e2e_tests::compile::compile_nvptx_program;
use e2e_tests::cuda_standin::{self, Log};
use e2e_tests::paths::{fixture, scratch};
use e2e_tests::plugin::built_plugin_dir;
use std::path::{Path, PathBuf};
use std::process::Output;

/// `source` built by clang-16 for sm_90 (LLVM 16's device runtime, no project parts)
/// into a fresh folder.
fn sm90_program(test: &str, source: &Path, extra: &[&str]) -> PathBuf {
    let exe = scratch("standin-launch", test).join(test);
    compile_nvptx_program(source, &exe, "sm_90", extra);
    exe
}

/// Run `exe` with our plugins and the stand-in; (output, the stand-in's report).
fn run(exe: &Path, env: &[(&str, &str)]) -> (Output, Log) {
    let log = exe.with_extension("standin.jsonl");
    let output = cuda_standin::command(exe, &built_plugin_dir(), &log)
        .envs(env.iter().copied())
        .env("OMP_TARGET_OFFLOAD", "MANDATORY")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    (output, Log::read(&log, None))
}

fn shown(output: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Each launch's blocks get the larger of the region's `ompx_dyn_cgroup_mem` and
/// `LIBOMPTARGET_SHARED_MEMORY_SIZE` (LLVM 16's rule), and the device environment the
/// device runtime hands it out from says the latter.
#[test]
fn each_launch_gets_the_larger_dynamic_shared_memory() {
    let exe = sm90_program(
        "dyn-shared-memory",
        &fixture("cuda/dyn_shared_memory.c"),
        &[],
    );
    let (output, log) = run(
        &exe,
        &[
            ("LIBOMPTARGET_SHARED_MEMORY_SIZE", "256"),
            (cuda_standin::LAUNCH_ENV, "skip"),
        ],
    );
    let launches = log.launches();
    let shared: Vec<u32> = launches.iter().map(|l| l.shared_bytes).collect();
    assert_eq!(
        shared,
        [256, 1024],
        "the two regions' launches (without the clause, then with 1024 bytes)\n{}",
        shown(&output)
    );
    let environment = launches[0]
        .device_environment
        .as_ref()
        .expect("LLVM 16's device runtime has a device environment");
    // DebugKind, NumDevices, DeviceNum, DynamicMemSize: four little-endian words.
    assert_eq!(
        environment.bytes.get(24..32),
        Some("00010000"),
        "DynamicMemSize in {environment:?}"
    );
    assert!(log.errors_but_cannot_run().is_empty(), "{:?}", log.errors());
}

/// `#pragma omp interop init(targetsync: obj)` with no target region (lit's
/// offloading/interop.c): the object is made and its targetsync is a stream the plugin
/// created for it.
#[test]
fn an_interop_object_gets_a_stream_of_its_own() {
    let exe = sm90_program(
        "interop",
        &fixture("plugin/interop.c"),
        &["-fopenmp-version=51"],
    );
    let (output, log) = run(&exe, &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success()
            && stdout.contains("interop: made on device 0, targetsync a queue (0)")
            && stdout.contains("interop: destroyed"),
        "{}",
        shown(&output)
    );
    let streams = log
        .events
        .iter()
        .filter(|e| matches!(e, cuda_standin::Event::StreamCreate { .. }))
        .count();
    assert_eq!(streams, 1, "one stream for the one interop object");
    assert!(log.errors().is_empty(), "{:?}", log.errors());
}

/// The interop object's `omp_ipr_device_context` and `omp_ipr_device` are what our
/// `__tgt_rtl_init_device_info` filled in: the primary context the driver handed out
/// for that device (the stand-in's report says which) and its CUdevice. On the second
/// of two devices, so that neither is the first device's or zero.
#[test]
fn an_interop_object_reports_its_devices_primary_context_and_cudevice() {
    let exe = sm90_program(
        "interop-device-1",
        &fixture("plugin/interop.c"),
        &["-fopenmp-version=51"],
    );
    let (output, log) = run(
        &exe,
        &[
            ("OMPTARGET_RS_CUDA_STANDIN_DEVICES", "2"),
            ("OMP_DEFAULT_DEVICE", "1"),
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let primary = [0, 1].map(|d| log.primary_context(d));
    let context = primary[1].unwrap_or_else(|| {
        panic!(
            "device 1's primary context was never retained ({primary:?}):\n{}",
            shown(&output)
        )
    });
    assert_ne!(primary[0], Some(context), "two devices, one context");
    let want = format!("interop: device context {context:#x}, device 0x1");
    assert!(
        output.status.success()
            && stdout.contains("interop: made on device 1, targetsync a queue (0)")
            && stdout.contains(&want),
        "want {want:?}:\n{}",
        shown(&output)
    );
    assert!(log.errors().is_empty(), "{:?}", log.errors());
}
