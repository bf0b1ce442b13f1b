//! Running the compilers and programs a test needs.

use std::process::{Command, Output};

/// Run `cmd` to completion; a test failure showing the command, its status and both
/// outputs unless it could start and succeeded.
pub fn run_ok(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("could not start {shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed with {}:\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Run `cmd` like [`run_ok`]; its stdout as text.
pub fn stdout_of(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&run_ok(cmd).stdout).into_owned()
}
