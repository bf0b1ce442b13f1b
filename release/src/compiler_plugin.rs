//! Building the compiler plugin (compiler-plugin/) for one clang: one shared library
//! holding the AST glue (C++, against libclang-N-dev) and the LLVM N pass (Rust,
//! llvm-plugin), for N = 16 (the default, Debian 12), 17 or 18 (Debian 13).
//!
//! Contract used by other xtask modules:
//! - `build_for(major)` builds the plugin for clang `major` (the crate's feature
//!   `llvm<major>`) and returns target/release/libcompiler_plugin.so. Each version's
//!   build writes the same file: the last one built is there.
use crate::util;
use anyhow::{ensure, Result};
use std::path::PathBuf;
use xshell::Shell;

/// The LLVM versions the plugin can be built for (the crate's features).
pub const LLVM_MAJORS: [u32; 3] = [16, 17, 18];

/// Debian packages the plugin builds against: LLVM N's headers and llvm-config, clang
/// N's headers, and the libclang-cpp.so link name.
pub fn debian_packages(major: u32) -> [String; 3] {
    [
        format!("llvm-{major}-dev"),
        format!("libclang-{major}-dev"),
        format!("libclang-cpp{major}-dev"),
    ]
}

/// Where Debian installs LLVM N (what llvm-plugin's `llvmN-0` feature and build.rs look
/// for through LLVM_SYS_<N>0_PREFIX).
pub fn llvm_prefix(major: u32) -> PathBuf {
    PathBuf::from(format!("/usr/lib/llvm-{major}"))
}

pub fn build_for(major: u32) -> Result<PathBuf> {
    ensure!(
        LLVM_MAJORS.contains(&major),
        "the compiler plugin is built for LLVM {LLVM_MAJORS:?}, not {major}"
    );
    util::section(&format!(
        "build compiler plugin (clang {major}: AST glue + LLVM pass)"
    ));
    let packages = debian_packages(major);
    util::ensure_debian_packages(&packages.each_ref().map(String::as_str))?;
    if major == 16 {
        // The tests that use the plugin compile with clang-16 (Debian 12's LLVM).
        util::llvm16("clang")?;
    }
    let sh = Shell::new()?;
    sh.set_var(format!("LLVM_SYS_{major}0_PREFIX"), llvm_prefix(major));
    let features = format!("llvm{major}");
    // 16 is the crate's default feature; the others replace it (exactly one may be on).
    let select: Vec<&str> = if major == 16 {
        vec!["--lib"]
    } else {
        vec!["--lib", "--no-default-features", "--features", &features]
    };
    util::build_release(&sh, "compiler-plugin", &select, "libcompiler_plugin.so")
}
