//! Where the doctor is installed, and the install's layout (as `cargo xtask install`
//! writes it: xtask/src/install.rs).
//!
//! The prefix is the folder above the one holding the doctor's own executable
//! (`<prefix>/bin/omptarget-indirect-doctor`); the LLVM major N is in the compiler
//! plugin's file name, `<prefix>/lib/libomptarget-indirect-clangN.so`.

use crate::report::Report;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The offload targets a config file is installed for.
pub const CONFIG_TRIPLES: [&str; 3] = [HOST_TRIPLE, NVPTX_TRIPLE, AMDGCN_TRIPLE];
pub const HOST_TRIPLE: &str = "x86_64-pc-linux-gnu";
pub const NVPTX_TRIPLE: &str = "nvptx64-nvidia-cuda";
pub const AMDGCN_TRIPLE: &str = "amdgcn-amd-amdhsa";

/// The self-test programs' folder below the prefix, and their name before
/// `.<triple>[.<arch>]`.
pub const SELF_TEST_DIR: &str = "libexec/omptarget-indirect/self-test";
pub const SELF_TEST_NAME: &str = "standard_indirect";

/// The compiler plugin's installed file name for clang `major`.
pub fn compiler_plugin_file(major: u32) -> String {
    format!("libomptarget-indirect-clang{major}.so")
}

/// N of `libomptarget-indirect-clangN.so`.
pub fn major_of_compiler_plugin(file_name: &str) -> Option<u32> {
    file_name
        .strip_prefix("libomptarget-indirect-clang")?
        .strip_suffix(".so")?
        .parse()
        .ok()
}

/// An install prefix and the LLVM major it was installed for.
#[derive(Clone, Debug)]
pub struct Install {
    pub prefix: PathBuf,
    pub major: u32,
    /// LLVM N's root (`/usr/lib/llvm-N` unless overridden).
    pub llvm_root: PathBuf,
}

impl Install {
    pub fn lib(&self) -> PathBuf {
        self.prefix.join("lib")
    }

    /// `<prefix>/share/omptarget-indirect/<triple>.cfg`
    pub fn config(&self, triple: &str) -> PathBuf {
        self.prefix
            .join("share/omptarget-indirect")
            .join(format!("{triple}.cfg"))
    }

    /// `<prefix>/lib/omptarget-indirect/libomptarget.devicertl.a`: LLVM N's device
    /// runtime plus one member of ours per GPU architecture.
    pub fn devicertl_archive(&self) -> PathBuf {
        self.lib()
            .join("omptarget-indirect/libomptarget.devicertl.a")
    }

    /// `standard_indirect.<triple>` (x86_64) or `standard_indirect.<triple>.<arch>`.
    pub fn self_test_program(&self, triple: &str, arch: Option<&str>) -> PathBuf {
        let name = match arch {
            Some(arch) => format!("{SELF_TEST_NAME}.{triple}.{arch}"),
            None => format!("{SELF_TEST_NAME}.{triple}"),
        };
        self.prefix.join(SELF_TEST_DIR).join(name)
    }

    /// The architectures a self-test program for `triple` is installed for.
    pub fn self_test_arches(&self, triple: &str) -> Vec<String> {
        let start = format!("{SELF_TEST_NAME}.{triple}.");
        let mut arches: Vec<String> = fs::read_dir(self.prefix.join(SELF_TEST_DIR))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|name| Some(name.strip_prefix(&start)?.to_owned()))
            .collect();
        arches.sort();
        arches
    }

    /// LLVM N's library folder, where libomptarget.so.N and LLVM's plugins are.
    pub fn llvm_lib(&self) -> PathBuf {
        self.llvm_root.join("lib")
    }
}

/// The prefix of an executable installed as `<prefix>/bin/<name>`.
pub fn prefix_of_exe(exe: &Path) -> Option<PathBuf> {
    Some(exe.parent()?.parent()?.to_path_buf())
}

/// The majors of the compiler plugins in `lib`, ascending.
pub fn installed_majors(lib: &Path) -> Vec<u32> {
    let mut majors: Vec<u32> = fs::read_dir(lib)
        .into_iter()
        .flatten()
        .filter_map(|e| major_of_compiler_plugin(e.ok()?.file_name().to_str()?))
        .collect();
    majors.sort_unstable();
    majors
}

/// What the command line said.
pub struct Overrides {
    pub prefix: Option<PathBuf>,
    pub llvm: Option<u32>,
    pub llvm_root: Option<PathBuf>,
}

/// The `[install]` section: the prefix and N. None when there is no install to check.
pub fn locate(report: &mut Report<impl Write>, overrides: &Overrides) -> Option<Install> {
    let prefix = match prefix(report, overrides.prefix.as_deref())? {
        p if p.join("lib").is_dir() => p,
        p => {
            report.fail(
                format!("{} has no lib/ folder: not an install prefix", p.display()),
                "run the doctor installed by `cargo xtask install --prefix P` (P/bin/omptarget-indirect-doctor), or give --prefix P",
            );
            return None;
        }
    };
    let major = major(report, &prefix, overrides.llvm)?;
    let llvm_root = overrides
        .llvm_root
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("/usr/lib/llvm-{major}")));
    Some(Install {
        prefix,
        major,
        llvm_root,
    })
}

