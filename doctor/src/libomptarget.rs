//! Which libomptarget a program built by clang-N with our config loads, its version,
//! and which library of it dlopens the plugins (whose search [`crate::plugin_search`]
//! emulates).
//!
//! Debian's clang-N gives OpenMP programs the RUNPATH `/usr/lib/llvm-N/lib` (the
//! clang 17/18 configs add it), where `libomptarget.so.N` is (`.so.18.1` for 18); libomptarget's plugins
//! are dlopened from `libLLVM-N.so.1` (libomptarget's NEEDED library, found through
//! libomptarget's RUNPATH `$ORIGIN`), so that library's RUNPATH, not the program's,
//! is the one that applies.

use crate::elf_dynamic::{self, Dynamic};
use crate::install::{Install, HOST_TRIPLE};
use crate::ld_cache::{self, LdCache};
use crate::ld_search::{self, Found, LoaderSearch, SearchDir};
use crate::report::Report;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The library whose `dlopen` loads the plugins: its path as the loader found it.
pub struct PluginCaller {
    pub path: PathBuf,
    pub dynamic: Dynamic,
}

/// `LD_LIBRARY_PATH` of this process.
pub fn env_ld_library_path() -> Vec<SearchDir> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    ld_search::ld_library_path(std::env::var_os("LD_LIBRARY_PATH").as_deref(), &cwd)
}

fn cache() -> Option<LdCache> {
    LdCache::read(Path::new(ld_cache::DEFAULT_PATH))
}

/// The `[libomptarget]` section: the libomptarget a program loads and the library that
/// dlopens the plugins (None: no libomptarget).
pub fn check(report: &mut Report<impl Write>, install: &Install) -> Option<PluginCaller> {
    let n = install.major;
    let (program, program_dynamic, role) = program(install);
    let name = soname_needed(install, &program_dynamic);
    let search = LoaderSearch::of_caller(
        &env_ld_library_path(),
        Some((&program, &program_dynamic, &role)),
        cache(),
    );
    let Some(found) = search.find(&name) else {
        report.fail(
            format!(
                "no {name} for programs of clang-{n} (looked in {})",
                looked_in(&search)
            ),
            format!("apt-get install libomp-{n}-dev"),
        );
        return None;
    };
    let dynamic = match elf_dynamic::read(&found.path) {
        Ok(d) => d,
        Err(e) => {
            report.fail(
                format!("{}: {e:#}", found.path.display()),
                format!("apt-get install --reinstall libomp-{n}-dev"),
            );
            return None;
        }
    };
    report_found(report, install, &found, &dynamic);
    Some(plugin_caller(report, found, dynamic))
}

/// The program whose NEEDED libomptarget is searched for: the installed x86_64
/// self-test program (built by clang-N with our config) when it needs libomptarget N,
/// else what clang-N gives one.
fn program(install: &Install) -> (PathBuf, Dynamic, String) {
    let self_test = install.self_test_program(HOST_TRIPLE, None);
    let built_for_n = |d: &Dynamic| {
        d.needed
            .iter()
            .any(|n| is_libomptarget_of(n, install.major))
    };
    if let Some(dynamic) = elf_dynamic::read(&self_test).ok().filter(built_for_n) {
        let who = self_test.display().to_string();
        return (self_test, dynamic, who);
    }
    let dynamic = Dynamic {
        runpath: Some(install.llvm_lib().display().to_string()),
        ..Dynamic::default()
    };
    let who = format!("the programs of clang-{} -fopenmp", install.major);
    (install.prefix.join("bin/<program>"), dynamic, who)
}

/// Whether `name` is a soname of LLVM `major`'s libomptarget: `libomptarget.so.17`, and
/// `libomptarget.so.18.1` (LLVM 18 put its minor version in the soname).
pub fn is_libomptarget_of(name: &str, major: u32) -> bool {
    let Some(version) = name.strip_prefix("libomptarget.so.") else {
        return false;
    };
    version.split('.').next() == Some(major.to_string().as_str())
}

/// The libomptarget soname a program of clang-N needs: the program's own NEEDED entry,
/// else the one in LLVM N's library folder, else `libomptarget.so.N`.
fn soname_needed(install: &Install, program: &Dynamic) -> String {
    let n = install.major;
    let from_program = program
        .needed
        .iter()
        .find(|name| is_libomptarget_of(name, n));
    let from_folder = || {
        std::fs::read_dir(install.llvm_lib())
            .ok()?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .find(|name| is_libomptarget_of(name, n))
    };
    from_program
        .cloned()
        .or_else(from_folder)
        .unwrap_or_else(|| format!("libomptarget.so.{n}"))
}

