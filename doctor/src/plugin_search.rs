//! Which plugin file libomptarget N would load for each device kind in this
//! environment, by the loader search of the library that dlopens them
//! ([`crate::libomptarget::PluginCaller`]), and whether it is this install's.
//!
//! File names: libomptarget 16 tries `libomptarget.rtl.<kind>.nextgen.so`, then
//! `libomptarget.rtl.<kind>.so` (`LIBOMPTARGET_NEXTGEN_PLUGINS` false: the second
//! only); 17 and 18 only `libomptarget.rtl.<kind>.so` (docs/LLVM_VERSIONS.md §3.0).

use crate::install::Install;
use crate::ld_cache::{self, LdCache};
use crate::ld_search::{Found, LoaderSearch};
use crate::libomptarget::{env_ld_library_path, same_dir, PluginCaller};
use crate::report::Report;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The device kinds whose plugins libomptarget loads from files on x86_64 Debian.
pub const KINDS: [&str; 3] = ["x86_64", "cuda", "amdgpu"];

/// Whose file a plugin is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The same file as `<prefix>/lib/<its name>`.
    Ours,
    /// In LLVM N's library folder.
    Llvm,
    Other,
}

/// What libomptarget would load for one kind.
#[derive(Clone, Debug)]
pub struct Choice {
    pub kind: &'static str,
    pub found: Option<(Found, Owner)>,
}

/// The file names libomptarget `major` tries for `kind`, in order; `nextgen` is
/// `LIBOMPTARGET_NEXTGEN_PLUGINS`.
pub fn plugin_names(major: u32, kind: &str, nextgen: Option<&str>) -> Vec<String> {
    let legacy = format!("libomptarget.rtl.{kind}.so");
    if major == 16 && nextgen.is_none_or(env_true) {
        vec![format!("libomptarget.rtl.{kind}.nextgen.so"), legacy]
    } else {
        vec![legacy]
    }
}

/// How libomptarget 16 reads a boolean variable (anything else is true).
fn env_true(value: &str) -> bool {
    !matches!(
        value.to_ascii_lowercase().as_str(),
        "0" | "false" | "off" | "no"
    )
}

/// Whether `found` is this install's copy of the file of that name, another file in
/// LLVM's folder, or something else.
pub fn owner(found: &Path, install: &Install) -> Owner {
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let ours = found
        .file_name()
        .map(|name| install.lib().join(name))
        .and_then(|p| id(&p));
    if ours.is_some() && ours == id(found) {
        Owner::Ours
    } else if same_dir(found.parent(), Some(&install.llvm_lib())) {
        Owner::Llvm
    } else {
        Owner::Other
    }
}

/// The first file any of `names` finds, in order (libomptarget tries each name
/// through the whole search before the next).
pub fn choose(search: &LoaderSearch, names: &[String]) -> Option<Found> {
    names.iter().find_map(|name| search.find(name))
}

/// The `[plugins]` section; returns each kind's choice (the self-test compares its
/// run's with the x86_64 one).
pub fn check(
    report: &mut Report<impl Write>,
    install: &Install,
    caller: &PluginCaller,
) -> Vec<Choice> {
    let who = format!("{}, which dlopens the plugins", caller.path.display());
    let search = LoaderSearch::of_caller(
        &env_ld_library_path(),
        Some((&caller.path, &caller.dynamic, &who)),
        LdCache::read(Path::new(ld_cache::DEFAULT_PATH)),
    );
    let nextgen = std::env::var("LIBOMPTARGET_NEXTGEN_PLUGINS").ok();
    if let (16, Some(value)) = (install.major, &nextgen) {
        report.note(&format!(
            "LIBOMPTARGET_NEXTGEN_PLUGINS={value}: libomptarget 16 tries {}",
            plugin_names(16, "<kind>", Some(value)).join(" then ")
        ));
    }
    let choices: Vec<Choice> = KINDS
        .iter()
        .map(|kind| {
            let names = plugin_names(install.major, kind, nextgen.as_deref());
            let found = choose(&search, &names).map(|f| {
                let owner = owner(&f.path, install);
                (f, owner)
            });
            report_choice(report, install, kind, &names, found.as_ref());
            Choice { kind, found }
        })
        .collect();
    offload_policy(report);
    choices
}

