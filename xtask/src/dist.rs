//! `cargo xtask dist [--llvm N] [--check]`: the packages of every LLVM version into
//! target/dist/ ([`release::dist`] builds one here); a version this machine's Debian
//! release does not package is built inside a root of the release that does
//! ([`harness::debian13_programs::dist`]), and `--check` installs each in a bare root
//! and runs the README's quick start there ([`harness::package_check`]).

use anyhow::{Context, Result};
use harness::{debian13_programs, package_check};
use release::dist::{build, out_dir, Built, Release};
use release::llvm_release;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// The LLVM version to package (16, 17 or 18); default: all three. A version this
    /// machine's Debian release does not package is built in a root of the release that
    /// does (Debian 13 for 17 and 18; needs root).
    #[arg(long)]
    pub llvm: Option<u32>,
    /// Then install each in a bare Debian root and run the README's quick start there
    /// ([`package_check`]; needs root).
    #[arg(long)]
    pub check: bool,
    /// Leave lintian to the caller (a package built inside a Debian root is checked by
    /// the machine's lintian afterwards: [`lintian`]).
    #[arg(long)]
    pub skip_lintian: bool,
    /// Package this install (`cargo xtask install --prefix P --llvm N`, made from this
    /// tree) instead of installing anew; only with `--llvm N`.
    #[arg(long, requires = "llvm")]
    pub from_install: Option<PathBuf>,
}

pub fn main(args: Args) -> Result<()> {
    let majors = match args.llvm {
        Some(major) => vec![major],
        None => llvm_release::SERVED.iter().map(|p| p.major).collect(),
    };
    // Packages of one Debian release, checked in one root.
    let mut by_release: BTreeMap<&str, Vec<(Release, Built)>> = BTreeMap::new();
    for major in majors {
        let release = Release { major };
        let built = if llvm_release::ensure_packaged_here(major).is_ok() {
            build(release, args.from_install.as_deref(), args.skip_lintian)?
        } else {
            // Another Debian release packages this LLVM: build there, in its root.
            gather(debian13_programs::dist(major)?)?
        };
        println!("LLVM {major}:");
        println!("  {}", built.deb.display());
        println!("  {}", built.tarball.display());
        let codename = llvm_release::packaged(major)?.codename;
        by_release
            .entry(codename)
            .or_default()
            .push((release, built));
    }
    if args.check {
        for built in by_release.values() {
            let report = package_check::check(built)?;
            println!("{}", report.summary());
        }
    }
    Ok(())
}

/// `built` (made in a root's own target folder) copied into [`out_dir`], beside the
/// packages built here.
fn gather(built: Built) -> Result<Built> {
    let out = out_dir();
    fs::create_dir_all(&out)?;
    let copy = |file: &Path| -> Result<PathBuf> {
        let to = out.join(file.file_name().context("a package file has a name")?);
        fs::copy(file, &to).with_context(|| format!("copying {}", file.display()))?;
        Ok(to)
    };
    Ok(Built {
        deb: copy(&built.deb)?,
        tarball: copy(&built.tarball)?,
    })
}
