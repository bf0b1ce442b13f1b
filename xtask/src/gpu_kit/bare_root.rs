//! The proof, on a CPU-only machine, that the GPU kit is self-contained: run.sh (both
//! parts) inside a bare Debian root that holds the base system and python3 only (no
//! LLVM, no Rust, no clang, no libffi-dev), as a GPU machine has no build tree.
//!
//! The root is `debootstrap --variant=minbase --include=python3 <codename>` of this
//! machine's own release, from the archive this machine's apt configuration uses for it
//! (read from `apt-cache policy`; no archive is named here), cached under
//! target/bare-root/. The kit is copied in and run with chroot, with /proc and a tmpfs
//! on /dev/shm (lit's worker pool needs it) mounted for the run and unmounted afterwards,
//! whatever happened.
//!
//! Passes when the run passes and its summary shows that every step that needs a GPU
//! printed SKIPPED; run.sh's own `kit_libraries` step has checked every ELF file of the
//! unpacked kit with the root's loader (nothing missing, nothing from outside the kit
//! but glibc), and its `programs` step has run the clang-16 programs through the
//! unpacked libomptarget 16 on its host fallback, with correct results.

use crate::util;
use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;
use xshell::{cmd, Shell};

/// Written into the root once debootstrap has completed it.
const STAMP: &str = ".omptarget-rs-bare-root-complete";
/// Where the kit and its results go inside the root.
const KIT_IN_ROOT: &str = "opt/omptarget-rs-kit";
const RESULTS_IN_ROOT: &str = "opt/omptarget-rs-results";

/// What the proof measured.
pub struct Proof {
    pub bootstrap_secs: Option<f64>,
    pub run_secs: f64,
    pub summary: String,
}

impl Proof {
    pub fn report(&self) -> String {
        let bootstrap = match self.bootstrap_secs {
            Some(s) => format!("debootstrap {s:.0} s, "),
            None => "cached root, ".to_owned(),
        };
        format!(
            "bare-root run: {bootstrap}run.sh --part all {:.0} s: {}",
            self.run_secs, self.summary
        )
    }
}

/// Builds the kit and runs it in the bare root; see the module documentation.
pub fn prove() -> Result<Proof> {
    ensure!(
        util::is_root(),
        "the bare-root proof needs root (debootstrap, chroot, mount)"
    );
    util::ensure_debian_packages(&["debootstrap"])?;
    let kit = super::build_kit()?;
    util::section("gpu-bundle: run.sh in a bare Debian root");
    let (root, bootstrap_secs) = bare_root()?;
    let inside_kit = root.join(KIT_IN_ROOT);
    let inside_results = root.join(RESULTS_IN_ROOT);
    for dir in [&inside_kit, &inside_results] {
        if dir.exists() {
            fs::remove_dir_all(dir)?;
        }
    }
    let sh = Shell::new()?;
    cmd!(sh, "cp -a {kit} {inside_kit}").run()?;

    let start = Instant::now();
    let output = {
        let _mounts = Mounts::new(&root)?;
        // A clean environment: nothing of this machine's (LD_LIBRARY_PATH, PATH to
        // toolchains) may reach the kit.
        let kit_sh = format!("/{KIT_IN_ROOT}/run.sh");
        let results = format!("/{RESULTS_IN_ROOT}");
        cmd!(
            sh,
            "chroot {root} /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 bash {kit_sh} --results {results} --part all"
        )
        .ignore_status()
        .output()?
    };
    let run_secs = start.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("SUMMARY: "))
        .unwrap_or("(no SUMMARY line)")
        .to_owned();
    check_summary(&inside_results.join("summary-partall.json"))?;
    ensure!(
        output.status.success(),
        "run.sh in the bare root failed ({}): {summary}; logs in {}",
        output.status,
        inside_results.display()
    );
    Ok(Proof {
        bootstrap_secs,
        run_secs,
        summary,
    })
}

/// Every step passed, and every step that needs a GPU printed SKIPPED (there is none
/// here); the runner ran without a GPU.
fn check_summary(path: &Path) -> Result<()> {
    let text = fs::read_to_string(path)
        .with_context(|| format!("run.sh wrote no summary {}", path.display()))?;
    let summary: Value = serde_json::from_str(&text)?;
    ensure!(
        summary["gpu"] == Value::Bool(false),
        "the runner found a GPU in the bare root"
    );
    let steps = summary["steps"]
        .as_array()
        .context("no steps in the summary")?;
    ensure!(!steps.is_empty(), "the summary lists no steps");
    let mut problems = Vec::new();
    for step in steps {
        let name = step["step"].as_str().unwrap_or("?");
        if step["passed"] != Value::Bool(true) {
            problems.push(format!("{name} failed: {}", step["detail"]));
        }
        if step["needs_gpu"] == Value::Bool(true) && step["skipped"].as_u64().unwrap_or(0) == 0 {
            problems.push(format!("{name} needs a GPU but printed no SKIPPED line"));
        }
    }
    if !problems.is_empty() {
        bail!("the bare-root run: {}", problems.join("; "));
    }
    Ok(())
}

