//! `cargo xtask build-device` (being written by the device-rtl work).
//!
//! Contract used by other xtask modules:
//! - `build_all()` builds every device artifact listed in README/issue 2 under target/device/.
//! - `host_staticlib()` builds (if needed) and returns
//!   target/device/x86_64-unknown-linux-gnu/libdevice_rtl.a.
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Default)]
pub struct Args {}

pub fn main(_args: Args) -> Result<()> {
    build_all()
}

pub fn build_all() -> Result<()> {
    anyhow::bail!("not yet implemented")
}

#[allow(dead_code)]
pub fn host_staticlib() -> Result<PathBuf> {
    anyhow::bail!("not yet implemented")
}
