//! Compiling OpenMP programs the way the project's users do.

use crate::paths::root;
use crate::process::run_ok;
use crate::tools::clang16;
use std::path::Path;
use std::process::Command;

/// Compile an OpenMP program for the x86_64 offload device with clang 16 (what
/// `cargo xtask demo` does). With `device_rtl` (device-rtl's x86_64 static library) the
/// device image links it through the offload linker.
pub fn compile_offload_program(source: &Path, output: &Path, device_rtl: Option<&Path>) {
    // C++ programs link libstdc++ (host and device image) through the C++ driver.
    let driver = match source.extension().and_then(|e| e.to_str()) {
        Some("cpp") => clang16().with_file_name("clang++-16"),
        _ => clang16(),
    };
    let mut cmd = Command::new(driver);
    cmd.args(["-O1", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu"])
        .arg("-I")
        .arg(root().join("host-plugin/include"));
    if let Some(library) = device_rtl {
        let x = "-Xoffload-linker-x86_64-pc-linux-gnu";
        cmd.args([x, "--undefined=__kmpc_target_translate_fptr", x])
            .arg(library);
    }
    run_ok(cmd.arg(source).arg("-o").arg(output));
}
