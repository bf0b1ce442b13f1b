//! The plugins under the real libomptarget 16: clang-16 programs run through
//! target/plugin/, with OMPTARGET_RS_LOAD_MARKER proving which plugin ran them.

mod plugin_support;

use e2e_tests::paths::{fixture, root};
use plugin_support::{
    compile_offload_program, compile_offload_sources, device_image_of, name_in_image, plugin_dir,
    scratch,
};
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
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
            let lib = e2e_tests::plugin::open(&path);
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
    run_with_our_plugin_env(exe, marker, info, &[])
}

/// As [`run_with_our_plugin`], with more environment variables.
fn run_with_our_plugin_env(
    exe: &Path,
    marker: &Path,
    info: &str,
    env: &[(&str, &str)],
) -> (std::process::Output, u32) {
    let child = Command::new(exe)
        .envs(env.iter().copied())
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

/// Build `source` into a fresh directory (device image linked with device-rtl or not):
/// (the directory, the program).
fn build_program(test: &str, source: &Path, with_device_rtl: bool) -> (PathBuf, PathBuf) {
    let dir = scratch(test);
    let name = source.file_stem().expect("a source file name");
    let exe = dir.join(name);
    compile_offload_program(source, &exe, with_device_rtl);
    (dir, exe)
}

/// Run a built program with LIBOMPTARGET_INFO=`info`; it must succeed, and our x86_64
/// plugin must have run it: (stdout, stderr).
fn run_successfully(dir: &Path, exe: &Path, info: &str) -> (String, String) {
    run_successfully_env(dir, exe, info, &[])
}

/// As [`run_successfully`], with more environment variables.
fn run_successfully_env(
    dir: &Path,
    exe: &Path,
    info: &str,
    env: &[(&str, &str)],
) -> (String, String) {
    let marker = dir.join("marker");
    let (out, pid) = run_with_our_plugin_env(exe, &marker, info, env);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    assert_our_plugin_ran(&marker, pid);
    (stdout, stderr)
}

#[test]
fn indirect_calls_example_gets_device_functions() {
    let (dir, exe) = build_program(
        "e2e-indirect",
        &root().join("examples/indirect_calls.c"),
        true,
    );
    let (stdout, stderr) = run_successfully(&dir, &exe, "16");
    assert_example_results(&stdout);
    // The plugin printed the table it installed: three rows, host -> device, and the
    // index beside it (3 rows at 80 % load: 2 buckets).
    assert!(
        stderr.contains("indirect function table, 3 entries"),
        "{stderr}"
    );
    assert!(stderr.contains("; index: 2 buckets of 2 pairs"), "{stderr}");
    assert_eq!(stderr.matches(" -> device 0x").count(), 3, "{stderr}");

    // With the index turned off the device searches the table: the same results.
    let (without, stderr) =
        run_successfully_env(&dir, &exe, "16", &[("OMPTARGET_RS_FPTR_INDEX", "0")]);
    assert!(
        stderr.contains("no index (turned off by OMPTARGET_RS_FPTR_INDEX=0)"),
        "{stderr}"
    );
    assert_example_results(&without);
}

/// examples/indirect_calls.c's output: each function's device version ran (device
/// copies add 1000), unregistered and null pointers came back unchanged.
fn assert_example_results(stdout: &str) {
    assert!(stdout.contains("ran on offload device 0"), "{stdout}");
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
}

/// The example linked with a device runtime from before the index (the table globals,
/// no `__omptarget_rs_fptr_index`): it works, and the debug log says why it has no index.
#[test]
fn a_device_runtime_from_before_the_index_keeps_working() {
    let dir = scratch("e2e-old-runtime");
    let object = dir.join("old_runtime.o");
    let archive = dir.join("libold_runtime.a");
    e2e_tests::process::run_ok(
        Command::new(e2e_tests::tools::clang16())
            .args(["-O1", "-fPIC", "-c"])
            .arg(fixture("plugin/old_runtime.c"))
            .arg("-o")
            .arg(&object),
    );
    e2e_tests::process::run_ok(
        Command::new(e2e_tests::tools::llvm22("llvm-ar"))
            .arg("rcs")
            .arg(&archive)
            .arg(&object),
    );
    let exe = dir.join("indirect_calls");
    e2e_tests::compile::compile_offload_program(
        &root().join("examples/indirect_calls.c"),
        &exe,
        Some(&archive),
    );
    let (stdout, stderr) = run_successfully_env(&dir, &exe, "16", &[("OMPTARGET_RS_DEBUG", "1")]);
    assert_example_results(&stdout);
    assert!(
        stderr
            .contains("has no __omptarget_rs_fptr_index (a device runtime from before the index)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("indirect function table, 3 entries"),
        "{stderr}"
    );
}

#[test]
fn program_without_the_device_runtime_runs_and_says_so() {
    let (dir, exe) = build_program(
        "e2e-no-runtime",
        &fixture("plugin/no_runtime_program.c"),
        false,
    );
    let (stdout, stderr) = run_successfully(&dir, &exe, "16");
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
    let (dir, exe) = build_program("e2e-nowait", &fixture("plugin/nowait_indirect.c"), true);
    let (stdout, _) = run_successfully(&dir, &exe, "0");
    assert!(
        stdout.contains("64 of 64 nowait indirect calls ran the device version"),
        "{stdout}"
    );
}

#[test]
fn header_works_from_cxx() {
    let (dir, exe) = build_program("e2e-cxx", &fixture("plugin/indirect_cxx.cpp"), true);
    let (stdout, _) = run_successfully(&dir, &exe, "0");
    // 3 * 5 from the device version, plus the device copy's bias.
    assert!(stdout.contains("c++ result 1015"), "{stdout}");
}

/// The seed convention's functions of seed_convention.c, its size-8 ones, and what each
/// returns on the host for the argument the program passes (its index + 2).
const SEED_FUNCTIONS: [(&str, i32); 4] = [
    ("seed_add", 2 + 7),
    ("seed_mul", 3 * 5),
    ("seed_neg", -4),
    ("seed_static", 5 - 3),
];
const POINTER_FUNCTIONS: [(&str, i32); 2] = [("ptr_double", 2 * 6), ("ptr_square", 7 * 7)];

/// Run a program that must fail to load its image: (stderr); our plugin must have run.
fn run_failing(dir: &Path, exe: &Path) -> String {
    let marker = dir.join("marker");
    let (out, pid) = run_with_our_plugin(exe, &marker, "0");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "the program ran:\n{stderr}");
    assert_our_plugin_ran(&marker, pid);
    assert!(
        stderr.contains("Libomptarget fatal error"),
        "libomptarget did not stop the program:\n{stderr}"
    );
    stderr
}

#[test]
fn seed_convention_finds_hidden_functions_in_the_static_symbol_table() {
    let (dir, exe) = build_program("e2e-seed", &fixture("plugin/seed_convention.c"), true);
    // What makes this case: clang 16 made every function hidden, so the image's dynamic
    // symbol table lacks them and .symtab has each once, LOCAL.
    let image = device_image_of(&exe);
    for (name, _) in SEED_FUNCTIONS.iter().chain(&POINTER_FUNCTIONS) {
        let seen = name_in_image(&image, name);
        assert!(
            !seen.in_dynsym,
            "{name} is exported: the test proves nothing"
        );
        assert_eq!(seen.in_symtab.len(), 1, "{name}: {:?}", seen.in_symtab);
        assert_eq!(seen.in_symtab[0].1, object::elf::STB_LOCAL, "{name}");
    }

    let (stdout, stderr) = run_successfully(&dir, &exe, "16");
    assert!(stdout.contains("ran on offload device 0"), "{stdout}");
    // Every function: the device version ran (host result + 1000), through a pointer
    // translated to the device function's own address (the program checks both, "OK").
    for (name, host) in SEED_FUNCTIONS.iter().chain(&POINTER_FUNCTIONS) {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no line for {name}:\n{stdout}"));
        let expected = format!("device result {}, host result {host}: OK", host + 1000);
        assert!(line.ends_with(&expected), "{line}");
    }
    // A pointer strictly inside the table's range that is not in it comes back as it
    // went in (LLVM 18's lookup never returns for one), and so does null.
    assert!(
        stdout.contains("(inside the table's range) -> "),
        "{stdout}"
    );
    assert!(
        stdout.contains(": unchanged\nnull -> 0: unchanged"),
        "{stdout}"
    );
    assert!(stdout.ends_with("PASSED\n"), "{stdout}");
    // The installed table: one row per registered function, named by its entry.
    assert!(
        stderr.contains("indirect function table, 6 entries"),
        "{stderr}"
    );
    let rows: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(" -> device 0x"))
        .collect();
    assert_eq!(rows.len(), 6, "{stderr}");
    for (name, _) in SEED_FUNCTIONS {
        assert!(
            rows.iter().any(|r| r.ends_with(&format!("  {name}"))),
            "{name}: {rows:?}"
        );
    }
    for (name, _) in POINTER_FUNCTIONS {
        let entry = format!("  __omp_indirect_fn_{name}");
        assert!(rows.iter().any(|r| r.ends_with(&entry)), "{name}: {rows:?}");
    }
}

