//! Compiling OpenMP programs the way the project's users do.

use crate::paths::root;
use crate::process::run_ok;
use crate::tools::{clang16, llvm16, ptxas};
use std::path::Path;
use std::process::Command;

/// Compile an OpenMP program for the x86_64 offload device with clang 16 (what
/// `cargo xtask demo` does). With `device_rtl` (device-rtl's x86_64 static library) the
/// device image links it through the offload linker.
pub fn compile_offload_program(source: &Path, output: &Path, device_rtl: Option<&Path>) {
    compile_offload_sources(&[source], output, device_rtl, &[]);
}

/// [`compile_offload_program`] for a program of several translation units, with extra
/// arguments for clang (e.g. `-Xoffload-linker-x86_64-pc-linux-gnu -s`).
pub fn compile_offload_sources(
    sources: &[&Path],
    output: &Path,
    device_rtl: Option<&Path>,
    extra_args: &[&str],
) {
    // C++ programs link libstdc++ (host and device image) through the C++ driver.
    let is_cxx = sources
        .iter()
        .any(|s| s.extension().and_then(|e| e.to_str()) == Some("cpp"));
    let driver = if is_cxx { llvm16("clang++") } else { clang16() };
    let mut cmd = Command::new(driver);
    cmd.args(["-O1", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu"])
        .arg("-I")
        .arg(root().join("host-plugin/include"))
        .args(extra_args);
    if let Some(library) = device_rtl {
        let x = "-Xoffload-linker-x86_64-pc-linux-gnu";
        cmd.args([x, "--undefined=__kmpc_target_translate_fptr", x])
            .arg(library);
    }
    run_ok(cmd.args(sources).arg("-o").arg(output));
}

/// Compile an OpenMP program for an NVIDIA GPU (`sm`, e.g. `sm_90`) with clang 16 alone:
/// LLVM 16's device runtime, nothing of this project's, ptxas and nvlink from CUDA's
/// wheel behind a minimal `--cuda-path` folder made beside `output`.
pub fn compile_nvptx_program(source: &Path, output: &Path, sm: &str, extra_args: &[&str]) {
    let folder = output.with_extension("cuda");
    let cuda = test_support::cuda::folder_for_clang(&ptxas(), &folder)
        .unwrap_or_else(|e| panic!("a --cuda-path folder in {}: {e}", folder.display()));
    run_ok(
        Command::new(clang16())
            .args([
                "-O1",
                "-fopenmp",
                "-fopenmp-targets=nvptx64-nvidia-cuda",
                "-Xopenmp-target",
            ])
            .arg(format!("-march={sm}"))
            .arg("-Wno-unknown-cuda-version")
            .args(extra_args)
            .arg(format!("--cuda-path={}", cuda.display()))
            .arg(source)
            .arg("-o")
            .arg(output),
    );
}

/// Compile a standard OpenMP program for an NVIDIA GPU (`sm`, e.g. `sm_90`) the way its
/// users do: clang 16 through an installed config file (`config`, e.g.
/// `<prefix>/share/omptarget-indirect/nvptx64-nvidia-cuda.cfg`: the compiler plugin and
/// the device runtime with the lookup), `--offload-arch=<sm>`, ptxas and nvlink from
/// CUDA's wheel behind a minimal `--cuda-path` folder made beside `output`.
pub fn compile_nvptx_with_config(
    config: &Path,
    source: &Path,
    output: &Path,
    sm: &str,
    extra_args: &[&str],
) {
    let folder = output.with_extension("cuda");
    let cuda = test_support::cuda::folder_for_clang(&ptxas(), &folder)
        .unwrap_or_else(|e| panic!("a --cuda-path folder in {}: {e}", folder.display()));
    run_ok(
        Command::new(clang16())
            .arg(format!("--config={}", config.display()))
            .arg(format!("--offload-arch={sm}"))
            .arg(format!("--cuda-path={}", cuda.display()))
            .arg("-Wno-unknown-cuda-version")
            .args(extra_args)
            .arg(source)
            .arg("-o")
            .arg(output),
    );
}
