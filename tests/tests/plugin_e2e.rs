//! The plugins under the real libomptarget 16: clang-16 programs run through
//! target/plugin/, with OMPTARGET_RS_LOAD_MARKER proving which plugin ran them.

mod plugin_support;

use plugin_support::*;
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

/// Entry points libomptarget 16 requires; a plugin missing one is silently ignored.
const MANDATORY: &[&str] = &[
    "__tgt_rtl_is_valid_binary",
    "__tgt_rtl_number_of_devices",
    "__tgt_rtl_init_device",
    "__tgt_rtl_load_binary",
    "__tgt_rtl_data_alloc",
    "__tgt_rtl_data_submit",
    "__tgt_rtl_data_retrieve",
    "__tgt_rtl_data_delete",
    "__tgt_rtl_launch_kernel",
];

#[test]
fn every_plugin_file_is_a_distinct_loadable_plugin_of_its_kind() {
    let dir = plugin_dir();
    let mut inodes = HashSet::new();
    for (kind, devices) in [("x86_64", 4), ("cuda", 0), ("amdgpu", 0)] {
        for name in [
            format!("libomptarget.rtl.{kind}.so"),
            format!("libomptarget.rtl.{kind}.nextgen.so"),
        ] {
            let path = dir.join(&name);
            let meta = std::fs::metadata(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                inodes.insert(meta.ino()),
                "{name} shares an inode with another plugin"
            );
            // SAFETY: the plugin's initialisers only set up Rust statics.
            let lib = unsafe { libloading::Library::new(&path) }.expect("dlopen the plugin");
            for sym in MANDATORY.iter().chain(&["__tgt_rtl_set_function_ptr_map"]) {
                // SAFETY: only the symbol's presence is checked.
                let found = unsafe { lib.get::<*const ()>(sym.as_bytes()) };
                assert!(found.is_ok(), "{name} lacks {sym}");
            }
            // SAFETY: both functions take no arguments and are the plugin ABI's.
            let (init, count) = unsafe {
                let init = lib
                    .get::<extern "C" fn() -> i32>(b"__tgt_rtl_init_plugin")
                    .unwrap();
                let count = lib
                    .get::<extern "C" fn() -> i32>(b"__tgt_rtl_number_of_devices")
                    .unwrap();
                (init(), count())
            };
            assert_eq!(init, 0, "{name}: init_plugin failed");
            assert_eq!(count, devices, "{name} reports {count} devices");
        }
    }
}

/// Run a program under libomptarget 16 with our plugins first on the search path.
fn run_with_our_plugin(exe: &Path, marker: &Path, info: &str) -> (std::process::Output, u32) {
    let child = Command::new(exe)
        .env("LD_LIBRARY_PATH", plugin_dir())
        .env("OMPTARGET_RS_LOAD_MARKER", marker)
        .env("LIBOMPTARGET_INFO", info)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the program");
    let pid = child.id();
    (child.wait_with_output().unwrap(), pid)
}

fn assert_our_plugin_ran(marker: &Path, pid: u32) {
    let lines = std::fs::read_to_string(marker).unwrap_or_default();
    assert!(
        lines.lines().any(|l| l == format!("x86_64 {pid}")),
        "our x86_64 plugin did not run process {pid}; marker file: {lines:?}"
    );
}

#[test]
fn indirect_calls_example_gets_device_functions() {
    let dir = scratch("e2e-indirect");
    let exe = dir.join("indirect_calls");
    compile_offload_program(&root().join("examples/indirect_calls.c"), &exe, true);
    let marker = dir.join("marker");
    let (out, pid) = run_with_our_plugin(&exe, &marker, "16");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    assert_our_plugin_ran(&marker, pid);

    assert!(stdout.contains("ran on offload device 0"), "{stdout}");
    // Each function's result says which version ran: device copies add 1000.
    for (name, arg, host) in [("add_one", 2, 3), ("twice", 3, 6), ("square", 4, 16)] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no line for {name} (arg {arg}):\n{stdout}"));
        let expected = format!("device result {}, host result {host}", host + 1000);
        assert!(line.contains(&expected), "{line}");
    }
    assert!(
        stdout.contains(": unchanged\nnull -> 0: unchanged"),
        "{stdout}"
    );
    // The plugin printed the table it installed: three rows, host -> device.
    assert!(
        stderr.contains("indirect function table, 3 entries"),
        "{stderr}"
    );
    assert_eq!(stderr.matches(" -> device 0x").count(), 3, "{stderr}");
}

#[test]
fn program_without_the_device_runtime_runs_and_says_so() {
    let dir = scratch("e2e-no-runtime");
    let exe = dir.join("no_runtime");
    compile_offload_program(
        &root().join("tests/fixtures/plugin/no_runtime_program.c"),
        &exe,
        false,
    );
    let marker = dir.join("marker");
    let (out, pid) = run_with_our_plugin(&exe, &marker, "16");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    assert_our_plugin_ran(&marker, pid);
    assert!(stdout.contains("result 42"), "{stdout}");
    assert_eq!(
        stderr.matches("will not be translated").count(),
        1,
        "{stderr}"
    );
    // Without LIBOMPTARGET_INFO the plugin stays quiet.
    let (quiet, _) = run_with_our_plugin(&exe, &dir.join("marker2"), "0");
    assert!(quiet.status.success());
    assert!(String::from_utf8_lossy(&quiet.stderr).is_empty());
}

#[test]
fn nowait_target_tasks_translate_concurrently() {
    let dir = scratch("e2e-nowait");
    let exe = dir.join("nowait_indirect");
    compile_offload_program(
        &root().join("tests/fixtures/plugin/nowait_indirect.c"),
        &exe,
        true,
    );
    let marker = dir.join("marker");
    let (out, pid) = run_with_our_plugin(&exe, &marker, "0");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_our_plugin_ran(&marker, pid);
    assert!(
        stdout.contains("64 of 64 nowait indirect calls ran the device version"),
        "{stdout}"
    );
}

#[test]
fn header_works_from_cxx() {
    let dir = scratch("e2e-cxx");
    let exe = dir.join("indirect_cxx");
    compile_offload_program(
        &root().join("tests/fixtures/plugin/indirect_cxx.cpp"),
        &exe,
        true,
    );
    let marker = dir.join("marker");
    let (out, pid) = run_with_our_plugin(&exe, &marker, "0");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_our_plugin_ran(&marker, pid);
    // 3 * 5 from the device version, plus the device copy's bias.
    assert!(stdout.contains("c++ result 1015"), "{stdout}");
}
