//! Shared helpers of the plugin tests: where the artifacts are, and clang 16.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the workspace root")
        .to_path_buf()
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// device-rtl's x86_64 static library, built by `cargo xtask build-device`.
pub fn device_staticlib() -> PathBuf {
    let p = target_dir().join("device/x86_64-unknown-linux-gnu/libdevice_rtl.a");
    assert!(
        p.is_file(),
        "{} is missing: run `cargo xtask build-device` (or `cargo xtask test`) first",
        p.display()
    );
    p
}

/// target/plugin/, filled by `cargo xtask build-plugin`.
pub fn plugin_dir() -> PathBuf {
    let d = target_dir().join("plugin");
    assert!(
        d.join("libomptarget.rtl.x86_64.so").is_file(),
        "{} has no plugins: run `cargo xtask build-plugin` (or `cargo xtask test`) first",
        d.display()
    );
    d
}

pub fn clang16() -> PathBuf {
    ["/usr/bin/clang-16"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect(
            "clang-16 is not installed: run `cargo xtask test` as root (it installs \
             clang-16 libomp-16-dev clang-tools-16 libffi-dev)",
        )
}

/// A fresh directory for one test's files.
/// A fresh, empty directory for one caller: unique per call, since tests in one process
/// run in parallel and may ask for the same name (a shared directory that each caller
/// clears made them delete each other's images).
pub fn scratch(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = target_dir()
        .join("plugin-tests")
        .join(format!("{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create a scratch directory");
    d
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("could not run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}:\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Compile an OpenMP program for the x86_64 offload device (what `cargo xtask demo`
/// does): the device image links device-rtl through the offload linker.
pub fn compile_offload_program(source: &Path, output: &Path, with_device_rtl: bool) {
    // C++ programs link libstdc++ (host and device image) through the C++ driver.
    let driver = match source.extension().and_then(|e| e.to_str()) {
        Some("cpp") => clang16().with_file_name("clang++-16"),
        _ => clang16(),
    };
    let mut cmd = Command::new(driver);
    cmd.args(["-O1", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu"])
        .arg("-I")
        .arg(root().join("host-plugin/include"));
    if with_device_rtl {
        let x = "-Xoffload-linker-x86_64-pc-linux-gnu";
        cmd.args([x, "--undefined=__kmpc_target_translate_fptr", x])
            .arg(device_staticlib());
    }
    run_ok(cmd.arg(source).arg("-o").arg(output));
}
