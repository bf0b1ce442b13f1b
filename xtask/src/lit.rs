//! `cargo xtask lit` (being written by the lit-suite work).
//!
//! Contract used by other xtask modules:
//! - `run_suite(plugin_dir)` runs LLVM 16's libomptarget lit tests for
//!   x86_64-pc-linux-gnu, through the plugins in `plugin_dir` (None = LLVM's own),
//!   and returns the counts; with Some(dir) it also proves our plugin was the one loaded.
use anyhow::Result;
use std::path::Path;

#[derive(clap::Args, Default)]
pub struct Args {}

#[allow(dead_code)]
pub struct LitSummary {
    pub passed: usize,
    pub failed: usize,
    pub unsupported: usize,
}

pub fn main(_args: Args) -> Result<()> {
    run_suite(None).map(|_| ())
}

pub fn run_suite(_plugin_dir: Option<&Path>) -> Result<LitSummary> {
    anyhow::bail!("not yet implemented")
}
