//! The second process of `cargo xtask test`: the Debian 13 steps (LLVM 17 and 18, their
//! packages, the LLVM 18 kit) and the lit suites run in a child `xtask test` beside the
//! host steps. Much of their time is spent where the host steps leave a core idle
//! (debootstrap and apt in the roots, single-threaded links and compressions, lit's
//! waits), and they share nothing the host steps write: their own roots, their own cargo
//! target folder, and the host's plugin files, which are replaced by rename only (the
//! caches both may want are locked: [`harness::cache_lock`]).
//!
//! The child starts before the builds and makes its roots and sources meanwhile; then it
//! reads one line on its standard input: `go` once the builds passed, nothing (the end of
//! the pipe) when they failed. Its output is relayed line by line, each line marked with
//! the lane's name; its step results come back through a file, one line per step.

use super::Step;
use anyhow::{anyhow, Context, Result};
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread::JoinHandle;

/// A lane running in a child process.
pub struct Lane {
    name: &'static str,
    child: Child,
    /// Where `go` is written once the builds passed; dropped (closed) otherwise.
    go: Option<ChildStdin>,
    relays: Vec<JoinHandle<()>>,
    results: PathBuf,
}

/// What the parent writes when the builds passed.
const GO: &str = "go";

impl Lane {
    /// Starts `xtask test <args> --lane-results <results>` (this executable) with its
    /// output relayed to this process's standard error, each line marked `[name]`.
    pub fn spawn(name: &'static str, args: &[String], results: &Path) -> Result<Lane> {
        if results.exists() {
            fs::remove_file(results)?;
        }
        let exe = std::env::current_exe().context("finding xtask's own executable")?;
        let mut child = Command::new(exe)
            .arg("test")
            .args(args)
            .arg("--lane-results")
            .arg(results)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting the {name} lane"))?;
        let go = child.stdin.take();
        let mut relays = Vec::new();
        if let Some(out) = child.stdout.take() {
            relays.push(relay(name, out));
        }
        if let Some(err) = child.stderr.take() {
            relays.push(relay(name, err));
        }
        eprintln!(
            "[{name}] started (pid {}): its lines are marked [{name}]",
            child.id()
        );
        Ok(Lane {
            name,
            child,
            go,
            relays,
            results: results.to_owned(),
        })
    }

    /// Lets the lane's steps start: the builds they need passed.
    pub fn tell_builds_passed(&mut self) -> Result<()> {
        let mut go = self
            .go
            .take()
            .with_context(|| format!("the {} lane was told already", self.name))?;
        writeln!(go, "{GO}").with_context(|| format!("telling the {} lane to go", self.name))
    }

    /// Waits for the lane (which, never told to go, ends after its caches); its steps,
    /// or one failed step saying why there are none.
    pub fn join(mut self) -> Vec<Step> {
        drop(self.go.take());
        let status = self.child.wait();
        for relay in self.relays.drain(..) {
            let _ = relay.join();
        }
        let read = fs::read_to_string(&self.results)
            .with_context(|| format!("reading {}", self.results.display()))
            .and_then(|text| parse_results(self.name, &text));
        match (read, status) {
            (Ok(steps), Ok(status)) if status.success() => steps,
            (read, status) => {
                let why = match (read, status) {
                    (_, Err(e)) => format!("waiting for it: {e}"),
                    (Ok(_), Ok(status)) => format!("it ended with {status}"),
                    (Err(e), Ok(status)) => format!("it ended with {status}: {e:#}"),
                };
                vec![Step {
                    name: format!("the {} lane", self.name),
                    lane: self.name,
                    result: Err(anyhow!("{why}")),
                    secs: 0.0,
                    cpu_secs: 0.0,
                }]
            }
        }
    }
}

/// In the lane's process: waits for the parent's word; whether the builds passed.
pub fn wait_for_builds() -> Result<bool> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .context("reading the parent's word on standard input")?;
    Ok(line.trim() == GO)
}

/// Copies `from` to this process's standard error line by line, each marked `[name]`.
fn relay(name: &'static str, from: impl Read + Send + 'static) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut lines = BufReader::new(from);
        let mut line = Vec::new();
        while lines.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            let text = String::from_utf8_lossy(&line);
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "[{name}] {}", text.trim_end_matches(['\n', '\r']));
            line.clear();
        }
    })
}

/// `steps` as the lane's results file: `ok|FAILED <tab> seconds <tab> CPU seconds <tab>
/// name <tab> error`, one line per step (the error on one line).
pub fn write_results(path: &Path, steps: &[Step]) -> Result<()> {
    let mut text = String::new();
    for step in steps {
        let (verdict, error) = match &step.result {
            Ok(()) => ("ok", String::new()),
            Err(e) => ("FAILED", one_line(&format!("{e:#}"))),
        };
        text.push_str(&format!(
            "{verdict}\t{:.1}\t{:.1}\t{}\t{error}\n",
            step.secs,
            step.cpu_secs,
            one_line(&step.name)
        ));
    }
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn one_line(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

fn parse_results(lane: &'static str, text: &str) -> Result<Vec<Step>> {
    text.lines()
        .map(|line| {
            let fields: Vec<&str> = line.splitn(5, '\t').collect();
            let [verdict, secs, cpu_secs, name, error] = fields[..] else {
                return Err(anyhow!("a results line without 5 fields: {line:?}"));
            };
            let seconds = |field: &str| {
                field
                    .parse()
                    .with_context(|| format!("the seconds {field:?} of {line:?}"))
            };
            let result = match verdict {
                "ok" => Ok(()),
                "FAILED" => Err(anyhow!("{error}")),
                other => return Err(anyhow!("unknown verdict {other:?} in {line:?}")),
            };
            Ok(Step {
                name: name.to_owned(),
                lane,
                result,
                secs: seconds(secs)?,
                cpu_secs: seconds(cpu_secs)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_survive_the_file_with_multi_line_errors() {
        let steps = vec![
            Step {
                name: "LLVM 17 in Debian 13".into(),
                lane: "debian13",
                result: Ok(()),
                secs: 12.34,
                cpu_secs: 20.06,
            },
            Step {
                name: "lit 18".into(),
                lane: "debian13",
                result: Err(anyhow!("2 tests\tfail\nonly with ours")),
                secs: 3.0,
                cpu_secs: 1.0,
            },
        ];
        let dir = std::env::temp_dir().join(format!("xtask-lane-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("results");
        write_results(&file, &steps).unwrap();
        let back = parse_results("debian13", &fs::read_to_string(&file).unwrap()).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].name, "LLVM 17 in Debian 13");
        assert!(back[0].result.is_ok());
        assert!((back[0].secs - 12.3).abs() < 1e-9);
        assert!((back[0].cpu_secs - 20.1).abs() < 1e-9);
        let error = format!("{:#}", back[1].result.as_ref().unwrap_err());
        assert_eq!(error, "2 tests fail only with ours");
    }

    #[test]
    fn a_torn_results_file_is_an_error_not_a_pass() {
        assert!(parse_results("debian13", "ok\t1.0\n").is_err());
        assert!(parse_results("debian13", "ok\t1.0\tx\t\n").is_err());
        assert!(parse_results("debian13", "maybe\t1.0\t1.0\tx\t\n").is_err());
    }
}
