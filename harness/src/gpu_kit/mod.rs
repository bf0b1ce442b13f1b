//! `cargo xtask gpu-bundle`: the GPU kit, one folder (target/gpu-bundle/, at most
//! 64 MiB) that tests the whole chain on a GPU machine with the NVIDIA driver and
//! python3 but no Rust, no clang and no LLVM: `bash run.sh [--results DIR] [--part 1|2]`.
//!
//! What it holds, one module each:
//! - [`cuda_tests`]: the CUDA test executables (both nvptx device RTL builds), their
//!   fixture cubins, the GPU lookup benchmark and our plugin file;
//! - [`programs`]: clang-16 OpenMP programs built here for the GPU, run there under the
//!   real libomptarget 16 with our cuda plugin and with LLVM 16's own;
//! - [`lit`]: LLVM 16's libomptarget lit suite for nvptx64-nvidia-cuda, compiled here,
//!   checked there with FileCheck;
//! - [`doctor`]: the install's `omptarget-indirect-doctor` with the part of the install
//!   it checks (the programs' install: its self-tests, configs, device runtime archive),
//!   run there on the kit's libomptarget 16;
//! - [`closure`]: the runtime closure of all of that beyond glibc (libomptarget.so.16,
//!   libomp, LLVM 16's cuda plugin, libLLVM-16, ...; FileCheck and `not`), each file
//!   compressed with xz;
//! - [`script`]: run.sh and its Python runner (harness/kit/), which unpacks the closure
//!   into a temporary folder, runs every step, and writes each step's log and a summary
//!   into the results folder;
//! - [`bare_root`]: the proof, on this CPU-only machine, that the kit is
//!   self-contained: run.sh in a bare Debian root (`cargo xtask test` runs it).
//!
//! `manifest.json` at the kit's top tells the runner what each part holds.
//!
//! `cargo xtask gpu-bundle --llvm 18` builds the second kit, of the same shape, for
//! LLVM 18 ([`llvm18`]): clang-18's programs, libomptarget 18 and LLVM 18's cuda plugin
//! from the Debian 13 root, target/gpu-bundle-llvm18/.

pub mod bare_root;
mod closure;
mod cuda_tests;
mod doctor;
pub mod lit;
pub mod llvm18;
mod programs;
mod script;

use crate::nvptx_program::NvptxBuild;
use crate::{plugin, util};
use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;
use xshell::{cmd, Shell};

#[derive(clap::Args, Default)]
pub struct Args {
    /// Then run the kit in a bare Debian root (what `cargo xtask test` does; needs root).
    #[arg(long)]
    pub bare_root: bool,
    /// The LLVM whose libomptarget the kit carries: 16 (Debian 12) or 18 (built in the
    /// Debian 13 root; needs root).
    #[arg(long, default_value_t = 16)]
    pub llvm: u32,
}

/// The GPU machines lend at most this much to a run's carried files.
pub const SIZE_LIMIT: u64 = 64 * 1024 * 1024;
/// Each kit stays below this, leaving room in [`SIZE_LIMIT`] for what a run carries
/// besides it.
pub const KIT_BUDGET: u64 = 60 * 1024 * 1024;
/// The GPU the programs and lit tests are compiled for (H100 and H200).
pub const SM: &str = "sm_90";

/// target/gpu-bundle/
pub fn kit_dir() -> PathBuf {
    util::target_dir().join("gpu-bundle")
}

/// Where the kit's build keeps what outlives one build (compressed libraries, the lit
/// build): target/gpu-kit-build/.
fn build_dir() -> PathBuf {
    util::target_dir().join("gpu-kit-build")
}

pub fn main(args: Args) -> Result<()> {
    if args.bare_root {
        let proof = match args.llvm {
            16 => bare_root::prove()?,
            18 => llvm18::prove()?,
            other => bail!("no GPU kit for LLVM {other}: 16 or 18"),
        };
        println!("{}", proof.report());
        return Ok(());
    }
    let kit = match args.llvm {
        16 => build_kit()?,
        18 => llvm18::build_kit()?,
        other => bail!("no GPU kit for LLVM {other}: 16 or 18"),
    };
    println!("GPU kit in {}", kit.display());
    println!("on a GPU machine: bash run.sh --results DIR   (then --part 2)");
    Ok(())
}

