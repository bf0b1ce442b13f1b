//! What the second lane of `cargo xtask test` makes while the first one builds: the
//! Debian roots its steps run in, the bare root of this machine's release (the host
//! lane's package check and GPU kit), and the lit suites' test sources. Making them is
//! mostly downloading and unpacking, which overlaps the builds' compiling instead of
//! following it. Each is the cache its step would otherwise make on first use (locked,
//! so no two processes make one at once): nothing here is a check of its own.

use crate::{debian13, debian_root, lit, llvm_release};
use anyhow::Result;
use std::time::Instant;

/// Which steps will run, so which of their caches to make.
pub struct Wanted {
    /// LLVM 17 and 18 in their Debian 13 roots, their packages, the LLVM 18 kit.
    pub debian13: bool,
    /// The lit suites: LLVM 16's on this machine, 17's and 18's in their roots.
    pub lit: bool,
}

/// Makes what `wanted`'s steps need and is missing; one line per cache, with its time.
pub fn prefetch(wanted: &Wanted) -> Result<Vec<String>> {
    let mut made = Vec::new();
    let mut note = |what: String, start: Instant| {
        made.push(format!(
            "{what}: ready in {:.0} s",
            start.elapsed().as_secs_f64()
        ));
    };
    if wanted.debian13 || wanted.lit {
        for major in debian13::LLVM_MAJORS {
            let start = Instant::now();
            let (root, _) = debian13::root(major)?;
            note(format!("Debian 13 root for LLVM {major}"), start);
            if wanted.lit {
                let start = Instant::now();
                lit::debian13_suites::tests(&root, major)?;
                note(format!("LLVM {major}'s lit tests"), start);
            }
        }
    }
    if wanted.debian13 {
        let start = Instant::now();
        debian_root::bare(debian13::CODENAME)?;
        note("bare Debian 13 root".into(), start);
    }
    if wanted.lit {
        let start = Instant::now();
        lit::debian_source::libomptarget_tests()?;
        note("LLVM 16's lit tests".into(), start);
    }
    // Last: the host lane's package check needs it some 15 minutes after the builds.
    let start = Instant::now();
    let codename = llvm_release::os_release_codename()?;
    debian_root::bare(&codename)?;
    note(
        format!("bare root of this machine's release ({codename})"),
        start,
    );
    Ok(made)
}
