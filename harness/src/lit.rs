//! `cargo xtask lit`: LLVM 16's own libomptarget lit suite for x86_64-pc-linux-gnu,
//! run through our plugin (or LLVM's, for the baseline). `--llvm 17` / `--llvm 18`: that
//! version's suite in a Debian 13 root, through both plugins, compared
//! ([`debian13_suites`]); what follows describes 16, and 17 and 18 run the same way,
//! chrooted ([`Llvm`]).
//!
//! - The tests come from Debian's `llvm-toolchain-16` source package ([`debian_source`]),
//!   the configuration from `tests/lit/lit.site.cfg.in` ([`site_config`]), and lit is
//!   llvm-16-tools' own `lit.py`.
//! - `run_suite(Some(dir))` puts `dir` first on the tests' `LD_LIBRARY_PATH`, so
//!   libomptarget.so.16's bare-name `dlopen` of `libomptarget.rtl.x86_64[.nextgen].so`
//!   finds ours (`LIBOMPTARGET_NEXTGEN_PLUGINS=0` when `dir` has no `.nextgen.so` name).
//!   `run_suite(None)` uses LLVM's plugins.
//! - Either way the loader's own log ([`load_proof`]) must show that every passed test
//!   ran its program and that each run initialized the x86_64 plugin from the expected
//!   directory, and (ours) that our plugin wrote its load marker from that process and
//!   that no process loaded any of LLVM's plugin files (so `dir` must provide every
//!   name libomptarget tries: x86_64, cuda, amdgpu, each `.so` and `.nextgen.so`).
//! - Each run leaves `target/lit/<llvm|ours>/`: `lit.log`, the loader logs `ld-debug/`,
//!   the marker `plugin-load-marker.txt` and the built test programs. A lock file keeps
//!   two runs of the same kind from clearing each other's evidence.
//!
//! Contract: `run_suite` fails when the suite cannot run or the load proof fails; it
//! returns the counts even when tests fail, so the caller can show them.
//! [`assert_matches_baseline`] is the pass criterion: all 114 tests found, 92 passed
//! (what LLVM's own plugin gives), 22 unsupported, no failure. `cargo xtask lit`
//! applies it (without a `--filter`; with one, it requires no failures only).

mod compile_cache;
pub(crate) mod debian13_suites;
pub(crate) mod debian_source;
mod load_proof;
pub(crate) mod results;
mod site_config;

use crate::{debian_root, plugin, util};
use anyhow::{bail, Context, Result};
use compile_cache::CompileCache;
use results::{Status, TestResult};
use site_config::SiteConfig;
pub(crate) use site_config::LLVM16_PREFIX;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use xshell::{cmd, Cmd, Shell};

/// The target this suite runs for (the plugin we test is the x86_64 one).
const TARGET: &str = "x86_64-pc-linux-gnu";
/// LLVM 16's suite as Debian ships it, through LLVM's own x86_64 plugin.
pub const BASELINE_TOTAL: usize = 114;
pub const BASELINE_PASSED: usize = 92;
pub const BASELINE_UNSUPPORTED: usize = 22;

#[derive(clap::Args, Default)]
pub struct Args {
    /// Run through the plugins in DIR (default: LLVM's own, the baseline).
    #[arg(long, value_name = "DIR", conflicts_with = "ours")]
    pub plugin_dir: Option<PathBuf>,
    /// Build our plugins (`cargo xtask build-plugin`) and run through them.
    #[arg(long)]
    pub ours: bool,
    /// Only run tests whose path matches REGEX (lit's --filter).
    #[arg(long, value_name = "REGEX")]
    pub filter: Option<String>,
    /// Parallel lit workers (default: the number of CPUs).
    #[arg(short = 'j', long)]
    pub jobs: Option<usize>,
    /// Run our x86_64 device in its own process (`OMPTARGET_RS_ISOLATED=1`).
    #[arg(long, requires = "ours")]
    pub isolated: bool,
    /// Which LLVM's suite: 16 (this machine's), 17 or 18 (in a cached Debian 13 root,
    /// run through that LLVM's plugin and through ours, and compared).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(16..=18))]
    pub llvm: u32,
}

/// What one run of the suite gave.
#[derive(Debug)]
pub struct LitSummary {
    pub passed: usize,
    /// FAIL, XPASS, UNRESOLVED and TIMEOUT: whatever makes lit fail.
    pub failed: usize,
    pub unsupported: usize,
    pub xfail: usize,
    /// Tests lit found (after the filter).
    pub total: usize,
    pub results: Vec<TestResult>,
    /// The directory the plugins came from.
    pub plugin_dir: PathBuf,
    pub load_proof: load_proof::LoadProof,
    /// Wall time of the lit run (not the one-time download).
    pub run_time: Duration,
}

