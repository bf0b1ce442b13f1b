//! The lit suites' compile cache ([`WRAPPER`], `harness/lit/compile_cache.py`): each
//! suite runs two or three times in one `cargo xtask test` (through LLVM's plugin, ours,
//! ours isolated), and which plugin a test uses is decided when its program runs, not
//! when it is built. The first run compiles; the later runs of the same suite in the
//! same process take the files it made, byte for byte, so every run still runs every
//! test's program, and all runs run the same programs.
//!
//! The cache of a suite is emptied the first time a process asks for it, so nothing
//! outlives the process that filled it (no stale program from an earlier checkout).

use anyhow::{ensure, Context, Result};
use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The wrapper lit runs in place of clang (its documentation says how it keys).
pub const WRAPPER: &str = include_str!("../../lit/compile_cache.py");
/// The interpreter of [`WRAPPER`], on this machine and in the Debian roots (lit itself
/// runs with it).
const PYTHON: &str = "/usr/bin/python3";

/// The suites whose cache this process has emptied.
static EMPTIED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// One suite's compile cache.
pub struct CompileCache {
    dir: PathBuf,
}

impl CompileCache {
    /// The cache of the suite `name` (e.g. `llvm17`) below `lit_dir`: emptied the first
    /// time this process asks for it, the wrapper written into it.
    pub fn for_suite(lit_dir: &Path, name: &str) -> Result<CompileCache> {
        let dir = lit_dir.join("compile-cache").join(name);
        let mut emptied = EMPTIED.lock().unwrap_or_else(|e| e.into_inner());
        if emptied
            .get_or_insert_with(HashSet::new)
            .insert(name.to_owned())
            && dir.exists()
        {
            fs::remove_dir_all(&dir).with_context(|| format!("emptying {}", dir.display()))?;
        }
        fs::create_dir_all(&dir)?;
        fs::write(dir.join("compile_cache.py"), WRAPPER)?;
        Ok(CompileCache { dir })
    }

    /// The folder (a chrooted run needs it at the same path).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What stands before the compiler where a test says `%clang` or `%clangxx`, for a
    /// run in `run_dir`; zeroes the counts of [`CompileCache::counts`].
    pub fn command_prefix(&self, run_dir: &Path) -> Result<String> {
        let words = [
            Path::new(PYTHON),
            &self.dir.join("compile_cache.py"),
            &self.dir,
            run_dir,
        ];
        let words: Vec<&str> = words
            .iter()
            .map(|p| {
                p.to_str()
                    .with_context(|| format!("{} is not UTF-8", p.display()))
            })
            .collect::<Result<_>>()?;
        ensure!(
            words.iter().all(|w| !w.contains(char::is_whitespace)),
            "a path of the compile cache's command has a space: {words:?}"
        );
        let stats = self.dir.join("stats");
        if stats.exists() {
            fs::remove_file(&stats)?;
        }
        Ok(words.join(" "))
    }

    /// (compiles taken from the cache, compiles run) since [`CompileCache::command_prefix`].
    pub fn counts(&self) -> Result<(usize, usize)> {
        let stats = match fs::read_to_string(self.dir.join("stats")) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e.into()),
        };
        let hits = stats.lines().filter(|l| *l == "hit").count();
        let misses = stats.lines().filter(|l| *l == "miss").count();
        Ok((hits, misses))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;

    /// A "compiler" that writes its arguments and its input's text to `-o`, says one
    /// line on each stream, counts its runs, and fails when an argument is `-fail`.
    const FAKE_CLANG: &str = r#"#!/bin/sh
echo run >> "$(dirname "$0")/runs"
out=""; prev=""; input=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out="$a"
  [ "$a" = "-fail" ] && { echo "error: told to fail" >&2; exit 1; }
  [ -f "$a" ] && input="$(cat "$a")"
  prev="$a"
