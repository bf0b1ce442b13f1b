//! `cargo xtask build-plugin` and `cargo xtask demo` (being written by the plugin work).
//!
//! Contract used by other xtask modules:
//! - `build_plugins()` builds and returns target/plugin/, holding
//!   libomptarget.rtl.{x86_64,cuda,amdgpu}.so and their .nextgen.so names.
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Default)]
pub struct BuildArgs {}
#[derive(clap::Args, Default)]
pub struct DemoArgs {}

pub fn build_main(_args: BuildArgs) -> Result<()> {
    build_plugins().map(|_| ())
}

pub fn build_plugins() -> Result<PathBuf> {
    anyhow::bail!("not yet implemented")
}

pub fn demo_main(_args: DemoArgs) -> Result<()> {
    anyhow::bail!("not yet implemented")
}
