//! Running one program with a time limit, its output in files, and the loader's
//! `LD_DEBUG=files` trace (what it really opened) read back.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How a run ended and what it left.
pub struct Outcome {
    /// None: killed at the time limit.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    /// Every file the loader opened with dlopen, in every process of the run.
    pub opened: Vec<PathBuf>,
}

/// Runs `cmd` (its environment set by the caller) in the fresh folder `dir` with
/// `LD_DEBUG=files` to `dir/ld.<pid>`, killing it after `limit`.
pub fn run(mut cmd: Command, dir: &Path, limit: Duration) -> io::Result<Outcome> {
    fs::create_dir_all(dir)?;
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = cmd
        .env("LD_DEBUG", "files")
        .env("LD_DEBUG_OUTPUT", dir.join("ld"))
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out)?)
        .stderr(fs::File::create(&err)?)
        .spawn()?;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if start.elapsed() > limit {
            // Our own child, by its handle.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &Path| String::from_utf8_lossy(&fs::read(p).unwrap_or_default()).into_owned();
    let mut opened = Vec::new();
    for entry in fs::read_dir(dir)?.flatten() {
        if entry.file_name().to_string_lossy().starts_with("ld.") {
            for path in opened_files(&read(&entry.path())) {
                if !opened.contains(&path) {
                    opened.push(path);
                }
            }
        }
    }
    Ok(Outcome {
        status,
        stdout: read(&out),
        stderr: read(&err),
        opened,
    })
}

/// The files an `LD_DEBUG=files` trace shows dlopen opening (`opening file=<path>
/// [0]; direct_opencount=1`), in order.
pub fn opened_files(trace: &str) -> Vec<PathBuf> {
    trace
        .lines()
        .filter_map(|line| {
            let rest = &line[line.find("opening file=")? + "opening file=".len()..];
            let end = rest.rfind(" [").unwrap_or(rest.len());
            Some(PathBuf::from(&rest[..end]))
        })
        .collect()
}

/// The last `n` lines of `text`.
pub fn last_lines(text: &str, n: usize) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as glibc 2.36 writes them for a libomptarget 16 program.
    const TRACE: &str = "\
      9289:\tfile=libomptarget.rtl.x86_64.nextgen.so [0];  dynamically loaded by /usr/lib/llvm-16/lib/libLLVM-16.so.1 [0]
      9289:\tfile=libomptarget.rtl.x86_64.nextgen.so [0];  generating link map
      9289:\tcalling init: /p/lib/libomptarget.rtl.x86_64.nextgen.so
      9289:\topening file=/p/lib/libomptarget.rtl.x86_64.nextgen.so [0]; direct_opencount=1
      9289:\t/p/lib/libomptarget.rtl.x86_64.nextgen.so: error: symbol lookup error: undefined symbol: omp_target_memset (fatal)
      9289:\topening file=/p/lib/libomptarget.rtl.cuda.nextgen.so [0]; direct_opencount=1
";

    #[test]
    fn the_files_dlopen_opened() {
        assert_eq!(
            opened_files(TRACE),
            [
                PathBuf::from("/p/lib/libomptarget.rtl.x86_64.nextgen.so"),
                PathBuf::from("/p/lib/libomptarget.rtl.cuda.nextgen.so")
            ]
        );
    }

    #[test]
    fn a_run_reports_status_output_and_its_loaders_trace() {
        let dir = std::env::temp_dir().join(format!("doctor-run-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"]);
        let outcome = run(cmd, &dir, Duration::from_secs(30)).unwrap();
        assert_eq!(outcome.status.and_then(|s| s.code()), Some(3));
        assert_eq!(
            (outcome.stdout.as_str(), outcome.stderr.as_str()),
            ("out\n", "err\n")
        );
        // sh dlopens nothing; the trace exists but opens no file.
        assert!(outcome.opened.is_empty(), "{:?}", outcome.opened);
        let mut slow = Command::new("sleep");
        slow.arg("30");
        let outcome = run(slow, &dir.join("slow"), Duration::from_millis(200)).unwrap();
        assert!(outcome.status.is_none());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn last_lines_of_short_and_long_text() {
        assert_eq!(last_lines("a\nb\nc\n", 2), ["b", "c"]);
        assert_eq!(last_lines("a", 5), ["a"]);
    }
}
