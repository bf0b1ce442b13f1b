//! `cargo xtask test`: everything CI runs, in order.
//!
//! 1. prerequisites (Debian packages and the ptxas wheel; installed when run as root),
//! 2. formatting and clippy with `-D warnings`,
//! 3. the artifacts the tests read: device RTL (all targets), the plugins and the CUDA
//!    driver stand-in, the install (compiler plugin, config files) under target/install,
//!    and the GPU kit's sm_90 programs under target/gpu-programs/ (their images checked),
//! 4. `cargo test --workspace`: unit, property, link-survival and end-to-end tests, and
//!    the end-to-end tests again on the isolated host device (`OMPTARGET_RS_ISOLATED=1`),
//! 5. the standard `declare target indirect` program built for gfx90a through the
//!    installed config file, its code object checked;
//!    the CUDA demo program and the GPU lookup benchmark built, the demo's device image
//!    and the benchmark's kernels checked on the CPU (they run only where a GPU is),
//! 6. the GPU kit (`cargo xtask gpu-bundle`) built and run in a bare Debian root,
//!    and LLVM 17 and 18 in their Debian 13 roots: the project installed inside each
//!    (`install --llvm N`), the standard programs built with clang-N and run through it,
//!    the GPU device RTL for clang-N checked; then the LLVM 18 kit (`gpu-bundle --llvm
//!    18`) built and run in a bare Debian 13 root,
//!    and the LLVM 16 package: built (`cargo xtask dist`), lintian-clean, installed in a
//!    bare Debian 12 root where the README's quick start runs as written,
//! 7. LLVM 16's libomptarget lit suite through our x86_64 plugin, in-process and on the
//!    isolated host device,
//! 8. bounded fuzzing of every parser.
//!
//! Build steps stop at the first failure (later steps need their output); test steps all
//! run so one report shows every failure. The last line is `xtask test: N passed, N failed`.

use anyhow::{bail, ensure, Result};
use harness::{debian13_programs, fuzz, gpu_programs, indirect_programs, lit};
use release::{install, plugin, util};
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
    // Source-package tooling for the lit suite, compression for bundles.
    "dpkg-dev",
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

struct Step {
    name: &'static str,
    result: Result<()>,
    secs: f64,
}

fn timed(name: &'static str, f: impl FnOnce() -> Result<()>) -> Step {
    util::section(name);
    let start = Instant::now();
    let result = f();
    let secs = start.elapsed().as_secs_f64();
    match &result {
        Ok(()) => eprintln!("<== {name}: ok ({secs:.1} s)"),
        Err(e) => eprintln!("<== {name}: FAILED ({secs:.1} s): {e:#}"),
    }
    Step { name, result, secs }
}

pub fn main(args: Args) -> Result<()> {
    let mut steps = Vec::new();
    let sh = Shell::new()?;
    let cargo = util::cargo();

    // Build steps: each later step needs what these produce, so stop at the first failure.
    type BuildStep = (&'static str, Box<dyn FnOnce() -> Result<()>>);
    let build_steps: Vec<BuildStep> = vec![
        (
            "prerequisites",
            Box::new(|| {
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
    ];
    for (name, f) in build_steps {
        let step = timed(name, f);
        let failed = step.result.is_err();
        steps.push(step);
        if failed {
            return summarize(&steps);
        }
    }

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
            Ok(
                cmd!(sh, "{cargo} test -p e2e-tests {tests...} --no-fail-fast")
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
    // The GPU kit built and run in a bare Debian root: nothing missing, every GPU step
    // SKIPPED, the clang-16 programs correct on libomptarget's host fallback.
    if !args.skip_kit {
        steps.push(timed("GPU kit: build + run in a bare Debian root", || {
            let proof = harness::gpu_kit::bare_root::prove()?;
            eprintln!("{}", proof.report());
            Ok(())
        }));
    }
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
    // LLVM 17 and 18 as a Debian 13 user has them: the install built inside the root,
    // standard programs compiled by clang-N through it and run through our plugin.
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
            let packages = &mut debian13_packages;
            steps.push(timed(name, move || {
                let report = debian13_programs::check(major)?;
                packages.push((release::dist::Release { major }, report.package));
                Ok(())
            }));
        }
        // Both packages in one bare Debian 13 root, in turn (Debian's OpenMP runtimes of
        // 17 and 18 exclude each other), after a check that no file is in both: the
        // README's quick start (for 17 and for 18) runs from each, then from each tarball.
        steps.push(timed(
            "packages for LLVM 17 and 18: README quick start in a bare Debian 13 root",
            || {
                ensure!(
                    debian13_packages.len() == 2,
                    "the Debian 13 steps built {} of the 2 packages",
                    debian13_packages.len()
                );
                let report = harness::package_check::check(&debian13_packages)?;
                eprintln!("{}", report.summary());
                Ok(())
            },
        ));
        // The second GPU kit: clang-18's programs and libomptarget 18 from that root,
        // run in a bare Debian 13 root, with the check of glibc symbol versions.
        if !args.skip_kit {
            steps.push(timed(
                "GPU kit for LLVM 18: build + run in a bare Debian 13 root",
                || {
                    let proof = harness::gpu_kit::llvm18::prove()?;
                    eprintln!("{}", proof.report());
                    Ok(())
                },
            ));
        }
    }
    if !args.skip_lit {
        steps.push(timed("libomptarget 16 lit suite (our plugin)", || {
            let dir = util::target_dir().join("plugin");
            let summary = lit::run_suite(Some(&dir))?;
            lit::assert_matches_baseline(&summary)
        }));
        steps.push(timed(
            "libomptarget 16 lit suite (our plugin, isolated host device)",
            || {
                let dir = util::target_dir().join("plugin");
                let summary = lit::run_suite_isolated(&dir)?;
                lit::assert_isolated_matches(&summary)
            },
        ));
        // LLVM 17's and 18's own suites in their Debian 13 roots (Debian 12 packages
        // neither), through their plugins and ours, compared.
        steps.push(timed(
            "libomptarget 17 lit suite in Debian 13 (LLVM 17's plugin vs ours, in-process and isolated)",
            || lit::compare_in_debian13(17, &util::target_dir().join("plugin")),
        ));
        steps.push(timed(
            "libomptarget 18 lit suite in Debian 13 (LLVM 18's plugin vs ours, in-process and isolated)",
            || lit::compare_in_debian13(18, &util::target_dir().join("plugin")),
        ));
    }
    if !args.skip_fuzz {
        steps.push(timed("bounded fuzzing", || {
            fuzz::run_all(args.fuzz_seconds, &[]).map(|_| ())
        }));
    }
    summarize(&steps)
}

fn summarize(steps: &[Step]) -> Result<()> {
    util::section("summary");
    for s in steps {
        let verdict = if s.result.is_ok() { "ok" } else { "FAILED" };
        eprintln!("  {verdict:>6}  {:7.1} s  {}", s.secs, s.name);
    }
    let failed = steps.iter().filter(|s| s.result.is_err()).count();
    let passed = steps.len() - failed;
    println!("xtask test: {passed} passed, {failed} failed");
    if failed > 0 {
        bail!("{failed} step(s) failed");
    }
    Ok(())
}
