//! Shared helpers of the reliability tests: build the tests/fixtures/reliability/
//! programs with clang 16 and run them through libomptarget 16 and our plugin.
//! (Builds on plugin_support, which every reliability test file also declares.)
#![allow(dead_code)]

use super::plugin_support::{compile_offload_program, device_staticlib, plugin_dir};
use e2e_tests::paths::root;
use e2e_tests::process::run_ok;
use e2e_tests::tools::clang16;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn fixture(name: &str) -> PathBuf {
    e2e_tests::paths::fixture("reliability").join(name)
}

/// An offload program from tests/fixtures/reliability/, device image linked with
/// device-rtl, built into `dir`.
pub fn build_program(dir: &Path, source: &str) -> PathBuf {
    let exe = dir.join(source.trim_end_matches(".c"));
    compile_offload_program(&fixture(source), &exe, true);
    exe
}

/// A shared library with its own offload code (clang-16 -shared -fPIC), device image
/// linked with device-rtl.
pub fn build_offload_library(dir: &Path, source: &str) -> PathBuf {
    let so = dir.join(format!("lib{}.so", source.trim_end_matches(".c")));
    let x = "-Xoffload-linker-x86_64-pc-linux-gnu";
    run_ok(
        Command::new(clang16())
            .args(["-O1", "-fPIC", "-shared", "-fopenmp"])
            .arg("-fopenmp-targets=x86_64-pc-linux-gnu")
            .arg("-I")
            .arg(root().join("host-plugin/include"))
            .args([x, "--undefined=__kmpc_target_translate_fptr", x])
            .arg(device_staticlib())
            .arg(fixture(source))
            .arg("-o")
            .arg(&so),
    );
    so
}

/// Run a program with our plugins first on libomptarget 16's search path.
pub fn run_with_our_plugin(exe: &Path, args: &[&str]) -> Output {
    Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", plugin_dir())
        .env("LIBOMPTARGET_INFO", "0")
        .output()
        .unwrap_or_else(|e| panic!("could not run {}: {e}", exe.display()))
}

/// The output must show a successful run; returns its stdout.
pub fn expect_success(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed with {}:\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The checksum launches.c prints for `indirect N`: each launch i computes
/// 3 * (i & 0xffff) + 1000 on the device.
pub fn indirect_checksum(n: u64) -> u64 {
    (0..n).map(|i| 3 * (i & 0xffff) + 1000).sum()
}

/// One `label: cycles N rss_kib R heap_bytes H images_mapped M fds F` line of
/// dlopen_cycles.c.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryReport {
    pub cycles: u64,
    pub rss_kib: u64,
    pub heap_bytes: u64,
    pub images_mapped: u64,
    pub fds: u64,
}

pub fn memory_report(stdout: &str, label: &str) -> MemoryReport {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{label}: ")))
        .unwrap_or_else(|| panic!("no `{label}:` line in:\n{stdout}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let field = |name: &str| -> u64 {
        let at = words
            .iter()
            .position(|w| *w == name)
            .unwrap_or_else(|| panic!("no {name} in {line:?}"));
        words[at + 1]
            .parse()
            .unwrap_or_else(|e| panic!("{name} in {line:?}: {e}"))
    };
    MemoryReport {
        cycles: field("cycles"),
        rss_kib: field("rss_kib"),
        heap_bytes: field("heap_bytes"),
        images_mapped: field("images_mapped"),
        fds: field("fds"),
    }
}
