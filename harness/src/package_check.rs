//! The packages as a user meets them (a step of `cargo xtask test`), in a fresh copy of
//! a bare Debian root of the release that packages the LLVM ([`debian_root::bare`]: the
//! base system and python3; no compiler, no LLVM, nothing of ours):
//!
//! 1. the README's `install` block, as written, in root's home holding the .deb:
//!    `apt-get install ./<package>.deb` installs it and its dependencies from the
//!    archive (apt is told to assume yes, as a user answers its question);
//! 2. the README's `run` block, as written, run by a user without root, prints exactly
//!    the README's `output` block (the isolated host device);
//! 3. the doctor on PATH passes its self-test on the host devices;
//! 4. `apt-get purge` leaves nothing of ours: every path the package installed is gone,
//!    and no path naming omptarget-indirect appeared and stayed (file lists before and
//!    after);
//! 5. the tarball, unpacked by that user in their home, runs the same `run` block (its
//!    `P=` line naming the unpacked folder) with the same output, and its doctor passes;
//!    deleting the folder leaves nothing behind.
//!
//! Packages of one release (17 and 18 on Debian 13) are checked in one root, one after
//! the other ([`check`] says why), after a check that no path is in two of them.

use crate::debian_root::{self, Mounts};
use crate::{llvm_release, util};
use anyhow::{bail, ensure, Context, Result};
use install_layout::DOCTOR;
use release::dist::{Built, Release};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;
use test_support::readme;
use xshell::{cmd, Shell};

/// The user without root who runs the programs, and their home inside the root.
const USER_ID: &str = "4242";
const USER_HOME: &str = "/home/user";

/// What the check measured: each phase and its seconds, and the README commands a user
/// types from a bare machine to a first program's output.
pub struct Report {
    pub package: String,
    pub phases: Vec<(String, f64)>,
    pub user_commands: usize,
    pub doctor: String,
}

impl Report {
    pub fn summary(&self) -> String {
        let phases: Vec<String> = self
            .phases
            .iter()
            .map(|(name, secs)| format!("{name} {secs:.0} s"))
            .collect();
        format!(
            "{}: {} README commands from a bare root to the first program's output; {}\ndoctor:\n{}",
            self.package,
            self.user_commands,
            phases.join(", "),
            self.doctor
        )
    }
}

/// The LLVM version the README's quick start shows.
const README_LLVM: u32 = 16;

/// The README's blocks the check runs.
struct QuickStart {
    install: String,
    run: String,
    output: String,
}

impl QuickStart {
    fn read() -> Result<Self> {
        let text = readme::text().context("reading README.md")?;
        let block = |name: &str| {
            readme::block(&text, name)
                .map(|(_, body)| body)
                .with_context(|| format!("README.md has no `{}` block", readme::marker(name)))
        };
        Ok(QuickStart {
            install: block("install")?,
            run: block("run")?,
            output: block("output")?,
        })
    }

    /// Commands a user types: the blocks' lines that are not comments or continuations.
    fn commands(&self) -> usize {
        [&self.install, &self.run]
            .iter()
            .flat_map(|b| b.lines())
            .scan(false, |continued, line| {
                let counts =
                    !*continued && !line.trim().is_empty() && !line.trim().starts_with('#');
                *continued = line.trim_end().ends_with('\\');
                Some(counts)
            })
            .filter(|c| *c)
            .count()
    }

    /// The blocks for LLVM `major`: the README shows [`README_LLVM`]'s; another's names
    /// its own package, folder and clang.
    fn for_release(&self, major: u32) -> Result<QuickStart> {
        let shown = format!("llvm{README_LLVM}");
        ensure!(
            self.install.contains(&shown) && self.run.contains(&shown),
            "the README's quick start is not LLVM {README_LLVM}'s (no `{shown}`)"
        );
        let swap = |block: &str| {
            block
                .replace(&shown, &format!("llvm{major}"))
                .replace(
                    &format!("clang++-{README_LLVM}"),
                    &format!("clang++-{major}"),
                )
                .replace(&format!("clang-{README_LLVM}"), &format!("clang-{major}"))
                .replace(&format!("libomp-{README_LLVM}"), &format!("libomp-{major}"))
        };
        Ok(QuickStart {
            install: swap(&self.install),
            run: swap(&self.run),
            output: self.output.clone(),
        })
    }

