//! LLVM's libomptarget lit suite for nvptx64-nvidia-cuda: compiled here, checked on the
//! GPU machine. LLVM 16's for the LLVM 16 kit, on this machine; LLVM 18's for the LLVM
//! 18 kit, in its Debian 13 root ([`Suite`]).
//!
//! lit runs here in the build mode of harness/kit/lit.site.cfg.py: every compile of every
//! RUN line runs clang N for the kit's GPU through harness/kit/lit_tool.py, which stores
//! its output file, stdout, stderr and exit status; programs are not run. The kit gets
//! lit itself (llvm-N-tools' pure-Python package), the test directory (Debian's
//! llvm-toolchain-N source, [`crate::lit::debian_source`]) and the stored compiles, in
//! one `lit.tar.xz`; run.sh runs the same suite in check mode, where each compile
//! replays what was stored and the programs run under FileCheck, once through our cuda
//! plugin and once through LLVM's.
//!
//! A test is *built* when lit passed it here (XPASS included: its XFAIL is about running
//! on a GPU, and nothing ran), *not built* when a compile failed (its first error is
//! kept), *unsupported* when lit skipped it for a feature (the reason lit gives, such
//! as `libomptarget-debug`, which Debian's libomptarget lacks). Results come from lit's
//! JSON report ([`crate::lit::results`]), which keeps every result code.

use super::script::{LIT_SITE_CFG, LIT_TOOL};
use super::{build_dir, Kit, SM};
use crate::lit::results::{self, Status, TestResult};
use crate::lit::{debian_source, LLVM16_PREFIX};
use crate::nvptx_program::NvptxBuild;
use crate::{debian_root, util};
use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use xshell::Shell;

/// Where lit builds the tests here and runs them there: the same absolute path on both
/// machines, because a test program may name a library of its test by its path
/// (offloading/dynamic_module.c links `%t.so`, which has no soname).
pub const EXEC_ROOT: &str = "/tmp/omptarget-rs-kit-lit";

/// What the build gave for one test.
#[derive(Debug, PartialEq)]
enum Outcome {
    Built,
    NotBuilt(String),
    Unsupported(String),
}

/// The suite a kit's lit part is built from, and where its compiles run.
pub struct Suite<'a> {
    pub major: u32,
    /// Where LLVM N is installed, as the compiles see it (`/usr/lib/llvm-N`).
    pub prefix: PathBuf,
    /// The root the compiles and lit run in, with this machine's target folder bound at
    /// its own path (`None`: this machine).
    pub sysroot: Option<&'a Path>,
    /// `openmp/libomptarget/test` of LLVM N's source.
    pub tests: PathBuf,
    /// What makes a compile for nvptx64-nvidia-cuda target the kit's GPU.
    pub offload_flags: Vec<String>,
    /// Where the build keeps its work (stored compiles, reports).
    pub work: PathBuf,
}

impl Suite<'_> {
    /// `path` (as the compiles see it) on this machine.
    fn here(&self, path: &Path) -> PathBuf {
        debian_root::host_path(self.sysroot, path)
    }

    /// `args` where the compiles run.
    fn cmd<'s>(&self, sh: &'s Shell, args: &[&str]) -> xshell::Cmd<'s> {
        debian_root::cmd_in(sh, self.sysroot, args)
    }
}

/// The LLVM 16 kit's suite: LLVM 16's, on this machine.
pub fn add(kit: &mut Kit, nvptx: &NvptxBuild) -> Result<()> {
    util::ensure_debian_packages(&["llvm-16-tools", "python3", "xz-utils", "tar"])?;
    let suite = Suite {
        major: 16,
        prefix: PathBuf::from(LLVM16_PREFIX),
        sysroot: None,
        tests: debian_source::libomptarget_tests()?,
        offload_flags: nvptx.offload_flags(),
        work: build_dir().join("lit"),
    };
    add_suite(kit, &suite)
}

