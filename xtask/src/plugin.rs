//! (being written)
use anyhow::Result;

#[derive(clap::Args, Default)]
pub struct BuildArgs {}
#[derive(clap::Args, Default)]
pub struct DemoArgs {}

pub fn build_main(_args: BuildArgs) -> Result<()> {
    anyhow::bail!("not yet implemented")
}
pub fn demo_main(_args: DemoArgs) -> Result<()> {
    anyhow::bail!("not yet implemented")
}
