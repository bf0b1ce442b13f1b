//! The dynamic loader's search for a bare file name (`dlopen("libx.so")`, a NEEDED
//! entry), as glibc does it for one calling object:
//! 1. the caller's DT_RPATH, when it has no DT_RUNPATH;
//! 2. `LD_LIBRARY_PATH` (an empty entry is the current folder);
//! 3. the caller's DT_RUNPATH (`$ORIGIN`: the folder the caller was found in, as found);
//! 4. `/etc/ld.so.cache`;
//! 5. the system folders.
//!
//! Not emulated: the executable's own DT_RPATH (used only when the caller has no
//! RUNPATH), `glibc-hwcaps/` subfolders, `$LIB`/`$PLATFORM`, and a file being skipped
//! for the wrong ELF class. A run with `LD_DEBUG=files` (the self-test) is the ground
//! truth.

use crate::elf_dynamic::Dynamic;
use crate::ld_cache::LdCache;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// glibc's default folders on Debian (`ld.so --list-diagnostics`: `path.system_dirs`).
#[cfg(target_arch = "x86_64")]
pub const SYSTEM_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib",
    "/usr/lib",
];
#[cfg(not(target_arch = "x86_64"))]
pub const SYSTEM_DIRS: &[&str] = &["/lib", "/usr/lib"];

/// One folder of the search, and why it is searched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchDir {
    pub dir: PathBuf,
    pub why: String,
}

/// A file the search found, and what found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    pub why: String,
}

/// The whole search of one caller.
#[derive(Debug, Default)]
pub struct LoaderSearch {
    /// Steps 1-3, in order.
    pub dirs: Vec<SearchDir>,
    pub cache: Option<LdCache>,
    pub system_dirs: Vec<PathBuf>,
}

impl LoaderSearch {
    /// The search of `caller` (its path as the loader found it, its dynamic section,
    /// and the words that name it in the reasons), with `ld_library_path`.
    pub fn of_caller(
        ld_library_path: &[SearchDir],
        caller: Option<(&Path, &Dynamic, &str)>,
        cache: Option<LdCache>,
    ) -> LoaderSearch {
        let mut dirs = Vec::new();
        let own = |list: &str, tag: &str, (path, who): (&Path, &str)| {
            let origin = path.parent().unwrap_or(Path::new("/"));
            search_list(list, origin, tag, who)
        };
        if let Some((path, dynamic, who)) = caller {
            if let (None, Some(rpath)) = (&dynamic.runpath, &dynamic.rpath) {
                dirs.extend(own(rpath, "RPATH", (path, who)));
            }
        }
        dirs.extend(ld_library_path.iter().cloned());
        if let Some((path, dynamic, who)) = caller {
            if let Some(runpath) = &dynamic.runpath {
                dirs.extend(own(runpath, "RUNPATH", (path, who)));
            }
        }
        LoaderSearch {
            dirs,
            cache,
            system_dirs: SYSTEM_DIRS.iter().map(PathBuf::from).collect(),
        }
    }

    /// The file the loader would open for `name` (its folder shown resolved), and
    /// why.
    pub fn find(&self, name: &str) -> Option<Found> {
        let in_dir = |dir: &Path, why: &str| {
            dir.join(name).is_file().then(|| Found {
                path: resolved(dir).join(name),
                why: why.to_owned(),
            })
        };
        self.dirs
            .iter()
            .find_map(|d| in_dir(&d.dir, &d.why))
            .or_else(|| {
                let path = self.cache.as_ref()?.lookup(name)?;
                path.is_file().then(|| Found {
                    path: path.to_path_buf(),
                    why: "/etc/ld.so.cache".into(),
                })
            })
            .or_else(|| {
                self.system_dirs
                    .iter()
                    .find_map(|dir| in_dir(dir, &format!("the system folder {}", dir.display())))
            })
    }
}

/// `dir` with its links and `..` resolved as the kernel does (itself when it does not
/// resolve): `/usr/lib/llvm-16/lib/../lib` is shown as `/usr/lib/llvm-16/lib`.
fn resolved(dir: &Path) -> PathBuf {
    dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf())
}

/// `LD_LIBRARY_PATH`'s folders (`:` or `;` between them; an empty entry is `cwd`).
pub fn ld_library_path(value: Option<&OsStr>, cwd: &Path) -> Vec<SearchDir> {
    let Some(value) = value.and_then(OsStr::to_str) else {
        return Vec::new();
    };
    if value.is_empty() {
        return Vec::new();
    }
    value
        .split([':', ';'])
        .map(|entry| {
            let dir = if entry.is_empty() {
                cwd.to_path_buf()
            } else {
                PathBuf::from(entry)
            };
            SearchDir {
                why: format!("LD_LIBRARY_PATH entry {}", dir.display()),
                dir,
            }
        })
        .collect()
}

