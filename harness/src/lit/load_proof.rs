//! Proof of which libomptarget plugin each test program really loaded.
//!
//! The suite runs with `LD_DEBUG=libs LD_DEBUG_OUTPUT=<dir>/pid`: the dynamic loader of
//! every process writes `<dir>/pid.<pid>`, naming the program (`initialize program:`)
//! and every library whose initializers ran (`calling init: <path>`), including the
//! plugins libomptarget dlopens by bare name. This is the loader's own account, so it
//! does not depend on the plugin cooperating. From it we require:
//! - every plugin initialized in any process, whose file name the expected directory
//!   provides, came from the expected directory (our `target/plugin/`, or LLVM's
//!   `/usr/lib/llvm-16/lib` for the baseline), and every x86_64 plugin did;
//! - every test lit reports as passed ran its own program (`%t`) at least once, and
//!   every run of it initialized the x86_64 plugin from the expected directory.
//!
//! On top, our plugin appends `<plugin-name> <pid>` to `$OMPTARGET_RS_LOAD_MARKER` when
//! it loads: each of those test processes must have an x86_64 line with its pid there,
//! which shows our plugin's code ran (not only that a file of that name was mapped).
//! LLVM's plugins know nothing of the marker, so the baseline must leave it empty.

use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// File name prefix of every libomptarget 16 plugin.
const PLUGIN_PREFIX: &str = "libomptarget.rtl.";
/// The plugin the x86_64-pc-linux-gnu suite offloads to (`.so` or `.nextgen.so`).
const X86_64_PLUGIN_PREFIX: &str = "libomptarget.rtl.x86_64.";

/// What the loader logged for one process.
#[derive(Debug, Default)]
struct Process {
    programs: BTreeSet<PathBuf>,
    plugins: Vec<PathBuf>,
}

/// The inputs of the proof.
pub struct Expectation<'a> {
    /// The root the processes ran in ("/", or a chroot's folder): every path here and
    /// in the loader logs is as seen from inside it.
    pub root: &'a Path,
    /// The directory every plugin of a provided name must come from.
    pub plugin_dir: &'a Path,
    /// LLVM's own plugin directory: nothing may be loaded from it when `ours`.
    pub llvm_plugin_dir: &'a Path,
    /// True for our plugin (marker lines required), false for LLVM's (marker empty).
    pub ours: bool,
    /// lit's exec root: test `a/b.c` runs `<exec_root>/a/Output/b.c.tmp`.
    pub exec_root: &'a Path,
    /// Paths (below the suite root) of the tests lit reports as passed that run a
    /// program.
    pub passed_tests: &'a [&'a str],
    /// How many passed tests only compile ([`runs_no_program`]): nothing to prove.
    pub compile_only: usize,
}

/// What was proven, for the report.
#[derive(Debug)]
pub struct LoadProof {
    /// Processes the loader logged (compilers, FileCheck and test programs).
    pub processes: usize,
    /// Runs of passed tests' programs, each seen initializing the expected x86_64 plugin.
    pub test_program_runs: usize,
    /// Passed tests covered by such runs (all of them, or the proof fails).
    pub tests_covered: usize,
    /// Lines in the load marker.
    pub marker_lines: usize,
    /// Passed tests that run no program, left out of the proof.
    pub compile_only: usize,
}

