//! The runtime closure of the kit: every shared library its programs, plugins, tests
//! and tools load beyond glibc, found through the ELF `DT_NEEDED` graph (read with
//! `object`, resolved the way the dynamic loader does: `DT_RUNPATH`/`DT_RPATH` with
//! `$ORIGIN`, then the loader cache, then the default folders), plus what libomptarget
//! 16 loads by name (LLVM 16's cuda plugin, both names) and the tools the lit check runs
//! (FileCheck, `not`).
//!
//! Each file is compressed on its own with `xz -9e` into `closure/<name>.xz` (the
//! runner unpacks them with python3's lzma module into a temporary folder), so the
//! summary can show what each one costs. Compressing libLLVM-16 takes over a minute:
//! the compressed files are kept under target/gpu-kit-build/xz/, keyed by the source's
//! path, size and modification time.
//!
//! glibc's own libraries (those of Debian's `libc6` package) stay out: every Linux
//! machine has its glibc, and a copy from here could not replace it there.

use super::{build_dir, relative, Kit};
use crate::util;
use anyhow::{bail, Context, Result};
use object::elf::{FileHeader64, DT_NEEDED, DT_NULL, DT_RPATH, DT_RUNPATH};
use object::read::elf::{Dyn, FileHeader};
use object::Endianness;
use serde_json::json;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use xshell::{cmd, Shell};

/// LLVM 16's own cuda plugin, which libomptarget 16 dlopens by these names (nextgen
/// first): the kit runs every program through it too, beside ours.
const LLVM_CUDA_PLUGINS: &[(&str, &str)] = &[
    (
        "libomptarget.rtl.cuda.nextgen.so",
        "/usr/lib/llvm-16/lib/libomptarget.rtl.cuda.nextgen.so.16",
    ),
    (
        "libomptarget.rtl.cuda.so",
        "/usr/lib/llvm-16/lib/libomptarget.rtl.cuda.so.16",
    ),
];
/// The tools the lit check runs.
const TOOLS: &[(&str, &str)] = &[
    ("FileCheck", "/usr/lib/llvm-16/bin/FileCheck"),
    ("not", "/usr/lib/llvm-16/bin/not"),
];
/// The kit's folders whose ELF files are roots of the closure.
const KIT_ROOTS: &[&str] = &["bin", "plugins", "programs"];
/// The default library folders of the x86-64 loader on Debian.
const DEFAULT_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// One file of the closure.
struct Member {
    /// The name it is loaded by (its DT_NEEDED name or the name dlopen asks for).
    name: String,
    /// The file on this machine.
    source: PathBuf,
    /// The first file found to need it, for the manifest.
    needed_by: String,
    is_tool: bool,
}

pub fn add(kit: &mut Kit) -> Result<()> {
    util::section("gpu-bundle: runtime closure beyond glibc");
    util::ensure_debian_packages(&["xz-utils", "clang-16", "libomp-16-dev", "llvm-16-tools"])?;
    let glibc = glibc_sonames()?;
    let mut roots = Vec::new();
    for dir in KIT_ROOTS {
        roots.extend(files_below(&kit.dir.join(dir))?);
    }
    // The lit tests' programs, as the kit stores them.
    roots.extend(files_below(&build_dir().join("lit/store"))?);
    let mut extra: Vec<(&str, &str, bool)> = LLVM_CUDA_PLUGINS
        .iter()
        .map(|(n, p)| (*n, *p, false))
        .collect();
    extra.extend(TOOLS.iter().map(|(n, p)| (*n, *p, true)));
    let members = Resolver::new(&glibc)?.closure(&roots, &extra)?;

    let out = kit.dir.join("closure");
    fs::create_dir_all(&out)?;
    let compressed = compress_all(&members, &out)?;
    let mut libraries = Vec::new();
    let mut tools = Vec::new();
    for (m, archive) in members.iter().zip(&compressed) {
        let entry = json!({
            "name": m.name,
            "archive": relative(kit, archive)?,
            "size": fs::metadata(&m.source)?.len(),
            "xz_size": fs::metadata(archive)?.len(),
            "source": m.source,
            "needed_by": m.needed_by,
        });
        if m.is_tool {
            tools.push(entry);
        } else {
            libraries.push(entry);
        }
    }
    report(&members, &compressed)?;
    kit.set(
        "closure",
        json!({"libraries": libraries, "tools": tools, "glibc": glibc}),
    );
    Ok(())
}

