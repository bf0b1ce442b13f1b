//! The Debian 13 (trixie) root where LLVM 17 and 18 are tested: Debian 13 ships clang,
//! libomp and libomptarget 17 and 18 (with their plugins as files) beside its default 19,
//! and Debian 12 packages neither clang-17 nor clang-18.
//!
//! One root per version (`libomp-17-dev` and `libomp-18-dev` conflict: only one
//! `libomp-x.y-dev` can be installed) serves every step that needs that version (`cargo
//! xtask lit --llvm N`, the compiler plugin built against LLVM N, `install --llvm N`, the
//! standard programs): `debootstrap --variant=minbase trixie` ([`debian_root`]) plus
//! [`packages`], cached in `target/debian13-root/`.

use crate::lit::debian_source;
use crate::{debian_root, llvm_release};
use anyhow::{ensure, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

pub const CODENAME: &str = "trixie";

/// The LLVM versions this root holds (Debian 13 packages both; 16 is Debian 12's).
pub const LLVM_MAJORS: [u32; 2] = [17, 18];

/// Every package the root of LLVM `major` gets: its [`llvm_release::packages`], python3 (lit),
/// the C compiler driver names Rust's linker and the `cc` crate call (`cc`, `c++`), and
/// what `cargo xtask dist` uses (dpkg-shlibdeps; git for the changelog's date).
pub fn packages(major: u32) -> Vec<String> {
    let mut all = llvm_release::packages(major);
    all.extend(["python3", "gcc", "g++", "dpkg-dev", "git"].map(String::from));
    all
}

/// `/usr/lib/llvm-N` inside the root.
pub fn llvm_prefix(major: u32) -> PathBuf {
    PathBuf::from(format!("/usr/lib/llvm-{major}"))
}

/// The cached root of LLVM `major` with its [`packages`]: (its folder, seconds spent
/// making it now).
pub fn root(major: u32) -> Result<(PathBuf, Option<f64>)> {
    ensure!(
        LLVM_MAJORS.contains(&major),
        "LLVM {major} has no Debian 13 root here (LLVM {LLVM_MAJORS:?} do)"
    );
    let packages = packages(major);
    debian_root::cached(&debian_root::RootSpec {
        dir: &format!("debian13-root/trixie-minbase-llvm{major}"),
        codename: CODENAME,
        include: &[],
        describe: &format!("packages: {}", packages.join(" ")),
        setup: &|root| install_packages(root, &packages),
    })
}

/// Inside a new root: deb-src twins of its apt entries (the lit step reads the source
/// packages' file lists from them), then `packages`.
fn install_packages(root: &Path, packages: &[String]) -> Result<()> {
    let list = root.join("etc/apt/sources.list");
    let text = fs::read_to_string(&list)
        .with_context(|| format!("debootstrap left no {}", list.display()))?;
    let deb_src = debian_source::deb_src_lines(&text, None);
    ensure!(!deb_src.is_empty(), "{} has no `deb` line", list.display());
    fs::write(
        root.join("etc/apt/sources.list.d/omptarget-rs-deb-src.list"),
        deb_src,
    )?;
    let sh = xshell::Shell::new()?;
    debian_root::chroot_cmd(&sh, root, &["apt-get", "update", "-qq"]).run()?;
    let mut install = vec!["apt-get", "install", "-y", "-qq", "--no-install-recommends"];
    install.extend(packages.iter().map(String::as_str));
    debian_root::chroot_cmd(&sh, root, &install).run()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_version_gets_its_compiler_runtime_and_dev_packages() {
        assert_eq!(
            llvm_release::packages(18),
            [
                "clang-18",
                "clang-tools-18",
                "libomp-18-dev",
                "llvm-18-tools",
                "llvm-18-dev",
                "libclang-18-dev",
                "libclang-cpp18-dev"
            ]
        );
        let all = packages(17);
        assert!(all.contains(&"libomp-17-dev".to_owned()));
        assert!(all.contains(&"python3".to_owned()));
        // Debian's libomp-N-dev packages conflict with each other: one version per root.
        assert!(!all.iter().any(|p| p.contains("18")));
    }
}
