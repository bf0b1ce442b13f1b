//! A staged copy that fails half-way, through the plugin crate's Rust API with the CUDA
//! driver stand-in in a child process (the stand-in reads its settings once per
//! process, and writes its `calls` line when the process ends): the copy returns the
//! driver's error, the copies after it work and carry every byte, and when the plugin
//! goes every pinned buffer and every device allocation has been given back.

use e2e_tests::cuda_standin::{self, Log};
use e2e_tests::paths::scratch;
use host_plugin::backend::AllocKind;
use host_plugin::{Plugin, PluginKind};
use std::process::Command;

/// Set in the child: the test body runs there.
const CHILD_ENV: &str = "OMPTARGET_RS_TEST_STAGING_FAILURE_CHILD";
const FAIL_COPY_ENV: &str = "OMPTARGET_RS_CUDA_STANDIN_FAIL_COPY";
/// 64 MiB and 5 bytes: five chunks of 16 MiB (the staging's default), the last short.
const BYTES: usize = (64 << 20) + 5;

fn pattern(i: usize) -> u8 {
    (i * 31 + i / 65_521) as u8
}

/// The child: the 3rd copy of the process fails (a chunk in the middle of the first
/// staged write); then a staged write and a staged read of the same bytes must work.
fn child() {
    let plugin = Plugin::new(PluginKind::Cuda);
    let device = plugin.device(0).expect("the stand-in's device 0");
    device.init_device().expect("init device 0");
    let buffer = device.alloc(BYTES, AllocKind::Device).expect("64 MiB");
    let src: Vec<u8> = (0..BYTES).map(pattern).collect();
    // SAFETY: `buffer` holds BYTES bytes of device 0's memory; `src` is a live slice.
    let failed = unsafe { device.write(buffer.addr(), &src) };
    let error = failed
        .expect_err("the 3rd copy is told to fail")
        .to_string();
    assert!(
        error.contains("(staged)") && error.contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
        "{error}"
    );
    // SAFETY: as above.
    unsafe { device.write(buffer.addr(), &src) }.expect("the write after the failure");
    let mut back = vec![0u8; BYTES];
    // SAFETY: as above; `back` is a live, exclusively borrowed slice of BYTES bytes.
    unsafe { device.read(buffer.addr(), &mut back) }.expect("the read");
    let first_wrong = back.iter().zip(&src).position(|(a, b)| a != b);
    assert_eq!(first_wrong, None, "bytes back differ");
    drop(buffer);
    drop(plugin);
    println!("staging-failure child: done");
}

#[test]
fn a_staged_copy_that_fails_half_way_leaves_nothing_behind_and_the_next_works() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // The stand-in is this process's libcuda before the plugin looks for one.
        let log = std::env::var_os(cuda_standin::LOG_ENV).expect("the parent sets the log");
        cuda_standin::preload(std::path::Path::new(&log));
        child();
        return;
    }
    let log = scratch("standin-staging-failure", "child").join("standin.jsonl");
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_staged_copy_that_fails_half_way_leaves_nothing_behind_and_the_next_works",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .env(cuda_standin::LOG_ENV, &log)
        .env(FAIL_COPY_ENV, "3")
        .output()
        .expect("running the child");
    let shown = format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{shown}");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("staging-failure child: done"),
        "{shown}"
    );
    let log = Log::read(&log, None);
    let failed: Vec<_> = log
        .errors()
        .into_iter()
        .filter(|(_, _, detail)| detail.contains("told to fail copy 3"))
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", log.errors());
    // The three pinned buffers were made once, for all three copies, and given back
    // with the device; the device buffer (through the pool) too.
    assert_eq!(log.calls_to(&["cuMemHostAlloc"]), 3, "{:?}", log.calls());
    assert_eq!(log.calls_to(&["cuMemFreeHost"]), 3, "{:?}", log.calls());
    assert_eq!(
        log.calls_to(&["cuMemFree"]) - log.calls_to(&["cuMemFreeHost"]),
        log.calls_to(&["cuMemAlloc"]) - log.calls_to(&["cuMemAllocHost"]),
        "device allocations and frees: {:?}",
        log.calls()
    );
    // Five chunks each way, and the failed write's first two chunks and its third.
    assert_eq!(
        log.calls_to(&["cuMemcpyHtoDAsync"]),
        3 + 5,
        "{:?}",
        log.calls()
    );
    assert_eq!(log.calls_to(&["cuMemcpyDtoHAsync"]), 5, "{:?}", log.calls());
}