impl LitSummary {
    /// "P passed, F failed, U unsupported, X xfail", for the summaries.
    pub fn counts(&self) -> String {
        format!(
            "{} passed, {} failed, {} unsupported, {} xfail",
            self.passed, self.failed, self.unsupported, self.xfail
        )
    }

    pub fn failed_tests(&self) -> Vec<&str> {
        self.results
            .iter()
            .filter(|r| r.status.failed())
            .map(|r| r.name.as_str())
            .collect()
    }
}

/// LLVM `major`'s suite (17 or 18) in its Debian 13 root, through LLVM's plugin and
/// through ours (the plugins in `plugin_dir`) in-process and on the isolated host device,
/// compared: the step `cargo xtask test` runs.
pub fn compare_in_debian13(major: u32, plugin_dir: &Path) -> Result<()> {
    debian13_suites::main(&Args {
        plugin_dir: Some(plugin_dir.to_owned()),
        llvm: major,
        isolated: true,
        ..Args::default()
    })
}

pub fn main(args: Args) -> Result<()> {
    if args.llvm != 16 {
        return debian13_suites::main(&args);
    }
    let plugin_dir = match (&args.plugin_dir, args.ours) {
        (Some(dir), _) => Some(dir.clone()),
        (None, true) => Some(plugin::build_plugins()?),
        (None, false) => None,
    };
    let options = Options {
        plugin_dir: plugin_dir.as_deref(),
        filter: args.filter.as_deref(),
        jobs: args.jobs,
        isolated: args.isolated,
    };
    let summary = run(&llvm16()?, &options)?;
    if options.isolated && options.filter.is_none() {
        return assert_isolated_matches(&summary);
    }
    if options.filter.is_some() {
        if summary.failed != 0 {
            bail!(
                "{} test(s) failed: {:?}",
                summary.failed,
                summary.failed_tests()
            );
        }
        Ok(())
    } else {
        assert_matches_baseline(&summary)
    }
}

/// Runs the whole suite (all CPUs) through the plugins in `plugin_dir`, or LLVM's.
pub fn run_suite(plugin_dir: Option<&Path>) -> Result<LitSummary> {
    run(
        &llvm16()?,
        &Options {
            plugin_dir,
            filter: None,
            jobs: None,
            isolated: false,
        },
    )
}

/// Runs the whole suite through our plugins in `plugin_dir` with the x86_64 device in its
/// own process (`OMPTARGET_RS_ISOLATED=1`).
pub fn run_suite_isolated(plugin_dir: &Path) -> Result<LitSummary> {
    run(
        &llvm16()?,
        &Options {
            plugin_dir: Some(plugin_dir),
            filter: None,
            jobs: None,
            isolated: true,
        },
    )
}

/// The tests that pass through our plugin in-process but fail on the isolated host
/// device (`OMPTARGET_RS_ISOLATED=1`), and why: each needs the host and the device to
/// share memory, which a discrete GPU does not. docs/RELIABILITY.md lists the same.
pub const ISOLATED_DIFFERENCES: &[(&str, &str)] = &[
    ("mapping/present/unified_shared_memory.c", REQUIRES_USM),
    ("unified_shared_memory/api.c", REQUIRES_USM),
    ("unified_shared_memory/associate_ptr.c", REQUIRES_USM),
    ("unified_shared_memory/close_enter_exit.c", REQUIRES_USM),
    ("unified_shared_memory/close_manual.c", REQUIRES_USM),
    ("unified_shared_memory/close_member.c", REQUIRES_USM),
    ("unified_shared_memory/close_modifier.c", REQUIRES_USM),
    ("unified_shared_memory/shared_update.c", REQUIRES_USM),
    (
        "mapping/target_has_device_addr.c",
        "clang 16 has libomptarget copy to the device from the device address that \
         `use_device_addr` gave (a device pointer used as host memory): only a shared \
         address space runs it; the plugin refuses the copy with that reason",
    ),
];

pub(crate) const REQUIRES_USM: &str =
    "`#pragma omp requires unified_shared_memory`: refused by the \
    isolated device, with the reason, as a discrete GPU without unified memory would";

