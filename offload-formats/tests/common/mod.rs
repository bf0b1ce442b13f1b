//! Helpers shared by the integration tests: the real LLVM 22 tools, our CLI, scratch
//! directories and deterministic test data.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// An LLVM 22 tool; fails the test with the install command when it is missing.
pub fn llvm22(tool: &str) -> PathBuf {
    let p = PathBuf::from("/usr/lib/llvm-22/bin").join(tool);
    assert!(
        p.is_file(),
        "{} not found: install LLVM 22 with `apt-get install -y clang-22 llvm-22 lld-22` (as root)",
        p.display()
    );
    p
}

pub fn bundler() -> PathBuf {
    llvm22("clang-offload-bundler")
}

pub fn ours() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_offload-inspect"))
}

/// A fresh scratch directory under the target dir, unique per test name.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("could not run {cmd:?}: {e}"))
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Write `data` to `dir/name` and return the path as a string.
pub fn file(dir: &Path, name: &str, data: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p.to_str().unwrap().to_owned()
}

/// The message after "error: " in a tool's stderr (program names differ).
pub fn error_text(out: &Output) -> String {
    let s = String::from_utf8_lossy(&out.stderr);
    s.lines()
        .find_map(|l| l.split_once("error: ").map(|(_, m)| m.to_owned()))
        .unwrap_or_default()
}

/// ptxas from CUDA's PyPI wheel (`nvidia-cuda-nvcc`), as `cargo xtask build-device` uses.
pub fn ptxas() -> PathBuf {
    if let Some(p) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("ptxas"))
            .find(|c| c.is_file())
    }) {
        return p;
    }
    let out = run(Command::new("python3").args([
        "-c",
        "import nvidia, os; print('\\n'.join(os.path.join(p, 'cu13', 'bin', 'ptxas') for p in nvidia.__path__))",
    ]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("ptxas not found: `python3 -m pip install nvidia-cuda-nvcc` (or run `cargo xtask build-device`, which installs it)")
}

/// A minimal CUDA installation for clang's OpenMP offload driver: `include/cuda.h`
/// naming a CUDA version (so clang picks a PTX version sm_90 accepts), `bin/ptxas`, and
/// an empty libdevice (the test programs use no libdevice functions).
pub fn fake_cuda_path(dir: &Path) -> PathBuf {
    let cuda = dir.join("cuda");
    for sub in ["include", "bin", "nvvm/libdevice"] {
        std::fs::create_dir_all(cuda.join(sub)).unwrap();
    }
    std::fs::write(cuda.join("include/cuda.h"), "#define CUDA_VERSION 12080\n").unwrap();
    std::fs::write(cuda.join("nvvm/libdevice/libdevice.10.bc"), b"").unwrap();
    let link = cuda.join("bin/ptxas");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(ptxas(), &link).unwrap();
    cuda
}

/// tests/data/indirect.c: a C program with `declare target indirect` functions.
pub const INDIRECT_PROGRAM: &str = include_str!("../data/indirect.c");

/// Compile `source` (written to `dir/indirect.c`) with `clang` for the x86_64 offload
/// target into `dir/<out>`, with `extra` flags (`-c` for an object); returns the output's
/// path. A linked program's device link wants a -lomp, which Debian's LLVM 22 lacks: LLVM
/// 16's libomp serves.
pub fn compile_openmp_x86(
    clang: &Path,
    dir: &Path,
    source: &str,
    out: &str,
    extra: &[&str],
) -> String {
    let src = file(dir, "indirect.c", source.as_bytes());
    let out = dir.join(out).to_str().unwrap().to_owned();
    assert!(
        Path::new("/usr/lib/llvm-16/lib/libomp.so").exists(),
        "libomp from LLVM 16 is missing: `apt-get install -y libomp-16-dev`"
    );
    run_ok(
        Command::new(clang)
            .args([
                "-fopenmp",
                "-fopenmp-targets=x86_64-pc-linux-gnu",
                "-L/usr/lib/llvm-16/lib",
            ])
            .args(extra)
            .arg(&src)
            .arg("-o")
            .arg(&out),
    );
    out
}
