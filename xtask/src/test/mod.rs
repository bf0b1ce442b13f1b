//! `cargo xtask test`: everything CI runs, builds first, then in two lanes.
//!
//! First, in order (a failure stops the run: every later step needs their output):
//! prerequisites (the disk space a run needs, checked; Debian packages and the ptxas
//! wheel, installed when run as root), the device RTL (all targets), the plugins and
//! the CUDA driver stand-in, the install (compiler plugin, config files) under
//! target/install, and the GPU kit's sm_90 programs under target/gpu-programs/ (their
//! images checked).
//!
//! Then two lanes side by side, each step in a lane after the one before it:
//! - **host** (this process): `cargo fmt --check` and clippy with `-D warnings`;
//!   `cargo test --workspace` (unit, property, link-survival and end-to-end tests) and
//!   the end-to-end tests again on the isolated host device (`OMPTARGET_RS_ISOLATED=1`);
//!   the CUDA demo, the gfx90a standard program and the GPU lookup benchmark built and
//!   their images checked on the CPU; the LLVM 16 package built (`cargo xtask dist`),
//!   lintian-clean, installed in a bare Debian 12 root where the README's quick start
//!   runs as written; bounded fuzzing of every parser; last, the GPU kit (`cargo xtask
//!   gpu-bundle`) built and run in a bare Debian 12 root;
//! - **debian13+lit** (a second `xtask test`, [`lane`], started once the prerequisites
//!   are in): while the builds run, the Debian roots and lit sources its steps use, and
//!   the bare Debian 12 root of the host lane's last steps (downloads and unpacking,
//!   beside the compiling); once they passed, LLVM 17 and 18
//!   in their Debian 13 roots (the project installed and packaged inside each, the
//!   standard programs built with clang-N and run through it, the GPU device RTL for
//!   clang-N checked), both packages' quick start in a bare Debian 13 root, the LLVM 18
//!   kit (`gpu-bundle --llvm 18`) in a bare Debian 13 root, LLVM 17's and 18's lit
//!   suites through their plugin and ours, and LLVM 16's lit suite through our x86_64
//!   plugin, in-process and on the isolated host device. `--sequential` runs them after
//!   the host lane, in this process.
//!
//! Test steps all run so one report shows every failure. The summary table gives each
//! step's wall time, CPU time and lane, then the wall clock; the last line is
//! `xtask test: N passed, N failed`.

mod cpu;
mod disk;
mod lane;

use anyhow::{bail, ensure, Result};
use harness::{debian13_programs, fuzz, gpu_programs, indirect_programs, lit};
use release::{install, plugin, util};
use std::path::PathBuf;
use std::time::Instant;
use xshell::{cmd, Shell};

#[derive(clap::Args, Default)]
pub struct Args {
    /// Skip the libomptarget lit suite (it downloads LLVM 16's source package once).
    #[arg(long)]
    pub skip_lit: bool,
    /// Skip the bounded fuzzing runs.
    #[arg(long)]
    pub skip_fuzz: bool,
    /// Seconds each fuzz target runs.
    #[arg(long, default_value_t = 20)]
    pub fuzz_seconds: u64,
    /// Skip `cargo fmt --check` and clippy.
    #[arg(long)]
    pub skip_lint: bool,
    /// Skip building the GPU kit and its run in a bare Debian root.
    #[arg(long)]
    pub skip_kit: bool,
    /// Skip LLVM 17 and 18 in their Debian 13 roots (install inside, standard programs).
    #[arg(long)]
    pub skip_debian13: bool,
    /// Run the second lane's steps (Debian 13, lit) after the host's, in this process,
    /// instead of beside them in a second one.
    #[arg(long)]
    pub sequential: bool,
    /// Run only the second lane's steps and write their results to this file: how the
    /// second process is started.
    #[arg(long, hide = true)]
    pub lane_results: Option<PathBuf>,
}

