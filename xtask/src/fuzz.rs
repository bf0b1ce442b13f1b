//! `cargo xtask fuzz` (being written by the formats work): bounded cargo-fuzz runs.
use anyhow::Result;

#[derive(clap::Args, Default)]
pub struct Args {}

pub fn main(_args: Args) -> Result<()> {
    anyhow::bail!("not yet implemented")
}
