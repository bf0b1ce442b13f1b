//! The disk space a run needs, checked before anything is built: a full disk otherwise
//! shows up as one step after another failing with `No space left on device`.

use anyhow::{ensure, Context, Result};
use release::util;
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// What target/ grows to in a whole `cargo xtask test` from a fresh clone (every step,
/// both lanes, the Debian roots included), with room to spare: about 16 GiB at its peak
/// on 2026-11-29 (TESTING.md).
pub const PEAK_TARGET_BYTES: u64 = 20 << 30;

const GIB: f64 = (1u64 << 30) as f64;

/// Fails, saying what is missing, when the file system that holds target/ has less
/// free than the run still needs: its peak less what target/ already holds.
pub fn ensure_room() -> Result<()> {
    let target = util::target_dir();
    let held = bytes_held(&target)?;
    let free = bytes_free(&existing_ancestor(&target))?;
    let needed = PEAK_TARGET_BYTES.saturating_sub(held);
    eprintln!(
        "disk: {:.1} GiB free for {}, which holds {:.1} GiB; a run needs {:.1} GiB more",
        free as f64 / GIB,
        target.display(),
        held as f64 / GIB,
        needed as f64 / GIB,
    );
    ensure!(
        free >= needed,
        "not enough disk space: cargo xtask test grows {} to about {:.0} GiB and {:.1} GiB \
         more are needed, but only {:.1} GiB are free; free some space (other clones' \
         target/ folders, /tmp) and run it again",
        target.display(),
        PEAK_TARGET_BYTES as f64 / GIB,
        needed as f64 / GIB,
        free as f64 / GIB,
    );
    Ok(())
}

/// Bytes free to an unprivileged writer on the file system holding `dir` (`df`).
fn bytes_free(dir: &Path) -> Result<u64> {
    let sh = Shell::new()?;
    let out = util::read(cmd!(sh, "df --output=avail -B1 {dir}"))?;
    out.lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .with_context(|| format!("reading df's answer for {}: {out:?}", dir.display()))
}

/// Bytes `dir` holds (`du`), 0 when it does not exist yet.
fn bytes_held(dir: &Path) -> Result<u64> {
    if !dir.exists() {
        return Ok(0);
    }
    let sh = Shell::new()?;
    let out = util::read(cmd!(sh, "du -s -B1 -x {dir}"))?;
    out.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("reading du's answer for {}: {out:?}", dir.display()))
}

/// `path` or its nearest ancestor that exists (target/ is missing on a fresh clone).
fn existing_ancestor(path: &Path) -> PathBuf {
    path.ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"))
        .to_path_buf()
}