pub fn prove(ld_debug_dir: &Path, marker: &Path, expect: &Expectation) -> Result<LoadProof> {
    let processes = read_loader_logs(ld_debug_dir)?;
    let root = expect.root;
    let canonical = |p: &Path| canonical_in(root, p).unwrap_or_else(|| p.to_path_buf());
    let plugin_dir = canonical(expect.plugin_dir);
    let plugin_dir_here = host_path(root, &plugin_dir);
    let provided: BTreeSet<String> = fs::read_dir(&plugin_dir_here)
        .with_context(|| format!("reading {}", plugin_dir_here.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(PLUGIN_PREFIX))
        .collect();

    let llvm_dir = canonical(expect.llvm_plugin_dir);
    for (pid, process) in &processes {
        for plugin in &process.plugins {
            let name = file_name(plugin);
            // Compare files, not directory names: a symlink in our directory that
            // points at LLVM's plugin must not count as ours.
            let loaded = canonical(plugin);
            let must_be_expected =
                provided.contains(&name) || name.starts_with(X86_64_PLUGIN_PREFIX);
            let expected = plugin_dir.join(&name);
            if must_be_expected
                && (!host_path(root, &expected).exists() || loaded != canonical(&expected))
            {
                bail!(
                    "process {pid} ({}) loaded {} (file {}) instead of {}",
                    describe(process),
                    plugin.display(),
                    loaded.display(),
                    expected.display()
                );
            }
            if expect.ours && loaded.starts_with(&llvm_dir) {
                bail!(
                    "process {pid} ({}) loaded LLVM's plugin file {} (as {}): in a run through \
                     {} no LLVM plugin may load, so it must provide, as its own files, \
                     every plugin name libomptarget tries",
                    describe(process),
                    loaded.display(),
                    plugin.display(),
                    plugin_dir.display()
                );
            }
        }
    }

    let marker_text = match fs::read_to_string(marker) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", marker.display())),
    };
    let marker_pids = parse_marker(&marker_text)?;
    let marker_lines = marker_text.lines().filter(|l| !l.trim().is_empty()).count();
    if !expect.ours && marker_lines != 0 {
        bail!(
            "{marker_lines} process(es) wrote our load marker {} although LLVM's plugins \
             were meant to be used: our plugin was loaded",
            marker.display()
        );
    }

    let exec_root = canonical(expect.exec_root);
    let mut test_program_runs = 0;
    for test in expect.passed_tests {
        let program = test_program(&exec_root, test);
        let runs: Vec<(&u32, &Process)> = processes
            .iter()
            .filter(|(_, p)| {
                p.programs
                    .iter()
                    .any(|prog| is_run_of(&canonical(prog), &program))
            })
            .collect();
        if runs.is_empty() {
            bail!(
                "passed test {test} never ran its program {}: nothing proves which plugin it used",
                program.display()
            );
        }
        for (pid, process) in runs {
            if process.programs.len() != 1 {
                bail!(
                    "loader log of pid {pid} mixes programs ({}): a reused pid, run again",
                    describe(process)
                );
            }
            let has_x86_64 = process
                .plugins
                .iter()
                .any(|p| file_name(p).starts_with(X86_64_PLUGIN_PREFIX));
            if !has_x86_64 {
                bail!(
                    "test {test}: process {pid} ({}) passed without loading an x86_64 plugin",
                    describe(process)
                );
            }
            if expect.ours
                && !marker_pids
                    .get(pid)
                    .is_some_and(|names| names.iter().any(|n| n.contains("x86_64")))
            {
                bail!(
                    "test {test}: process {pid} initialized libomptarget.rtl.x86_64 from {} but \
                     left no `x86_64 {pid}` line in the load marker {}: that library is \
                     not our plugin",
                    plugin_dir.display(),
                    marker.display()
                );
            }
            test_program_runs += 1;
        }
    }
    Ok(LoadProof {
        processes: processes.len(),
        test_program_runs,
        tests_covered: expect.passed_tests.len(),
        marker_lines,
        compile_only: expect.compile_only,
    })
}

/// Whether a test's `RUN:` lines only compile: no lit substitution that runs (`%…run…`)
/// and no command that is the built program (`%t` other than after `-o`). Such a test
/// (`offloading/bug64959_compile_only.c` of LLVM 18) never loads a plugin.
pub fn runs_no_program(source: &str) -> bool {
    let run_lines: Vec<&str> = source
        .lines()
        .filter_map(|l| l.split_once("RUN:").map(|(_, cmd)| cmd))
        .collect();
    let runs = |cmd: &str| {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        words.iter().enumerate().any(|(i, w)| {
            let substitution_runs = w.starts_with('%') && w.contains("run");
            let runs_output = w.starts_with("%t") && (i == 0 || words[i - 1] != "-o");
            substitution_runs || runs_output
        })
    };
    !run_lines.is_empty() && !run_lines.iter().any(|cmd| runs(cmd))
}

/// `<exec_root>/<dir>/Output/<file>.tmp` for test `<dir>/<file>` (lit's `%t`).
fn test_program(exec_root: &Path, test: &str) -> PathBuf {
    let test = Path::new(test);
    let dir = test.parent().unwrap_or(Path::new(""));
    let mut file = test.file_name().unwrap_or_default().to_os_string();
    file.push(".tmp");
    exec_root.join(dir).join("Output").join(file)
}

/// `%t` itself or a derived name such as `%t-variant` (`program` canonical).
fn is_run_of(p: &Path, test_program: &Path) -> bool {
    p == test_program
        || p.to_str().zip(test_program.to_str()).is_some_and(|(p, t)| {
            p.strip_prefix(t)
                .is_some_and(|rest| rest.starts_with('-') || rest.starts_with('.'))
        })
}

/// `<name> <pid>` lines → names seen per pid. A malformed line is an error: the marker
/// is our plugin's testimony and must read unambiguously.
fn parse_marker(text: &str) -> Result<BTreeMap<u32, Vec<String>>> {
    let mut pids: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut fields = line.split_whitespace();
        let parsed = fields
            .next()
            .zip(fields.next().and_then(|p| p.parse::<u32>().ok()))
            .filter(|_| fields.next().is_none());
        let Some((name, pid)) = parsed else {
            bail!(
                "load marker line {}: expected `<plugin-name> <pid>`, got {line:?}",
                i + 1
            );
        };
        pids.entry(pid).or_default().push(name.to_owned());
    }
    Ok(pids)
}

