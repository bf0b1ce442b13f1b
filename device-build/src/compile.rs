//! One target's `cargo rustc` with the chosen toolchain, its artifact delivered under
//! target/device/ with the artifact rules applied and checked.

use crate::older_llvm::{older_llvms, to_older_bitcode, OlderLlvm};
use crate::targets::{older_output_of, output_of, Artifact, DeviceTarget};
use crate::toolchain::Toolchain;
use crate::{read_only_globals, symbols};
use anyhow::{Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use xshell::{cmd, Shell};

/// `cargo rustc` for one target with the chosen toolchain, then copy the artifact to
/// target/device/ and check it defines the exported symbols and needs nothing it
/// should not.
pub fn build_target(toolchain: &Toolchain, target: &DeviceTarget) -> Result<()> {
    crate::tools::section(&format!("device-rtl for {}", target.label()));
    let build_dir = test_support::workspace::target_dir()
        .join("device-build")
        .join(target.label().replace('/', "-"));
    // RUSTFLAGS reach `core` too; the cfg and --emit below only device-rtl itself.
    let mut rustflags = Vec::new();
    if let Some(cpu) = target.cpu {
        // amdgcn cannot generate code without a CPU, so `core` gets it too.
        rustflags.push(format!("-Ctarget-cpu={cpu}"));
    }
    if target.artifact == Artifact::StaticLib {
        // The library goes into shared objects (offload device images).
        rustflags.push("-Crelocation-model=pic".into());
    }
    let crate_type: &[&str] = match target.artifact {
        Artifact::StaticLib => &["--crate-type", "staticlib"],
        Artifact::Bitcode => &[],
    };
    let variant_cfg: Vec<&str> = target
        .variant
        .iter()
        .flat_map(|&(_, cfg)| ["--cfg", cfg])
        .collect();
    let emit: &[&str] = match target.artifact {
        Artifact::Bitcode => &["--emit=llvm-bc,link"],
        Artifact::StaticLib => &[],
    };
    let (cargo, triple, panic) = (
        &toolchain.cargo,
        target.triple,
        "profile.release.panic=\"abort\"",
    );
    let sh = Shell::new()?;
    sh.change_dir(test_support::workspace::root());
    // No DWARF in device bitcode: it only gets in the way of the kernels' own.
    let mut cmd = cmd!(
        sh,
        "{cargo} rustc -p device-rtl --release --target {triple} -Zbuild-std=core --config {panic} --config profile.release.debug=false {crate_type...} -- --cfg device_rtl_artifact {variant_cfg...} {emit...}"
    );
    // Only what we set: the calling cargo's (rustup's) settings must not leak in.
    for var in [
        "RUSTUP_TOOLCHAIN",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTDOC",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
    ] {
        cmd = cmd.env_remove(var);
    }
    cmd.env("RUSTC", &toolchain.rustc)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_TARGET_DIR", &build_dir)
        .env("RUSTFLAGS", rustflags.join(" "))
        .run()?;

    let release = build_dir.join(target.triple).join("release");
    let built = match target.artifact {
        Artifact::Bitcode => newest_with_prefix(&release.join("deps"), "device_rtl-", ".bc")?,
        Artifact::StaticLib => release.join("libdevice_rtl.a"),
    };
    let out = output_of(target);
    fs::create_dir_all(out.parent().expect("outputs live in a directory"))?;
    fs::copy(&built, &out)
        .with_context(|| format!("copying {} to {}", built.display(), out.display()))?;
    if target.artifact == Artifact::Bitcode {
        read_only_globals::mark(&out)?;
    }
    symbols::check(&out, target.artifact)?;
    eprintln!("wrote {}", out.display());
    if target.artifact == Artifact::Bitcode {
        for major in older_llvms() {
            let older = older_output_of(target, major);
            to_older_bitcode(&out, &older, OlderLlvm::Here(major), target.triple)?;
            eprintln!("wrote {} (LLVM {major})", older.display());
        }
    }
    Ok(())
}
/// rustc names the bitcode `device_rtl-<hash>.bc`; take the most recent one.
fn newest_with_prefix(dir: &Path, prefix: &str, suffix: &str) -> Result<PathBuf> {
    let mut best: Option<(SystemTime, PathBuf)> = None;
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with(prefix) && name.ends_with(suffix) {
            let mtime = fs::metadata(&path)?.modified()?;
            if best.as_ref().is_none_or(|(t, _)| mtime > *t) {
                best = Some((mtime, path));
            }
        }
    }
    best.map(|(_, p)| p)
        .with_context(|| format!("no {prefix}*{suffix} in {}", dir.display()))
}
