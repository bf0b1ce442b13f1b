//! The GPU kit's programs (tests/gpu_programs/) on the host offload device: the kit runs
//! them on a GPU built for sm_90, here they are built for x86_64 and run under the real
//! libomptarget 16, through our x86_64 plugin (every check must pass) and through LLVM
//! 16's own x86_64 plugin, which builds no table (each program must notice and fail),
//! so a program that cannot tell a working table from a missing one fails here first.

mod plugin_support;

use e2e_tests::paths::root;
use plugin_support::{compile_offload_program, plugin_dir, scratch};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// LLVM 16's own plugins (and libomptarget) as Debian installs them.
const LLVM_PLUGIN_DIR: &str = "/usr/lib/llvm-16/lib";

fn build(name: &str) -> (PathBuf, PathBuf) {
    let source = root().join("tests/gpu_programs").join(name);
    let dir = scratch(&format!("kit-{name}"));
    let exe = dir.join(Path::new(name).file_stem().unwrap());
    compile_offload_program(&source, &exe, true);
    (dir, exe)
}

fn run(exe: &Path, plugins: &Path, marker: &Path) -> (Output, u32) {
    let child = Command::new(exe)
        .env("LD_LIBRARY_PATH", plugins)
        .env("OMPTARGET_RS_LOAD_MARKER", marker)
        .env_remove("OMPTARGET_RS_ALLOW_HOST_FALLBACK")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the program");
    let pid = child.id();
    (child.wait_with_output().unwrap(), pid)
}

/// Ours passes every check on offload device 0; LLVM's plugin makes the program fail.
fn passes_with_ours_and_fails_with_llvms(name: &str, program: &str) {
    let (dir, exe) = build(name);
    let marker = dir.join("marker");
    let (out, pid) = run(&exe, &plugin_dir(), &marker);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} through our plugin: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("target regions ran on offload device 0"),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("{program}: PASSED")), "{stdout}");
    let loaded = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(
        loaded.lines().any(|l| l == format!("x86_64 {pid}")),
        "our x86_64 plugin did not run process {pid}: {loaded:?}"
    );

    let llvm_marker = dir.join("llvm-marker");
    let (out, _) = run(&exe, Path::new(LLVM_PLUGIN_DIR), &llvm_marker);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "{name} passed through LLVM's plugin, which builds no table:\n{stdout}"
    );
    assert!(stdout.contains(&format!("{program}: FAILED")), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(&llvm_marker).unwrap_or_default(),
        "",
        "a plugin of ours loaded in the LLVM run"
    );
}

#[test]
fn stress_program_checks_every_call_and_stray_pointer() {
    passes_with_ours_and_fails_with_llvms("stress.c", "stress");
}

/// Deferred regions (each with an async info of its own) and one taskwait; two host
/// threads with their own: on the host device every copy and launch completes at once,
/// and every result must still be there after the wait.
#[test]
fn function_ptr_map_program_installs_and_replaces_the_table() {
    passes_with_ours_and_fails_with_llvms("function_ptr_map.c", "function_ptr_map");
}

#[test]
fn virtual_calls_program_translates_every_vtable_slot() {
    passes_with_ours_and_fails_with_llvms("virtual_calls.cpp", "virtual_calls");
}

/// Where no device exists the programs accept the host versions only when told to.
#[test]
fn host_fallback_passes_only_when_allowed() {
    let (_dir, exe) = build("stress.c");
    // Offloading disabled: libomptarget runs every target region on the host, as it
    // does where no plugin finds a device.
    let fallback = |allow: bool| {
        let mut cmd = Command::new(&exe);
        cmd.env("LD_LIBRARY_PATH", plugin_dir())
            .env("OMP_TARGET_OFFLOAD", "DISABLED");
        if allow {
            cmd.env("OMPTARGET_RS_ALLOW_HOST_FALLBACK", "1");
        } else {
            cmd.env_remove("OMPTARGET_RS_ALLOW_HOST_FALLBACK");
        }
        cmd.output().expect("run the program")
    };
    let refused = fallback(false);
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert!(!refused.status.success(), "{stdout}");
    assert!(stdout.contains("WRONG: host fallback"), "{stdout}");
    let allowed = fallback(true);
    let stdout = String::from_utf8_lossy(&allowed.stdout);
    assert!(allowed.status.success(), "{stdout}");
    assert!(stdout.contains("ran on the host (fallback)"), "{stdout}");
    assert!(stdout.contains("stress: PASSED"), "{stdout}");
}

/// The kit's runtime benchmark (tests/fixtures/bench/runtime.c, which the kit runs under
/// both cuda plugins), shortened, on the host device: through our plugin in-process and
/// isolated, and through LLVM's, every copy comes back right and every measure prints
/// a positive best and median. Its timings are the kit's business, not this test's.
#[test]
fn runtime_benchmark_runs_through_each_x86_64_plugin() {
    let source = root().join("tests/fixtures/bench/runtime.c");
    let dir = scratch("kit-runtime-bench");
    let exe = dir.join("runtime");
    compile_offload_program(&source, &exe, false);
    let mut measures = vec!["launch_empty".to_owned(), "launch_8_scalars".to_owned()];
    for size in ["4KiB", "1MiB", "256MiB"] {
        for copy in ["update_to", "update_from", "enter_to", "exit_from"] {
            measures.push(format!("{copy}_{size}"));
        }
    }
    let runs = [
        ("ours, in-process", plugin_dir(), "0"),
        ("ours, isolated", plugin_dir(), "1"),
        ("LLVM's", PathBuf::from(LLVM_PLUGIN_DIR), "0"),
    ];
    for (label, plugins, isolated) in runs {
        let out = Command::new(&exe)
            .arg("50")
            .env("LD_LIBRARY_PATH", &plugins)
            .env("OMPTARGET_RS_ISOLATED", isolated)
            .env("OMP_TARGET_OFFLOAD", "MANDATORY")
            .output()
            .expect("run the benchmark");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("runtime: PASSED"),
            "{label}: {}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        for measure in &measures {
            let line = stdout
                .lines()
                .find(|l| l.split_whitespace().next() == Some(measure.as_str()))
                .unwrap_or_else(|| panic!("{label}: no {measure} line in\n{stdout}"));
            let numbers: Vec<f64> = line
                .split_whitespace()
                .skip(1)
                .take(2)
                .filter_map(|w| w.parse().ok())
                .collect();
            assert!(
                numbers.len() == 2 && numbers.iter().all(|&v| v > 0.0),
                "{label}: {line}"
            );
        }
    }
}
