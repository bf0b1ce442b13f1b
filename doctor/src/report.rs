//! The doctor's output: plain text, one verdict per line (`ok`, `FAIL`, `warn`,
//! `skip`), grouped under `[section]` headers; a failing line is followed by its fix
//! (`  fix: ...`) and, where it helps, indented detail lines (`  | ...`).

use std::fmt;
use std::io::Write;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Fail,
    Warn,
    Skip,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Ok => "ok",
            Verdict::Fail => "FAIL",
            Verdict::Warn => "warn",
            Verdict::Skip => "skip",
        })
    }
}

/// Writes the lines as they come (the self-tests take seconds) and counts the verdicts.
pub struct Report<W: Write> {
    out: W,
    counts: [usize; 4],
}

impl<W: Write> Report<W> {
    pub fn new(out: W) -> Self {
        Report {
            out,
            counts: [0; 4],
        }
    }

    /// `[title]`, after a blank line.
    pub fn header(&mut self, title: &str) {
        self.write(&format!("\n[{title}]"));
    }

    /// A line that is no verdict (what the section is about).
    pub fn note(&mut self, text: &str) {
        self.write(&format!("  {text}"));
    }

    pub fn ok(&mut self, text: impl fmt::Display) {
        self.verdict(Verdict::Ok, text, None);
    }

    pub fn fail(&mut self, text: impl fmt::Display, fix: impl fmt::Display) {
        self.verdict(Verdict::Fail, text, Some(&fix.to_string()));
    }

    pub fn warn(&mut self, text: impl fmt::Display, fix: Option<&str>) {
        self.verdict(Verdict::Warn, text, fix);
    }

    pub fn skip(&mut self, text: impl fmt::Display, fix: Option<&str>) {
        self.verdict(Verdict::Skip, text, fix);
    }

    /// `verdict: text`, then `  fix: fix` when there is one.
    pub fn verdict(&mut self, verdict: Verdict, text: impl fmt::Display, fix: Option<&str>) {
        self.counts[verdict as usize] += 1;
        self.write(&format!("{verdict}: {text}"));
        if let Some(fix) = fix {
            self.write(&format!("  fix: {fix}"));
        }
    }

    /// Lines quoted under the verdict before (a program's output).
    pub fn detail<'a>(&mut self, lines: impl IntoIterator<Item = &'a str>) {
        for line in lines {
            self.write(&format!("  | {line}"));
        }
    }

    pub fn count(&self, verdict: Verdict) -> usize {
        self.counts[verdict as usize]
    }

    /// The closing line: every verdict's count.
    pub fn summary(&mut self) {
        let [ok, fail, warn, skip] = self.counts;
        self.write(&format!(
            "\nsummary: {ok} ok, {fail} FAIL, {warn} warn, {skip} skip"
        ));
    }

    /// The process's exit status: 1 when anything failed.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.count(Verdict::Fail) > 0)
    }

    #[cfg(test)]
    pub fn into_inner(self) -> W {
        self.out
    }

    fn write(&mut self, line: &str) {
        // A closed stdout (`doctor | head`) ends the output, not the checks' verdicts.
        let _ = writeln!(self.out, "{line}");
        let _ = self.out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_prints_its_fix_and_sets_the_exit_status() {
        let mut report = Report::new(Vec::new());
        report.header("plugins");
        report.ok("x86_64: ours");
        assert_eq!(report.exit_code(), 0);
        report.fail("cuda: LLVM's", "export LD_LIBRARY_PATH=/p/lib");
        report.warn("OMP_TARGET_OFFLOAD is unset", None);
        report.skip("no CUDA driver", None);
        report.summary();
        assert_eq!(report.exit_code(), 1);
        let text = String::from_utf8(report.into_inner()).unwrap();
        assert_eq!(
            text,
            "\n[plugins]\nok: x86_64: ours\nFAIL: cuda: LLVM's\n  fix: export LD_LIBRARY_PATH=/p/lib\n\
             warn: OMP_TARGET_OFFLOAD is unset\nskip: no CUDA driver\n\
             \nsummary: 1 ok, 1 FAIL, 1 warn, 1 skip\n"
        );
    }
}
