//! The relocatable tarball: the install tree under one top folder, with the licence and
//! the third-party notices beside it. Unpacked anywhere, that folder is the prefix: the
//! config files name the plugin, headers and device runtime relative to themselves
//! (`<CFGDIR>`), the plugin finds the isolated device's process relative to itself, and
//! the doctor finds the install relative to itself.

use super::Release;
use crate::util;
use anyhow::{Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// Pack the install at `prefix` as `release`'s tarball in `out` (assembled in
/// `staging`, made anew); returns its path.
pub fn build(
    release: Release,
    prefix: &Path,
    notices: &Path,
    staging: &Path,
    out: &Path,
) -> Result<PathBuf> {
    let top = staging.join(release.tarball_dir());
    if staging.exists() {
        fs::remove_dir_all(staging)?;
    }
    fs::create_dir_all(staging)?;
    let sh = Shell::new()?;
    cmd!(sh, "cp -a {prefix} {top}").run()?;
    fs::copy(util::root().join("LICENSE"), top.join("LICENSE"))?;
    fs::copy(notices, top.join("THIRD-PARTY-NOTICES"))?;
    let tarball = out.join(release.tarball_file());
    let dir = release.tarball_dir();
    let reproducible = util::REPRODUCIBLE_TAR;
    cmd!(
        sh,
        "tar --create {reproducible...} --gzip -f {tarball} -C {staging} {dir}"
    )
    .run()
    .with_context(|| format!("packing {}", tarball.display()))?;
    Ok(tarball)
}
