//! When the device build may skip: every output newer than every input.

use anyhow::{Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// True when every output exists and is newer than every input of the device build:
/// device-rtl's sources and manifest, the workspace manifest and lock file, and this
/// crate (a change to how we build must rebuild).
pub fn is_fresh(outputs: &[PathBuf]) -> Result<bool> {
    let root = test_support::workspace::root();
    let mut inputs = vec![
        root.join("Cargo.toml"),
        root.join("Cargo.lock"),
        root.join("device-rtl/Cargo.toml"),
        root.join("device-build/Cargo.toml"),
    ];
    collect_files(&root.join("device-build/src"), &mut inputs)?;
    collect_files(&root.join("device-rtl/src"), &mut inputs)?;
    let mut newest_input = SystemTime::UNIX_EPOCH;
    for input in &inputs {
        if let Ok(meta) = fs::metadata(input) {
            newest_input = newest_input.max(meta.modified()?);
        }
    }
    for output in outputs {
        match fs::metadata(output) {
            Ok(meta) if meta.modified()? > newest_input => {}
            _ => return Ok(false),
        }
    }
    Ok(true)
}

fn collect_files(dir: &Path, into: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(&path, into)?;
        } else {
            into.push(path);
        }
    }
    Ok(())
}
