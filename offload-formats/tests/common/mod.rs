//! Helpers shared by the integration tests: the real LLVM 22 tools, our CLI, scratch
//! directories and deterministic test data.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
/// The tools as every test of the workspace finds them (test-support); each fails the
/// test with the install command when it is missing. (Each test file uses a part.)
#[allow(unused_imports)]
pub use test_support::tools::{find_llvm, llvm22, ptxas};

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