/// `suite` compiled for the kit's GPU, packed into the kit.
pub fn add_suite(kit: &mut Kit, suite: &Suite) -> Result<()> {
    let major = suite.major;
    util::section(&format!(
        "gpu-bundle: LLVM {major} lit suite compiled for {SM}"
    ));
    let tests = &suite.tests;
    let lit_package = suite.here(&suite.prefix.join("build/utils/lit"));
    ensure!(
        lit_package.join("lit.py").is_file(),
        "{} has no lit.py (package llvm-{major}-tools)",
        lit_package.display()
    );
    let work = suite.work.clone();
    let features = compiler_features(suite)?;
    let site = BuildSite {
        suite,
        work: &work,
        tests,
        offload_flags: suite.offload_flags.clone(),
        features: &features,
        clang_major: features[1].trim_start_matches("clang-").to_owned(),
    };
    let results = site.results()?;
    let outcomes = classify(&results, &work.join("store"))?;
    let built: Vec<&str> = outcomes
        .iter()
        .filter(|(_, o)| *o == Outcome::Built)
        .map(|(t, _)| t.as_str())
        .collect();
    let not_built: Vec<Value> = outcomes
        .iter()
        .filter_map(|(t, o)| match o {
            Outcome::NotBuilt(why) => Some(json!({"test": t, "reason": why})),
            _ => None,
        })
        .collect();
    let unsupported: Vec<Value> = outcomes
        .iter()
        .filter_map(|(t, o)| match o {
            Outcome::Unsupported(why) => Some(json!({"test": t, "reason": why})),
            _ => None,
        })
        .collect();
    eprintln!(
        "lit for {SM}: {} tests, {} built, {} not built, {} unsupported",
        outcomes.len(),
        built.len(),
        not_built.len(),
        unsupported.len()
    );
    ensure!(
        !built.is_empty(),
        "no lit test compiled; see {}",
        site.log().display()
    );

    let archive = kit.path("lit.tar.xz")?;
    pack(&work, &lit_package, tests, &archive)?;
    kit.set(
        "lit",
        json!({
            "archive": "lit.tar.xz",
            "lit_py": "lit/lit.py",
            "upstream_lit_cfg": "tests/lit.cfg",
            "store": "store",
            "exec_root": EXEC_ROOT,
            "compiler_features": features,
            "cuda_test_arch": cuda_test_arch(),
            "total": outcomes.len(),
            "built": built,
            "not_built": not_built,
            "unsupported": unsupported,
        }),
    );
    Ok(())
}

/// `--cuda_test_arch` of the upstream configuration: the SM's number (`90`).
fn cuda_test_arch() -> &'static str {
    SM.trim_start_matches("sm_")
}

/// The lit features upstream's set_test_compiler_features() gives the suite's clang.
fn compiler_features(suite: &Suite) -> Result<Vec<String>> {
    let clang = suite.prefix.join("bin/clang").display().to_string();
    let sh = Shell::new()?;
    let version = util::read(suite.cmd(&sh, &[&clang, "-dumpversion"]))?;
    let version = version.trim();
    let parts: Vec<&str> = version.split('.').collect();
    Ok(vec![
        "clang".to_owned(),
        format!("clang-{}", parts[0]),
        format!("clang-{}", parts[..2.min(parts.len())].join(".")),
        format!("clang-{version}"),
    ])
}

/// The build-mode run of the suite.
struct BuildSite<'a> {
    suite: &'a Suite<'a>,
    work: &'a Path,
    tests: &'a Path,
    offload_flags: Vec<String>,
    features: &'a [String],
    /// `16`: clang's resource folder lib/clang/16.
    clang_major: String,
}

