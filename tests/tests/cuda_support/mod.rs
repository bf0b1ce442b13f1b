//! Shared helpers of the CUDA tests: the kernel fixtures (built here with clang-22 and
//! ptxas, or read prebuilt from `OMPTARGET_RS_CUDA_FIXTURES` on a GPU machine that has
//! no clang), and the one-line skip where there is no driver or GPU.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The SM architectures the fixtures are built for.
pub const ARCHES: [u32; 2] = [90, 80];
pub const FIXTURE: &str = "indirect_calls";
/// Where gpu-bundle's run.sh points the tests at the prebuilt cubins.
pub const FIXTURES_ENV: &str = "OMPTARGET_RS_CUDA_FIXTURES";

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

/// Where the fixture cubins are built: target/cuda-fixtures/ (gpu-bundle copies them).
pub fn fixture_dir() -> PathBuf {
    target_dir().join("cuda-fixtures")
}

pub fn cubin_name(sm: u32) -> String {
    format!("{FIXTURE}.sm_{sm}.cubin")
}

/// The one line a GPU test prints when it cannot run here; the test then passes.
pub fn skip(test: &str, reason: &str) {
    println!("SKIPPED: {test}: no CUDA driver/GPU ({reason})");
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

fn clang22() -> PathBuf {
    which("clang-22")
        .or_else(|| Some(PathBuf::from("/usr/lib/llvm-22/bin/clang")).filter(|p| p.is_file()))
        .expect("clang-22 not found: install clang-22 (`cargo xtask test` does)")
}

/// ptxas from PATH, CUDA_HOME, or the nvidia-cuda-nvcc wheel.
pub fn ptxas() -> PathBuf {
    if let Some(p) = which("ptxas") {
        return p;
    }
    if let Some(p) = std::env::var_os("CUDA_HOME")
        .map(|h| PathBuf::from(h).join("bin/ptxas"))
        .filter(|p| p.is_file())
    {
        return p;
    }
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

fn run(cmd: &mut Command) {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("could not start {shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed with {}:\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Build the fixture for one SM: clang-22 links device_rtl.bc into the C kernels and
/// writes PTX, ptxas assembles the cubin. Returns (ptx, cubin) paths.
pub fn build_fixture(sm: u32) -> (PathBuf, PathBuf) {
    let bc = target_dir().join("device/nvptx64-nvidia-cuda/device_rtl.bc");
    assert!(
        bc.is_file(),
        "{} is missing: run `cargo xtask build-device` first",
        bc.display()
    );
    let dir = fixture_dir();
    std::fs::create_dir_all(&dir).expect("create target/cuda-fixtures");
    let ptx = dir.join(format!("{FIXTURE}.sm_{sm}.ptx"));
    let cubin = dir.join(cubin_name(sm));
    // Build under a per-process name and rename: tests run in parallel.
    let tmp = dir.join(format!("{}.{}.tmp", cubin_name(sm), std::process::id()));
    run(Command::new(clang22())
        .arg("--target=nvptx64-nvidia-cuda")
        .arg(format!("-march=sm_{sm}"))
        .args(["-Xclang", "-target-feature", "-Xclang", "+ptx80"])
        .args(["-nogpulib", "-O2", "-S"])
        .arg(root().join(format!("tests/fixtures/cuda/{FIXTURE}.c")))
        .args(["-Xclang", "-mlink-builtin-bitcode", "-Xclang"])
        .arg(&bc)
        .arg("-o")
        .arg(&ptx));
    run(Command::new(ptxas())
        .arg(format!("-arch=sm_{sm}"))
        .arg(&ptx)
        .arg("-o")
        .arg(&tmp));
    std::fs::rename(&tmp, &cubin).expect("move the cubin into place");
    (ptx, cubin)
}

/// The cubin for one SM: prebuilt from `OMPTARGET_RS_CUDA_FIXTURES`, else built now.
pub fn fixture_cubin(sm: u32) -> Vec<u8> {
    let path = match std::env::var_os(FIXTURES_ENV) {
        Some(dir) => PathBuf::from(dir).join(cubin_name(sm)),
        None => build_fixture(sm).1,
    };
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (build the fixtures with `cargo xtask gpu-bundle` or run where \
             clang-22 and ptxas are)",
            path.display()
        )
    })
}
