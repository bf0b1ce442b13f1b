//! Where the doctor is installed, and the install it checks (its layout is the
//! install-layout crate's, which `cargo xtask install` writes).
//!
//! The prefix is the folder above the one holding the doctor's own executable
//! (`<prefix>/bin/omptarget-indirect-doctor`); the LLVM major N is in the compiler
//! plugin's file name, `<prefix>/lib/libomptarget-indirect-clangN.so`.

use crate::report::Report;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use install_layout::Prefix;
pub use install_layout::{
    compiler_plugin_file, major_of_compiler_plugin, AMDGCN_TRIPLE, CONFIG_TRIPLES, HOST_TRIPLE,
    NVPTX_TRIPLE, SELF_TEST_DIR, SELF_TEST_NAME,
};

/// An install prefix and the LLVM major it was installed for.
#[derive(Clone, Debug)]
pub struct Install {
    pub prefix: PathBuf,
    pub major: u32,
    /// LLVM N's root (`/usr/lib/llvm-N` unless overridden).
    pub llvm_root: PathBuf,
}

impl Install {
    fn layout(&self) -> Prefix {
        Prefix::new(&self.prefix)
    }

    pub fn lib(&self) -> PathBuf {
        self.layout().lib()
    }

    /// `<prefix>/share/omptarget-indirect/<triple>.cfg`
    pub fn config(&self, triple: &str) -> PathBuf {
        self.layout().config(triple)
    }

    /// `<prefix>/lib/omptarget-indirect/libomptarget.devicertl.a`: LLVM N's device
    /// runtime plus one member of ours per GPU architecture.
    pub fn devicertl_archive(&self) -> PathBuf {
        self.layout().devicertl_archive()
    }

    /// `standard_indirect.<triple>` (x86_64) or `standard_indirect.<triple>.<arch>`.
    pub fn self_test_program(&self, triple: &str, arch: Option<&str>) -> PathBuf {
        self.layout().self_test_program(triple, arch)
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
        Ok(exe) => match Prefix::of_executable(&exe) {
            Some(Prefix(p)) => {
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