fn report(members: &[Member], compressed: &[PathBuf]) -> Result<()> {
    let mut total = (0, 0);
    for (m, archive) in members.iter().zip(compressed) {
        let (size, xz) = (fs::metadata(&m.source)?.len(), fs::metadata(archive)?.len());
        total = (total.0 + size, total.1 + xz);
        eprintln!(
            "  {:<36} {:>11} -> {:>10} bytes  (needed by {})",
            m.name, size, xz, m.needed_by
        );
    }
    eprintln!(
        "  {} files: {} -> {} bytes with xz -9e",
        members.len(),
        total.0,
        total.1
    );
    Ok(())
}

/// Every regular file below `dir` (none when it does not exist).
fn files_below(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if !dir.is_dir() {
        return Ok(out);
    }
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            out.extend(files_below(&path)?);
        } else if path.is_file() {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// The sonames of glibc's libraries (Debian's `libc6`): `libc.so.6`, `libm.so.6`,
/// `ld-linux-x86-64.so.2`, ...
fn glibc_sonames() -> Result<Vec<String>> {
    let sh = Shell::new()?;
    let files = util::read(cmd!(sh, "dpkg -L libc6"))?;
    let mut names: Vec<String> = files
        .lines()
        .filter_map(|l| Path::new(l).file_name()?.to_str())
        .filter(|n| (n.starts_with("lib") || n.starts_with("ld-")) && n.contains(".so."))
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    if !names.iter().any(|n| n == "libc.so.6") {
        bail!("dpkg -L libc6 lists no libc.so.6");
    }
    Ok(names)
}

/// What the dynamic section of an ELF file asks the loader for.
struct Dynamic {
    needed: Vec<String>,
    search: Vec<String>,
}

/// None for files that are not dynamically linked ELF files (objects, archives, data).
fn dynamic_of(path: &Path) -> Result<Option<Dynamic>> {
    let data = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if !data.starts_with(b"\x7fELF") {
        return Ok(None);
    }
    let what = || format!("{}: malformed ELF", path.display());
    let header = FileHeader64::<Endianness>::parse(&*data).with_context(what)?;
    let endian = header.endian().with_context(what)?;
    let sections = header.sections(endian, &*data).with_context(what)?;
    let Some((entries, link)) = sections.dynamic(endian, &*data).with_context(what)? else {
        return Ok(None);
    };
    let strings = sections.strings(endian, &*data, link).with_context(what)?;
    let mut dynamic = Dynamic {
        needed: Vec::new(),
        search: Vec::new(),
    };
    for entry in entries {
        let tag = entry.d_tag(endian) as u32;
        if tag == DT_NULL {
            break;
        }
        if tag != DT_NEEDED && tag != DT_RUNPATH && tag != DT_RPATH {
            continue;
        }
        let value = entry.string(endian, strings).with_context(what)?;
        let value = String::from_utf8_lossy(value).into_owned();
        if tag == DT_NEEDED {
            dynamic.needed.push(value);
        } else {
            let origin = path
                .parent()
                .unwrap_or(Path::new("/"))
                .display()
                .to_string();
            dynamic.search.extend(
                value
                    .split(':')
                    .map(|d| d.replace("$ORIGIN", &origin).replace("${ORIGIN}", &origin)),
            );
        }
    }
    Ok(Some(dynamic))
}

struct Resolver<'a> {
    glibc: &'a [String],
    /// The loader cache (`ldconfig -p`): soname -> file, x86-64 entries only.
    cache: HashMap<String, PathBuf>,
}

impl<'a> Resolver<'a> {
    fn new(glibc: &'a [String]) -> Result<Self> {
        let sh = Shell::new()?;
        let listing = util::read(cmd!(sh, "ldconfig -p"))?;
        let cache = listing
            .lines()
            .filter(|l| l.contains("x86-64"))
            .filter_map(|l| {
                let (left, path) = l.split_once(" => ")?;
                let name = left.split_whitespace().next()?;
                Some((name.to_owned(), PathBuf::from(path.trim())))
            })
            .collect();
        Ok(Resolver { glibc, cache })
    }

    fn find(&self, name: &str, search: &[String]) -> Option<PathBuf> {
        if name.contains('/') {
            return Some(PathBuf::from(name)).filter(|p| p.is_file());
        }
        search
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
            .or_else(|| self.cache.get(name).cloned())
            .or_else(|| {
                DEFAULT_DIRS
                    .iter()
                    .map(|d| Path::new(d).join(name))
                    .find(|p| p.is_file())
            })
    }