/// Every `<prefix>.<pid>` file in `dir`, parsed.
fn read_loader_logs(dir: &Path) -> Result<BTreeMap<u32, Process>> {
    let mut processes = BTreeMap::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let Some(pid) = path
            .extension()
            .and_then(|e| e.to_str())
            .and_then(|e| e.parse::<u32>().ok())
        else {
            continue;
        };
        // The loader writes plain text; lossy decoding keeps odd bytes from stopping us.
        let text = String::from_utf8_lossy(&fs::read(&path)?).into_owned();
        processes.insert(pid, parse_loader_log(&text));
    }
    if processes.is_empty() {
        bail!(
            "the dynamic loader logged nothing in {}: LD_DEBUG did not reach the tests",
            dir.display()
        );
    }
    Ok(processes)
}

/// One process's `LD_DEBUG=libs` log (lines `<pid>:\t<message>`).
fn parse_loader_log(text: &str) -> Process {
    let mut process = Process::default();
    for line in text.lines() {
        let message = line.split_once(":\t").map(|(_, m)| m).unwrap_or(line);
        if let Some(program) = message.strip_prefix("initialize program: ") {
            process.programs.insert(PathBuf::from(program.trim()));
        } else if let Some(lib) = message.strip_prefix("calling init: ") {
            let lib = PathBuf::from(lib.trim());
            if file_name(&lib).starts_with(PLUGIN_PREFIX) {
                process.plugins.push(lib);
            }
        }
    }
    process
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Resolves `..` and symlinks where the path still exists (loader paths look like
/// `/usr/lib/llvm-16/lib/../lib/x.so`).
fn canonical(p: &Path) -> PathBuf {
    fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Where `p`, a path inside `root`, lies on this machine.
fn host_path(root: &Path, p: &Path) -> PathBuf {
    root.join(p.strip_prefix("/").unwrap_or(p))
}

/// `p` (a path as seen inside `root`) with `..` and symlinks resolved, as seen inside
/// `root`; None when it does not exist. The root's own symlinks resolve within it as
/// long as they are relative (Debian's are); folders bind-mounted into the root at
/// their own path read the same inside and out.
pub(crate) fn canonical_in(root: &Path, p: &Path) -> Option<PathBuf> {
    if root == Path::new("/") {
        return fs::canonicalize(p).ok();
    }
    let resolved = fs::canonicalize(host_path(root, p)).ok()?;
    let root = canonical(root);
    Some(match resolved.strip_prefix(&root) {
        Ok(rest) => Path::new("/").join(rest),
        // An absolute symlink that left the root: keep what it names.
        Err(_) => resolved,
    })
}

fn describe(p: &Process) -> String {
    let programs: Vec<String> = p.programs.iter().map(|p| p.display().to_string()).collect();
    if programs.is_empty() {
        "unknown program".to_owned()
    } else {
        programs.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compile_only_tests_are_told_from_those_that_run() {
        let compile_only =
            "// RUN: %libomptarget-compile-generic\n// RUN: %libomptarget-compileopt-generic\n";
        assert!(runs_no_program(compile_only));
        assert!(!runs_no_program(
            "// RUN: %libomptarget-compile-run-and-check-generic\n"
        ));
        assert!(!runs_no_program(
            "// RUN: %libomptarget-compile-generic -o %t\n// RUN: env X=1 %t | %fcheck-generic\n"
        ));
        assert!(!runs_no_program(
            "// RUN: %clang-generic %s -o %t && %libomptarget-run-generic\n"
        ));
        // No RUN line at all: not a test that compiles only.
        assert!(!runs_no_program("int main() {}\n"));
    }

    struct World {
        root: PathBuf,
        ours: PathBuf,
        theirs: PathBuf,
        logs: PathBuf,
        exec_root: PathBuf,
        marker: PathBuf,
    }

    fn world(name: &str) -> World {
        let root = crate::test_scratch(name);
        let w = World {
            ours: root.join("ours"),
            theirs: root.join("theirs"),
            logs: root.join("ld"),
            exec_root: root.join("exec"),
            marker: root.join("marker"),
            root,
        };
        for d in [&w.ours, &w.theirs, &w.logs, &w.exec_root] {
            fs::create_dir_all(d).unwrap();
        }
        for d in [&w.ours, &w.theirs] {
            fs::write(d.join("libomptarget.rtl.x86_64.so"), "").unwrap();
        }
        w
    }

    impl World {
        fn log(&self, pid: u32, program: &Path, plugin: Option<&Path>) {
            let mut text = format!("{pid}:\tcalling init: /lib/libc.so.6\n");
            if let Some(p) = plugin {
                text.push_str(&format!("{pid}:\tcalling init: {}\n", p.display()));
            }
            text.push_str(&format!(
                "{pid}:\tinitialize program: {}\n",
                program.display()
            ));
            fs::write(self.logs.join(format!("pid.{pid}")), text).unwrap();
        }

        fn prove(&self, dir: &Path, ours: bool, passed: &[&str]) -> Result<LoadProof> {
            prove(
                &self.logs,
                &self.marker,
                &Expectation {
                    root: Path::new("/"),
                    plugin_dir: dir,
                    llvm_plugin_dir: &self.theirs,
                    ours,
                    exec_root: &self.exec_root,
                    passed_tests: passed,
                    compile_only: 0,
                },
            )
        }
    }

    #[test]
    fn our_plugin_in_every_test_run_with_marker_is_proven() {
        let w = world("ok");
        let prog = w.exec_root.join("api/Output/a.c.tmp");
        w.log(10, Path::new("/usr/bin/clang"), None);
        w.log(11, &prog, Some(&w.ours.join("libomptarget.rtl.x86_64.so")));
        fs::write(&w.marker, "x86_64 11\n").unwrap();
        let proof = w.prove(&w.ours, true, &["api/a.c"]).unwrap();
        assert_eq!(
            (proof.processes, proof.test_program_runs, proof.marker_lines),
            (2, 1, 1)
        );
        let _ = fs::remove_dir_all(&w.root);
    }

    #[test]
    fn llvm_plugin_in_our_run_is_caught() {
        let w = world("theirs");
        let prog = w.exec_root.join("api/Output/a.c.tmp");
        w.log(
            11,
            &prog,
            Some(&w.theirs.join("libomptarget.rtl.x86_64.so")),
        );
        fs::write(&w.marker, "x86_64 11\n").unwrap();
        let err = w.prove(&w.ours, true, &["api/a.c"]).unwrap_err();
        assert!(err.to_string().contains("instead of"), "{err}");
        // A symlink to LLVM's plugin in our directory is LLVM's plugin.
        fs::remove_file(w.ours.join("libomptarget.rtl.x86_64.so")).unwrap();
        std::os::unix::fs::symlink(
            w.theirs.join("libomptarget.rtl.x86_64.so"),
            w.ours.join("libomptarget.rtl.x86_64.so"),
        )
        .unwrap();
        let err = w.prove(&w.ours, true, &["api/a.c"]).unwrap_err();
        assert!(err.to_string().contains("LLVM's plugin"), "{err}");
        // The same logs are a valid baseline, once the marker is empty.
        fs::write(&w.marker, "").unwrap();
        assert!(w.prove(&w.theirs, false, &["api/a.c"]).is_ok());
        let _ = fs::remove_dir_all(&w.root);
    }

    #[test]
    fn missing_marker_line_or_missing_run_is_caught() {
        let w = world("marker");
        let prog = w.exec_root.join("api/Output/a.c.tmp");
        w.log(11, &prog, Some(&w.ours.join("libomptarget.rtl.x86_64.so")));
        fs::write(&w.marker, "x86_64 12\n").unwrap();
        assert!(w.prove(&w.ours, true, &["api/a.c"]).is_err());
        fs::write(&w.marker, "x86_64 11\n").unwrap();
        assert!(w.prove(&w.ours, true, &["api/b.c"]).is_err());
        fs::write(&w.marker, "x86_64\n").unwrap();
        assert!(w.prove(&w.ours, true, &["api/a.c"]).is_err());
        let _ = fs::remove_dir_all(&w.root);
    }

    #[test]
    fn test_run_without_plugin_is_caught() {
        let w = world("noplugin");
        let prog = w.exec_root.join("api/Output/a.c.tmp");
        w.log(11, &prog, None);
        let err = w.prove(&w.theirs, false, &["api/a.c"]).unwrap_err();
        assert!(err.to_string().contains("without loading"), "{err}");
        let _ = fs::remove_dir_all(&w.root);
    }

    #[test]
    fn loader_log_lines_are_parsed() {
        let p = parse_loader_log(
            "  77:\tcalling init: /usr/lib/llvm-16/lib/../lib/libomptarget.rtl.x86_64.nextgen.so\n\
             \x20 77:\tinitialize program: /x/Output/t.c.tmp\n\
             \x20 77:\tfind library=libomptarget.rtl.cuda.so [0]; searching\n",
        );
        assert_eq!(p.plugins.len(), 1);
        assert!(p.programs.contains(Path::new("/x/Output/t.c.tmp")));
    }
}
