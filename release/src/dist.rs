//! `cargo xtask dist [--llvm N]`: what a user installs, built from an install
//! ([`install::install_for`]) into target/dist/:
//!
//! - `omptarget-indirect-llvmN_<version>-1_amd64.deb` ([`deb`]): the install under
//!   `/usr/lib/omptarget-indirect/llvmN/` (a folder of its own: no file of LLVM's is
//!   replaced, and no path is in two versions' packages; Debian's own OpenMP runtimes of
//!   17 and 18 exclude each other, though), depending on clang-N and
//!   libomp-N-dev, checked by `lintian`;
//! - `omptarget-indirect-<version>-llvmN-x86_64-linux.tar.gz` ([`tarball`]): the same
//!   install, relocatable (the config files name everything relative to themselves), for
//!   users without root.
//!
//! Both carry the licence and the notices of the Rust crates linked in ([`notices`]).
//! A version is built on the Debian release that packages its LLVM ([`llvm_release`]):
//! here when this machine runs it, else inside a root of that release
//! ([`debian13_programs::dist`]); with no `--llvm`, all three. [`package_check`]
//! installs the results in bare Debian roots and runs the README's quick start there.

mod deb;
mod notices;
mod tarball;

use crate::{install, util};
use anyhow::{ensure, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// The project's version, as Cargo.toml says (the packages' upstream version).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Names and places of one LLVM version's packages.
#[derive(Clone, Copy)]
pub struct Release {
    pub major: u32,
}

impl Release {
    /// The Debian package's name.
    pub fn package(&self) -> String {
        format!("omptarget-indirect-llvm{}", self.major)
    }
    /// Where the package installs: a folder of ours, so no path of LLVM's is touched.
    pub fn prefix(&self) -> PathBuf {
        PathBuf::from(format!("/usr/lib/omptarget-indirect/llvm{}", self.major))
    }
    /// The .deb's file name.
    pub fn deb_file(&self) -> String {
        format!("{}_{VERSION}-1_amd64.deb", self.package())
    }
    /// The tarball's top folder (what a user uses as the prefix).
    pub fn tarball_dir(&self) -> String {
        format!("omptarget-indirect-{VERSION}-llvm{}", self.major)
    }
    /// The tarball's file name.
    pub fn tarball_file(&self) -> String {
        format!("{}-x86_64-linux.tar.gz", self.tarball_dir())
    }
    /// The doctor's name on PATH, from the package (one per version, so they coexist).
    pub fn doctor_on_path(&self) -> String {
        format!("{}-{}", install_layout::DOCTOR, self.major)
    }
}

/// What [`build`] made.
pub struct Built {
    pub deb: PathBuf,
    pub tarball: PathBuf,
}

/// target/dist/: the packages.
pub fn out_dir() -> PathBuf {
    util::target_dir().join("dist")
}

/// Install for `release` into a staging tree, then make its .deb and tarball.
pub fn build(release: Release, from_install: Option<&Path>, skip_lintian: bool) -> Result<Built> {
    let staging = util::target_dir()
        .join("dist-build")
        .join(release.package());
    if staging.exists() {
        fs::remove_dir_all(&staging).with_context(|| format!("removing {}", staging.display()))?;
    }
    // The package's file tree: what `dpkg -L` lists, and nothing else.
    let deb_root = staging.join("root");
    let prefix = host_path(&deb_root, &release.prefix());
    match from_install {
        Some(install) => copy_install(release, install, &prefix)?,
        None => {
            install::install_for(&prefix, release.major)?;
        }
    }
    util::section(&format!("dist: {}", release.package()));
    let notices = notices::write(release.major, &staging.join("THIRD-PARTY-NOTICES"))?;
    let out = out_dir();
    fs::create_dir_all(&out)?;
    let tarball = tarball::build(release, &prefix, &notices, &staging.join("tarball"), &out)?;
    let deb = deb::build(release, &deb_root, &notices, &out)?;
    if !skip_lintian {
        lintian(&deb)?;
    }
    Ok(Built { deb, tarball })
}

/// The install at `from` (relocatable: the configs name everything relative to
/// themselves) copied to `to`, after a check that it is LLVM `release`'s.
fn copy_install(release: Release, from: &Path, to: &Path) -> Result<()> {
    let compiler_plugin = install_layout::Prefix::new(from).compiler_plugin(release.major);
    ensure!(
        compiler_plugin.is_file(),
        "{} is no install for LLVM {} (it has no {})",
        from.display(),
        release.major,
        compiler_plugin.display()
    );
    fs::create_dir_all(to.parent().context("the prefix has a parent")?)?;
    let sh = xshell::Shell::new()?;
    xshell::cmd!(sh, "cp -a {from} {to}").run()?;
    Ok(())
}

/// lintian on a .deb: no error allowed; what it says otherwise is printed.
pub fn lintian(deb: &Path) -> Result<()> {
    deb::lintian(deb)
}

/// `path` (absolute, as installed) below the staging tree `root`.
fn host_path(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}