/// Passes when the isolated run differs from the in-process baseline by exactly
/// [`ISOLATED_DIFFERENCES`]: every other test of the 92 passes, and each listed one
/// fails (a listed test that passes means the list is stale).
pub fn assert_isolated_matches(s: &LitSummary) -> Result<()> {
    let expected: std::collections::BTreeSet<String> = ISOLATED_DIFFERENCES
        .iter()
        .map(|(t, _)| t.to_string())
        .collect();
    let failed: std::collections::BTreeSet<String> = s
        .results
        .iter()
        .filter(|r| r.status.failed())
        .map(|r| r.path().to_owned())
        .collect();
    let want_passed = BASELINE_PASSED - ISOLATED_DIFFERENCES.len();
    if failed != expected || s.passed != want_passed || s.total != BASELINE_TOTAL {
        let unexpected: Vec<_> = failed.difference(&expected).collect();
        let stale: Vec<_> = expected.difference(&failed).collect();
        bail!(
            "lit on the isolated host device: {} tests, {} passed, {} failed; expected \
             {BASELINE_TOTAL} tests, {want_passed} passed and exactly the {} listed \
             differences failing. Failed but not listed: {unexpected:?}; listed but not \
             failing: {stale:?}",
            s.total,
            s.passed,
            s.failed,
            expected.len()
        );
    }
    Ok(())
}

/// Passes when the run matches LLVM's own plugin on this suite: every test found,
/// the same 92 passing, nothing failing.
pub fn assert_matches_baseline(s: &LitSummary) -> Result<()> {
    let got = (s.total, s.passed, s.unsupported, s.failed);
    let want = (BASELINE_TOTAL, BASELINE_PASSED, BASELINE_UNSUPPORTED, 0);
    if got != want {
        bail!(
            "lit through {}: {} tests, {} passed, {} unsupported, {} failed; LLVM's own \
             plugin gives {BASELINE_TOTAL} tests, {BASELINE_PASSED} passed, \
             {BASELINE_UNSUPPORTED} unsupported, 0 failed. Failed: {:?}",
            s.plugin_dir.display(),
            s.total,
            s.passed,
            s.unsupported,
            s.failed,
            s.failed_tests()
        );
    }
    Ok(())
}

struct Options<'a> {
    plugin_dir: Option<&'a Path>,
    filter: Option<&'a str>,
    jobs: Option<usize>,
    isolated: bool,
}

/// The LLVM whose suite runs, and where.
pub(crate) struct Llvm {
    pub major: u32,
    /// `/usr/lib/llvm-N`, as the tests see it.
    pub prefix: PathBuf,
    /// The Debian root the suite runs in (chrooted), or None for this machine.
    pub root: Option<PathBuf>,
    /// `openmp/libomptarget/test` of the matching source package.
    pub tests: PathBuf,
    /// Host folders the chrooted run needs at the same path inside the root.
    pub binds: Vec<PathBuf>,
}

impl Llvm {
    /// Where a path as the tests see it lies on this machine.
    fn host_path(&self, p: &Path) -> PathBuf {
        match &self.root {
            Some(root) => root.join(p.strip_prefix("/").unwrap_or(p)),
            None => p.to_path_buf(),
        }
    }

    /// The root the tests' paths are relative to ("/" for this machine).
    fn fs_root(&self) -> &Path {
        self.root.as_deref().unwrap_or(Path::new("/"))
    }

    /// `program args...`, run in the root when there is one.
    fn command<'a>(&self, sh: &'a Shell, program: &Path, args: &[&str]) -> Cmd<'a> {
        match &self.root {
            Some(root) => {
                let mut all = vec![program.to_str().unwrap_or_default()];
                all.extend_from_slice(args);
                debian_root::chroot_cmd(sh, root, &all)
            }
            None => cmd!(sh, "{program} {args...}"),
        }
    }

    /// `target/lit/<label>` for 16 (as always), `target/lit/llvm<N>-<label>` otherwise.
    fn run_dir_name(&self, label: &str) -> String {
        if self.major == 16 {
            label.to_owned()
        } else {
            format!("llvm{}-{label}", self.major)
        }
    }
}

/// LLVM 16 on this machine (its packages installed, its tests fetched when missing).
fn llvm16() -> Result<Llvm> {
    util::ensure_debian_packages(&[
        "clang-16",
        "libomp-16-dev",
        "clang-tools-16",
        "llvm-16-tools",
        "python3",
    ])?;
    Ok(Llvm {
        major: 16,
        prefix: PathBuf::from(LLVM16_PREFIX),
        root: None,
        tests: debian_source::libomptarget_tests()?,
        binds: Vec::new(),
    })
}

