//! Where things are: the workspace, its target directory, fixtures, built artifacts,
//! and fresh scratch directories for a test's own files.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The workspace root, and cargo's target directory (where xtask writes the artifacts
/// the tests use).
pub use test_support::workspace::{root, target_dir};

/// A file under tests/fixtures/.
pub fn fixture(relative: &str) -> PathBuf {
    root().join("tests/fixtures").join(relative)
}

/// `path`, which an xtask command must have built: the test fails with
/// "<path> is missing: run <how> first" when it is not there.
pub fn require_file(path: PathBuf, how: &str) -> PathBuf {
    assert!(
        path.is_file(),
        "{} is missing: run {how} first",
        path.display()
    );
    path
}

/// A fresh, empty directory target/<area>/<name>-<pid>-<n>, unique per call: tests of
/// one binary run in parallel and may ask for the same name, and a directory shared by
/// callers that each clear it made them delete each other's files.
pub fn scratch(area: &str, name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = target_dir()
        .join(area)
        .join(format!("{name}-{}-{n}", std::process::id()));
    // Only a leftover of an earlier process with the same pid can be there.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_gives_each_call_its_own_empty_directory() {
        let first = scratch("paths-unit", "same-name");
        std::fs::write(first.join("kept"), b"mine").unwrap();
        let second = scratch("paths-unit", "same-name");
        assert_ne!(first, second);
        assert!(second.is_dir());
        assert_eq!(std::fs::read_dir(&second).unwrap().count(), 0);
        // The second call left the first caller's files alone.
        assert_eq!(std::fs::read(first.join("kept")).unwrap(), b"mine");
        for dir in [first, second] {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    #[test]
    #[should_panic(expected = "/no/such/artifact is missing: run `cargo xtask build-device` first")]
    fn a_missing_artifact_names_itself_and_the_command_that_builds_it() {
        require_file(
            PathBuf::from("/no/such/artifact"),
            "`cargo xtask build-device`",
        );
    }

    #[test]
    fn a_present_artifact_is_returned() {
        let manifest = root().join("tests/Cargo.toml");
        assert_eq!(require_file(manifest.clone(), "nothing"), manifest);
    }
}
