//! One process at a time checks and makes a cache below target/ (a Debian root, a source
//! tree): the two lanes of `cargo xtask test` may want the same one, and a second
//! debootstrap into a half-made root would ruin both.

use anyhow::{Context, Result};
use std::fs::{self, File, TryLockError};
use std::path::{Path, PathBuf};

/// Held while a cache is checked or made; the lock goes with it (or with the process).
pub struct CacheLock {
    _file: File,
}

/// Locks `<cache>.lock`, waiting (and saying so) while another process holds it.
pub fn lock(cache: &Path) -> Result<CacheLock> {
    let path = lock_path(cache);
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            eprintln!("{}: another process is making it; waiting", cache.display());
            file.lock()
                .with_context(|| format!("locking {}", path.display()))?;
        }
        Err(TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
    Ok(CacheLock { _file: file })
}

fn lock_path(cache: &Path) -> PathBuf {
    let mut name = cache.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    cache.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = crate::test_scratch("cache-lock");
        let cache = dir.join("root");
        let held = lock(&cache).unwrap();
        let other = File::create(lock_path(&cache)).unwrap();
        assert!(matches!(other.try_lock(), Err(TryLockError::WouldBlock)));
        drop(held);
        other.try_lock().unwrap();
        drop(other);
        fs::remove_dir_all(&dir).unwrap();
    }
}
