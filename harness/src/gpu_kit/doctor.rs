//! The install's doctor in the kit: `omptarget-indirect-doctor` (doctor/) with the part
//! of the install it checks, packed as `doctor/prefix.tar.xz`. The runner unpacks it
//! into a prefix of its own, copies the kit's plugin file to every plugin name the
//! install has in `lib/`, and its `doctor` step runs
//!
//! ```text
//! <prefix>/bin/omptarget-indirect-doctor --prefix <prefix> --llvm-root <unpacked closure> --timeout 60
//! ```
//!
//! with `LD_LIBRARY_PATH=<prefix>/lib:<unpacked closure>/lib` (our plugins first, as
//! the `programs` step has them), so that the doctor finds the kit's libomptarget 16,
//! not /usr/lib/llvm-16 (which a GPU machine lacks), and says which plugin loads, what
//! the GPUs are, and runs the self-tests on the host, the isolated host device and each
//! CUDA device.
//!
//! The prefix holds, from the install [`super::programs`] builds the standard programs
//! through (target/install):
//! - what runs there ([`RUNS`]): the doctor; the isolated host device's process (the
//!   x86_64 plugin starts it from `../libexec/omptarget-indirect/`); the self-test
//!   programs for x86_64 and the kit's [`SM`] (not the install's other arches). These
//!   are roots of the kit's closure (and its glibc check) as the kit's own ELF files
//!   are, through [`Kit::packed_roots`], and run.sh's `kit_libraries` step checks them;
//! - what the doctor only reads ([`READ_ONLY`]): the three clang config files and what
//!   they name (the compiler plugin, `include/`, the x86_64 device RTL archive), and
//!   the device runtime archive whose members say which sm_XY our device RTL has. The
//!   compiler plugin needs libclang-cpp.so.16: clang-16 loads it, nothing in the kit
//!   does, so `kit_libraries` leaves it out (the manifest says why) and so does the
//!   closure.
//!
//! The plugin copies are made by the runner from the kit's one plugin file (the one
//! every other step runs; the install's copies are the same build with a debug link),
//! six copies of 1.9 MB the kit does not carry.
//!
//! A GPU machine has no clang: the doctor warns about it (programs cannot be compiled
//! there) and passes, so the step requires no FAIL line and exit status 0.

use super::{build_dir, relative, Kit, SM};
use crate::util;
use anyhow::{ensure, Context, Result};
use serde_json::json;
use std::fs;
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// The install's files the doctor runs on the GPU machine (relative to the prefix;
/// `{SM}` is the kit's).
const RUNS: &[&str] = &[
    "bin/omptarget-indirect-doctor",
    "libexec/omptarget-indirect/omptarget-rs-device",
    "libexec/omptarget-indirect/self-test/standard_indirect.x86_64-pc-linux-gnu",
    "libexec/omptarget-indirect/self-test/standard_indirect.nvptx64-nvidia-cuda.{SM}",
];

/// The install's files and folders the doctor only reads: the configs and what they
/// name, the device runtime archive (its members' names).
const READ_ONLY: &[&str] = &[
    "share/omptarget-indirect/x86_64-pc-linux-gnu.cfg",
    "share/omptarget-indirect/nvptx64-nvidia-cuda.cfg",
    "share/omptarget-indirect/amdgcn-amd-amdhsa.cfg",
    "lib/libomptarget-indirect-clang16.so",
    "include",
    "lib/omptarget-indirect/x86_64-unknown-linux-gnu/libdevice_rtl.a",
    "lib/omptarget-indirect/libomptarget.devicertl.a",
];

/// Of [`READ_ONLY`], the ELF files nothing in the kit loads, and why (`kit_libraries`
/// does not check them).
const NOT_LOADED: &[(&str, &str)] = &[(
    "lib/libomptarget-indirect-clang16.so",
    "the compiler plugin: only clang-16 loads it (it needs libclang-cpp.so.16), and a GPU machine has no clang",
)];

/// What the doctor gets besides `--prefix` and `--llvm-root`: each self-test run may
/// take a minute (they take seconds).
const ARGS: &[&str] = &["--timeout", "60"];