    /// The run block with its `P=` line naming `prefix` instead.
    fn run_with_prefix(&self, prefix: &str) -> Result<String> {
        ensure!(
            self.run.lines().any(|l| l.starts_with("P=")),
            "the README's run block sets no P="
        );
        Ok(self
            .run
            .lines()
            .map(|l| {
                if l.starts_with("P=") {
                    format!("P={prefix}")
                } else {
                    l.to_string()
                }
            })
            .map(|l| l + "\n")
            .collect())
    }
}

/// Check the packages `built` (of one Debian release) in a fresh bare root of that
/// release: first that they could coexist (no path in two of them), then each in turn:
/// installed and used as the README says, purged, and the same from its tarball. In
/// turn, because Debian's OpenMP runtimes of different LLVM versions exclude each other
/// (libomp5-17 and libomp5-18 both conflict with the virtual libomp-x.y): installing the
/// LLVM 18 package removes LLVM 17's runtime, and with it the LLVM 17 package.
pub fn check(built: &[(Release, Built)]) -> Result<Report> {
    let quick = QuickStart::read()?;
    let codename = one_release(built)?;
    disjoint(built)?;
    let mut phases = Vec::new();
    let mut timed =
        |name: String, start: Instant| phases.push((name, start.elapsed().as_secs_f64()));

    let start = Instant::now();
    let (base, _) = debian_root::bare(codename)?;
    let root = debian_root::fresh_copy(&base, &format!("package-check/{codename}"))?;
    let mounts = Mounts::new(&root, &[])?;
    let sh = Shell::new()?;
    prepare(&sh, &root, built)?;
    timed("root ready".into(), start);

    let before = files(&root)?;
    let mut doctors = Vec::new();
    for (release, _) in built {
        let quick = quick.for_release(release.major)?;
        let package = release.package();
        let start = Instant::now();
        in_root(&sh, &root, None, "/root", &quick.install)
            .with_context(|| format!("the README's install block for {package}"))?;
        timed(format!("{package}: README install block"), start);
        let installed = package_files(&sh, &root, *release)?;

        let start = Instant::now();
        let output = in_root(&sh, &root, Some(USER_ID), USER_HOME, &quick.run)
            .with_context(|| format!("the README's run block for {package}"))?;
        same_output(&quick.output, &output, &package)?;
        timed(format!("{package}: README run block"), start);
        let prefix = release.prefix().display().to_string();
        doctors.push(run_doctor(&sh, &root, &release.doctor_on_path(), &prefix)?);

        let start = Instant::now();
        debian_root::chroot_cmd(&sh, &root, &["apt-get", "purge", "-y", "-qq", &package]).run()?;
        nothing_left(&before, &files(&root)?, &installed)?;
        timed(format!("{package}: purge"), start);

        // The package's dependencies stay after the purge: the tarball uses them.
        let start = Instant::now();
        let unpacked = format!("{USER_HOME}/{}", release.tarball_dir());
        let tarball = format!("/tmp/{}", release.tarball_file());
        let untar = format!("tar xzf {tarball}\n");
        in_root(&sh, &root, Some(USER_ID), USER_HOME, &untar)?;
        let output = in_root(
            &sh,
            &root,
            Some(USER_ID),
            USER_HOME,
            &quick.run_with_prefix(&unpacked)?,
        )
        .with_context(|| format!("the README's run block with {}", release.tarball_file()))?;
        same_output(&quick.output, &output, &release.tarball_file())?;
        run_doctor(&sh, &root, &format!("{unpacked}/bin/{DOCTOR}"), &unpacked)?;
        // Uninstalled as the user guide says: the folder deleted, nothing else to undo.
        in_root(
            &sh,
            &root,
            Some(USER_ID),
            USER_HOME,
            &format!("rm -r {unpacked}\n"),
        )?;
        nothing_left(&before, &files(&root)?, &BTreeSet::new())?;
        timed(
            format!(
                "{}: unpack, run block, doctor, delete",
                release.tarball_file()
            ),
            start,
        );
    }

    // Passed: the root (LLVM and its packages installed, a GiB or more) goes; a failed
    // check leaves it for a look.
    drop(mounts);
    if let Err(e) = debian_root::remove_root(&root) {
        eprintln!("package check passed, but its root stays: {e:#}");
    }

    Ok(Report {
        package: built
            .iter()
            .map(|(r, _)| r.package())
            .collect::<Vec<_>>()
            .join(" + "),
        phases,
        user_commands: quick.commands(),
        doctor: doctors.into_iter().next().unwrap_or_default(),
    })
}

