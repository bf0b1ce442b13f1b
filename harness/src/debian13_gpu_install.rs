//! The GPU side of `cargo xtask install --llvm N`, checked in LLVM N's Debian 13 root (a
//! part of `cargo xtask debian13-programs --llvm N`; nothing runs on a GPU here):
//! 1. [`write_bitcode`]: the device RTL's GPU bitcode, which this machine builds (Rust
//!    for the GPU targets and LLVM 22, neither in the root), rewritten for LLVM N with
//!    the root's own clang-N (its data layout) and llvm-as-N (which checks the result):
//!    `device_rtl.llvmN.bc` beside each GPU bitcode. The install inside the root takes
//!    the device RTL from there ([`device_build::DEVICE_DIR_ENV`], [`install_env`]).
//! 2. [`device_link_test`]: `tests/tests/device_link.rs`'s clang-N test with the root's
//!    clang-N: `clang-N -mlink-builtin-bitcode` links that bitcode into an sm_90 image
//!    (ptxas accepts it) and a gfx90a object, and both keep the lookup's loads of its
//!    four globals.
//! 3. [`config_program`]: the standard C program built by clang-N for sm_90 through the
//!    installed nvptx64 config: its sm_90 image defines our lookup (the compiler plugin's
//!    calls pulled our member of the installed device runtime archive in) and the four
//!    globals, exported, as the cuda plugin finds them by name.
use crate::indirect_programs::{self, Clang};
use crate::{debian_root, util};
use anyhow::{ensure, Context, Result};
use std::path::Path;

const SM: &str = "sm_90";
const PROGRAM: &str = "indirect_standard";

/// Step 1 (the root's mounts must show this machine's target folder).
pub fn write_bitcode(major: u32, root: &Path) -> Result<()> {
    util::section(&format!(
        "LLVM {major} in Debian 13: the device RTL's GPU bitcode for clang-{major} (the root's tools)"
    ));
    device_build::build_all()?;
    device_build::write_older_bitcode_in(major, &debian_root::InRoot(root))
}

/// `VAR=value` for the install inside the root: take the device RTL of this machine.
pub fn install_env() -> String {
    format!(
        "{}={}",
        device_build::DEVICE_DIR_ENV,
        device_build::device_dir().display()
    )
}

/// Step 2: runs the ignored clang-N test of device_link.rs on this machine, its clang a
/// script that runs the root's (written under `build`). Returns a one-line summary.
pub fn device_link_test(
    sh: &xshell::Shell,
    root: &Path,
    major: u32,
    build: &Path,
) -> Result<String> {
    let clang = build.join(format!("bin/clang-{major}"));
    debian_root::write_chroot_script(&clang, root, &format!("clang-{major}"))?;
    let test = format!("clang_{major}_links_the_llvm{major}_bitcode_into_sm90_and_gfx90a_images");
    let cargo = util::cargo();
    let output = xshell::cmd!(
        sh,
        "{cargo} test -p e2e-tests --test device_link -- --ignored --exact {test}"
    )
    .env(test_support::tools::clang_in_root_env(major), &clang)
    .ignore_status()
    .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success() && stdout.contains("test result: ok. 1 passed"),
        "device_link.rs {test} with the root's clang-{major} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(format!(
        "clang-{major} -mlink-builtin-bitcode: device_rtl.llvm{major}.bc linked into {SM} and gfx90a images, lookup and globals kept"
    ))
}

/// Step 3: builds [`PROGRAM`] (the kits' standard C program) with clang-`major` inside
/// `root` through the installed nvptx64 config under `prefix`, into `out`, and checks its
/// sm_90 image ([`indirect_programs::check_cubin`]: one image that defines and exports
/// the lookup and its globals, a kernel calling it). Returns a one-line summary.
pub fn config_program(root: &Path, major: u32, prefix: &Path, out: &Path) -> Result<String> {
    let program = indirect_programs::STANDARD_GPU_PROGRAMS
        .iter()
        .find(|p| p.name == PROGRAM)
        .context("the kits have no indirect_standard program")?;
    let config = install_layout::Prefix::new(prefix).config(install_layout::NVPTX_TRIPLE);
    program.build(Clang::InRoot { major, root }, &config, SM, out)?;
    Ok(format!(
        "{PROGRAM} through the installed clang-{major} nvptx64 config: the {SM} image defines and exports the lookup and its globals, a kernel calls it"
    ))
}