/// Where the kit's prefix is staged: target/gpu-kit-build/doctor/prefix/.
fn staging() -> PathBuf {
    build_dir().join("doctor/prefix")
}

/// Puts the doctor and its part of the install at `prefix` into the kit.
pub fn add(kit: &mut Kit, prefix: &Path) -> Result<()> {
    util::section("gpu-bundle: the install's doctor and what it checks");
    util::ensure_debian_packages(&["xz-utils", "tar"])?;
    let stage = staging();
    if stage.exists() {
        fs::remove_dir_all(&stage).with_context(|| format!("clearing {}", stage.display()))?;
    }
    fs::create_dir_all(&stage)?;
    let runs: Vec<String> = RUNS.iter().map(|p| p.replace("{SM}", SM)).collect();
    let sh = Shell::new()?;
    for relative in runs
        .iter()
        .map(String::as_str)
        .chain(READ_ONLY.iter().copied())
    {
        let from = prefix.join(relative);
        ensure!(
            from.exists(),
            "the install in {} has no {relative} (`cargo xtask install` makes it)",
            prefix.display()
        );
        let to = stage.join(relative);
        fs::create_dir_all(to.parent().context("a file in a folder")?)?;
        cmd!(sh, "cp -a {from} {to}").run()?;
    }

    let archive = kit.path("doctor/prefix.tar.xz")?;
    pack(&stage, &archive)?;
    let (size, xz_size) = (super::folder_size(&stage)?, fs::metadata(&archive)?.len());
    kit.packed_roots
        .extend(runs.iter().map(|relative| stage.join(relative)));

    let plugin_copies: Vec<String> = install_layout::PLUGIN_KINDS
        .iter()
        .flat_map(|kind| install_layout::plugin_file_names(kind))
        .map(|name| format!("lib/{name}"))
        .collect();
    let not_loaded: Vec<_> = NOT_LOADED
        .iter()
        .map(|(path, why)| json!({"path": path, "why": why}))
        .collect();
    kit.set(
        "doctor",
        json!({
            "archive": relative(kit, &archive)?,
            "exe": runs[0],
            "args": ARGS,
            "plugin_copies": plugin_copies,
            "not_loaded": not_loaded,
            "size": size,
            "xz_size": xz_size,
        }),
    );
    eprintln!("  the doctor's prefix: {size} bytes -> {xz_size} bytes with xz -9e");
    Ok(())
}

/// `archive` (tar, xz -9e) of the folder `stage`, its top the prefix.
fn pack(stage: &Path, archive: &Path) -> Result<()> {
    let tar = build_dir().join("doctor/prefix.tar");
    super::closure::tar_xz(&tar, stage, &[], &["."], archive)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names here are the install's (install-layout's, which the doctor reads too).
    #[test]
    fn the_carried_paths_are_the_installs() {
        let doctor = format!("bin/{}", install_layout::DOCTOR);
        assert_eq!(RUNS[0], doctor);
        let host = install_layout::Prefix::new(Path::new(""))
            .self_test_program(install_layout::HOST_TRIPLE, None);
        let gpu = install_layout::Prefix::new(Path::new(""))
            .self_test_program(install_layout::NVPTX_TRIPLE, Some("{SM}"));
        assert_eq!(Path::new(RUNS[2]), host);
        assert_eq!(Path::new(RUNS[3]), gpu);
        assert_eq!(
            Path::new(RUNS[1]),
            Path::new(install_layout::LIBEXEC_DIR).join(install_layout::DEVICE_EXECUTABLE)
        );
        for triple in install_layout::CONFIG_TRIPLES {
            let config = install_layout::Prefix::new(Path::new("")).config(triple);
            assert!(READ_ONLY.iter().any(|p| Path::new(p) == config), "{triple}");
        }
        let compiler_plugin = format!("lib/{}", install_layout::compiler_plugin_file(16));
        assert!(READ_ONLY.contains(&compiler_plugin.as_str()));
        assert_eq!(NOT_LOADED[0].0, compiler_plugin);
    }
}