/// `export LD_LIBRARY_PATH=<prefix>/lib` (keeping what is there).
pub fn ld_library_path_fix(install: &Install) -> String {
    let lib = install.lib();
    match std::env::var("LD_LIBRARY_PATH") {
        Ok(v) if !v.is_empty() => {
            format!("export LD_LIBRARY_PATH={}:$LD_LIBRARY_PATH", lib.display())
        }
        _ => format!("export LD_LIBRARY_PATH={}", lib.display()),
    }
}

const WHY_OURS: &str = "LLVM's plugin does not translate indirect calls: every indirect call on a GPU faults (on the host device it calls the host function)";

fn report_choice(
    report: &mut Report<impl Write>,
    install: &Install,
    kind: &str,
    names: &[String],
    found: Option<&(Found, Owner)>,
) {
    let fix = ld_library_path_fix(install);
    match found {
        Some((f, Owner::Ours)) => report.ok(format!(
            "{kind}: ours, {} (found through {})",
            f.path.display(),
            f.why
        )),
        Some((f, Owner::Llvm)) => report.fail(
            format!(
                "{kind}: LLVM's {} would load (found through {}); {WHY_OURS}",
                f.path.display(),
                f.why
            ),
            fix,
        ),
        Some((f, Owner::Other)) => report.fail(
            format!(
                "{kind}: {} would load (found through {}), not this install's {}",
                f.path.display(),
                f.why,
                install
                    .lib()
                    .join(f.path.file_name().unwrap_or_default())
                    .display()
            ),
            fix,
        ),
        None => report.fail(
            format!(
                "{kind}: no {} on the loader's path: libomptarget {} gets no {kind} devices",
                names.join(" or "),
                install.major
            ),
            fix,
        ),
    }
}