/// The cached root (debootstrapped now when missing): (its folder, seconds spent now).
fn bare_root() -> Result<(PathBuf, Option<f64>)> {
    let codename = os_release_codename()?;
    let root = util::target_dir()
        .join("bare-root")
        .join(format!("{codename}-minbase-python3"));
    if root.join(STAMP).is_file() {
        eprintln!("bare root: using {}", root.display());
        return Ok((root, None));
    }
    if root.exists() {
        // An interrupted debootstrap: nothing may be mounted in it before it goes.
        unmount_below(&root)?;
        fs::remove_dir_all(&root)?;
    }
    fs::create_dir_all(root.parent().unwrap())?;
    let mirror = archive_of(&codename)?;
    let start = Instant::now();
    let sh = Shell::new()?;
    cmd!(
        sh,
        "debootstrap --variant=minbase --include=python3 {codename} {root} {mirror}"
    )
    .run()
    .context("debootstrap failed")?;
    fs::write(root.join(STAMP), format!("{codename} from {mirror}\n"))?;
    Ok((root, Some(start.elapsed().as_secs_f64())))
}

fn os_release_codename() -> Result<String> {
    let text = fs::read_to_string("/etc/os-release")?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_owned())
        .filter(|v| !v.is_empty())
        .context("/etc/os-release has no VERSION_CODENAME")
}

/// The archive this machine's apt takes `<codename>/main` from.
fn archive_of(codename: &str) -> Result<String> {
    let sh = Shell::new()?;
    let policy = util::read(cmd!(sh, "apt-cache policy"))?;
    archive_in_policy(&policy, codename).with_context(|| {
        format!("apt's configuration has no archive for {codename}/main (apt-cache policy)")
    })
}

/// From `apt-cache policy`'s package files, `<priority> <uri> <suite>/<component> <arch>
/// Packages`: the URI of the first one for `<codename>/main`.
fn archive_in_policy(policy: &str, codename: &str) -> Option<String> {
    let wanted = format!("{codename}/main");
    policy.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let is_archive = f.len() == 5 && f[4] == "Packages" && f[0].parse::<i64>().is_ok();
        (is_archive && f[2] == wanted && f[1].contains("://"))
            .then(|| f[1].trim_end_matches('/').to_owned())
    })
}

/// What is mounted inside the root for one run; unmounted when dropped, in reverse.
struct Mounts {
    points: Vec<PathBuf>,
}

impl Mounts {
    fn new(root: &Path) -> Result<Self> {
        unmount_below(root)?;
        let mut mounts = Mounts { points: Vec::new() };
        let sh = Shell::new()?;
        let proc_dir = root.join("proc");
        let shm = root.join("dev/shm");
        fs::create_dir_all(&proc_dir)?;
        fs::create_dir_all(&shm)?;
        cmd!(sh, "mount -t proc proc {proc_dir}").run()?;
        mounts.points.push(proc_dir);
        cmd!(sh, "mount -t tmpfs -o size=512m tmpfs {shm}").run()?;
        mounts.points.push(shm);
        Ok(mounts)
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        for point in self.points.iter().rev() {
            if let Err(e) = unmount(point) {
                eprintln!("bare root: {e:#}");
            }
        }
    }
}

fn unmount(point: &Path) -> Result<()> {
    let sh = Shell::new()?;
    if cmd!(sh, "umount {point}").run().is_err() {
        // Busy (a process left behind): detach it now, it goes when released.
        cmd!(sh, "umount --lazy {point}")
            .run()
            .with_context(|| format!("could not unmount {}", point.display()))?;
    }
    Ok(())
}

/// Unmounts whatever an earlier, interrupted run left mounted below `root`.
fn unmount_below(root: &Path) -> Result<()> {
    let root = fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")?;
    let mut points: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(&root) && *p != root)
        .collect();
    // Deepest first.
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for point in points {
        unmount(&point)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_is_the_one_serving_the_release_main_component() {
        let policy = "Package files:\n 100 /var/lib/dpkg/status\n     release a=now\n \
            500 http://security.example/debian-security bookworm-security/main amd64 Packages\n \
            500 http://archive.example/debian bookworm-updates/main amd64 Packages\n \
            500 http://archive.example/debian/ bookworm/main amd64 Packages\n     \
            release v=12.15,o=Debian,a=oldstable,n=bookworm,l=Debian,c=main,b=amd64\n";
        assert_eq!(
            archive_in_policy(policy, "bookworm").as_deref(),
            Some("http://archive.example/debian")
        );
        assert_eq!(archive_in_policy(policy, "trixie"), None);
    }
}
