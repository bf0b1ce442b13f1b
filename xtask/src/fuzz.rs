//! `cargo xtask fuzz`: bounded cargo-fuzz runs of every parser target in `fuzz/`, each
//! seeded with a corpus made by the real LLVM 22 tools (bundles plain, text and
//! compressed, OffloadBinaries, clang host objects with offload entries).

use crate::util::{llvm16, llvm22, output, root, run, section, target_dir, which};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The fuzz targets of `fuzz/Cargo.toml`, one per parser.
pub const TARGETS: &[&str] = &[
    "bundle",
    "compressed_bundle",
    "offload_binary",
    "host_entries",
    "find_images",
    "target_id",
];

#[derive(clap::Args)]
pub struct Args {
    /// Seconds of fuzzing per target.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Only these targets (default: all).
    #[arg(long = "target")]
    pub targets: Vec<String>,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            seconds: 20,
            targets: Vec::new(),
        }
    }
}

/// What one bounded run did.
pub struct FuzzResult {
    pub target: String,
    pub execs: u64,
    pub seconds: u64,
    pub corpus_files: usize,
}

pub fn main(args: Args) -> Result<()> {
    run_all(args.seconds, &args.targets)?;
    Ok(())
}

/// Run every target (or those in `only`) for `seconds` each; fails on the first crash,
/// naming the reproducer libFuzzer wrote.
pub fn run_all(seconds: u64, only: &[String]) -> Result<Vec<FuzzResult>> {
    for t in only {
        if !TARGETS.contains(&t.as_str()) {
            bail!("unknown fuzz target `{t}`; targets: {}", TARGETS.join(", "));
        }
    }
    ensure_cargo_fuzz()?;
    let fuzz_dir = root().join("fuzz");
    let build_dir = target_dir().join("fuzz");
    section("fuzz: building targets");
    run(cargo_fuzz(&fuzz_dir, &build_dir).args(["build", "-O"]))?;
    section("fuzz: seed corpus from the LLVM 22 tools");
    let corpus_root = target_dir().join("fuzz-corpus");
    let seeds = make_seeds(&corpus_root.join("seeds"))?;
    let mut results = Vec::new();
    for &target in TARGETS {
        if !only.is_empty() && !only.iter().any(|t| t == target) {
            continue;
        }
        section(&format!("fuzz: {target} for {seconds} s"));
        let corpus = corpus_root.join(target);
        std::fs::create_dir_all(&corpus)?;
        for seed in seeds_for(target, &seeds) {
            let name = seed.file_name().context("seed without a name")?;
            std::fs::copy(&seed, corpus.join(name))?;
        }
        let artifacts = corpus_root.join("artifacts").join(target);
        std::fs::create_dir_all(&artifacts)?;
        let out = cargo_fuzz(&fuzz_dir, &build_dir)
            .args(["run", "-O", target])
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg("-rss_limit_mb=2048")
            .arg("-max_len=1048576")
            .arg("-timeout=10")
            .arg("-print_final_stats=1")
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .output()
            .context("could not run cargo fuzz")?;
        let log = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!(
                "fuzz target `{target}` failed ({}); reproducer under {}:\n{}",
                out.status,
                artifacts.display(),
                tail.join("\n")
            );
        }
        let execs = final_stat(&log, "stat::number_of_executed_units")
            .with_context(|| format!("no final stats from libFuzzer for `{target}`:\n{log}"))?;
        let corpus_files = std::fs::read_dir(&corpus)?.count();
        eprintln!("{target}: {execs} executions in {seconds} s, corpus {corpus_files} files");
        results.push(FuzzResult {
            target: target.to_owned(),
            execs,
            seconds,
            corpus_files,
        });
    }
    section("fuzz: summary");
    for r in &results {
        eprintln!(
            "{:<20} {:>12} execs {:>10} execs/s  corpus {}",
            r.target,
            r.execs,
            r.execs / r.seconds.max(1),
            r.corpus_files
        );
    }
    Ok(results)
}

fn cargo_fuzz(fuzz_dir: &Path, build_dir: &Path) -> Command {
    let mut c = Command::new("cargo");
    c.args(["+nightly", "fuzz"])
        .current_dir(fuzz_dir)
        .env("CARGO_TARGET_DIR", build_dir);
    c
}