impl BuildSite<'_> {
    fn log(&self) -> PathBuf {
        self.work.join("build.log")
    }

    /// lit's JSON report of the build, from an earlier build with the same inputs when
    /// there is one (the build takes minutes).
    fn results(&self) -> Result<Vec<TestResult>> {
        let report = self.work.join("results.json");
        let stamp = self.work.join("inputs.hash");
        let key = self.inputs_hash()?;
        let cached = fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == key);
        if cached && report.is_file() {
            eprintln!("lit build: reusing {} (same inputs)", self.work.display());
        } else {
            let _ = fs::remove_file(&stamp);
            self.run(&report)?;
            fs::write(&stamp, &key)?;
        }
        results::read(&report)
    }

    fn tool(&self) -> PathBuf {
        self.work.join("lit_tool.py")
    }

    /// kit-lit.json of the build run (what lit.site.cfg.py reads).
    fn config(&self) -> Result<Value> {
        let prefix = &self.suite.prefix;
        let lib = prefix.join("lib");
        // By these names: clang++ is a link to clang that drives C++ by its name.
        Ok(json!({
            "mode": "build",
            "llvm": self.suite.major,
            "python": "python3",
            "tool": self.tool(),
            "c_compiler": prefix.join("bin/clang"),
            "cxx_compiler": prefix.join("bin/clang++"),
            "compiler_features": self.features,
            "cuda_test_arch": cuda_test_arch(),
            "library_dir": lib,
            "omp_header_dir": lib.join("clang").join(&self.clang_major).join("include"),
            "filecheck": Value::Null,
            "not": Value::Null,
            "store": self.work.join("store"),
            "offload_flags": self.offload_flags,
            "upstream_lit_cfg": self.tests.join("lit.cfg"),
        }))
    }

    /// Everything the stored compiles depend on.
    fn inputs_hash(&self) -> Result<String> {
        let mut h = DefaultHasher::new();
        LIT_TOOL.hash(&mut h);
        LIT_SITE_CFG.hash(&mut h);
        EXEC_ROOT.hash(&mut h);
        self.config()?.to_string().hash(&mut h);
        for tool in ["clang", "clang++", "clang-offload-packager"] {
            let path = self
                .suite
                .here(&self.suite.prefix.join("bin").join(tool))
                .canonicalize()
                .with_context(|| format!("LLVM {} has no {tool}", self.suite.major))?;
            let meta = fs::metadata(&path)?;
            (path, meta.len(), meta.modified()?).hash(&mut h);
        }
        Ok(format!("{:016x}", h.finish()))
    }

    fn run(&self, report: &Path) -> Result<()> {
        let exec = self.suite.here(Path::new(EXEC_ROOT));
        let store = self.work.join("store");
        // One build at a time may use the shared exec root.
        fs::create_dir_all(self.work)?;
        let lock = fs::File::create(self.work.join("exec-root.lock"))?;
        if lock.try_lock().is_err() {
            eprintln!("lit build: another build holds {EXEC_ROOT}; waiting");
            lock.lock()?;
        }
        for dir in [&exec, &store] {
            if dir.exists() {
                fs::remove_dir_all(dir)?;
            }
            fs::create_dir_all(dir)?;
        }
        super::script::write_executable(&self.tool(), LIT_TOOL)?;
        fs::write(exec.join("lit.site.cfg.py"), LIT_SITE_CFG)?;
        fs::write(
            exec.join("kit-lit.json"),
            serde_json::to_string_pretty(&self.config()?)?,
        )?;
        let _ = fs::remove_file(report);
        let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
        let lit_py = self.suite.prefix.join("build/utils/lit/lit.py");
        let log = fs::File::create(self.log())?;
        let (jobs_arg, xunit) = (jobs.to_string(), self.work.join("build.xml"));
        let (lit_py, report_arg) = (lit_py.display().to_string(), report.display().to_string());
        let xunit = xunit.display().to_string();
        let sh = Shell::new()?;
        let args = [
            "python3",
            &lit_py,
            "-v",
            "--no-progress-bar",
            "-j",
            &jobs_arg,
            "-o",
            &report_arg,
            "--xunit-xml-output",
            &xunit,
            EXEC_ROOT,
        ];
        // What the compiles see is set in the site config.
        let lit = self.suite.cmd(&sh, &args).env_remove("LD_LIBRARY_PATH");
        eprintln!("$ {lit} > {}", self.log().display());
        let start = Instant::now();
        // Through std: xshell cannot send a command's output to a file as it runs.
        let status = Command::from(lit)
            .stdout(log.try_clone()?)
            .stderr(log)
            .status()
            .context("running lit")?;
        eprintln!(
            "lit build: {status} after {:.0} s ({jobs} workers)",
            start.elapsed().as_secs_f64()
        );
        // 0: all passed, 1: some failed (reported per test); anything else: lit broke.
        if !matches!(status.code(), Some(0) | Some(1)) || !report.is_file() {
            bail!("lit failed ({status}); see {}", self.log().display());
        }
        Ok(())
    }
}

