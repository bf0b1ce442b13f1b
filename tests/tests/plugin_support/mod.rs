//! Helpers of the plugin tests: device-rtl's x86_64 library, the built plugin files,
//! and device images and programs compiled by clang 16 against them.
#![allow(dead_code)]

use e2e_tests::paths::{fixture, require_file, target_dir};
use e2e_tests::plugin::built_plugin_dir;
use e2e_tests::process::run_ok;
use e2e_tests::tools::clang16;
use std::path::{Path, PathBuf};
use std::process::Command;

/// device-rtl's x86_64 static library, built by `cargo xtask build-device`.
pub fn device_staticlib() -> PathBuf {
    require_file(
        target_dir().join("device/x86_64-unknown-linux-gnu/libdevice_rtl.a"),
        "`cargo xtask build-device` (or `cargo xtask test`)",
    )
}

/// target/plugin/, filled by `cargo xtask build-plugin`.
pub fn plugin_dir() -> PathBuf {
    let d = built_plugin_dir();
    assert!(
        d.join("libomptarget.rtl.x86_64.so").is_file(),
        "{} has no plugins: run `cargo xtask build-plugin` (or `cargo xtask test`) first",
        d.display()
    );
    d
}

/// A fresh, empty directory for one caller under target/plugin-tests/ (unique per
/// call: see `e2e_tests::paths::scratch`).
pub fn scratch(name: &str) -> PathBuf {
    e2e_tests::paths::scratch("plugin-tests", name)
}

/// tests/fixtures/plugin/<name>.c built into an x86-64 shared object, the host
/// backend's image format; with `with_device_rtl` it links device-rtl's lookup.
pub fn host_image(name: &str, with_device_rtl: bool) -> Vec<u8> {
    let dir = scratch(&format!("image-{name}"));
    let so = dir.join(format!("{name}.so"));
    let mut cmd = Command::new(clang16());
    cmd.args(["-O1", "-shared", "-fPIC"])
        .arg(fixture(&format!("plugin/{name}.c")));
    if with_device_rtl {
        cmd.arg("-Wl,--undefined=__kmpc_target_translate_fptr")
            .arg(device_staticlib());
    }
    run_ok(cmd.arg("-o").arg(&so));
    std::fs::read(&so).expect("read the built image")
}

/// Compile an OpenMP program for the x86_64 offload device; with `with_device_rtl` its
/// device image links device-rtl.
pub fn compile_offload_program(source: &Path, output: &Path, with_device_rtl: bool) {
    let library = with_device_rtl.then(device_staticlib);
    e2e_tests::compile::compile_offload_program(source, output, library.as_deref());
}
