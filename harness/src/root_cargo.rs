//! This machine's Rust toolchain, run inside a Debian root: the only way cargo gets
//! into a root, and always offline.
//!
//! The roots are debootstrap minbase: no CA certificates, and no cargo of their own.
//! Cargo inside one runs from this machine's cargo and rustup homes, bind-mounted at
//! their own paths. A download from inside the root would fail its TLS check (or reach
//! whatever the root's network is), so every crate is fetched here first, from the
//! lockfile, for every target and feature ([`RootCargo::prepare`]), and every cargo run
//! inside a root is offline (`CARGO_NET_OFFLINE=true`, which nested runs such as the
//! builds of `cargo xtask install` inherit) and the ones written here are `--frozen`.
//! A crate missing there is then cargo's "you're using offline mode" error inside the
//! step that needed it, not a TLS failure.
//!
//! [`crate::debian_root::chroot_cmd`] refuses a cargo command without the offline
//! setting ([`assert_offline`]), so a new step cannot bypass this.

use crate::util;
use anyhow::{ensure, Context, Result};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// What makes every cargo run inside a root offline, nested runs included.
pub const OFFLINE_ENV: &str = "CARGO_NET_OFFLINE=true";

/// This machine's cargo and rustup homes, after the host fetch.
pub struct RootCargo {
    cargo_home: PathBuf,
    rustup_home: PathBuf,
}

impl RootCargo {
    /// Finds this machine's toolchain and fetches every crate of the workspace's lockfile
    /// into its cargo home (`cargo fetch --locked`: all targets, all features, the
    /// compiler plugin's `llvm17` and `llvm18` included), so that the runs inside a root
    /// find them there. The only way to a [`RootCargo`].
    pub fn prepare() -> Result<RootCargo> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let from_env = |var: &str, default: &str| {
            std::env::var_os(var)
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(default)))
                .with_context(|| format!("neither {var} nor HOME is set"))
        };
        let toolchain = RootCargo {
            cargo_home: from_env("CARGO_HOME", ".cargo")?,
            rustup_home: from_env("RUSTUP_HOME", ".rustup")?,
        };
        ensure!(
            toolchain.cargo_home.join("bin/cargo").is_file(),
            "no cargo in {}/bin",
            toolchain.cargo_home.display()
        );
        fetch_on_host()?;
        Ok(toolchain)
    }

    /// The folders a root must show at their own paths for [`RootCargo::command`] to run.
    pub fn binds(&self) -> [&Path; 2] {
        [&self.cargo_home, &self.rustup_home]
    }

    /// `env -C <dir> CARGO_HOME=... RUSTUP_HOME=... PATH=... CARGO_TARGET_DIR=<build>
    /// CARGO_NET_OFFLINE=true <extra_env...> cargo --frozen <args...>`: cargo `args` in
    /// `dir`, with what [`crate::debian_root::chroot_cmd`]'s clean environment lacks.
    pub fn command(
        &self,
        dir: &Path,
        build: &Path,
        extra_env: &[String],
        args: &[&str],
    ) -> Vec<String> {
        let mut all = vec![
            "env".into(),
            "-C".into(),
            dir.display().to_string(),
            format!("CARGO_HOME={}", self.cargo_home.display()),
            format!("RUSTUP_HOME={}", self.rustup_home.display()),
            format!(
                "PATH={}:/usr/sbin:/usr/bin:/sbin:/bin",
                self.cargo_home.join("bin").display()
            ),
            format!("CARGO_TARGET_DIR={}", build.display()),
            OFFLINE_ENV.into(),
        ];
        all.extend(extra_env.iter().cloned());
        all.extend(["cargo", "--frozen"].map(String::from));
        all.extend(args.iter().map(|a| a.to_string()));
        all
    }
}

/// `cargo fetch --locked` in the workspace.
fn fetch_on_host() -> Result<()> {
    util::section("crates for the Debian roots: cargo fetch --locked (on this machine)");
    let sh = Shell::new()?;
    let _in_workspace = sh.push_dir(util::root());
    let cargo = util::cargo();
    cmd!(sh, "{cargo} fetch --locked").run().context(
        "fetching the workspace's crates on this machine (the cargo runs inside the \
             Debian roots are offline and take them from here)",
    )
}

/// Panics when `args`, a command line for inside a root, runs cargo without
/// [`OFFLINE_ENV`]: such a run would reach for the network from a root that has no
/// certificates, and not after the host fetch. A bug in xtask, hence the panic.
pub fn assert_offline(args: &[&str]) {
    let runs_cargo = args
        .iter()
        .any(|a| Path::new(a).file_name().is_some_and(|f| f == "cargo"));
    assert!(
        !runs_cargo || args.contains(&OFFLINE_ENV),
        "cargo inside a Debian root must come from RootCargo::command (offline, after \
         the host fetch): {args:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toolchain() -> RootCargo {
        RootCargo {
            cargo_home: "/home/u/.cargo".into(),
            rustup_home: "/home/u/.rustup".into(),
        }
    }

    #[test]
    fn commands_are_frozen_and_offline_with_this_machines_cargo_first_on_path() {
        let line = toolchain().command(
            Path::new("/ws"),
            Path::new("/ws/target/b"),
            &["X=1".into()],
            &["test", "-p", "compiler-plugin"],
        );
        let at = |s: &str| line.iter().position(|a| a == s);
        let cargo = at("cargo").expect("runs cargo");
        assert_eq!(line[cargo + 1], "--frozen");
        assert_eq!(&line[cargo + 2..], ["test", "-p", "compiler-plugin"]);
        assert!(at(OFFLINE_ENV).is_some_and(|i| i < cargo));
        assert!(at("X=1").is_some_and(|i| i < cargo));
        assert!(line.contains(&"PATH=/home/u/.cargo/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()));
        assert!(line.contains(&"CARGO_TARGET_DIR=/ws/target/b".into()));
        let as_strs: Vec<&str> = line.iter().map(String::as_str).collect();
        assert_offline(&as_strs);
    }

    #[test]
    #[should_panic(expected = "must come from RootCargo::command")]
    fn a_cargo_run_without_the_offline_setting_is_refused() {
        assert_offline(&["env", "-C", "/ws", "/home/u/.cargo/bin/cargo", "build"]);
    }

    #[test]
    fn commands_that_do_not_run_cargo_pass() {
        assert_offline(&["apt-get", "install", "-y", "clang-18"]);
        assert_offline(&["env", "CARGO_HOME=/root/.cargo", "clang-18", "-v"]);
    }
}