/// The kit being assembled: its folder and the manifest its runner reads.
pub struct Kit {
    dir: PathBuf,
    manifest: Map<String, Value>,
    /// ELF files the kit carries inside an archive (the doctor's prefix): roots of the
    /// closure and of its glibc check, as the kit's own ELF files are.
    packed_roots: Vec<PathBuf>,
}

impl Kit {
    /// A path inside the kit (created folders included).
    fn path(&self, relative: &str) -> Result<PathBuf> {
        let p = self.dir.join(relative);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent)?;
        }
        Ok(p)
    }

    fn set(&mut self, key: &str, value: Value) {
        self.manifest.insert(key.to_owned(), value);
    }
}

/// Builds the whole kit; returns its folder.
pub fn build_kit() -> Result<PathBuf> {
    let start = Instant::now();
    let plugins = timed("plugins", plugin::build_plugins)?;
    let mut kit = Kit::start(kit_dir(), 16)?;
    let nvptx = timed("nvptx build", || {
        NvptxBuild::prepare(SM, &build_dir().join("nvptx"))
    })?;
    timed("CUDA tests", || cuda_tests::add(&mut kit, &plugins))?;
    let prefix = timed("programs", || programs::add(&mut kit, &nvptx))?;
    timed("doctor", || doctor::add(&mut kit, &prefix))?;
    timed("lit", || lit::add(&mut kit, &nvptx))?;
    timed("closure", || closure::add(&mut kit))?;
    timed("script", || script::add(&mut kit))?;
    kit.finish(start)
}

/// Runs one part of a kit's build and prints its time, so a log shows where a kit's
/// minutes go.
fn timed<T>(part: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let start = Instant::now();
    let out = f()?;
    println!(
        "gpu-bundle: {part} took {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(out)
}

impl Kit {
    /// An empty kit folder `dir` (emptied first) for LLVM `llvm`'s libomptarget, with
    /// the manifest's common part.
    fn start(dir: PathBuf, llvm: u32) -> Result<Kit> {
        if dir.exists() {
            fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        fs::create_dir_all(&dir)?;
        let mut kit = Kit {
            dir,
            manifest: Map::new(),
            packed_roots: Vec::new(),
        };
        kit.set("format", json!(1));
        kit.set("llvm", json!(llvm));
        kit.set("built", provenance()?);
        kit.set("sm", json!(SM));
        Ok(kit)
    }

    /// Writes the manifest and checks the kit's size; returns its folder.
    fn finish(self, start: Instant) -> Result<PathBuf> {
        let dir = self.dir;
        let manifest = serde_json::to_string_pretty(&Value::Object(self.manifest))?;
        fs::write(dir.join("manifest.json"), manifest + "\n")?;
        report_size(&dir, start)?;
        Ok(dir)
    }
}

/// Prints the kit's size and fails when it is over [`KIT_BUDGET`].
fn report_size(dir: &Path, start: Instant) -> Result<()> {
    let size = folder_size(dir)?;
    println!(
        "gpu-bundle: {size} bytes ({:.1} MiB of a kit's {} MiB; a GPU run carries {} MiB) \
         in {}, built in {:.0} s",
        size as f64 / (1024.0 * 1024.0),
        KIT_BUDGET / (1024 * 1024),
        SIZE_LIMIT / (1024 * 1024),
        dir.display(),
        start.elapsed().as_secs_f64()
    );
    if size > KIT_BUDGET {
        bail!(
            "the kit is {size} bytes, over a kit's {} MiB",
            KIT_BUDGET / (1024 * 1024)
        );
    }
    Ok(())
}

/// Which sources the kit was built from, for docs/GPU_RUNS.md.
fn provenance() -> Result<Value> {
    let sh = Shell::new()?;
    sh.change_dir(util::root());
    let git = |args: &[&str]| util::read(cmd!(sh, "git {args...}")).map(|s| s.trim().to_owned());
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|_| "unknown".into());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .map(|s| !s.is_empty())
        .unwrap_or(false);
    Ok(json!({
        "commit": commit,
        "uncommitted_changes": dirty,
        "date": crate::bench::utc_now()?,
    }))
}

fn folder_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            folder_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// `path` relative to the kit's top, as the manifest names files.
fn relative(kit: &Kit, path: &Path) -> Result<String> {
    let rel = path
        .strip_prefix(&kit.dir)
        .with_context(|| format!("{} is not inside the kit", path.display()))?;
    rel.to_str()
        .map(str::to_owned)
        .with_context(|| format!("{} is not UTF-8", rel.display()))
}