/// The end-to-end test files that run programs through libomptarget: run a second time
/// with `OMPTARGET_RS_ISOLATED=1` (the isolated host device).
const ISOLATED_E2E_TESTS: &[&str] = &[
    "plugin_e2e",
    "kit_programs",
    "compiler_plugin",
    "reliability_endurance",
    "plugin_abi_llvm18",
];

/// Every Debian package some step needs, installed in one apt-get run up front.
const DEBIAN_PACKAGES: &[&str] = &[
    // Device bitcode: Debian's Rust can build `core` for nvptx64/amdgcn here.
    "rustc-web",
    "cargo-web",
    "rust-web-src",
    // Linking device bitcode into kernels, offload tools for the formats tests.
    "clang-22",
    "clang-tools-22", // clang-offload-bundler-22, for the formats and AMDGPU tests
    "lld-22",
    "llvm-22",
    // The real libomptarget 16 and the compiler that targets it.
    "clang-16",
    "libomp-16-dev",
    "clang-tools-16",
    "llvm-16-tools",
    "libffi-dev",
    // The compiler plugin: LLVM 16 / clang 16 headers and link names; lld 16 links
    // amdgcn device images, rocm-device-libs lets clang 16 compile for amdgcn.
    "llvm-16-dev",
    "libclang-16-dev",
    "libclang-cpp16-dev",
    "lld-16",
    "rocm-device-libs",
    // Source-package tooling for the lit suites (curl: 17's and 18's sources),
    // compression for bundles.
    "dpkg-dev",
    "curl",
    // The packages' check (`cargo xtask dist`).
    "lintian",
    "xz-utils",
    "zstd",
    // The virtual environment PyPI wheels go into (never the system's python3).
    "python3-venv",
    // The GPU kit's proof: a bare Debian root to run it in.
    "debootstrap",
    // offload-formats/tests/streaming.rs: the peak memory of a run (GNU time's %M).
    "time",
];

/// Where `cargo xtask test` installs (tests/tests/compiler_plugin.rs reads it).
fn install_prefix() -> std::path::PathBuf {
    util::target_dir().join("install")
}

/// One step's outcome, as the summary table shows it.
pub struct Step {
    name: String,
    /// Which process ran it: [`HOST_LANE`] or [`SECOND_LANE`].
    lane: &'static str,
    result: Result<()>,
    secs: f64,
    /// CPU seconds of the step's process and of the commands it waited for.
    cpu_secs: f64,
}

/// The steps this process runs: builds, lint, cargo test, the LLVM 16 kit and package,
/// fuzzing.
const HOST_LANE: &str = "host";
/// The steps run beside the host's (see [`lane`]): LLVM 17 and 18 in their Debian 13
/// roots, and the lit suites of 16, 17 and 18.
const SECOND_LANE: &str = "debian13+lit";

fn timed(name: &str, f: impl FnOnce() -> Result<()>) -> Step {
    util::section(name);
    let start = Instant::now();
    let cpu_start = cpu::seconds();
    let result = f();
    let secs = start.elapsed().as_secs_f64();
    let cpu_secs = cpu::seconds() - cpu_start;
    match &result {
        Ok(()) => eprintln!("<== {name}: ok ({secs:.1} s, {cpu_secs:.0} CPU s)"),
        Err(e) => eprintln!("<== {name}: FAILED ({secs:.1} s): {e:#}"),
    }
    Step {
        name: name.to_owned(),
        lane: HOST_LANE,
        result,
        secs,
        cpu_secs,
    }
}

