//! Building the clang 16 compiler plugin (compiler-plugin/): one shared library holding
//! the AST glue (C++, against libclang-16-dev) and the LLVM 16 pass (Rust, llvm-plugin).
//!
//! Contract used by other xtask modules:
//! - `build()` builds and returns target/release/libcompiler_plugin.so.
use crate::util;
use anyhow::{ensure, Result};
use std::path::PathBuf;
use std::process::Command;

/// Debian packages the plugin builds against: LLVM 16's headers and llvm-config, clang
/// 16's headers, and the libclang-cpp.so link name.
pub const DEBIAN_PACKAGES: &[&str] = &["llvm-16-dev", "libclang-16-dev", "libclang-cpp16-dev"];

/// Where Debian installs LLVM 16 (what llvm-plugin's `llvm16-0` feature looks for).
pub const LLVM16_PREFIX: &str = "/usr/lib/llvm-16";

pub fn build() -> Result<PathBuf> {
    util::section("build compiler plugin (clang 16: AST glue + LLVM pass)");
    util::ensure_debian_packages(DEBIAN_PACKAGES)?;
    util::llvm16("clang")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    util::run(
        Command::new(cargo)
            .current_dir(util::root())
            .args(["build", "--release", "-p", "compiler-plugin", "--lib"])
            .env("LLVM_SYS_160_PREFIX", LLVM16_PREFIX),
    )?;
    let built = util::target_dir().join("release/libcompiler_plugin.so");
    ensure!(built.is_file(), "cargo did not produce {}", built.display());
    Ok(built)
}
