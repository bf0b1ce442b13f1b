//! Where the tools are: LLVM 16 and 22 as Debian installs them, ptxas (on PATH, under
//! CUDA_HOME, or in CUDA's PyPI wheel), the system C compiler.
//!
//! `find_*` return a [`Missing`] naming what to install; the short forms (`llvm22`,
//! `ptxas`, ...) panic with it, which is what a test wants.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Debian packages that provide the LLVM 22 tools the project uses
/// (clang-offload-bundler and clang-offload-packager are in clang-tools-22).
pub const LLVM22_PACKAGES: &[&str] = &["clang-22", "lld-22", "llvm-22", "clang-tools-22"];
/// The Debian packages of clang 16 and the real libomptarget 16 it compiles for
/// (clang-tools-16 for offload linking, libffi-dev for the host plugin's calls).
pub const LLVM16_PACKAGES: &[&str] = &["clang-16", "libomp-16-dev", "clang-tools-16", "libffi-dev"];
/// CUDA's ptxas and nvlink: the PyPI wheel, and ptxas's path below its `nvidia` package.
pub const PTXAS_WHEEL: &str = "nvidia-cuda-nvcc";
pub const PTXAS_IN_WHEEL: &str = "cu13/bin/ptxas";

/// A tool that is not on this machine, and how to get it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The tool, e.g. `clang-offload-bundler-22`.
    pub tool: String,
    /// Where it was looked for.
    pub looked_in: String,
    /// The command that installs it.
    pub install: String,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} not found ({}): {} (`cargo xtask test`, run as root, installs it)",
            self.tool, self.looked_in, self.install
        )
    }
}

impl std::error::Error for Missing {}

/// An executable called `name` on PATH (or `name` itself, when it is a path).
pub fn which(name: &str) -> Option<PathBuf> {
    which::which(name).ok()
}

/// A tool of LLVM `major` as Debian installs it: `<tool>-<major>` on PATH, else
/// `/usr/lib/llvm-<major>/bin/<tool>` (tools that have no versioned name, such as
/// clang-offload-packager, live only there).
pub fn find_llvm(major: u32, tool: &str) -> Result<PathBuf, Missing> {
    let versioned = format!("{tool}-{major}");
    let dir = PathBuf::from(format!("/usr/lib/llvm-{major}/bin"));
    which(&versioned)
        .or_else(|| which(dir.join(tool).to_str()?))
        .ok_or_else(|| Missing {
            tool: versioned.clone(),
            looked_in: format!("on PATH and as {}", dir.join(tool).display()),
            install: match llvm_packages(major) {
                [] => format!("install LLVM {major}"),
                packages => format!("apt-get install -y {}", packages.join(" ")),
            },
        })
}

/// The Debian packages that provide LLVM `major`'s tools (none known for others).
pub fn llvm_packages(major: u32) -> &'static [&'static str] {
    match major {
        22 => LLVM22_PACKAGES,
        16 => LLVM16_PACKAGES,
        _ => &[],
    }
}

/// ptxas: on PATH, under CUDA_HOME, or in the `nvidia-cuda-nvcc` wheel.
pub fn find_ptxas() -> Result<PathBuf, Missing> {
    which("ptxas")
        .or_else(|| {
            let p = PathBuf::from(std::env::var_os("CUDA_HOME")?).join("bin/ptxas");
            p.is_file().then_some(p)
        })
        .or_else(|| find_in_nvidia_wheel(PTXAS_IN_WHEEL))
        .ok_or_else(|| Missing {
            tool: "ptxas".into(),
            looked_in: format!(
                "on PATH, in $CUDA_HOME/bin, as nvidia/{PTXAS_IN_WHEEL} of {} or of python3",
                python_tools_venv().display()
            ),
            install: format!(
                "any `cargo xtask` step that needs it installs the {PTXAS_WHEEL} wheel into {}",
                python_tools_venv().display()
            ),
        })
}

/// The virtual environment (under target/) where xtask installs the PyPI wheels it
/// needs: never into the system's python3, which Debian marks externally managed (PEP
/// 668) and whose pip refuses to install.
pub fn python_tools_venv() -> PathBuf {
    crate::workspace::target_dir().join("python-tools")
}

/// A file shipped in a PyPI wheel of CUDA's `nvidia` namespace package, `relative` to
/// one of `nvidia.__path__` (e.g. `cu13/bin/ptxas`), as the interpreter of
/// [`python_tools_venv`] finds it, else python3 (a wheel the user installed).
pub fn find_in_nvidia_wheel(relative: &str) -> Option<PathBuf> {
    let script = "import nvidia, os, sys\n\
                  print('\\n'.join(os.path.join(p, sys.argv[1]) for p in nvidia.__path__))";
    let interpreters: [PathBuf; 2] = [python_tools_venv().join("bin/python3"), "python3".into()];
    interpreters.iter().find_map(|python| {
        let out = Command::new(python)
            .args(["-c", script, relative])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(PathBuf::from)
            .find(|p| p.is_file())
    })
}

/// The system C compiler (`cc` or `gcc`), for host-side stand-ins.
pub fn find_host_cc() -> Result<PathBuf, Missing> {
    which("cc").or_else(|| which("gcc")).ok_or_else(|| Missing {
        tool: "a C compiler (cc or gcc)".into(),
        looked_in: "on PATH".into(),
        install: "apt-get install -y gcc".into(),
    })
}

/// [`find_llvm`]`(22, tool)`, panicking with what to install.
pub fn llvm22(tool: &str) -> PathBuf {
    find_llvm(22, tool).unwrap_or_else(|e| panic!("{e}"))
}

/// [`find_llvm`]`(16, tool)`, panicking with what to install.
pub fn llvm16(tool: &str) -> PathBuf {
    find_llvm(16, tool).unwrap_or_else(|e| panic!("{e}"))
}

/// The variable naming a program that runs clang-`major` where it is installed (xtask
/// writes one that runs it inside its Debian 13 root, for tests that need a clang this
/// machine lacks).
pub fn clang_in_root_env(major: u32) -> String {
    format!("OMPTARGET_RS_CLANG_{major}")
}

/// clang 16, the compiler whose OpenMP output libomptarget 16 runs.
pub fn clang16() -> PathBuf {
    llvm16("clang")
}

/// [`find_ptxas`], panicking with what to install.
pub fn ptxas() -> PathBuf {
    find_ptxas().unwrap_or_else(|e| panic!("{e}"))
}

/// [`find_host_cc`], panicking with what to install.
pub fn host_cc() -> PathBuf {
    find_host_cc().unwrap_or_else(|e| panic!("{e}"))
}

/// `tool`'s folder's parent: the installation a tool in `<root>/bin/` belongs to.
pub fn installation_of(tool: &Path) -> Option<&Path> {
    tool.parent()?.parent()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_llvm_tool_names_its_packages() {
        let e = find_llvm(22, "no-such-tool").unwrap_err();
        assert_eq!(e.tool, "no-such-tool-22");
        assert_eq!(
            e.install,
            "apt-get install -y clang-22 lld-22 llvm-22 clang-tools-22"
        );
        assert!(
            e.to_string().contains("/usr/lib/llvm-22/bin/no-such-tool"),
            "{e}"
        );
    }

    #[test]
    fn an_llvm_tool_is_found_by_its_versioned_name_first() {
        // clang-22 is on PATH wherever the tests run (`cargo xtask test` installs it).
        let clang = find_llvm(22, "clang").unwrap();
        assert_eq!(Some(clang), which("clang-22"));
    }
}