/// A RUNPATH/RPATH (`tag`) list's folders, `$ORIGIN` expanded to `origin`; `who`
/// names the object it is of.
pub fn search_list(list: &str, origin: &Path, tag: &str, who: &str) -> Vec<SearchDir> {
    list.split(':')
        .filter(|e| !e.is_empty())
        .map(|entry| SearchDir {
            dir: expand_origin(entry, origin),
            why: format!("{tag} entry {entry} of {who}"),
        })
        .collect()
}

/// `$ORIGIN` and `${ORIGIN}` in `entry` replaced by `origin`.
pub fn expand_origin(entry: &str, origin: &Path) -> PathBuf {
    let origin = origin.to_string_lossy();
    PathBuf::from(
        entry
            .replace("${ORIGIN}", &origin)
            .replace("$ORIGIN", &origin),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ld_cache;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("doctor-ld-search-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn touch(dir: &Path, name: &str) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, b"").unwrap();
        path
    }

    #[test]
    fn ld_library_path_comes_before_the_callers_runpath() {
        let root = scratch("order");
        let ours = touch(
            &root.join("prefix/lib"),
            "libomptarget.rtl.x86_64.nextgen.so",
        );
        let llvm = touch(&root.join("llvm/lib"), "libomptarget.rtl.x86_64.nextgen.so");
        let caller = root.join("llvm/lib/libLLVM-16.so.1");
        let dynamic = Dynamic {
            runpath: Some("$ORIGIN/../lib".into()),
            ..Dynamic::default()
        };
        let env = root.join("prefix/lib").into_os_string();
        let search = LoaderSearch::of_caller(
            &ld_library_path(Some(&env), &root),
            Some((&caller, &dynamic, "which dlopens the plugins")),
            None,
        );
        let found = search.find("libomptarget.rtl.x86_64.nextgen.so").unwrap();
        assert_eq!(found.path, ours.canonicalize().unwrap());
        assert!(found.why.starts_with("LD_LIBRARY_PATH entry"), "{found:?}");

        let search = LoaderSearch::of_caller(&[], Some((&caller, &dynamic, "libLLVM")), None);
        let found = search.find("libomptarget.rtl.x86_64.nextgen.so").unwrap();
        // $ORIGIN is the folder the caller was found in; the folder is shown resolved.
        assert_eq!(found.path, llvm.canonicalize().unwrap());
        assert_eq!(found.why, "RUNPATH entry $ORIGIN/../lib of libLLVM");
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn an_rpath_caller_searches_its_rpath_before_ld_library_path() {
        let root = scratch("rpath");
        let in_rpath = touch(&root.join("rpath"), "libx.so");
        touch(&root.join("env"), "libx.so");
        let dynamic = Dynamic {
            rpath: Some(root.join("rpath").display().to_string()),
            ..Dynamic::default()
        };
        let env = root.join("env").into_os_string();
        let caller = root.join("caller.so");
        let search = LoaderSearch::of_caller(
            &ld_library_path(Some(&env), &root),
            Some((&caller, &dynamic, "the caller")),
            None,
        );
        assert_eq!(
            search.find("libx.so").unwrap().path,
            in_rpath.canonicalize().unwrap()
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn the_cache_then_the_system_folders_come_last() {
        let root = scratch("cache");
        let cached = touch(&root.join("cached"), "liby.so.1");
        let bytes =
            ld_cache::tests::cache_bytes(&[(0x0303, "liby.so.1", cached.to_str().unwrap())]);
        let mut search = LoaderSearch::of_caller(&[], None, ld_cache::parse(&bytes));
        let found = search.find("liby.so.1").unwrap();
        assert_eq!(
            (found.path, found.why.as_str()),
            (cached, "/etc/ld.so.cache")
        );
        let system = touch(&root.join("system"), "libz.so");
        search.system_dirs = vec![root.join("system")];
        let found = search.find("libz.so").unwrap();
        assert_eq!(found.path, system.canonicalize().unwrap());
        assert!(found.why.starts_with("the system folder"));
        assert_eq!(search.find("libnothing.so"), None);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn ld_library_path_entries() {
        let cwd = Path::new("/here");
        let dirs: Vec<PathBuf> = ld_library_path(Some(OsStr::new("/a::/b;/c")), cwd)
            .into_iter()
            .map(|d| d.dir)
            .collect();
        assert_eq!(dirs, ["/a", "/here", "/b", "/c"].map(PathBuf::from));
        assert!(ld_library_path(Some(OsStr::new("")), cwd).is_empty());
        assert!(ld_library_path(None, cwd).is_empty());
    }

    #[test]
    fn origin_expands_in_both_spellings() {
        let origin = Path::new("/usr/lib/llvm-16/lib");
        assert_eq!(
            expand_origin("$ORIGIN/../lib", origin),
            Path::new("/usr/lib/llvm-16/lib/../lib")
        );
        assert_eq!(expand_origin("${ORIGIN}", origin), origin);
    }
}
