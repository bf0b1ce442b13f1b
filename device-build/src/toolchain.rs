//! A Rust toolchain that can build `core` for the GPU targets: a rustup toolchain with
//! `rust-src` (nightlies first), else Debian's rustc-web + rust-web-src (installed when
//! running as root).

use crate::targets::{AMDGCN_TRIPLE, NVPTX_TRIPLE};
use anyhow::{ensure, Context, Result};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// A Rust toolchain that can build `core` for the GPU targets.
pub struct Toolchain {
    pub description: String,
    pub cargo: PathBuf,
    pub rustc: PathBuf,
}

impl Toolchain {
    pub fn select() -> Result<Toolchain> {
        let toolchain = match Self::rustup_with_rust_src()? {
            Some(t) => t,
            None => Self::debian()?,
        };
        eprintln!(
            "device toolchain: {} (cargo {}, rustc {})",
            toolchain.description,
            toolchain.cargo.display(),
            toolchain.rustc.display()
        );
        Ok(toolchain)
    }

    /// A rustup toolchain whose sysroot holds the library source and which knows the GPU
    /// targets; nightlies first (the usual way to build `core` for a GPU).
    fn rustup_with_rust_src() -> Result<Option<Toolchain>> {
        let Some(rustup) = test_support::tools::which("rustup").or_else(home_rustup) else {
            return Ok(None);
        };
        let sh = Shell::new()?;
        let Ok(list) = crate::tools::read(cmd!(sh, "{rustup} toolchain list")) else {
            return Ok(None);
        };
        let mut names: Vec<String> = list
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect();
        names.sort_by_key(|n| !n.starts_with("nightly"));
        for name in names {
            let which = |tool: &str| {
                crate::tools::read(cmd!(sh, "{rustup} which --toolchain {name} {tool}"))
                    .map(|s| PathBuf::from(s.trim()))
            };
            let (Ok(rustc), Ok(cargo)) = (which("rustc"), which("cargo")) else {
                continue;
            };
            if has_library_source(&rustc)? && knows_gpu_targets(&rustc)? {
                return Ok(Some(Toolchain {
                    description: format!("rustup toolchain {name} with rust-src"),
                    cargo,
                    rustc,
                }));
            }
        }
        Ok(None)
    }

    /// Debian's rustc-web / cargo-web / rust-web-src, installed when missing.
    fn debian() -> Result<Toolchain> {
        crate::tools::ensure_debian_packages(&["rustc-web", "cargo-web", "rust-web-src"]).context(
            "no Rust toolchain can build `core` for the GPU targets: install a nightly with \
             the rust-src component, or Debian's rustc-web cargo-web rust-web-src",
        )?;
        let rustc = PathBuf::from("/usr/bin/rustc");
        let cargo = PathBuf::from("/usr/bin/cargo");
        ensure!(
            rustc.is_file() && cargo.is_file(),
            "Debian's rustc-web/cargo-web are installed but /usr/bin/rustc or /usr/bin/cargo is missing"
        );
        ensure!(
            has_library_source(&rustc)?,
            "{} has no library source (rust-web-src) in its sysroot",
            rustc.display()
        );
        ensure!(
            knows_gpu_targets(&rustc)?,
            "{} does not list {NVPTX_TRIPLE} and {AMDGCN_TRIPLE}",
            rustc.display()
        );
        let sh = Shell::new()?;
        let version = crate::tools::read(cmd!(sh, "{rustc} --version"))?;
        Ok(Toolchain {
            description: format!("Debian rustc-web + rust-web-src, {}", version.trim()),
            cargo,
            rustc,
        })
    }
}

fn home_rustup() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let p = home.join("bin/rustup");
    p.is_file().then_some(p)
}

fn has_library_source(rustc: &Path) -> Result<bool> {
    let sh = Shell::new()?;
    let sysroot = crate::tools::read(cmd!(sh, "{rustc} --print sysroot"))?;
    Ok(Path::new(sysroot.trim())
        .join("lib/rustlib/src/rust/library/core/Cargo.toml")
        .is_file())
}

fn knows_gpu_targets(rustc: &Path) -> Result<bool> {
    let sh = Shell::new()?;
    let list = crate::tools::read(cmd!(sh, "{rustc} --print target-list"))?;
    Ok([NVPTX_TRIPLE, AMDGCN_TRIPLE]
        .iter()
        .all(|t| list.lines().any(|l| l.trim() == *t)))
}
