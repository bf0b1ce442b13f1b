//! The proof, on a CPU-only machine, that the GPU kit is self-contained: run.sh (both
//! parts) inside a bare Debian root that holds the base system and python3 only (no
//! LLVM, no Rust, no clang, no libffi-dev), as a GPU machine has no build tree.
//!
//! The root is `debootstrap --variant=minbase --include=python3 <codename>` of this
//! machine's own release, from the archive this machine's apt configuration uses for it
//! (read from `apt-cache policy`; no archive is named here: see [`crate::debian_root`]),
//! cached under target/bare-root/. The run works on a fresh copy of it
//! (target/gpu-kit-root/<codename>, removed when the run passed, kept with its results
//! when not), so the package check may copy the cached root at the same time. The kit is
//! copied in and run with chroot, with /proc and a tmpfs on /dev/shm (lit's worker pool
//! needs it) mounted for the run and unmounted afterwards, whatever happened.
//!
//! Passes when the run passes and its summary shows that every step that needs a GPU
//! printed SKIPPED; run.sh's own `kit_libraries` step has checked every ELF file of the
//! unpacked kit with the root's loader (nothing missing, nothing from outside the kit
//! but glibc), its `doctor` step has run the install's doctor on the kit's prefix (the
//! host and isolated host device self-tests ok, no FAIL but the missing clang-16), and
//! its `programs` step has run the clang-16 programs through the unpacked libomptarget
//! 16 on its host fallback, with correct results.

use crate::{debian_root, util};
use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::time::Instant;
use xshell::{cmd, Shell};

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

/// Builds the kit and runs it in the bare root of this machine's release; see the
/// module documentation.
pub fn prove() -> Result<Proof> {
    ensure_can_prove()?;
    let kit = super::build_kit()?;
    run_in_bare_root(&kit, &release::llvm_release::os_release_codename()?)
}

/// What a bare-root proof needs of this machine.
pub fn ensure_can_prove() -> Result<()> {
    ensure!(
        util::is_root(),
        "the bare-root proof needs root (debootstrap, chroot, mount)"
    );
    util::ensure_debian_packages(&["debootstrap"])
}

/// Runs the kit in `kit` (both parts) in a bare root of Debian `codename`; passes as
/// the module documentation says.
pub fn run_in_bare_root(kit: &Path, codename: &str) -> Result<Proof> {
    util::section(&format!(
        "gpu-bundle: run.sh in a bare Debian root ({codename})"
    ));
    let (base, bootstrap_secs) = debian_root::bare(codename)?;
    let root = debian_root::fresh_copy(&base, &format!("gpu-kit-root/{codename}"))?;
    let inside_kit = root.join(KIT_IN_ROOT);
    let inside_results = root.join(RESULTS_IN_ROOT);
    let sh = Shell::new()?;
    cmd!(sh, "cp -a {kit} {inside_kit}").run()?;

    let start = Instant::now();
    let output = {
        let _mounts = debian_root::Mounts::new(&root, &[])?;
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
    debian_root::remove_root(&root)?;
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