#[test]
fn static_functions_of_one_name_in_two_files_fail_naming_both() {
    let dir = scratch("e2e-seed-ambiguous");
    let exe = dir.join("seed_static");
    let (a, b) = (
        fixture("plugin/seed_static_a.c"),
        fixture("plugin/seed_static_b.c"),
    );
    compile_offload_sources(&[&a, &b], &exe, true, &[]);
    let seen = name_in_image(&device_image_of(&exe), "helper");
    assert!(!seen.in_dynsym);
    let files: Vec<Option<&str>> = seen.in_symtab.iter().map(|d| d.2.as_deref()).collect();
    assert_eq!(
        files,
        [Some("seed_static_a.c"), Some("seed_static_b.c")],
        "{:?}",
        seen.in_symtab
    );

    let stderr = run_failing(&dir, &exe);
    let error = stderr
        .lines()
        .find(|l| l.starts_with("omptarget-rs (x86_64) error: load_binary:"))
        .unwrap_or_else(|| panic!("no load error:\n{stderr}"));
    assert!(error.contains("entry `helper`"), "{error}");
    assert!(error.contains("has 2 definitions"), "{error}");
    for (addr, _, file) in &seen.in_symtab {
        let named = format!(
            "image address {addr:#x} (from {})",
            file.as_deref().unwrap()
        );
        assert!(error.contains(&named), "{error} lacks {named}");
    }
}

