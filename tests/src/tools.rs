//! The toolchains the tests compile fixtures with. Each lookup fails with the command
//! that installs the tool (`cargo xtask test`, run as root, installs them all).

use std::path::{Path, PathBuf};
use std::process::Command;

/// An executable called `tool` on PATH.
pub fn which(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// An LLVM 22 tool: `<tool>-22` on PATH or /usr/lib/llvm-22/bin/<tool>.
pub fn llvm22(tool: &str) -> PathBuf {
    let versioned = format!("{tool}-22");
    which(&versioned)
        .or_else(|| {
            let p = Path::new("/usr/lib/llvm-22/bin").join(tool);
            p.is_file().then_some(p)
        })
        .unwrap_or_else(|| {
            panic!(
                "{versioned} not found: install clang-22 lld-22 llvm-22 clang-tools-22 \
                 (`cargo xtask test` does)"
            )
        })
}

/// clang 16, the compiler whose OpenMP output libomptarget 16 runs. Its sibling
/// `clang++-16` sits next to it.
pub fn clang16() -> PathBuf {
    which("clang-16")
        .or_else(|| Some(PathBuf::from("/usr/bin/clang-16")).filter(|p| p.is_file()))
        .expect(
            "clang-16 is not installed: run `cargo xtask test` as root (it installs \
             clang-16 libomp-16-dev clang-tools-16 libffi-dev)",
        )
}

/// The system C compiler (cc or gcc), for host-side stand-ins.
pub fn host_cc() -> PathBuf {
    which("cc")
        .or_else(|| which("gcc"))
        .expect("a C compiler (cc or gcc) is needed to build the stand-in HIP library")
}

/// ptxas: on PATH, under CUDA_HOME, or in the `nvidia-cuda-nvcc` Python wheel.
pub fn ptxas() -> PathBuf {
    if let Some(p) = which("ptxas") {
        return p;
    }
    if let Some(p) = std::env::var_os("CUDA_HOME")
        .map(|home| PathBuf::from(home).join("bin/ptxas"))
        .filter(|p| p.is_file())
    {
        return p;
    }
    // The wheel installs under the `nvidia` namespace package: nvidia/cu13/bin/ptxas.
    let out = Command::new("python3")
        .args([
            "-c",
            "import nvidia, os; print('\\n'.join(os.path.join(p, 'cu13', 'bin', 'ptxas') for p in nvidia.__path__))",
        ])
        .output();
    out.ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(PathBuf::from)
                .find(|p| p.is_file())
        })
        .expect(
            "ptxas not found: `python3 -m pip install nvidia-cuda-nvcc` (`cargo xtask test` does)",
        )
}
