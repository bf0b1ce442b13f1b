//! Reads lit's JSON report (`-o FILE`): one object per test lit ran, with its full
//! name, its result code and its output (the commands and what they printed).
//!
//! Why not `--xunit-xml-output`: lit 16's xunit report writes XFAIL and XPASS tests
//! like passing ones (and an XPASS makes lit fail), and turns dots of folder names into
//! underscores; the JSON report keeps every result code and name.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::Path;

/// lit's verdict on one test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Pass,
    FlakyPass,
    Fail,
    XFail,
    XPass,
    Unsupported,
    Unresolved,
    Timeout,
    Skipped,
    Excluded,
}

/// lit's name of each result code.
const CODES: [(Status, &str); 10] = [
    (Status::Pass, "PASS"),
    (Status::FlakyPass, "FLAKYPASS"),
    (Status::Fail, "FAIL"),
    (Status::XFail, "XFAIL"),
    (Status::XPass, "XPASS"),
    (Status::Unsupported, "UNSUPPORTED"),
    (Status::Unresolved, "UNRESOLVED"),
    (Status::Timeout, "TIMEOUT"),
    (Status::Skipped, "SKIPPED"),
    (Status::Excluded, "EXCLUDED"),
];

impl Status {
    fn parse(code: &str) -> Option<Status> {
        CODES.iter().find(|(_, c)| *c == code).map(|(s, _)| *s)
    }

    /// lit's name of the code, e.g. `FAIL`.
    pub fn code(self) -> &'static str {
        CODES
            .iter()
            .find(|(s, _)| *s == self)
            .map(|(_, c)| *c)
            .expect("every status has a code")
    }

    pub fn passed(self) -> bool {
        matches!(self, Status::Pass | Status::FlakyPass)
    }

    /// What makes lit exit non-zero.
    pub fn failed(self) -> bool {
        matches!(
            self,
            Status::Fail | Status::XPass | Status::Unresolved | Status::Timeout
        )
    }
}

#[derive(Clone, Debug)]
pub struct TestResult {
    pub status: Status,
    /// Full lit name, e.g. `libomptarget :: x86_64-pc-linux-gnu :: api/assert.c`.
    pub name: String,
    /// The commands lit ran and what they printed (for UNSUPPORTED: why).
    pub output: String,
}

impl TestResult {
    /// The test's path below the suite root, e.g. `api/assert.c`.
    pub fn path(&self) -> &str {
        self.name.rsplit(" :: ").next().unwrap_or(&self.name)
    }
}

/// The part of lit's JSON report this reads.
#[derive(Deserialize)]
struct Report {
    tests: Vec<ReportedTest>,
}

#[derive(Deserialize)]
struct ReportedTest {
    name: String,
    code: String,
    #[serde(default)]
    output: String,
}

/// Every test of the report at `path`, in lit's order.
pub fn read(path: &Path) -> Result<Vec<TestResult>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("reading lit's report {}", path.display()))
}

/// Every test of a JSON report, in lit's order.
pub fn parse(json: &str) -> Result<Vec<TestResult>> {
    let report: Report = serde_json::from_str(json)?;
    report
        .tests
        .into_iter()
        .map(|t| {
            let Some(status) = Status::parse(&t.code) else {
                bail!("test {}: unknown lit result code {:?}", t.name, t.code);
            };
            Ok(TestResult {
                status,
                name: t.name,
                output: t.output,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"{"__version__": [16, 0, 6], "elapsed": 1.5, "tests": [
{"code": "PASS", "elapsed": 0.5, "name": "libomptarget :: x86_64-pc-linux-gnu :: api/assert.c", "output": "Script:\n--\n: 'RUN: at line 1';   clang ... -o assert.c.tmp\n--\nExit Code: 0\n\n"},
{"code": "UNSUPPORTED", "elapsed": 0.0, "name": "libomptarget :: x86_64-pc-linux-gnu :: env/omp_target_debug.c", "output": "Test requires the following unavailable features: libomptarget-debug"},
{"code": "FAIL", "elapsed": 0.2, "name": "libomptarget :: x86_64-pc-linux-gnu :: offloading/info.c", "output": "Script:\n--\n: 'RUN: at line 1';   clang ... -o info.c.tmp\n--\nExit Code: 1\n\n"}
]}"#;

    #[test]
    fn results_and_failure_output() {
        let results = parse(REPORT).unwrap();
        let statuses: Vec<Status> = results.iter().map(|r| r.status).collect();
        assert_eq!(statuses, [Status::Pass, Status::Unsupported, Status::Fail]);
        assert_eq!(results[0].path(), "api/assert.c");
        let failures: Vec<&TestResult> = results.iter().filter(|r| r.status.failed()).collect();
        assert_eq!(failures.len(), 1);
        assert_eq!(
            failures[0].name,
            "libomptarget :: x86_64-pc-linux-gnu :: offloading/info.c"
        );
        assert!(failures[0].output.contains("Exit Code: 1"));
        assert!(!failures[0].output.contains("FAILED"));
    }

    /// Verbatim `-o` report of llvm-16-tools' lit.py for a two-test suite (`echo hello &&
    /// false`, then `true`).
    const REAL_LIT16: &str = r#"{
  "__version__": [
    16,
    0,
    6
  ],
  "elapsed": 0.03379249572753906,
  "tests": [
    {
      "code": "FAIL",
      "elapsed": 0.008278608322143555,
      "name": "mini :: a.c",
      "output": "Script:\n--\n: 'RUN: at line 1';   echo hello && false\n--\nExit Code: 1\n\nCommand Output (stdout):\n--\nhello\n\n--\n"
    },
    {
      "code": "PASS",
      "elapsed": 0.0030570030212402344,
      "name": "mini :: b.c",
      "output": "Script:\n--\n: 'RUN: at line 1';   true\n--\nExit Code: 0\n\n"
    }
  ]
}"#;

    #[test]
    fn real_lit16_report() {
        let results = parse(REAL_LIT16).unwrap();
        assert_eq!(results.len(), 2);
        assert!(results[0].status.failed() && results[1].status.passed());
        assert_eq!(results[0].name, "mini :: a.c");
        assert!(results[0].output.ends_with("hello\n\n--\n"));
    }

    /// What the xunit report cannot tell apart: XFAIL and XPASS (a failure) from PASS.
    #[test]
    fn expected_failures_keep_their_codes() {
        let json = r#"{"tests": [
            {"code": "XFAIL", "name": "mini :: c.c", "output": ""},
            {"code": "XPASS", "name": "mini :: sub.dir/e.c", "output": ""}]}"#;
        let results = parse(json).unwrap();
        assert_eq!(results[0].status, Status::XFail);
        assert!(!results[0].status.passed() && !results[0].status.failed());
        assert_eq!(results[1].status, Status::XPass);
        assert!(results[1].status.failed());
        assert_eq!(results[1].path(), "sub.dir/e.c");
    }

    #[test]
    fn an_unknown_code_is_an_error() {
        let e = parse(r#"{"tests": [{"code": "MAYBE", "name": "mini :: a.c"}]}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "test mini :: a.c: unknown lit result code \"MAYBE\""
        );
    }
}
