//! `cargo xtask install --prefix P [--llvm N]`: [`release::install`] into P, then the
//! commands that use it.

use anyhow::Result;
use release::{install, llvm_release};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The installation prefix (created if missing).
    #[arg(long)]
    pub prefix: PathBuf,
    /// The clang/LLVM version to install for: 16 (Debian 12), 17 or 18 (Debian 13).
    #[arg(long, default_value_t = llvm_release::DEFAULT)]
    pub llvm: u32,
}

pub fn main(args: Args) -> Result<()> {
    let major = args.llvm;
    let prefix = install::install_for(&args.prefix, major)?;
    let layout = install_layout::Prefix::new(&prefix);
    println!("installed into {} for clang {major}", prefix.display());
    for triple in install_layout::CONFIG_TRIPLES {
        println!(
            "  clang-{major} --config={} ...",
            layout.config(triple).display()
        );
    }
    println!("  run with LD_LIBRARY_PATH={}", layout.lib().display());
    Ok(())
}