fn looked_in(search: &LoaderSearch) -> String {
    let mut dirs: Vec<String> = search
        .dirs
        .iter()
        .map(|d| d.dir.display().to_string())
        .collect();
    dirs.push("/etc/ld.so.cache".into());
    dirs.extend(search.system_dirs.iter().map(|d| d.display().to_string()));
    dirs.join(", ")
}

fn report_found(
    report: &mut Report<impl Write>,
    install: &Install,
    found: &Found,
    dynamic: &Dynamic,
) {
    let soname = dynamic.soname.as_deref().unwrap_or("none");
    let package = debian_package(&found.path).map_or(String::new(), |p| format!(", package {p}"));
    let text = format!(
        "{} (soname {soname}{package}; found through {})",
        found.path.display(),
        found.why
    );
    let llvms = same_dir(found.path.parent(), Some(&install.llvm_lib()));
    if llvms {
        report.ok(text);
    } else {
        report.warn(
            format!(
                "{text}: not LLVM {}'s own ({})",
                install.major,
                install.llvm_lib().display()
            ),
            Some(
                "take that folder off LD_LIBRARY_PATH unless you mean to use another libomptarget",
            ),
        );
    }
}

/// Whether two folders are the same one.
pub fn same_dir(a: Option<&Path>, b: Option<&Path>) -> bool {
    match (
        a.and_then(|a| a.canonicalize().ok()),
        b.and_then(|b| b.canonicalize().ok()),
    ) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// `<package> <version>` of the Debian package that installed `path`.
fn debian_package(path: &Path) -> Option<String> {
    let real = path.canonicalize().ok()?;
    let owner = run("dpkg-query", &["-S", real.to_str()?])
        .or_else(|| run("dpkg-query", &["-S", path.to_str()?]))?;
    let package = owner.lines().next()?.split(':').next()?.trim().to_owned();
    let version = run("dpkg-query", &["-W", "-f=${Version}", &package])?;
    Some(format!("{package} {}", version.trim()))
}

fn run(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// libomptarget's NEEDED libLLVM (the library that calls dlopen for it), found as the
/// loader finds it from libomptarget; libomptarget itself when it needs none.
fn plugin_caller(
    report: &mut Report<impl Write>,
    libomptarget: Found,
    dynamic: Dynamic,
) -> PluginCaller {
    let llvm = dynamic.needed.iter().find(|n| n.starts_with("libLLVM"));
    let search = LoaderSearch::of_caller(
        &env_ld_library_path(),
        Some((
            &libomptarget.path,
            &dynamic,
            &libomptarget.path.display().to_string(),
        )),
        cache(),
    );
    let found = llvm.and_then(|name| Some((name, search.find(name)?)));
    let caller = match found.map(|(name, f)| (name, elf_dynamic::read(&f.path).map(|d| (f, d)))) {
        Some((_, Ok((f, d)))) => PluginCaller {
            path: f.path,
            dynamic: d,
        },
        Some((name, Err(e))) => {
            report.warn(
                format!("{name}: {e:#}: the plugin search below assumes libomptarget's own"),
                None,
            );
            PluginCaller {
                path: libomptarget.path,
                dynamic,
            }
        }
        None => PluginCaller {
            path: libomptarget.path,
            dynamic,
        },
    };
    let runpath = match (&caller.dynamic.runpath, &caller.dynamic.rpath) {
        (Some(r), _) => format!("whose RUNPATH is {r}"),
        (None, Some(r)) => format!("whose RPATH is {r}"),
        (None, None) => "which has no RUNPATH".into(),
    };
    report.ok(format!(
        "plugins are dlopened from {}, {runpath}: a program's own rpath does not apply to them",
        caller.path.display()
    ));
    caller
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llvm_18_s_soname_carries_its_minor_version() {
        assert!(is_libomptarget_of("libomptarget.so.16", 16));
        assert!(is_libomptarget_of("libomptarget.so.18.1", 18));
        assert!(!is_libomptarget_of("libomptarget.so.18.1", 1));
        assert!(!is_libomptarget_of("libomptarget.so.17", 18));
        assert!(!is_libomptarget_of("libomptarget.so", 18));
        assert!(!is_libomptarget_of("libomptarget.rtl.x86_64.so.18", 18));
    }
}