/// `OMP_TARGET_OFFLOAD`: without MANDATORY a missing device is no error.
fn offload_policy(report: &mut Report<impl Write>) {
    match std::env::var("OMP_TARGET_OFFLOAD") {
        Ok(v) if v.eq_ignore_ascii_case("mandatory") => report.ok(format!(
            "OMP_TARGET_OFFLOAD={v}: a missing device is an error"
        )),
        value => {
            let what = value.map_or("OMP_TARGET_OFFLOAD is unset".to_owned(), |v| {
                format!("OMP_TARGET_OFFLOAD={v}")
            });
            report.warn(
                format!("{what}: a program whose device is missing silently runs its target regions on the host"),
                Some("export OMP_TARGET_OFFLOAD=MANDATORY"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf_dynamic::Dynamic;
    use crate::ld_search::ld_library_path;
    use std::path::PathBuf;

    #[test]
    fn libomptarget_16_tries_nextgen_first_and_17_and_18_only_so() {
        assert_eq!(
            plugin_names(16, "cuda", None),
            [
                "libomptarget.rtl.cuda.nextgen.so",
                "libomptarget.rtl.cuda.so"
            ]
        );
        assert_eq!(
            plugin_names(16, "cuda", Some("0")),
            ["libomptarget.rtl.cuda.so"]
        );
        assert_eq!(
            plugin_names(16, "cuda", Some("OFF")),
            ["libomptarget.rtl.cuda.so"]
        );
        assert_eq!(plugin_names(16, "cuda", Some("1")).len(), 2);
        for major in [17, 18] {
            assert_eq!(
                plugin_names(major, "x86_64", None),
                ["libomptarget.rtl.x86_64.so"]
            );
        }
    }

    struct Layout {
        root: PathBuf,
        install: Install,
        caller: PathBuf,
    }

    /// A prefix with our x86_64 plugins, an LLVM root with LLVM's (and its libLLVM,
    /// RUNPATH `$ORIGIN/../lib`, whose search applies).
    fn layout(name: &str, ours_has_nextgen: bool) -> Layout {
        let root =
            std::env::temp_dir().join(format!("doctor-plugins-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (prefix_lib, llvm_lib) = (root.join("prefix/lib"), root.join("llvm-16/lib"));
        for dir in [&prefix_lib, &llvm_lib] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let mut ours = vec!["libomptarget.rtl.x86_64.so"];
        if ours_has_nextgen {
            ours.push("libomptarget.rtl.x86_64.nextgen.so");
        }
        for name in ours {
            std::fs::write(prefix_lib.join(name), b"ours").unwrap();
        }
        for name in [
            "libomptarget.rtl.x86_64.so",
            "libomptarget.rtl.x86_64.nextgen.so",
        ] {
            std::fs::write(llvm_lib.join(name), b"llvm").unwrap();
        }
        Layout {
            install: Install {
                prefix: root.join("prefix"),
                major: 16,
                llvm_root: root.join("llvm-16"),
            },
            caller: llvm_lib.join("libLLVM-16.so.1"),
            root,
        }
    }

    fn x86_64_choice(layout: &Layout, env: Option<&Path>) -> Option<(Found, Owner)> {
        let dynamic = Dynamic {
            runpath: Some("$ORIGIN/../lib".into()),
            ..Dynamic::default()
        };
        let env = env.map(|p| p.as_os_str().to_owned());
        let search = LoaderSearch::of_caller(
            &ld_library_path(env.as_deref(), &layout.root),
            Some((&layout.caller, &dynamic, "which dlopens the plugins")),
            None,
        );
        let found = choose(&search, &plugin_names(16, "x86_64", None))?;
        let owner = owner(&found.path, &layout.install);
        Some((found, owner))
    }

    #[test]
    fn with_the_prefix_on_ld_library_path_ours_loads() {
        let layout = layout("ours", true);
        let (found, owner) = x86_64_choice(&layout, Some(&layout.install.lib())).unwrap();
        assert_eq!(owner, Owner::Ours, "{found:?}");
        assert!(found.path.ends_with("libomptarget.rtl.x86_64.nextgen.so"));
        std::fs::remove_dir_all(&layout.root).unwrap();
    }

    #[test]
    fn without_it_llvms_loads_through_libllvms_runpath() {
        let layout = layout("llvm", true);
        let (found, owner) = x86_64_choice(&layout, None).unwrap();
        assert_eq!(owner, Owner::Llvm, "{found:?}");
        assert!(
            found.why.starts_with("RUNPATH entry $ORIGIN/../lib of"),
            "{found:?}"
        );
        std::fs::remove_dir_all(&layout.root).unwrap();
    }

    /// The trap README's "Running with our plugin" names: a folder with only the `.so`
    /// names first on LD_LIBRARY_PATH loses to LLVM's `.nextgen.so` through the
    /// RUNPATH, since each name goes through the whole search first.
    #[test]
    fn a_prefix_without_the_nextgen_names_loses_to_llvms_nextgen_plugin() {
        let layout = layout("no-nextgen", false);
        let (found, owner) = x86_64_choice(&layout, Some(&layout.install.lib())).unwrap();
        assert_eq!(owner, Owner::Llvm, "{found:?}");
        assert!(found.path.ends_with("libomptarget.rtl.x86_64.nextgen.so"));
        std::fs::remove_dir_all(&layout.root).unwrap();
    }

    #[test]
    fn a_copy_elsewhere_is_not_ours() {
        let layout = layout("other", true);
        let elsewhere = layout.root.join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        // Same bytes, another file: only the same file (device and inode) is ours.
        std::fs::copy(
            layout
                .install
                .lib()
                .join("libomptarget.rtl.x86_64.nextgen.so"),
            elsewhere.join("libomptarget.rtl.x86_64.nextgen.so"),
        )
        .unwrap();
        let (_, owner) = x86_64_choice(&layout, Some(&elsewhere)).unwrap();
        assert_eq!(owner, Owner::Other);
        // A link to our file is ours.
        let linked = layout.root.join("linked");
        std::fs::create_dir_all(&linked).unwrap();
        std::os::unix::fs::symlink(
            layout
                .install
                .lib()
                .join("libomptarget.rtl.x86_64.nextgen.so"),
            linked.join("libomptarget.rtl.x86_64.nextgen.so"),
        )
        .unwrap();
        let (_, owner) = x86_64_choice(&layout, Some(&linked)).unwrap();
        assert_eq!(owner, Owner::Ours);
        std::fs::remove_dir_all(&layout.root).unwrap();
    }
}