/// cargo-fuzz needs a nightly toolchain and the cargo-fuzz subcommand; install the
/// subcommand from the registry when it is missing.
fn ensure_cargo_fuzz() -> Result<()> {
    let nightly = Command::new("cargo")
        .args(["+nightly", "--version"])
        .output();
    if !nightly.map(|o| o.status.success()).unwrap_or(false) {
        eprintln!("no nightly toolchain: trying `rustup toolchain install nightly`");
        run(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))
        .context("cargo-fuzz needs a nightly Rust toolchain")?;
    }
    let has_fuzz = Command::new("cargo")
        .args(["+nightly", "fuzz", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !has_fuzz {
        section("fuzz: installing cargo-fuzz");
        run(Command::new("cargo").args(["install", "--locked", "cargo-fuzz"]))?;
    }
    if which("c++").is_none() {
        crate::util::ensure_debian_packages(&["g++"])?;
    }
    Ok(())
}

/// The last value of a libFuzzer final-stats line such as
/// `stat::number_of_executed_units: 123456`.
fn final_stat(log: &str, name: &str) -> Option<u64> {
    log.lines().rev().find_map(|l| {
        l.strip_prefix(name)?
            .trim_start_matches(':')
            .trim()
            .parse()
            .ok()
    })
}

/// Seed files grouped by what they are.
struct Seeds {
    bundles: Vec<PathBuf>,
    text_bundles: Vec<PathBuf>,
    compressed: Vec<PathBuf>,
    offload_binaries: Vec<PathBuf>,
    elf: Vec<PathBuf>,
    ids: Vec<PathBuf>,
}

fn seeds_for(target: &str, s: &Seeds) -> Vec<PathBuf> {
    let all = |groups: &[&Vec<PathBuf>]| groups.iter().flat_map(|g| g.iter().cloned()).collect();
    match target {
        "bundle" => all(&[&s.bundles, &s.text_bundles]),
        "compressed_bundle" => all(&[&s.compressed]),
        "offload_binary" => all(&[&s.offload_binaries]),
        "host_entries" => all(&[&s.elf]),
        "find_images" => all(&[&s.bundles, &s.compressed, &s.offload_binaries, &s.elf]),
        "target_id" => all(&[&s.ids]),
        _ => Vec::new(),
    }
}

/// Make the seed corpus with the real tools: clang-offload-bundler 22 (binary, text,
/// compressed v2 and v3), llvm-offload-binary 22, and clang-22 / clang-16 host objects
/// with offload entries (LLVM 20+ and legacy layouts).
fn make_seeds(dir: &Path) -> Result<Seeds> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let p = |name: &str| dir.join(name);
    // Small, distinct code objects: the fuzzer mutates structure, not payload.
    let inputs: Vec<PathBuf> = (0..3)
        .map(|i| {
            let path = p(&format!("code{i}.bin"));
            let data: Vec<u8> = (0..(24 + 40 * i)).map(|b| (b * 7 + i) as u8).collect();
            std::fs::write(&path, data).map(|_| path)
        })
        .collect::<std::io::Result<_>>()?;
    let bundler = llvm22("clang-offload-bundler")?;
    let targets = "-targets=host-x86_64-unknown-linux-gnu,openmp-nvptx64-nvidia-cuda--sm_90,hip-amdgcn-amd-amdhsa--gfx90a:xnack+";
    let bundle = |ty: &str, out: &Path, version: Option<&str>| -> Result<()> {
        let mut c = Command::new(&bundler);
        c.arg(format!("-type={ty}")).arg(targets);
        for i in &inputs {
            c.arg(format!("-input={}", i.display()));
        }
        c.arg(format!("-output={}", out.display()));
        if let Some(v) = version {
            c.arg("-compress")
                .env("COMPRESSED_BUNDLE_FORMAT_VERSION", v);
        }
        run(&mut c)
    };
    let mut s = Seeds {
        bundles: vec![p("bundle.bc"), p("bundle_aligned.bc")],
        text_bundles: vec![p("bundle.ll"), p("bundle.s")],
        compressed: vec![p("bundle_v2.ccob"), p("bundle_v3.ccob")],
        offload_binaries: vec![p("images.offload")],
        elf: vec![p("host22.o"), p("host16.o")],
        ids: Vec::new(),
    };
    bundle("bc", &s.bundles[0], None)?;
    run(Command::new(&bundler)
        .args(["-type=bc", targets, "-bundle-align=64"])
        .args(inputs.iter().map(|i| format!("-input={}", i.display())))
        .arg(format!("-output={}", s.bundles[1].display())))?;
    bundle("ll", &s.text_bundles[0], None)?;
    bundle("s", &s.text_bundles[1], None)?;
    bundle("bc", &s.compressed[0], Some("2"))?;
    bundle("bc", &s.compressed[1], Some("3"))?;
    run(Command::new(llvm22("llvm-offload-binary")?)
        .arg("-o")
        .arg(&s.offload_binaries[0])
        .arg(format!(
            "--image=file={},triple=nvptx64-nvidia-cuda,arch=sm_90,kind=openmp",
            inputs[1].display()
        ))
        .arg(format!(
            "--image=file={},triple=amdgcn-amd-amdhsa,arch=gfx90a:xnack+,kind=hip",
            inputs[2].display()
        )))?;
    let program = root().join("offload-formats/tests/data/indirect.c");
    run(Command::new(llvm22("clang")?)
        .args(["-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-c"])
        .arg(&program)
        .arg("-o")
        .arg(&s.elf[0]))?;
    // clang-16 has no `declare target indirect`: compile a copy without it.
    let legacy_src = p("legacy.c");
    let text = std::fs::read_to_string(&program)?.replace(
        "#pragma omp begin declare target indirect",
        "#pragma omp begin declare target",
    );
    std::fs::write(&legacy_src, text)?;
    let clang16 = llvm16("clang")?;
    let _ = output(Command::new(&clang16).arg("--version"))?;
    run(Command::new(&clang16)
        .args(["-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-c"])
        .arg(&legacy_src)
        .arg("-o")
        .arg(&s.elf[1]))?;
    for (i, id) in [
        "gfx90a:sramecc+:xnack-|gfx90a:xnack-",
        "fiji:xnack+|gfx803:sramecc-:xnack+",
        "hip-amdgcn-amd-amdhsa--gfx90a:xnack+",
        "openmp-nvptx64-nvidia-cuda--sm_90",
        "host-x86_64-unknown-linux-gnu-",
    ]
    .iter()
    .enumerate()
    {
        let path = p(&format!("id{i}.txt"));
        std::fs::write(&path, id)?;
        s.ids.push(path);
    }
    Ok(s)
}
