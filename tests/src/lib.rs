//! Test support shared by the end-to-end tests in tests/tests/: where the workspace and
//! its artifacts are, the toolchains the tests compile with, running commands, and the
//! built plugin's C ABI. Per-area helpers stay in the tests' `*_support` modules.

pub mod compile;
pub mod cuda_standin;
pub mod paths;
pub mod plugin;
pub mod process;
pub mod rust_source;
/// The toolchains the tests compile fixtures with (shared with offload-formats' tests
/// and xtask); each lookup fails with the command that installs the tool.
pub use test_support::tools;

/// Whether the programs these tests run go to the isolated host device
/// (`OMPTARGET_RS_ISOLATED=1` in the test process's environment, which they inherit):
/// where a test expects a host address to "work" in-process, it expects a fault there.
pub fn isolated() -> bool {
    std::env::var("OMPTARGET_RS_ISOLATED").is_ok_and(|v| !v.is_empty() && v != "0")
}
