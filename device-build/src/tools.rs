//! The tools the device build needs, found or installed: LLVM 22 (and 16), ptxas (on
//! PATH, or from the CUDA wheels in our own virtual environment), Debian packages when
//! running as root; and reading a command's output with its failure explained. xtask
//! and the test harness use the same functions.

use anyhow::{bail, ensure, Context, Result};
use std::path::PathBuf;
use test_support::tools;
use xshell::{cmd, Cmd, Shell};

/// Runs `cmd` without echoing it and returns its stdout as text; a failure names the
/// command, its exit status and what it wrote to stderr. (xshell's own `read` lets
/// stderr through to the terminal and leaves it out of the error.)
pub fn read(cmd: Cmd<'_>) -> Result<String> {
    let shown = cmd.to_string();
    let out = cmd.quiet().ignore_status().output()?;
    if !out.status.success() {
        bail!(
            "`{shown}` failed with {}:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() == 0 }
}

/// Make sure the Debian packages are installed: installs the missing ones when running
/// as root, otherwise fails with the apt-get command the user should run.
pub fn ensure_debian_packages(pkgs: &[&str]) -> Result<()> {
    // Packages this process has seen installed: every tool lookup calls this, and a
    // package does not go away while xtask runs, so each is asked of dpkg once.
    static INSTALLED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    let sh = Shell::new()?;
    let status_format = "-f=${Status}";
    let missing: Vec<&str> = pkgs
        .iter()
        .copied()
        .filter(|p| {
            if installed.iter().any(|i| i == p) {
                return false;
            }
            let present = cmd!(sh, "dpkg-query -W {status_format} {p}")
                .quiet()
                .ignore_status()
                .ignore_stderr()
                .read()
                .is_ok_and(|status| status.contains("install ok installed"));
            if present {
                installed.push(p.to_string());
            }
            !present
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing Debian packages: {}\n  run as root: apt-get install -y {}",
            missing.join(" "),
            missing.join(" ")
        );
    }
    eprintln!("installing Debian packages: {}", missing.join(" "));
    static UPDATED: std::sync::Once = std::sync::Once::new();
    let mut update_result = Ok(());
    UPDATED.call_once(|| {
        update_result = cmd!(sh, "apt-get update -qq").run();
    });
    update_result?;
    // A package that conflicts with one already installed (libomp-19-dev and
    // libomp-16-dev) must fail here, not silently uninstall the other: apt's simulation
    // lists the removals (`--no-remove` does not stop removals by conflict).
    let packages = &missing;
    let plan = read(cmd!(
        sh,
        "apt-get install -s --no-install-recommends {packages...}"
    ))?;
    let removals: Vec<&str> = plan
        .lines()
        .filter_map(|l| l.strip_prefix("Remv "))
        .collect();
    if !removals.is_empty() {
        bail!(
            "installing {} would remove installed packages: {}",
            missing.join(" "),
            removals.join(", ")
        );
    }
    cmd!(
        sh,
        "apt-get install -y -qq --no-install-recommends {packages...}"
    )
    .env("DEBIAN_FRONTEND", "noninteractive")
    .run()?;
    installed.extend(missing.iter().map(|p| p.to_string()));
    Ok(())
}

/// Find `ptxas`: on PATH, under CUDA_HOME, or inside the PyPI wheel `nvidia-cuda-nvcc`
/// (CUDA 13; installed into our own virtual environment when missing).
pub fn ptxas() -> Result<PathBuf> {
    match tools::find_ptxas() {
        Ok(p) => Ok(p),
        Err(_) => wheel_tool(tools::PTXAS_WHEEL, tools::PTXAS_IN_WHEEL),
    }
}

/// A tool shipped inside a PyPI wheel under the `nvidia` namespace package (`rel` is
/// its path below one of `nvidia.__path__`), the wheel installed into
/// [`tools::python_tools_venv`] when it is missing.
pub fn wheel_tool(wheel: &str, rel: &str) -> Result<PathBuf> {
    if let Some(p) = tools::find_in_nvidia_wheel(rel) {
        return Ok(p);
    }
    let python = venv_python()?;
    let sh = Shell::new()?;
    cmd!(sh, "{python} -m pip install -q {wheel}").run()?;
    tools::find_in_nvidia_wheel(rel).with_context(|| {
        format!(
            "{wheel} was installed into {}, but it has no nvidia/{rel}",
            tools::python_tools_venv().display()
        )
    })
}

/// The interpreter of [`tools::python_tools_venv`], the environment made first when
/// missing (`python3 -m venv`; Debian keeps venv's pip in `python3-venv`, installed
/// here when running as root). The only interpreter xtask installs into.
fn venv_python() -> Result<PathBuf> {
    let venv = tools::python_tools_venv();
    let python = venv.join("bin/python3");
    if python.is_file() {
        return Ok(python);
    }
    let sh = Shell::new()?;
    let make = || {
        // A half-made environment (no pip) from a failed try would be taken as whole.
        let _ = std::fs::remove_dir_all(&venv);
        cmd!(sh, "python3 -m venv {venv}").run()
    };
    if make().is_err() {
        ensure!(
            is_root(),
            "`python3 -m venv {}` failed: on Debian, `apt-get install python3-venv` and retry",
            venv.display()
        );
        ensure_debian_packages(&["python3-venv"])?;
        make().with_context(|| format!("python3 -m venv {}", venv.display()))?;
    }
    Ok(python)
}

/// An LLVM 22 tool (`<tool>-22` on PATH, or under /usr/lib/llvm-22/bin), its Debian
/// packages installed first when missing.
pub fn llvm22(tool: &str) -> Result<PathBuf> {
    llvm(22, tool)
}

/// An LLVM 16 tool (clang-16 etc.), like [`llvm22`].
pub fn llvm16(tool: &str) -> Result<PathBuf> {
    llvm(16, tool)
}

fn llvm(major: u32, tool: &str) -> Result<PathBuf> {
    ensure_debian_packages(tools::llvm_packages(major))?;
    Ok(tools::find_llvm(major, tool)?)
}

/// Print a section header so long logs read well.
pub fn section(title: &str) {
    eprintln!("\n==> {title}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::workspace::root;

    /// No code path installs into a system interpreter (Debian's python3 refuses it, PEP
    /// 668): the one installing pip run in the tree's code and scripts is [`wheel_tool`]'s,
    /// through the interpreter of our virtual environment ([`venv_python`]).
    #[test]
    fn pip_installs_only_into_our_virtual_environment() {
        let pip_install = ["pip", " install"].concat();
        let pip3_install = ["pip3", " install"].concat();
        let sh = Shell::new().unwrap();
        let _in_root = sh.push_dir(root());
        let files = read(cmd!(sh, "git ls-files")).unwrap();
        let mut found = Vec::new();
        for file in files.lines() {
            let code = [".rs", ".py", ".sh", ".toml", ".cfg", "run"];
            if !code.iter().any(|e| file.ends_with(e)) {
                continue;
            }
            let text = std::fs::read_to_string(root().join(file)).unwrap_or_default();
            for line in text.lines() {
                if line.contains(&pip_install) || line.contains(&pip3_install) {
                    found.push(format!("{file}: {}", line.trim()));
                }
            }
        }
        let venv_install = [
            "device-build/src/tools.rs: cmd!(sh, \"{python} -m ",
            &pip_install,
            " -q {wheel}\").run()?;",
        ]
        .concat();
        assert_eq!(found, [venv_install]);
        let body = include_str!("tools.rs");
        assert!(
            body.contains("let python = venv_python()?;"),
            "wheel_tool's interpreter is not the virtual environment's"
        );
    }
}