/// No path (but shared folders) is in two of the packages: they never replace each
/// other's files.
fn disjoint(built: &[(Release, Built)]) -> Result<()> {
    let sh = Shell::new()?;
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    for (release, built) in built {
        let deb = &built.deb;
        let listing = util::read(cmd!(sh, "dpkg-deb --contents {deb}"))?;
        for line in listing.lines().filter(|l| !l.starts_with('d')) {
            let path = line
                .split_whitespace()
                .nth(5)
                .with_context(|| format!("dpkg-deb --contents: `{line}`"))?;
            if let Some(other) = owner.insert(path.to_string(), release.package()) {
                bail!("{path} is in both {other} and {}", release.package());
            }
        }
    }
    Ok(())
}

/// The one Debian release (codename) that packages every LLVM of `built`.
fn one_release(built: &[(Release, Built)]) -> Result<&'static str> {
    let mut codenames = built
        .iter()
        .map(|(r, _)| llvm_release::packaged(r.major).map(|p| p.codename));
    let first = codenames.next().context("no package to check")??;
    for codename in codenames {
        ensure!(codename? == first, "packages of different Debian releases");
    }
    Ok(first)
}

/// The .debs in root's home, the tarballs in /tmp, a user without root, apt assuming yes
/// and its package lists read.
fn prepare(sh: &Shell, root: &Path, built: &[(Release, Built)]) -> Result<()> {
    let into = |file: &Path, dir: &str| -> Result<()> {
        let to = root.join(dir).join(file.file_name().unwrap());
        fs::copy(file, &to)
            .with_context(|| format!("copying {} to {}", file.display(), to.display()))?;
        Ok(())
    };
    for (_, built) in built {
        into(&built.deb, "root")?;
        into(&built.tarball, "tmp")?;
    }
    fs::write(
        root.join("etc/apt/apt.conf.d/90omptarget-check-assume-yes"),
        "APT::Get::Assume-Yes \"true\";\n",
    )?;
    let home = USER_HOME;
    debian_root::chroot_cmd(
        sh,
        root,
        &[
            "useradd",
            "--create-home",
            "--home-dir",
            home,
            "--uid",
            USER_ID,
            "user",
        ],
    )
    .run()?;
    debian_root::chroot_cmd(sh, root, &["apt-get", "update", "-qq"]).run()?;
    Ok(())
}