fn prefix(report: &mut Report<impl Write>, given: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = given {
        let absolute = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        report.ok(format!("prefix {} (--prefix)", absolute.display()));
        return Some(absolute);
    }
    match own_executable() {
        Ok(exe) => match prefix_of_exe(&exe) {
            Some(p) => {
                report.ok(format!(
                    "prefix {} (the folder above the doctor's own {})",
                    p.display(),
                    exe.display()
                ));
                Some(p)
            }
            None => {
                report.fail(
                    format!("{} is not in a <prefix>/bin/ folder", exe.display()),
                    "give --prefix P",
                );
                None
            }
        },
        Err(e) => {
            report.fail(e, "give --prefix P");
            None
        }
    }
}

/// This executable's file: /proc/self/exe (the file, whatever link started it), else
/// argv[0] resolved when it names a path (a root without /proc).
fn own_executable() -> Result<PathBuf, String> {
    std::env::current_exe().or_else(|proc_error| {
        let argv0 = std::env::args_os().next().map(PathBuf::from);
        argv0
            .filter(|p| p.components().count() > 1)
            .and_then(|p| p.canonicalize().ok())
            .ok_or_else(|| {
                format!("cannot read /proc/self/exe ({proc_error}), and argv[0] names no file")
            })
    })
}

fn major(report: &mut Report<impl Write>, prefix: &Path, given: Option<u32>) -> Option<u32> {
    let lib = prefix.join("lib");
    let found = installed_majors(&lib);
    let major = given.or_else(|| found.last().copied());
    match major {
        Some(n) if found.contains(&n) => {
            let others: Vec<String> = found
                .iter()
                .filter(|&&m| m != n)
                .map(|m| m.to_string())
                .collect();
            let text = format!("LLVM {n}: lib/{}", compiler_plugin_file(n));
            if others.is_empty() {
                report.ok(text);
            } else {
                report.warn(
                    format!(
                        "{text}; compiler plugins for LLVM {} are here too (the configs name the last installed)",
                        others.join(", ")
                    ),
                    Some("give --llvm N to check another"),
                );
            }
            Some(n)
        }
        Some(n) => {
            report.fail(
                format!("no compiler plugin for LLVM {n} in {}", lib.display()),
                format!(
                    "cargo xtask install --prefix {} --llvm {n}",
                    prefix.display()
                ),
            );
            given
        }
        None => {
            report.fail(
                format!(
                    "no compiler plugin (libomptarget-indirect-clangN.so) in {}: which LLVM it was installed for is unknown",
                    lib.display()
                ),
                "reinstall (`cargo xtask install --prefix P`), or give --llvm N",
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_major_is_in_the_compiler_plugins_name() {
        assert_eq!(
            major_of_compiler_plugin(&compiler_plugin_file(16)),
            Some(16)
        );
        assert_eq!(
            major_of_compiler_plugin("libomptarget-indirect-clang18.so"),
            Some(18)
        );
        assert_eq!(
            major_of_compiler_plugin("libomptarget-indirect-clang.so"),
            None
        );
        assert_eq!(major_of_compiler_plugin("libomptarget.rtl.cuda.so"), None);
    }

    /// The names here are the ones `cargo xtask install` writes (xtask is a binary, so
    /// its source is what can be compared).
    #[test]
    fn the_layout_is_the_one_xtask_installs() {
        let xtask = include_str!("../../xtask/src/install.rs");
        for needle in [
            format!("pub const SELF_TEST_DIR: &str = \"{SELF_TEST_DIR}\";"),
            format!("format!(\"{SELF_TEST_NAME}.{{triple}}.{{arch}}\")"),
            format!("format!(\"{SELF_TEST_NAME}.{{triple}}\")"),
            "format!(\"libomptarget-indirect-clang{major}.so\")".to_owned(),
            // lib/omptarget-indirect/libomptarget.devicertl.a
            "install_device_rtl(&lib.join(\"omptarget-indirect\"), major)".to_owned(),
            "&dir.join(\"libomptarget.devicertl.a\")".to_owned(),
        ] {
            assert!(
                xtask.contains(&needle),
                "xtask/src/install.rs has no {needle}"
            );
        }
        for triple in CONFIG_TRIPLES {
            assert!(xtask.contains(&format!("\"{triple}\"")), "{triple}");
        }
    }

    #[test]
    fn the_prefix_is_above_bin() {
        assert_eq!(
            prefix_of_exe(Path::new("/opt/omp/bin/omptarget-indirect-doctor")),
            Some(PathBuf::from("/opt/omp"))
        );
    }

    #[test]
    fn self_test_programs_are_named_by_triple_and_arch() {
        let install = Install {
            prefix: "/p".into(),
            major: 16,
            llvm_root: "/usr/lib/llvm-16".into(),
        };
        assert_eq!(
            install.self_test_program(HOST_TRIPLE, None),
            Path::new(
                "/p/libexec/omptarget-indirect/self-test/standard_indirect.x86_64-pc-linux-gnu"
            )
        );
        assert_eq!(
            install.self_test_program(NVPTX_TRIPLE, Some("sm_90")),
            Path::new("/p/libexec/omptarget-indirect/self-test/standard_indirect.nvptx64-nvidia-cuda.sm_90")
        );
    }
}