fn run(llvm: &Llvm, options: &Options) -> Result<LitSummary> {
    let major = llvm.major;
    util::section(&format!(
        "lit: LLVM {major} libomptarget suite ({TARGET}){}",
        llvm.root
            .as_ref()
            .map(|r| format!(" in {}", r.display()))
            .unwrap_or_default()
    ));
    let lit_py = llvm.prefix.join("build/utils/lit/lit.py");
    if !llvm.host_path(&lit_py).is_file() {
        bail!(
            "{} not found (package llvm-{major}-tools)",
            lit_py.display()
        );
    }
    let tests = llvm.tests.clone();
    let llvm_plugin_dir = llvm.prefix.join("lib");
    let fs_root = llvm.fs_root();
    let canonical_dir = |dir: &Path| -> Result<PathBuf> {
        load_proof::canonical_in(fs_root, dir)
            .with_context(|| format!("{} does not exist", llvm.host_path(dir).display()))
    };

    // Our plugin folder is this machine's (bind-mounted at its own path into a root);
    // LLVM's is the tests' own.
    let host_dir = |dir: &Path| {
        fs::canonicalize(dir).with_context(|| format!("{} does not exist", dir.display()))
    };
    let (label, plugin_dir, plugin_dir_here) = match options.plugin_dir {
        Some(dir) if options.isolated => ("ours-isolated", host_dir(dir)?, host_dir(dir)?),
        Some(dir) => ("ours", host_dir(dir)?, host_dir(dir)?),
        None => {
            let dir = canonical_dir(&llvm_plugin_dir)?;
            let here = llvm.host_path(&dir);
            ("llvm", dir, here)
        }
    };
    let ours = options.plugin_dir.is_some();
    let has = |name: &str| plugin_dir_here.join(name).is_file();
    let x86_64_names = [
        "libomptarget.rtl.x86_64.so",
        "libomptarget.rtl.x86_64.nextgen.so",
    ];
    if !x86_64_names.iter().any(|n| has(n)) {
        bail!(
            "{} holds no libomptarget.rtl.x86_64[.nextgen].so; build it with \
             `cargo xtask build-plugin`",
            plugin_dir.display()
        );
    }

    // One run per folder at a time: a second run would clear this one's loader logs.
    // Runs of other LLVM versions have folders of their own, and go on beside it.
    let lit_dir = util::target_dir().join("lit");
    fs::create_dir_all(&lit_dir)?;
    let run_name = llvm.run_dir_name(label);
    let lock = fs::File::create(lit_dir.join(format!("{run_name}.lock")))?;
    if lock.try_lock().is_err() {
        eprintln!("lit: another `{run_name}` run holds {run_name}.lock; waiting");
        lock.lock()?;
    }
    // A fresh directory per run: stale loader logs or markers would void the proof.
    let run_dir = lit_dir.join(&run_name);
    if run_dir.exists() {
        fs::remove_dir_all(&run_dir).with_context(|| format!("clearing {}", run_dir.display()))?;
    }
    let exec_root = run_dir.join(TARGET);
    let ld_debug_dir = run_dir.join("ld-debug");
    fs::create_dir_all(&exec_root)?;
    fs::create_dir_all(&ld_debug_dir)?;
    let exec_root = fs::canonicalize(&exec_root)?;
    let ld_debug_dir = fs::canonicalize(&ld_debug_dir)?;
    let marker = run_dir.join("plugin-load-marker.txt");
    let cache = CompileCache::for_suite(&lit_dir, &format!("llvm{major}"))?;
    // A chrooted run sees these at the same paths as this machine: the run's folder
    // (programs, logs, marker), the compile cache, the tests, our plugins.
    let _mounts = match &llvm.root {
        Some(root) => {
            let mut binds: Vec<&Path> = vec![&run_dir, cache.dir()];
            binds.extend(llvm.binds.iter().map(PathBuf::as_path));
            if ours {
                binds.push(&plugin_dir);
            }
            Some(debian_root::Mounts::new(root, &binds)?)
        }
        None => None,
    };

    // Debian 13's libLLVM-17.so.1 (where libomptarget 17's bare-name dlopen of its
    // plugins is called from) lives in /usr/lib/x86_64-linux-gnu with RUNPATH
    // `$ORIGIN/../lib`, and the plugins in /usr/lib/llvm-17/lib: without a search path
    // libomptarget 17 finds no plugin at all and every region silently runs on the
    // host fallback. So LLVM's own plugins get their folder on the search path too.
    let search_dir = (ours || major >= 17).then_some(&*plugin_dir);
    let mut environment = test_environment(search_dir, major, &ld_debug_dir, &marker)?;
    if options.isolated {
        environment.push(("OMPTARGET_RS_ISOLATED".to_owned(), "1".to_owned()));
    }
    let sh = Shell::new()?;
    let clang = llvm.prefix.join("bin/clang");
    let clang_version = util::read(llvm.command(&sh, &clang, &["-dumpversion"]))?;
    let compiler_prefix = cache.command_prefix(&run_dir)?;
    let site = SiteConfig {
        prefix: &llvm.prefix,
        tests: &tests,
        exec_root: &exec_root,
        clang_version: clang_version.trim(),
        environment: &environment,
        compiler_prefix: Some(&compiler_prefix),
    };
    for f in site.required_files() {
        if !llvm.host_path(&f).exists() {
            bail!(
                "{} is missing: is LLVM {major} fully installed?",
                f.display()
            );
        }
    }
    let template_path = util::root().join(match major {
        16 => "tests/lit/lit.site.cfg.in".to_owned(),
        n => format!("tests/lit/lit.site.cfg.{n}.in"),
    });
    let template = fs::read_to_string(&template_path)
        .with_context(|| format!("reading {}", template_path.display()))?;
    fs::write(exec_root.join("lit.site.cfg"), site.render(&template)?)?;

    let jobs = options.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    });
    let report_path = run_dir.join("results.json");
    let lit = lit_command(
        llvm,
        &sh,
        &lit_py,
        jobs,
        options.filter,
        &exec_root,
        &report_path,
    );
    eprintln!(
        "lit: plugins from {} ({label}), {jobs} workers",
        plugin_dir.display()
    );
    let start = Instant::now();
    run_streaming(lit, &run_dir.join("lit.log"))?;
    let run_time = start.elapsed();
    let (hits, misses) = cache.counts()?;
    eprintln!(
        "lit: compile cache: {hits} compile(s) taken from an earlier run of this suite, {misses} run"
    );

    let results = results::read(&report_path)?;
    if results.is_empty() {
        bail!(
            "lit reported no test results; see {}",
            run_dir.join("lit.log").display()
        );
    }
    let count = |pred: fn(Status) -> bool| results.iter().filter(|r| pred(r.status)).count();
    // A passed test that only compiles (LLVM 18 has some) runs no program that could
    // show which plugin it used: the proof covers the others, and says how many.
    let (passed_paths, compile_only): (Vec<&str>, Vec<&str>) = results
        .iter()
        .filter(|r| r.status.passed())
        .map(|r| r.path())
        .partition(|path| {
            let source = fs::read_to_string(llvm.host_path(&llvm.tests.join(path)));
            !source.is_ok_and(|text| load_proof::runs_no_program(&text))
        });
    let load_proof = load_proof::prove(
        &ld_debug_dir,
        &marker,
        &load_proof::Expectation {
            root: fs_root,
            plugin_dir: &plugin_dir,
            llvm_plugin_dir: &llvm_plugin_dir,
            ours,
            exec_root: &exec_root,
            passed_tests: &passed_paths,
            compile_only: compile_only.len(),
        },
    )
    .context("proving which plugin the tests loaded")?;

    let summary = LitSummary {
        passed: count(Status::passed),
        failed: count(Status::failed),
        unsupported: count(|s| s == Status::Unsupported),
        xfail: count(|s| s == Status::XFail),
        total: results.len(),
        results,
        plugin_dir,
        load_proof,
        run_time,
    };
    report(&summary);
    Ok(summary)
}