#[test]
fn a_static_variable_of_the_same_name_is_no_rival_for_a_function() {
    let dir = scratch("e2e-seed-function-and-variable");
    let exe = dir.join("seed_static_var");
    let (a, var) = (
        fixture("plugin/seed_static_a.c"),
        fixture("plugin/seed_static_var.c"),
    );
    compile_offload_sources(&[&a, &var], &exe, true, &[]);
    let seen = name_in_image(&device_image_of(&exe), "helper");
    assert_eq!(seen.in_symtab.len(), 2, "{:?}", seen.in_symtab);
    // helper(1) on the device is 1 + 1; helper_b(1) adds the static variable: 1 + 5.
    let (stdout, _) = run_successfully(&dir, &exe, "0");
    assert_eq!(stdout, "2 6\n");
}

#[test]
fn stripped_device_image_fails_and_says_it_was_stripped() {
    let dir = scratch("e2e-seed-stripped");
    let exe = dir.join("seed_stripped");
    let strip = ["-Xoffload-linker-x86_64-pc-linux-gnu", "-s"];
    compile_offload_sources(&[&fixture("plugin/seed_convention.c")], &exe, true, &strip);
    let seen = name_in_image(&device_image_of(&exe), "seed_add");
    assert!(!seen.in_dynsym && seen.in_symtab.is_empty(), "not stripped");

    let stderr = run_failing(&dir, &exe);
    let error = stderr
        .lines()
        .find(|l| l.starts_with("omptarget-rs (x86_64) error: load_binary:"))
        .unwrap_or_else(|| panic!("no load error:\n{stderr}"));
    // The first seed entry is the first that cannot be resolved.
    assert!(error.contains("entry `seed_add`"), "{error}");
    assert!(error.contains(".symtab was stripped"), "{error}");
}

/// The programs of these tests run where the environment says: with
/// `OMPTARGET_RS_ISOLATED=1` (the isolated run of `cargo xtask test`) our plugin starts
/// the device process, otherwise it runs the device in the program's process.
#[test]
fn programs_run_on_the_host_device_the_environment_asks_for() {
    let (dir, exe) = build_program("e2e-mode", &root().join("examples/indirect_calls.c"), true);
    let (_, stderr) = run_successfully_env(&dir, &exe, "0", &[("OMPTARGET_RS_DEBUG", "1")]);
    let started = stderr.contains("isolated device: process");
    assert_eq!(
        started,
        e2e_tests::isolated(),
        "isolated asked: {}; device process started: {started}\n{stderr}",
        e2e_tests::isolated()
    );
}

/// `#pragma omp interop init(targetsync: ...)` on the x86_64 device with no image loaded
/// (libomptarget's offloading/interop.c, as the host device can run it): the object is
/// made from the plugin's device info and async info (without those entry points it is
/// omp_interop_none), on device 0; the host device completes everything before it
/// returns, so, as with LLVM's host plugin, its targetsync has no queue.
#[test]
fn interop_objects_are_made_on_a_device_without_an_image() {
    let dir = scratch("interop");
    let exe = dir.join("interop");
    compile_offload_sources(
        &[&fixture("plugin/interop.c")],
        &exe,
        false,
        &["-fopenmp-version=51"],
    );
    let (stdout, _) = run_successfully(&dir, &exe, "0");
    assert!(
        stdout.contains("interop: made on device 0, targetsync no queue (0)")
            && stdout.contains("interop: destroyed"),
        "{stdout}"
    );
}
