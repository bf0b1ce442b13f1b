//! Shared helpers for xtask: reading a command's output, locating tools, installing
//! prerequisites. Commands run through xshell (`cmd!(sh, "...").run()` echoes each one
//! as `$ <command>` on stderr, which CI logs show).

use anyhow::{ensure, Context, Result};
use std::path::{Path, PathBuf};
use test_support::tools;
use xshell::{cmd, Shell};

/// Commands' output, tool lookup and prerequisites: the device build's own, shared.
pub use device_build::tools::{
    ensure_debian_packages, is_root, llvm16, llvm22, ptxas, read, section,
};
/// The workspace root, and cargo's target directory: where the tests look too.
pub use test_support::workspace::{root, target_dir};
/// An executable on PATH (or the path itself, when it is one).
pub use tools::which;

/// The cargo that runs xtask (`$CARGO`), for the builds and tests xtask starts.
pub fn cargo() -> PathBuf {
    std::env::var_os("CARGO").map_or_else(|| "cargo".into(), PathBuf::from)
}

/// `cargo build --release -p <package> <target...>` in the workspace (with `sh`'s
/// environment); returns `target/release/<file>`, which the build must have written.
pub fn build_release(sh: &Shell, package: &str, target: &[&str], file: &str) -> Result<PathBuf> {
    let cargo = cargo();
    let _in_root = sh.push_dir(root());
    cmd!(sh, "{cargo} build --release -p {package} {target...}").run()?;
    let built = target_dir().join("release").join(file);
    ensure!(built.is_file(), "cargo did not produce {}", built.display());
    Ok(built)
}

/// What makes a tar archive the same for the same files, whoever packs them: member
/// order, owners and groups.
pub const REPRODUCIBLE_TAR: [&str; 4] =
    ["--sort=name", "--owner=0", "--group=0", "--numeric-owner"];

/// Every path below `dir` (folders, files and links, not following links), parents
/// before children, but those `skip` names and what is below them.
pub fn paths_below(dir: &Path, skip: impl Fn(&Path) -> bool) -> Result<Vec<PathBuf>> {
    let mut all = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(folder) = todo.pop() {
        let entries =
            std::fs::read_dir(&folder).with_context(|| format!("reading {}", folder.display()))?;
        for entry in entries {
            let path = entry?.path();
            if skip(&path) {
                continue;
            }
            if std::fs::symlink_metadata(&path)?.is_dir() {
                todo.push(path.clone());
            }
            all.push(path);
        }
    }
    Ok(all)
}

/// `cargo <args> --message-format=json-render-diagnostics` in the workspace (a build,
/// or `test`/`bench --no-run`): cargo's JSON messages, for [`cargo_executable`].
pub fn cargo_messages(args: &[&str]) -> Result<String> {
    let cargo = cargo();
    let sh = Shell::new()?;
    sh.change_dir(root());
    read(cmd!(
        sh,
        "{cargo} {args...} --message-format=json-render-diagnostics"
    ))
}

/// The executable cargo built for target `name`, from its `--message-format=json` output
/// (one message per line; the target's `compiler-artifact` message names it).
pub fn cargo_executable(json: &str, name: &str) -> Option<PathBuf> {
    cargo_metadata::Message::parse_stream(json.as_bytes())
        .filter_map(Result::ok)
        .find_map(|message| match message {
            cargo_metadata::Message::CompilerArtifact(a) if a.target.name == name => {
                a.executable.map(|e| e.into_std_path_buf())
            }
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages as cargo 1.95 prints them for `cargo test --no-run --message-format=json`
    /// (every field; shorter paths): the library's artifact (no executable), the test's,
    /// and the build-finished line.
    const CARGO_JSON: &str = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests#e2e-tests@0.1.0","manifest_path":"/w/tests/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"e2e_tests","src_path":"/w/tests/src/lib.rs","edition":"2021","doc":true,"doctest":true,"test":true},"profile":{"opt_level":"0","debuginfo":2,"debug_assertions":true,"overflow_checks":true,"test":false},"features":[],"filenames":["/w/target/debug/deps/libe2e_tests-1.rlib"],"executable":null,"fresh":true}
{"reason":"compiler-artifact","package_id":"path+file:///w/tests#e2e-tests@0.1.0","manifest_path":"/w/tests/Cargo.toml","target":{"kind":["test"],"crate_types":["bin"],"name":"cuda_abi","src_path":"/w/tests/tests/cuda_abi.rs","edition":"2021","doc":false,"doctest":false,"test":true},"profile":{"opt_level":"0","debuginfo":2,"debug_assertions":true,"overflow_checks":true,"test":true},"features":[],"filenames":["/w/target/debug/deps/cuda_abi-2"],"executable":"/w/target/debug/deps/cuda_abi-2","fresh":false}
{"reason":"build-finished","success":true}
"#;

    #[test]
    fn the_executable_of_the_named_target() {
        assert_eq!(
            cargo_executable(CARGO_JSON, "cuda_abi"),
            Some(PathBuf::from("/w/target/debug/deps/cuda_abi-2"))
        );
        // A target without an executable (a library), or one cargo did not build.
        assert_eq!(cargo_executable(CARGO_JSON, "e2e_tests"), None);
        assert_eq!(cargo_executable(CARGO_JSON, "cuda_indirect"), None);
    }
}