/// What every test command gets (lit hands tests a cleaned environment): the loader's
/// log for the load proof, our plugin's marker, and, for our plugins (and LLVM 17's), the search path
/// that makes libomptarget's bare-name dlopen find them first.
fn test_environment(
    plugin_search_dir: Option<&Path>,
    major: u32,
    ld_debug_dir: &Path,
    marker: &Path,
) -> Result<Vec<(String, String)>> {
    let mut env = vec![
        ("LD_DEBUG".to_owned(), "libs".to_owned()),
        (
            "LD_DEBUG_OUTPUT".to_owned(),
            path_string(&ld_debug_dir.join("pid"))?,
        ),
        ("OMPTARGET_RS_LOAD_MARKER".to_owned(), path_string(marker)?),
    ];
    if let Some(dir) = plugin_search_dir {
        env.push(("LD_LIBRARY_PATH".to_owned(), path_string(dir)?));
        // Only 16 tries `.nextgen.so` names (a folder in a root: it has none).
        if major == 16 && !dir.join("libomptarget.rtl.x86_64.nextgen.so").is_file() {
            // Otherwise libomptarget would find LLVM's .nextgen.so before our .so.
            env.push(("LIBOMPTARGET_NEXTGEN_PLUGINS".to_owned(), "0".to_owned()));
        }
    }
    Ok(env)
}