pub fn main(args: Args) -> Result<()> {
    if let Some(results) = &args.lane_results {
        // The child of `spawn_second_lane`: its caches while the builds run, then (once
        // they passed) its steps; their results to the file.
        let mut steps = vec![second_lane_prefetch(&args)];
        if steps[0].result.is_ok() && lane::wait_for_builds()? {
            steps.extend(second_lane_steps(&args));
        }
        return lane::write_results(results, &steps);
    }
    let start = Instant::now();
    let mut steps = Vec::new();
    let mut second = None;
    for (name, f) in build_steps() {
        let step = timed(name, f);
        let failed = step.result.is_err();
        steps.push(step);
        if failed {
            // The second lane hears that the builds failed and ends after its caches.
            steps.extend(second.map(lane::Lane::join).unwrap_or_default());
            return summarize(&steps, start);
        }
        // Once the Debian packages are in (no two apt runs at once), the second lane
        // makes its roots and sources while the builds compile.
        if name == PREREQUISITES && !args.sequential {
            second = spawn_second_lane(&args)?;
        }
    }
    // Its steps need the builds above and nothing the host steps make.
    if let Some(lane) = &mut second {
        lane.tell_builds_passed()?;
    }
    steps.extend(host_steps(&args));
    match second {
        Some(lane) => steps.extend(lane.join()),
        None => {
            steps.push(second_lane_prefetch(&args));
            steps.extend(second_lane_steps(&args));
        }
    }
    summarize(&steps, start)
}

/// The first build step, after which the second lane starts.
const PREREQUISITES: &str = "prerequisites";