done
echo "compiled" ; echo "warning: w" >&2
printf '%s|%s' "$*" "$input" | sed "s|$out|OUT|" > "$out"
"#;

    struct Fixture {
        dir: PathBuf,
        clang: PathBuf,
        cache: CompileCache,
    }

    fn fixture(name: &str) -> Fixture {
        let dir = crate::test_scratch(&format!("compile-cache-{name}"));
        let clang = dir.join("fake-clang");
        fs::write(&clang, FAKE_CLANG).unwrap();
        fs::set_permissions(&clang, fs::Permissions::from_mode(0o755)).unwrap();
        let cache = CompileCache::for_suite(&dir, name).unwrap();
        Fixture { dir, clang, cache }
    }

    impl Fixture {
        /// Runs the wrapper as lit would in `run` (a folder of its own), compiling
        /// `source` into `run/Output/t`; returns (exit ok, stdout, stderr, output).
        fn compile(
            &self,
            run: &str,
            source: &Path,
            extra: &[&str],
        ) -> (bool, String, String, String) {
            let run_dir = self.dir.join(run);
            let out_dir = run_dir.join("Output");
            fs::create_dir_all(&out_dir).unwrap();
            let prefix = self.cache.command_prefix(&run_dir).unwrap();
            let words: Vec<&str> = prefix.split(' ').collect();
            let output = out_dir.join("t");
            let done = Command::new(words[0])
                .args(&words[1..])
                .arg(&self.clang)
                .args(["-fopenmp", "-I", self.dir.to_str().unwrap()])
                .arg(source)
                .args(extra)
                .arg("-o")
                .arg(&output)
                .current_dir(&out_dir)
                .output()
                .unwrap();
            (
                done.status.success(),
                String::from_utf8_lossy(&done.stdout).into_owned(),
                String::from_utf8_lossy(&done.stderr).into_owned(),
                fs::read_to_string(&output).unwrap_or_default(),
            )
        }

        fn runs(&self) -> usize {
            fs::read_to_string(self.dir.join("runs")).map_or(0, |t| t.lines().count())
        }
    }

    #[test]
    fn a_second_run_of_the_suite_takes_the_first_runs_files_and_streams() {
        let f = fixture("replay");
        let source = f.dir.join("a.c");
        fs::write(&source, "int main() {}").unwrap();
        let first = f.compile("llvm", &source, &[]);
        assert!(first.0 && first.3.contains("int main() {}"), "{first:?}");
        assert_eq!(f.cache.counts().unwrap(), (0, 1));
        // Another run's folder: the same compile but for the folder.
        let second = f.compile("ours", &source, &[]);
        assert_eq!(f.runs(), 1, "the second run must not compile");
        assert_eq!(f.cache.counts().unwrap(), (1, 0));
        assert_eq!(second.3, first.3, "the same output, byte for byte");
        assert_eq!(
            (second.1.as_str(), second.2.as_str()),
            ("compiled\n", "warning: w\n")
        );
    }

    #[test]
    fn a_changed_source_or_argument_compiles_again() {
        let f = fixture("miss");
        let source = f.dir.join("a.c");
        fs::write(&source, "int main() { return 0; }").unwrap();
        f.compile("llvm", &source, &[]);
        fs::write(&source, "int main() { return 1; }").unwrap();
        let changed = f.compile("ours", &source, &[]);
        assert!(changed.3.contains("return 1"), "{changed:?}");
        f.compile("isolated", &source, &["-O2"]);
        assert_eq!(f.runs(), 3);
    }

    #[test]
    fn a_failed_compile_is_never_kept() {
        let f = fixture("fail");
        let source = f.dir.join("a.c");
        fs::write(&source, "x").unwrap();
        for run in ["llvm", "ours"] {
            let (ok, _, stderr, _) = f.compile(run, &source, &["-fail"]);
            assert!(!ok && stderr.contains("told to fail"), "{stderr}");
        }
        assert_eq!(f.runs(), 2);
    }

    #[test]
    fn side_outputs_bypass_the_cache() {
        let f = fixture("bypass");
        let source = f.dir.join("a.c");
        fs::write(&source, "x").unwrap();
        f.compile("llvm", &source, &["-save-temps"]);
        f.compile("ours", &source, &["-save-temps"]);
        assert_eq!(f.runs(), 2);
        assert_eq!(
            f.cache.counts().unwrap(),
            (0, 0),
            "a bypass is neither hit nor miss"
        );
    }

    /// A link against a library an earlier command made in the run's folder records
    /// that path: a program taken from another run would load the other run's library.
    #[test]
    fn a_compile_reading_from_the_runs_folder_is_never_cached() {
        let f = fixture("run-inputs");
        for run in ["llvm", "ours"] {
            let made = f.dir.join(run).join("Output");
            fs::create_dir_all(&made).unwrap();
            let library = made.join("t.so");
            fs::write(&library, "a library").unwrap();
            let (ok, _, _, output) = f.compile(run, &library, &[]);
            assert!(ok && output.contains(run), "{output}");
        }
        assert_eq!(f.runs(), 2, "each run compiles its own");
        assert_eq!(f.cache.counts().unwrap(), (0, 0), "neither hit nor miss");
    }

    #[test]
    fn a_process_empties_a_suites_cache_the_first_time_only() {
        let f = fixture("empty");
        let source = f.dir.join("a.c");
        fs::write(&source, "x").unwrap();
        f.compile("llvm", &source, &[]);
        let again = CompileCache::for_suite(&f.dir, "empty").unwrap();
        assert!(
            fs::read_dir(again.dir()).unwrap().count() > 2,
            "kept within the process"
        );
    }
}