/// lit -v (for the log: one `STATUS: name (i of n)` line per test, each failure's
/// output) with its JSON report `-o` (for us: every test's result code and output).
fn lit_command<'a>(
    llvm: &Llvm,
    sh: &'a Shell,
    lit_py: &Path,
    jobs: usize,
    filter: Option<&str>,
    exec_root: &Path,
    report: &Path,
) -> Cmd<'a> {
    let jobs = jobs.to_string();
    let filter: Vec<&str> = filter.into_iter().flat_map(|f| ["--filter", f]).collect();
    if llvm.root.is_some() {
        // chroot_cmd starts from an empty environment.
        let (lit_py, report, exec_root) = (
            lit_py.to_str().unwrap_or_default(),
            report.to_str().unwrap_or_default(),
            exec_root.to_str().unwrap_or_default(),
        );
        let mut args = vec![lit_py, "-v", "--no-progress-bar", "-j", &jobs, "-o", report];
        args.extend(filter.iter().copied());
        args.push(exec_root);
        return llvm.command(sh, Path::new("python3"), &args);
    }
    cmd!(
        sh,
        "python3 {lit_py} -v --no-progress-bar -j {jobs} -o {report} {filter...} {exec_root}"
    )
    // What the tests see is set in lit.site.cfg; keep the caller's loader settings
    // from leaking in through lit's pass-through list.
    .env_remove("LD_LIBRARY_PATH")
    .env_remove("LD_PRELOAD")
    .env_remove("LIBOMPTARGET_NEXTGEN_PLUGINS")
    .env_remove("OMP_TARGET_OFFLOAD")
    .env_remove("LIBOMPTARGET_DEBUG")
}

/// Runs `cmd`, echoing its stdout line by line as it comes (through std: xshell gives
/// the output only at the end) and saving it to `log_path`. lit's exit status is not an
/// error here: failing tests are read from its report.
fn run_streaming(cmd: Cmd<'_>, log_path: &Path) -> Result<()> {
    eprintln!("$ {cmd}");
    let shown = cmd.to_string();
    let mut child = Command::from(cmd)
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start `{shown}`"))?;
    let stdout = child.stdout.take().context("lit's stdout")?;
    let mut log_file = fs::File::create(log_path)?;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        eprintln!("{line}");
        writeln!(log_file, "{line}")?;
    }
    let status = child.wait()?;
    // lit: 0 all passed, 1 some test failed; anything else is lit itself failing.
    if !matches!(status.code(), Some(0) | Some(1)) {
        bail!("lit failed with {status}; see {}", log_path.display());
    }
    Ok(())
}

fn report(s: &LitSummary) {
    util::section("lit: summary");
    eprintln!("plugins from   {}", s.plugin_dir.display());
    eprintln!(
        "tests {}: {}  ({:.1} s)",
        s.total,
        s.counts(),
        s.run_time.as_secs_f64()
    );
    let p = &s.load_proof;
    eprintln!(
        "load proof: {} processes logged by the loader; {} runs of the {} passed tests' \
         programs, each initializing libomptarget.rtl.x86_64 from the directory above; \
         {} load-marker lines; {} passed tests only compile",
        p.processes, p.test_program_runs, p.tests_covered, p.marker_lines, p.compile_only
    );
    for f in s.results.iter().filter(|r| r.status.failed()) {
        const LIMIT: usize = 4000;
        let tail_start = f.output.len().saturating_sub(LIMIT);
        let tail_start = (tail_start..=f.output.len())
            .find(|&i| f.output.is_char_boundary(i))
            .unwrap_or(f.output.len());
        eprintln!("\n--- FAILED {} (last {LIMIT} bytes) ---", f.name);
        eprintln!("{}", &f.output[tail_start..]);
    }
    for name in s.failed_tests() {
        eprintln!("FAILED: {name}");
    }
}

fn path_string(p: &Path) -> Result<String> {
    p.to_str()
        .map(str::to_owned)
        .with_context(|| format!("path is not UTF-8: {}", p.display()))
}