/// Each test's outcome, by its path in the suite (`offloading/bug49334.cpp`).
fn classify(results: &[TestResult], store: &Path) -> Result<Vec<(String, Outcome)>> {
    let mut outcomes = Vec::new();
    for t in results {
        let path = t.path().to_owned();
        let output = &t.output;
        let outcome = match t.status {
            Status::Pass | Status::XPass => Outcome::Built,
            Status::Unsupported => {
                Outcome::Unsupported(output.lines().next().unwrap_or("").to_owned())
            }
            _ => Outcome::NotBuilt(first_compile_error(store, &path).unwrap_or_else(|| {
                format!(
                    "lit {}: {}",
                    t.status.code(),
                    output.lines().last().unwrap_or("")
                )
            })),
        };
        outcomes.push((path, outcome));
    }
    outcomes.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(outcomes)
}

/// The first error line of the first failed stored compile of a test, if any.
fn first_compile_error(store: &Path, test: &str) -> Option<String> {
    let (dir, file) = test.rsplit_once('/').unwrap_or(("", test));
    let prefix = format!("{file}.tmp");
    let outputs = store.join(dir).join("Output");
    let mut entries: Vec<PathBuf> = fs::read_dir(outputs)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect();
    entries.sort();
    entries.iter().find_map(|e| {
        let rc = fs::read_to_string(e.join("rc")).ok()?;
        if rc.trim() == "0" {
            return None;
        }
        let stderr = fs::read_to_string(e.join("stderr")).unwrap_or_default();
        let line = stderr
            .lines()
            .find(|l| l.contains("error"))
            .or_else(|| stderr.lines().next())
            .unwrap_or("");
        Some(format!("compile failed (exit {}): {line}", rc.trim()))
    })
}

/// `lit.tar.xz`: lit (its package only), the test directory and the stored compiles.
fn pack(work: &Path, lit_package: &Path, tests: &Path, archive: &Path) -> Result<()> {
    let staging = work.join("pack");
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    fs::create_dir_all(staging.join("lit"))?;
    let link = |from: &Path, to: PathBuf| std::os::unix::fs::symlink(from, to);
    link(&lit_package.join("lit.py"), staging.join("lit/lit.py"))?;
    link(&lit_package.join("lit"), staging.join("lit/lit"))?;
    link(tests, staging.join("tests"))?;
    link(&work.join("store"), staging.join("store"))?;
    super::closure::tar_xz(
        &work.join("lit.tar"),
        &staging,
        &["--dereference", "--exclude=__pycache__"],
        &["lit", "tests", "store"],
        archive,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lit_codes_become_outcomes() {
        let report = json!({"tests": [
            {"name": "libomptarget :: nvptx64-nvidia-cuda :: offloading/a.c", "code": "PASS", "output": ""},
            {"name": "libomptarget :: nvptx64-nvidia-cuda :: unified_shared_memory/api.c", "code": "XPASS", "output": ""},
            {"name": "libomptarget :: nvptx64-nvidia-cuda :: env/d.c", "code": "UNSUPPORTED",
             "output": "Test requires the following unavailable features: libomptarget-debug"},
            {"name": "libomptarget :: nvptx64-nvidia-cuda :: offloading/b.c", "code": "FAIL", "output": "x\nexit 1"},
        ]});
        let store = std::env::temp_dir().join("no-such-kit-store");
        let got = classify(&results::parse(&report.to_string()).unwrap(), &store).unwrap();
        assert_eq!(
            got[0],
            (
                "env/d.c".into(),
                Outcome::Unsupported(
                    "Test requires the following unavailable features: libomptarget-debug".into()
                )
            )
        );
        assert_eq!(got[1], ("offloading/a.c".into(), Outcome::Built));
        assert_eq!(
            got[2],
            (
                "offloading/b.c".into(),
                Outcome::NotBuilt("lit FAIL: exit 1".into())
            )
        );
        assert_eq!(
            got[3],
            ("unified_shared_memory/api.c".into(), Outcome::Built)
        );
    }
}