/// A build step: its name and what it runs.
type BuildStep = (&'static str, Box<dyn FnOnce() -> Result<()>>);

/// The builds every later step reads; the first failure stops the run.
fn build_steps() -> Vec<BuildStep> {
    vec![
        (
            PREREQUISITES,
            Box::new(|| {
                disk::ensure_room()?;
                util::ensure_debian_packages(DEBIAN_PACKAGES)?;
                util::ptxas().map(|p| eprintln!("ptxas: {}", p.display()))
            }),
        ),
        ("build device RTL", Box::new(device_build::build_all)),
        (
            "build plugins",
            Box::new(|| plugin::build_plugins().map(|_| ())),
        ),
        // The compiler plugin and the install the standard-source tests build through.
        (
            "install into target/install",
            Box::new(|| install::install(&install_prefix()).map(|_| ())),
        ),
        // The GPU kit's sm_90 programs, their images checked, into target/gpu-programs/
        // (the end-to-end tests load them through the CUDA driver stand-in; the kit
        // copies them).
        (
            "build the GPU programs for sm_90",
            Box::new(|| gpu_programs::build_with_install("sm_90").map(|_| ())),
        ),
    ]
}

/// The second lane in a child process, when it has a step to run.
fn spawn_second_lane(args: &Args) -> Result<Option<lane::Lane>> {
    if args.skip_debian13 && args.skip_lit {
        return Ok(None);
    }
    let flags: Vec<String> = [
        (args.skip_debian13, "--skip-debian13"),
        (args.skip_lit, "--skip-lit"),
        (args.skip_kit, "--skip-kit"),
    ]
    .iter()
    .filter(|(skip, _)| *skip)
    .map(|(_, flag)| flag.to_string())
    .collect();
    let results = util::target_dir().join("xtask-test-second-lane.tsv");
    lane::Lane::spawn(SECOND_LANE, &flags, &results).map(Some)
}

/// The host lane: lint, the workspace's tests, programs and images, the LLVM 16 kit
/// and package, LLVM 16's lit suite, fuzzing. Each runs whatever the others gave.
fn host_steps(args: &Args) -> Vec<Step> {
    let mut steps = Vec::new();
    let Ok(sh) = Shell::new() else {
        return vec![timed("a shell for the host steps", || {
            Shell::new().map(|_| ()).map_err(Into::into)
        })];
    };
    let cargo = util::cargo();
    if !args.skip_lint {
        steps.push(timed("cargo fmt --check", || {
            Ok(cmd!(sh, "{cargo} fmt --all --check").run()?)
        }));
        steps.push(timed("cargo clippy -D warnings", || {
            Ok(cmd!(
                sh,
                "{cargo} clippy --workspace --all-targets -- -D warnings"
            )
            .run()?)
        }));
    }
    steps.push(timed("cargo test --workspace", || {
        Ok(cmd!(sh, "{cargo} test --workspace --no-fail-fast").run()?)
    }));
    // The same end-to-end programs (ours, the kit's host half, the compiler plugin's)
    // with the x86_64 device in its own process, where a host address faults.
    steps.push(timed(
        "end-to-end tests on the isolated host device",
        || {
            let tests: Vec<&str> = ISOLATED_E2E_TESTS
                .iter()
                .flat_map(|t| ["--test", t])
                .collect();
            // `--workspace`, as the step before: `-p e2e-tests` would resolve other
            // features for the shared dependencies and rebuild them (28 s in CI).
            Ok(
                cmd!(sh, "{cargo} test --workspace {tests...} --no-fail-fast")
                    .env("OMPTARGET_RS_ISOLATED", "1")
                    .run()?,
            )
        },
    ));
    // The demo program for an NVIDIA GPU, compiled by clang 16 with the device RTL
    // linked in by nvlink, its image checked (it runs only where a GPU is).
    steps.push(timed("demo for CUDA: build + image check", || {
        harness::demo::main(harness::demo::Args {
            backend: harness::demo::Backend::Cuda,
            build_only: true,
            sm: "sm_90".into(),
        })
    }));
    // The standard `declare target indirect` program for gfx90a through the installed
    // config file, its code object checked (no AMD GPU runs it; the sm_90 programs were
    // built and checked by a build step).
    steps.push(timed(
        "standard indirect program for gfx90a: build + image check",
        || indirect_programs::build_and_check_gfx90a(&install_prefix()),
    ));
    // The GPU benchmark's kernels for every lookup (ours, warp-cooperative, LLVM 19's,
    // direct) built and checked on the CPU against the driver's reference, so a change
    // that breaks them shows here and not first on a GPU machine.
    steps.push(timed("GPU lookup bench: build + CPU check", || {
        harness::bench::gpu_lookup::build_and_check().map(|_| ())
    }));
    // The package a user installs, built, checked by lintian, installed in a bare
    // Debian 12 root with its dependencies, the README's quick start run there as
    // written, the doctor, the purge; then the tarball as a user without root.
    steps.push(timed(
        "package for LLVM 16: dist + README quick start in a bare Debian 12 root",
        || {
            let release = release::dist::Release { major: 16 };
            // The install the tests used, packaged as it is.
            let built = release::dist::build(release, Some(&install_prefix()), false)?;
            let report = harness::package_check::check(&[(release, built)])?;
            eprintln!("{}", report.summary());
            Ok(())
        },
    ));
    if !args.skip_fuzz {
        steps.push(timed("bounded fuzzing", || {
            fuzz::run_all(args.fuzz_seconds, &[]).map(|_| ())
        }));
    }
    // The GPU kit built and run in a bare Debian root: nothing missing, every GPU step
    // SKIPPED, the clang-16 programs correct on libomptarget's host fallback. Last: its
    // compressions and lit compiles keep both cores busy when the other lane is done
    // (fuzzing, single-threaded, left one idle there).
    if !args.skip_kit {
        steps.push(timed("GPU kit: build + run in a bare Debian root", || {
            let proof = harness::gpu_kit::bare_root::prove()?;
            eprintln!("{}", proof.report());
            Ok(())
        }));
    }
    steps
}

/// The second lane's first step, run while the builds compile: the Debian roots and
/// lit sources its steps (and the host lane's package check and GPU kit) would
/// otherwise make on first use.
fn second_lane_prefetch(args: &Args) -> Step {
    let wanted = harness::prefetch::Wanted {
        debian13: !args.skip_debian13,
        lit: !args.skip_lit,
    };
    let mut step = timed("Debian roots and lit sources (beside the builds)", || {
        let made = harness::prefetch::prefetch(&wanted)?;
        eprintln!("{}", made.join("\n"));
        Ok(())
    });
    step.lane = SECOND_LANE;
    step
}

/// The second lane: LLVM 17 and 18 as a Debian 13 user has them (the install built
/// inside each root, standard programs compiled by clang-N through it and run through
/// our plugin), their packages, the LLVM 18 kit; then the lit suites of LLVM 17 and 18
/// (in their roots, their plugin and ours) and LLVM 16's (ours, in-process and
/// isolated).
fn second_lane_steps(args: &Args) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut step = |name: &str, f: &mut dyn FnMut() -> Result<()>| {
        let mut s = timed(name, f);
        s.lane = SECOND_LANE;
        steps.push(s);
    };
    if !args.skip_debian13 {
        let mut debian13_packages = Vec::new();
        for (major, name) in [
            (
                17,
                "LLVM 17 in Debian 13: install and dist inside + standard programs",
            ),
            (
                18,
                "LLVM 18 in Debian 13: install and dist inside + standard programs",
            ),
        ] {
            step(name, &mut || {
                let report = debian13_programs::check(major)?;
                debian13_packages.push((release::dist::Release { major }, report.package));
                Ok(())
            });
        }
        // Both packages in one bare Debian 13 root, in turn (Debian's OpenMP runtimes of
        // 17 and 18 exclude each other), after a check that no file is in both: the
        // README's quick start (for 17 and for 18) runs from each, then from each tarball.
        step(
            "packages for LLVM 17 and 18: README quick start in a bare Debian 13 root",
            &mut || {
                ensure!(
                    debian13_packages.len() == 2,
                    "the Debian 13 steps built {} of the 2 packages",
                    debian13_packages.len()
                );
                let report = harness::package_check::check(&debian13_packages)?;
                eprintln!("{}", report.summary());
                Ok(())
            },
        );
        // The second GPU kit: clang-18's programs and libomptarget 18 from that root,
        // run in a bare Debian 13 root, with the check of glibc symbol versions.
        if !args.skip_kit {
            step(
                "GPU kit for LLVM 18: build + run in a bare Debian 13 root",
                &mut || {
                    let proof = harness::gpu_kit::llvm18::prove()?;
                    eprintln!("{}", proof.report());
                    Ok(())
                },
            );
        }
    }
    if !args.skip_lit {
        // LLVM 17's and 18's own suites in their Debian 13 roots (Debian 12 packages
        // neither), through their plugins and ours, compared.
        for (major, name) in [
            (17, "libomptarget 17 lit suite in Debian 13 (LLVM 17's plugin vs ours, in-process and isolated)"),
            (18, "libomptarget 18 lit suite in Debian 13 (LLVM 18's plugin vs ours, in-process and isolated)"),
        ] {
            step(name, &mut || {
                lit::compare_in_debian13(major, &util::target_dir().join("plugin"))
            });
        }
        let plugins = util::target_dir().join("plugin");
        step("libomptarget 16 lit suite (our plugin)", &mut || {
            let summary = lit::run_suite(Some(&plugins))?;
            lit::assert_matches_baseline(&summary)
        });
        step(
            "libomptarget 16 lit suite (our plugin, isolated host device)",
            &mut || {
                let summary = lit::run_suite_isolated(&plugins)?;
                lit::assert_isolated_matches(&summary)
            },
        );
    }
    steps
}

fn summarize(steps: &[Step], start: Instant) -> Result<()> {
    util::section("summary");
    eprintln!(
        "  {:>6}  {:>9}  {:>9}  {:<12}  step",
        "", "wall", "CPU", "lane"
    );
    for s in steps {
        let verdict = if s.result.is_ok() { "ok" } else { "FAILED" };
        eprintln!(
            "  {verdict:>6}  {:7.1} s  {:7.0} s  {:<12}  {}",
            s.secs, s.cpu_secs, s.lane, s.name
        );
    }
    let cpu: f64 = steps.iter().map(|s| s.cpu_secs).sum();
    eprintln!(
        "  {:>6}  {:7.1} s  {cpu:7.0} s  wall clock (the {HOST_LANE} and {SECOND_LANE} lanes side by side)",
        "total",
        start.elapsed().as_secs_f64()
    );
    let failed = steps.iter().filter(|s| s.result.is_err()).count();
    let passed = steps.len() - failed;
    println!("xtask test: {passed} passed, {failed} failed");
    if failed > 0 {
        bail!("{failed} step(s) failed");
    }
    Ok(())
}
