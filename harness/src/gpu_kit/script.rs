//! run.sh and the Python files it runs (checked in under harness/kit/, reviewed there):
//! - `run.sh`: finds python3 and hands over to the runner;
//! - `kit/runner.py`: every step, each step's log and the summary;
//! - `kit/lit_tool.py` and `kit/lit.site.cfg.py`: LLVM's lit suite compiled here and
//!   replayed there ([`super::lit`] runs them in build mode).

use super::Kit;
use anyhow::Result;
use serde_json::json;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

pub const RUN_SH: &str = include_str!("../../kit/run.sh");
pub const RUNNER: &str = include_str!("../../kit/runner.py");
pub const LIT_TOOL: &str = include_str!("../../kit/lit_tool.py");
pub const LIT_SITE_CFG: &str = include_str!("../../kit/lit.site.cfg.py");

/// Writes the scripts into the kit.
pub fn add(kit: &mut Kit) -> Result<()> {
    write_executable(&kit.path("run.sh")?, RUN_SH)?;
    write_executable(&kit.path("kit/runner.py")?, RUNNER)?;
    write_executable(&kit.path("kit/lit_tool.py")?, LIT_TOOL)?;
    fs::write(kit.path("kit/lit.site.cfg.py")?, LIT_SITE_CFG)?;
    kit.set(
        "scripts",
        json!({
            "runner": "kit/runner.py",
            "lit_tool": "kit/lit_tool.py",
            "lit_site_cfg": "kit/lit.site.cfg.py",
        }),
    );
    Ok(())
}

pub fn write_executable(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

    /// The runner's verdict on lit tests that differ between the plugins (reruns, the
    /// one-sided Fisher test): kit/test_runner.py drives it with a scripted lit.
    #[test]
    fn the_runners_rerun_verdict_passes_its_unit_tests() {
        let kit = Path::new(env!("CARGO_MANIFEST_DIR")).join("kit");
        let out = Command::new("python3")
            .args(["-B", "-m", "unittest", "-v", "test_runner"])
            .current_dir(&kit)
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "kit/test_runner.py failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
