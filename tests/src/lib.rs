//! Test support shared by the end-to-end tests in tests/tests/: where the workspace and
//! its artifacts are, the toolchains the tests compile with, running commands, and the
//! built plugin's C ABI. Per-area helpers stay in the tests' `*_support` modules.

pub mod compile;
pub mod paths;
pub mod plugin;
pub mod process;
/// The toolchains the tests compile fixtures with (shared with offload-formats' tests
/// and xtask); each lookup fails with the command that installs the tool.
pub use test_support::tools;
