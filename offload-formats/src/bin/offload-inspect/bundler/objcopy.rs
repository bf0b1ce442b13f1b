//! Object bundles (`-type=o` with an object file): written and stripped by llvm-objcopy
//! with the arguments clang-offload-bundler gives it, so the object is the one the
//! bundler makes. Each code object is a section `__CLANG_OFFLOAD_BUNDLE__<target>`
//! (flags readonly, exclude); the host's section holds one zero byte, the host code
//! being the object itself.
//!
//! Which llvm-objcopy: `OFFLOAD_INSPECT_OBJCOPY`, else the one beside this executable,
//! else the first on PATH, as the bundler looks beside the path it was started by and
//! then on PATH. The bytes are that llvm-objcopy's, so the bundler's own vary with how
//! it is started: `/usr/lib/llvm-22/bin/clang-offload-bundler` runs LLVM 22's, but
//! `/usr/bin/clang-offload-bundler-22` runs `/usr/bin/llvm-objcopy`, of whichever
//! version that is. Name the one whose bytes you expect.

use crate::files::{create_new_file, Output};
use crate::{fail, io_message, CliResult, Failure};
use offload_formats::bundle::OBJECT_SECTION_PREFIX;
use std::path::PathBuf;
use std::process::Command;

/// The llvm-objcopy to run.
fn find() -> CliResult<PathBuf> {
    if let Some(chosen) = std::env::var_os("OFFLOAD_INSPECT_OBJCOPY") {
        return Ok(chosen.into());
    }
    let beside_us = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("llvm-objcopy")))
        .filter(|p| p.is_file());
    match beside_us {
        Some(p) => Ok(p),
        None => which::which("llvm-objcopy")
            .map_err(|_| Failure("unable to find 'llvm-objcopy' in path".into())),
    }
}

/// Run llvm-objcopy with `args`; its failure is the bundler's message.
fn run(args: &[String]) -> CliResult {
    let objcopy = find()?;
    let status = Command::new(&objcopy)
        .args(args)
        .status()
        .map_err(|e| Failure(format!("'{}': {}", objcopy.display(), io_message(&e))))?;
    if !status.success() {
        return fail("'llvm-objcopy' tool failed");
    }
    Ok(())
}

/// Bundle: the host object (`inputs[host]`) with a section per target added, written
/// to `output`. Returns the output's size.
pub fn bundle(inputs: &[String], targets: &[String], host: usize, output: &str) -> CliResult<u64> {
    let placeholder = HostPlaceholder::create()?;
    let mut args = Vec::new();
    for (i, (input, target)) in inputs.iter().zip(targets).enumerate() {
        let contents = if i == host {
            placeholder.path.to_string_lossy().into_owned()
        } else {
            input.clone()
        };
        args.push(format!(
            "--add-section={OBJECT_SECTION_PREFIX}{target}={contents}"
        ));
        args.push(format!(
            "--set-section-flags={OBJECT_SECTION_PREFIX}{target}=readonly,exclude"
        ));
    }
    let out = Output::create(output)?;
    args.extend(["--".into(), inputs[host].clone(), out.path_for_tool()]);
    run(&args)?;
    out.commit()?;
    std::fs::metadata(output)
        .map(|m| m.len())
        .map_err(|e| Failure(format!("'{output}': {}", io_message(&e))))
}

/// Unbundle the host: the object `input` without its bundle sections, to `output`.
pub fn host_object(input: &str, output: &str) -> CliResult {
    let out = Output::create(output)?;
    run(&[
        "--regex".into(),
        format!("--remove-section={OBJECT_SECTION_PREFIX}.*"),
        "--".into(),
        input.to_owned(),
        out.path_for_tool(),
    ])?;
    out.commit()
}

/// Is `section` the host's placeholder (one zero byte), as the bundler tests it?
pub fn is_host_placeholder(section: &[u8]) -> bool {
    section == [0]
}

/// A temporary file of one zero byte: the host section's contents. Removed on drop.
struct HostPlaceholder {
    path: PathBuf,
}

impl HostPlaceholder {
    fn create() -> CliResult<Self> {
        let dir = std::env::temp_dir();
        let fail = |path: &std::path::Path, e: std::io::Error| {
            Failure(format!("'{}': {}", path.display(), io_message(&e)))
        };
        let (mut file, path) = create_new_file(|n| {
            dir.join(format!(
                "offload-inspect-host-{}-{n}.tmp",
                std::process::id()
            ))
        })
        .map_err(|e| fail(&dir, e))?;
        let placeholder = HostPlaceholder { path };
        std::io::Write::write_all(&mut file, &[0]).map_err(|e| fail(&placeholder.path, e))?;
        Ok(placeholder)
    }
}

impl Drop for HostPlaceholder {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
