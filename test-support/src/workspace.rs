//! The workspace root and cargo's target directory.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The workspace root (this crate is one of its top-level members).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test-support lives one level below the workspace root")
        .to_path_buf()
}

/// Cargo's target directory, where xtask writes the artifacts the tests read: what
/// `cargo metadata` reports (CARGO_TARGET_DIR and `build.target-dir` honoured), asked
/// once per process. Where cargo cannot answer (a GPU machine runs the test executables
/// without Rust), `target/` below the workspace root.
pub fn target_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        cargo_metadata::MetadataCommand::new()
            .manifest_path(root().join("Cargo.toml"))
            .no_deps()
            .exec()
            .map(|m| m.target_directory.into_std_path_buf())
            .unwrap_or_else(|_| root().join("target"))
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_holds_the_workspace_manifest() {
        let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
        assert!(manifest.contains("[workspace]"), "{manifest}");
    }

    #[test]
    fn the_target_dir_is_where_cargo_built_this_test() {
        let dir = target_dir();
        let exe = std::env::current_exe().unwrap();
        assert!(
            exe.starts_with(&dir),
            "{} is not below {}",
            exe.display(),
            dir.display()
        );
    }
}