    /// The closure of `roots` (not members themselves) and of `extra` (name, file,
    /// is a tool), which are members.
    fn closure(&self, roots: &[PathBuf], extra: &[(&str, &str, bool)]) -> Result<Vec<Member>> {
        let mut members: BTreeMap<String, Member> = BTreeMap::new();
        let mut queue: VecDeque<(PathBuf, String)> = VecDeque::new();
        for root in roots {
            queue.push_back((root.clone(), display_name(root)));
        }
        for (name, file, is_tool) in extra {
            let source = fs::canonicalize(file).with_context(|| format!("{file} is missing"))?;
            members.insert(
                (*name).to_owned(),
                Member {
                    name: (*name).to_owned(),
                    source: source.clone(),
                    needed_by: "run.sh".to_owned(),
                    is_tool: *is_tool,
                },
            );
            queue.push_back((source, (*name).to_owned()));
        }
        let mut seen: HashSet<PathBuf> = HashSet::new();
        while let Some((file, label)) = queue.pop_front() {
            if !seen.insert(file.clone()) {
                continue;
            }
            let Some(dynamic) = dynamic_of(&file)? else {
                continue;
            };
            for name in &dynamic.needed {
                if self.glibc.contains(name) || members.contains_key(name) {
                    continue;
                }
                // A lit test's own library, named by its path (replayed with the test).
                if name.starts_with(super::lit::EXEC_ROOT) {
                    continue;
                }
                let found = self.find(name, &dynamic.search).with_context(|| {
                    format!("{label} needs {name}, which the loader would not find here")
                })?;
                let source = fs::canonicalize(&found)?;
                members.insert(
                    name.clone(),
                    Member {
                        name: name.clone(),
                        source: source.clone(),
                        needed_by: label.clone(),
                        is_tool: false,
                    },
                );
                queue.push_back((source, name.clone()));
            }
        }
        Ok(members.into_values().collect())
    }
}

/// A root's name in messages: the kit-relative path where it has one.
fn display_name(path: &Path) -> String {
    let kit = super::kit_dir();
    let store = build_dir().join("lit/store");
    path.strip_prefix(&kit)
        .or_else(|_| path.strip_prefix(&store).map(|_| Path::new("a lit test")))
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Compresses every member into `out/<name>.xz`, several at a time.
fn compress_all(members: &[Member], out: &Path) -> Result<Vec<PathBuf>> {
    let targets: Vec<PathBuf> = members
        .iter()
        .map(|m| out.join(format!("{}.xz", m.name)))
        .collect();
    let work: Mutex<Vec<usize>> = Mutex::new((0..members.len()).rev().collect());
    let errors: Mutex<Vec<anyhow::Error>> = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let Some(i) = work.lock().unwrap().pop() else {
                    break;
                };
                if let Err(e) = cached_xz(&members[i].source, &targets[i]) {
                    errors.lock().unwrap().push(e);
                }
            });
        }
    });
    if let Some(e) = errors.into_inner().unwrap().into_iter().next() {
        return Err(e);
    }
    Ok(targets)
}

/// `xz -9e` of `source` into `target`, from the cache when this file was compressed
/// before.
fn cached_xz(source: &Path, target: &Path) -> Result<()> {
    let meta = fs::metadata(source)?;
    let mut h = DefaultHasher::new();
    (source, meta.len(), meta.modified()?).hash(&mut h);
    let name = source.file_name().unwrap_or_default().to_string_lossy();
    let cache = build_dir()
        .join("xz")
        .join(format!("{name}.{:016x}.xz", h.finish()));
    if !cache.is_file() {
        xz(source, &cache)?;
    }
    fs::copy(&cache, target)?;
    Ok(())
}

/// `xz -9e` of `source` into `target` (written under a temporary name, then renamed).
pub fn xz(source: &Path, target: &Path) -> Result<()> {
    if let Some(dir) = target.parent() {
        fs::create_dir_all(dir)?;
    }
    let sh = Shell::new()?;
    let compress = cmd!(sh, "xz -9e -T1 --stdout {source}");
    eprintln!("$ {compress} > {}", target.display());
    let out = compress
        .quiet()
        .output()
        .with_context(|| format!("compressing {}", source.display()))?;
    let tmp = target.with_extension("xz.tmp");
    fs::write(&tmp, &out.stdout)?;
    fs::rename(&tmp, target)?;
    Ok(())
}
