//! Shared helpers for xtask: running commands, locating tools, installing prerequisites.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (the parent of `xtask/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// `target/` of the workspace (honours CARGO_TARGET_DIR).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// Print a command, run it, fail with its exit status if it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("+ {}", display(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{}`", display(cmd)))?;
    if !status.success() {
        bail!("`{}` failed with {status}", display(cmd));
    }
    Ok(())
}

/// Run a command and capture its stdout as a string; fail (with stderr) if it fails.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("could not start `{}`", display(cmd)))?;
    if !out.status.success() {
        bail!(
            "`{}` failed with {}:\n{}",
            display(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn display(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Find an executable on PATH or at an absolute path.
pub fn which(tool: &str) -> Option<PathBuf> {
    let p = Path::new(tool);
    if p.is_absolute() {
        return p.is_file().then(|| p.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(tool))
            .find(|c| c.is_file())
    })
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { geteuid() == 0 }
}

extern "C" {
    fn geteuid() -> u32;
}

/// Make sure the Debian packages are installed: installs the missing ones when running
/// as root, otherwise fails with the apt-get command the user should run.
pub fn ensure_debian_packages(pkgs: &[&str]) -> Result<()> {
    // Packages this process has seen installed: every tool lookup calls this, and a
    // package does not go away while xtask runs, so each is asked of dpkg once.
    static INSTALLED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    let missing: Vec<&str> = pkgs
        .iter()
        .copied()
        .filter(|p| {
            if installed.iter().any(|i| i == p) {
                return false;
            }
            let present = Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
                .unwrap_or(false);
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
        update_result = run(Command::new("apt-get").args(["update", "-qq"]));
    });
    update_result?;
    // A package that conflicts with one already installed (libomp-19-dev and
    // libomp-16-dev) must fail here, not silently uninstall the other: apt's simulation
    // lists the removals (`--no-remove` does not stop removals by conflict).
    let plan = output(
        Command::new("apt-get")
            .args(["install", "-s", "--no-install-recommends"])
            .args(&missing),
    )?;
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
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))?;
    installed.extend(missing.iter().map(|p| p.to_string()));
    Ok(())
}

/// Find `ptxas`: on PATH, under CUDA_HOME, or inside the PyPI wheel `nvidia-cuda-nvcc`
/// (CUDA 13; installed with pip when missing and running as root).
pub fn ptxas() -> Result<PathBuf> {
    if let Some(p) = which("ptxas") {
        return Ok(p);
    }
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        let p = PathBuf::from(home).join("bin/ptxas");
        if p.is_file() {
            return Ok(p);
        }
    }
    wheel_tool("nvidia-cuda-nvcc", "cu13/bin/ptxas")
}

/// A tool shipped inside a PyPI wheel under the `nvidia` namespace package (`rel` is
/// its path below one of `nvidia.__path__`), pip-installing the wheel when it is missing
/// and we may install (root, or inside a virtualenv).
pub fn wheel_tool(wheel: &str, rel: &str) -> Result<PathBuf> {
    let find = || -> Option<PathBuf> {
        let script = format!(
            "import nvidia, os; print('\\n'.join(os.path.join(p, '{rel}') for p in nvidia.__path__))"
        );
        let out = Command::new("python3")
            .args(["-c", &script])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(PathBuf::from)
            .find(|p| p.is_file())
    };
    if let Some(p) = find() {
        return Ok(p);
    }
    if is_root() || std::env::var_os("VIRTUAL_ENV").is_some() {
        run(Command::new("python3").args(["-m", "pip", "install", "-q", wheel]))?;
        if let Some(p) = find() {
            return Ok(p);
        }
    }
    bail!("{rel} not found: `python3 -m pip install {wheel}` and retry")
}

/// An LLVM 22 tool (clang-22, ld.lld-22 or a tool under /usr/lib/llvm-22/bin).
pub fn llvm22(tool: &str) -> Result<PathBuf> {
    ensure_debian_packages(&["clang-22", "lld-22", "llvm-22"])?;
    let versioned = format!("{tool}-22");
    which(&versioned)
        .or_else(|| {
            let p = PathBuf::from("/usr/lib/llvm-22/bin").join(tool);
            p.is_file().then_some(p)
        })
        .with_context(|| format!("{tool} from LLVM 22 not found"))
}

/// An LLVM 16 tool (clang-16 etc.).
pub fn llvm16(tool: &str) -> Result<PathBuf> {
    ensure_debian_packages(&["clang-16", "libomp-16-dev", "clang-tools-16", "libffi-dev"])?;
    let versioned = format!("{tool}-16");
    which(&versioned)
        .or_else(|| {
            let p = PathBuf::from("/usr/lib/llvm-16/bin").join(tool);
            p.is_file().then_some(p)
        })
        .with_context(|| format!("{tool} from LLVM 16 not found"))
}

/// Print a section header so long logs read well.
pub fn section(title: &str) {
    eprintln!("\n==> {title}");
}

/// The executable cargo built for target `name`, from its `--message-format=json` output
/// (one JSON object per line; the target's `compiler-artifact` line names it).
pub fn cargo_executable(json: &str, name: &str) -> Option<PathBuf> {
    let target = format!("\"name\":\"{name}\"");
    json.lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\"") && l.contains(&target))
        .find_map(|l| {
            let rest = &l[l.find("\"executable\":\"")? + "\"executable\":\"".len()..];
            Some(PathBuf::from(&rest[..rest.find('"')?]))
        })
}
