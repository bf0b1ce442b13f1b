//! What the tests (tests/, offload-formats' tests) and xtask share about this machine:
//! where the workspace and its target directory are ([`workspace`]), where the tools
//! they run live ([`tools`]: LLVM 16 and 22, ptxas, a C compiler), and the `--cuda-path`
//! folder clang needs for NVIDIA targets ([`cuda`]), and the installed config files as
//! the controls need them ([`config`]).
//!
//! Lookups return a [`tools::Missing`] that names the package to install; the tests use
//! the panicking forms (`llvm22`, `ptxas`, ...), xtask the `find_*` forms, and installs
//! what is missing itself.

pub mod config;
pub mod cuda;
pub mod readme;
pub mod tools;
pub mod workspace;
