//! `cargo xtask build-device`: the device RTL for every target under target/device/. The
//! device-build crate makes and checks each artifact; other xtask modules call it
//! directly.

use anyhow::Result;

#[derive(clap::Args, Default)]
pub struct Args {
    /// Rebuild even when every output is newer than its inputs.
    #[arg(long)]
    pub force: bool,
}

pub fn main(args: Args) -> Result<()> {
    device_build::build(args.force)
}