/// `script` run by bash (stopping at the first failure) inside `root`, in `dir`, as
/// `user` (a uid; None: root); returns its stdout.
fn in_root(sh: &Shell, root: &Path, user: Option<&str>, dir: &str, script: &str) -> Result<String> {
    let script = format!("set -euo pipefail\ncd {dir}\n{script}");
    let mut args: Vec<String> = Vec::new();
    if let Some(uid) = user {
        args.extend(
            [
                "setpriv",
                "--reuid",
                uid,
                "--regid",
                uid,
                "--clear-groups",
                "env",
            ]
            .map(String::from),
        );
        args.push(format!("HOME={USER_HOME}"));
    }
    args.extend(["bash", "-c", &script].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = debian_root::chroot_cmd(sh, root, &args)
        .ignore_status()
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    ensure!(
        output.status.success(),
        "{script}\nfailed ({}):\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(stdout)
}

fn same_output(readme: &str, got: &str, from: &str) -> Result<()> {
    ensure!(
        got.trim_end() == readme.trim_end(),
        "the quick start with {from} printed\n{got}\nbut the README shows\n{readme}"
    );
    Ok(())
}

/// The doctor (`command`, as the root sees it) run by the user, with the README's
/// LD_LIBRARY_PATH for the install at `prefix`: it must pass, and say ok for the
/// self-test on the host device and the isolated host device. Returns its output.
fn run_doctor(sh: &Shell, root: &Path, command: &str, prefix: &str) -> Result<String> {
    let script = format!("LD_LIBRARY_PATH={prefix}/lib {command}\n");
    let output = in_root(sh, root, Some(USER_ID), USER_HOME, &script)
        .with_context(|| format!("the doctor, {command}"))?;
    for device in ["host device", "isolated host device"] {
        ensure!(
            output.lines().any(|l| l.trim_start().starts_with("ok")
                && l.contains(device)
                && l.contains("0 wrong")),
            "the doctor's self-test passed on no {device}:\n{output}"
        );
    }
    Ok(output)
}

/// Every path below `root` but the mounts and apt's caches, relative to it.
fn files(root: &Path) -> Result<BTreeSet<PathBuf>> {
    const SKIPPED: &[&str] = &[
        "proc",
        "dev",
        "sys",
        "run",
        "var/cache/apt",
        "var/lib/apt/lists",
        "var/log",
    ];
    let skipped = |path: &Path| SKIPPED.iter().any(|s| path == root.join(s));
    Ok(util::paths_below(root, skipped)?
        .into_iter()
        .map(|path| path.strip_prefix(root).map(Path::to_path_buf))
        .collect::<Result<_, _>>()?)
}

/// The paths `dpkg -L` lists for the installed package (relative to the root), checked
/// to be present.
fn package_files(sh: &Shell, root: &Path, release: Release) -> Result<BTreeSet<PathBuf>> {
    let package = release.package();
    let listed = util::read(debian_root::chroot_cmd(sh, root, &["dpkg", "-L", &package]))?;
    let files: BTreeSet<PathBuf> = listed
        .lines()
        .filter(|l| l.starts_with('/') && *l != "/.")
        .map(|l| PathBuf::from(&l[1..]))
        .collect();
    ensure!(
        files.contains(
            &release
                .prefix()
                .join("bin")
                .join(DOCTOR)
                .strip_prefix("/")?
                .to_path_buf()
        ),
        "dpkg -L {package} lists no doctor:\n{listed}"
    );
    Ok(files)
}

/// After the purge: no path the package installed that was not there before, and no new
/// path naming omptarget-indirect (LLVM's libomptarget files are its
/// dependencies').
fn nothing_left(
    before: &BTreeSet<PathBuf>,
    after: &BTreeSet<PathBuf>,
    installed: &BTreeSet<PathBuf>,
) -> Result<()> {
    let left: Vec<&PathBuf> = after
        .difference(before)
        .filter(|p| installed.contains(*p) || p.to_string_lossy().contains("omptarget-indirect"))
        .collect();
    ensure!(
        left.is_empty(),
        "apt-get purge left {} path(s) of ours: {left:?}",
        left.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick() -> QuickStart {
        QuickStart {
            install: "# as root\napt-get install ./p.deb\n".into(),
            run: "P=/usr/lib/x\nclang++-16 --config=$P/a.cfg \\\n  b.cpp -o b\n./b\n".into(),
            output: "ok\n".into(),
        }
    }

    #[test]
    fn commands_count_neither_comments_nor_continuations() {
        assert_eq!(quick().commands(), 4);
    }

    #[test]
    fn the_blocks_for_llvm_18_name_its_package_folder_and_clang() {
        let shown = QuickStart {
            install: "apt-get install ./omptarget-indirect-llvm16_0.1.0-1_amd64.deb\n".into(),
            run: "P=/usr/lib/omptarget-indirect/llvm16\nclang++-16 x\n".into(),
            output: "ok\n".into(),
        };
        let for_18 = shown.for_release(18).unwrap();
        assert_eq!(
            for_18.install,
            "apt-get install ./omptarget-indirect-llvm18_0.1.0-1_amd64.deb\n"
        );
        assert_eq!(
            for_18.run,
            "P=/usr/lib/omptarget-indirect/llvm18\nclang++-18 x\n"
        );
        assert!(
            quick().for_release(18).is_err(),
            "a quick start without llvm16 is refused"
        );
    }

    #[test]
    fn the_tarball_run_names_the_unpacked_folder() {
        let run = quick().run_with_prefix("/home/user/t").unwrap();
        assert!(run.starts_with("P=/home/user/t\nclang++-16"), "{run}");
        assert!(QuickStart {
            run: "echo\n".into(),
            ..quick()
        }
        .run_with_prefix("/x")
        .is_err());
    }

    #[test]
    fn a_path_of_ours_left_after_the_purge_is_found() {
        let before: BTreeSet<PathBuf> = ["usr/bin/ls".into()].into();
        let installed: BTreeSet<PathBuf> =
            ["usr/lib/omptarget-indirect/llvm16/lib/x.so".into()].into();
        let mut after = before.clone();
        after.insert("usr/lib/clang-16/new".into());
        assert!(nothing_left(&before, &after, &installed).is_ok());
        after.insert("usr/lib/omptarget-indirect/llvm16/lib/x.so".into());
        assert!(nothing_left(&before, &after, &installed).is_err());
        after.remove(Path::new("usr/lib/omptarget-indirect/llvm16/lib/x.so"));
        after.insert("usr/lib/llvm-16/lib/libomptarget.so.16".into());
        assert!(
            nothing_left(&before, &after, &installed).is_ok(),
            "LLVM's stay"
        );
        after.insert("etc/omptarget-indirect.conf".into());
        assert!(nothing_left(&before, &after, &installed).is_err());
    }
}
