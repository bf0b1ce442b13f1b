//! Building the clang 16 compiler plugin (compiler-plugin/): one shared library holding
//! the AST glue (C++, against libclang-16-dev) and the LLVM 16 pass (Rust, llvm-plugin).
//!
//! Contract used by other xtask modules:
//! - `build()` builds and returns target/release/libcompiler_plugin.so.
use crate::util;
use anyhow::Result;
use std::path::PathBuf;
use xshell::Shell;

/// Debian packages the plugin builds against: LLVM 16's headers and llvm-config, clang
/// 16's headers, and the libclang-cpp.so link name.
pub const DEBIAN_PACKAGES: &[&str] = &["llvm-16-dev", "libclang-16-dev", "libclang-cpp16-dev"];

/// Where Debian installs LLVM 16 (what llvm-plugin's `llvm16-0` feature looks for).
pub const LLVM16_PREFIX: &str = "/usr/lib/llvm-16";

pub fn build() -> Result<PathBuf> {
    util::section("build compiler plugin (clang 16: AST glue + LLVM pass)");
    util::ensure_debian_packages(DEBIAN_PACKAGES)?;
    util::llvm16("clang")?;
    let sh = Shell::new()?;
    sh.set_var("LLVM_SYS_160_PREFIX", LLVM16_PREFIX);
    util::build_release(&sh, "compiler-plugin", &["--lib"], "libcompiler_plugin.so")
}
