//! Reads lit's `-v` output (not `-s`): one `STATUS: suite :: target :: path (i of n)`
//! line per test, and for each failure the test's output between
//! `**** TEST '...' FAILED ****` and a line of stars.

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

impl Status {
    fn parse(code: &str) -> Option<Status> {
        Some(match code {
            "PASS" => Status::Pass,
            "FLAKYPASS" => Status::FlakyPass,
            "FAIL" => Status::Fail,
            "XFAIL" => Status::XFail,
            "XPASS" => Status::XPass,
            "UNSUPPORTED" => Status::Unsupported,
            "UNRESOLVED" => Status::Unresolved,
            "TIMEOUT" => Status::Timeout,
            "SKIPPED" => Status::Skipped,
            "EXCLUDED" => Status::Excluded,
            _ => return None,
        })
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
}

impl TestResult {
    /// The test's path below the suite root, e.g. `api/assert.c`.
    pub fn path(&self) -> &str {
        self.name.rsplit(" :: ").next().unwrap_or(&self.name)
    }
}

#[derive(Clone, Debug)]
pub struct Failure {
    pub name: String,
    /// The commands lit ran and what they printed.
    pub output: String,
}

/// Every result line and failure block in lit's output, in order.
pub fn parse(log: &str) -> (Vec<TestResult>, Vec<Failure>) {
    let mut results = Vec::new();
    let mut failures = Vec::new();
    let mut open_failure: Option<Failure> = None;
    for line in log.lines() {
        if let Some(failure) = open_failure.as_mut() {
            if line.starts_with("********************") && !line.contains(" TEST '") {
                failures.extend(open_failure.take());
            } else {
                failure.output.push_str(line);
                failure.output.push('\n');
            }
            continue;
        }
        if let Some(name) = failure_header(line) {
            open_failure = Some(Failure {
                name: name.to_owned(),
                output: String::new(),
            });
        } else if let Some(result) = result_line(line) {
            results.push(result);
        }
    }
    // A truncated log still reports what it has.
    failures.extend(open_failure);
    (results, failures)
}

/// `STATUS: name (i of n)`.
fn result_line(line: &str) -> Option<TestResult> {
    let (code, rest) = line.split_once(": ")?;
    let status = Status::parse(code)?;
    let rest = rest.strip_suffix(')')?;
    let (name, counter) = rest.rsplit_once(" (")?;
    let (i, n) = counter.split_once(" of ")?;
    i.parse::<usize>().ok()?;
    n.parse::<usize>().ok()?;
    Some(TestResult {
        status,
        name: name.to_owned(),
    })
}

/// `******************** TEST 'name' FAILED ********************`.
fn failure_header(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("******************** TEST '")?;
    let (name, tail) = rest.rsplit_once("' ")?;
    tail.starts_with("FAILED").then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
-- Testing: 3 tests, 2 workers --
PASS: libomptarget :: x86_64-pc-linux-gnu :: api/assert.c (1 of 3)
UNSUPPORTED: libomptarget :: x86_64-pc-linux-gnu :: env/omp_target_debug.c (2 of 3)
******************** TEST 'libomptarget :: x86_64-pc-linux-gnu :: offloading/info.c' FAILED ********************
Script:
--
: 'RUN: at line 1';   clang ... -o info.c.tmp
--
Exit Code: 1
********************
FAIL: libomptarget :: x86_64-pc-linux-gnu :: offloading/info.c (3 of 3)
********************
Failed Tests (1):
  libomptarget :: x86_64-pc-linux-gnu :: offloading/info.c
";

    #[test]
    fn results_and_failure_output() {
        let (results, failures) = parse(LOG);
        let statuses: Vec<Status> = results.iter().map(|r| r.status).collect();
        assert_eq!(statuses, [Status::Pass, Status::Unsupported, Status::Fail]);
        assert_eq!(results[0].path(), "api/assert.c");
        assert_eq!(failures.len(), 1);
        assert_eq!(
            failures[0].name,
            "libomptarget :: x86_64-pc-linux-gnu :: offloading/info.c"
        );
        assert!(failures[0].output.contains("Exit Code: 1"));
        assert!(!failures[0].output.contains("FAILED"));
    }

    /// Verbatim output of llvm-16-tools' lit.py -v for a two-test suite.
    const REAL_LIT16: &str = "\
-- Testing: 2 tests, 2 workers --
FAIL: mini :: a.c (1 of 2)
******************** TEST 'mini :: a.c' FAILED ********************
Script:
--
: 'RUN: at line 1';   echo hello && false
--
Exit Code: 1

Command Output (stdout):
--
$ \"false\"
error: command failed with exit status: 1

--

********************
PASS: mini :: b.c (2 of 2)
********************
Failed Tests (1):
  mini :: a.c


Testing Time: 0.04s
  Passed: 1
  Failed: 1
";

    #[test]
    fn real_lit16_output() {
        let (results, failures) = parse(REAL_LIT16);
        assert_eq!(results.len(), 2);
        assert!(results[0].status.failed() && results[1].status.passed());
        assert_eq!(failures.len(), 1);
        assert_eq!(failures[0].name, "mini :: a.c");
        assert!(failures[0].output.ends_with("exit status: 1\n\n--\n\n"));
    }

    #[test]
    fn lines_that_only_look_like_results_are_ignored() {
        let (results, _) = parse("PASS: no counter\nNOTE: x (1 of 2)\nPASS: a (b of 2)\n");
        assert!(results.is_empty());
    }

    #[test]
    fn truncated_failure_block_is_kept() {
        let (_, failures) =
            parse("******************** TEST 'x' FAILED ********************\nboom\n");
        assert_eq!(failures.len(), 1);
        assert_eq!(failures[0].output, "boom\n");
    }
}
