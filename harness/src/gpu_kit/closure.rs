//! The runtime closure of the kit: every shared library its ELF files load beyond glibc
//! (programs, benchmarks, plugins, tests: every ELF file the kit carries, in whatever
//! folder, but the closure's own; [`kit_roots`]; and those it carries packed, the
//! doctor's prefix: [`Kit::packed_roots`]) and its tools, found through the ELF
//! `DT_NEEDED` graph (read with `object`, resolved the way the dynamic loader does:
//! `DT_RUNPATH`/`DT_RPATH` with `$ORIGIN`, then the loader cache, then the default
//! folders), plus what libomptarget 16 loads by name (LLVM 16's cuda plugin, both names)
//! and the tools the lit check runs (FileCheck, `not`).
//!
//! Each file is compressed on its own with `xz -9` ([`XZ_PRESET`]) into
//! `closure/<name>.xz` (the runner unpacks them with python3's lzma module into a
//! temporary folder), so the summary can show what each one costs. Compressing
//! libLLVM-16 takes over a minute:
//! the compressed files are kept under target/gpu-kit-build/xz/, keyed by the source's
//! path, size and modification time and the preset.
//!
//! glibc's own libraries (those of Debian's `libc6` package) stay out: every Linux
//! machine has its glibc, and a copy from here could not replace it there. So no file
//! of the kit may need a glibc symbol version newer than the GPU machine's glibc
//! ([`GPU_MACHINE_GLIBC`], Ubuntu 24.04's): [`check_glibc_versions`] reads the version
//! needs of every ELF file of the kit, of the lit store and of the closure, and stops the
//! build naming the file and version that would not load there.
//!
//! The LLVM 16 kit's closure comes from this machine; the LLVM 18 kit's from its Debian
//! 13 root ([`Sources::sysroot`]), resolved as that root's loader would.

use super::{build_dir, relative, Kit};
use crate::debian_root::cmd_in;
use crate::util;
use anyhow::{bail, ensure, Context, Result};
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
/// The closure's own folder in the kit: the compressed members this step writes
/// (`<name>.xz`), which is all it ever holds. It is the one part of the kit that is not
/// a root: its files are xz archives, not ELF files, and the members they hold are
/// resolved from their sources (and checked) as members.
const CLOSURE_DIR: &str = "closure";
/// The default library folders of the x86-64 loader on Debian.
const DEFAULT_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// The newest glibc the GPU machines have (Ubuntu 24.04): no file of a kit may need a
/// newer symbol version.
pub const GPU_MACHINE_GLIBC: (u32, u32) = (2, 39);

/// Where a kit's closure comes from.
pub struct Sources<'a> {
    /// The root the libraries live in (`None`: this machine).
    pub sysroot: Option<&'a Path>,
    /// Loaded by name, with dlopen (name, file in the sysroot): LLVM's plugins.
    pub dlopened: &'a [(&'a str, &'a str)],
    /// The tools the kit runs (name, file in the sysroot).
    pub tools: &'a [(&'a str, &'a str)],
    /// Folders outside the kit whose ELF files are roots too (the lit store, whose
    /// programs messages call "a lit test").
    pub more_roots: Vec<PathBuf>,
}

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

/// The LLVM 16 kit's closure, from this machine.
pub fn add(kit: &mut Kit) -> Result<()> {
    util::ensure_debian_packages(&["xz-utils", "clang-16", "libomp-16-dev", "llvm-16-tools"])?;
    add_from(
        kit,
        &Sources {
            sysroot: None,
            dlopened: LLVM_CUDA_PLUGINS,
            tools: TOOLS,
            // The lit tests' programs, as the kit stores them.
            more_roots: vec![build_dir().join("lit/store")],
        },
    )
}

/// The closure of the kit's ELF files and of `sources`, compressed into the kit, with
/// the glibc check.
///
/// The kit's roots are every ELF file already in it ([`kit_roots`]) or packed in it
/// ([`Kit::packed_roots`]), so this must run
/// after every step that puts one there: in both kits only [`super::script::add`]
/// follows, and it writes text files alone (run.sh, the Python runner).
pub fn add_from(kit: &mut Kit, sources: &Sources) -> Result<()> {
    util::section("gpu-bundle: runtime closure beyond glibc");
    let Resolved {
        glibc,
        members,
        newest,
    } = resolve(&kit.dir, &kit.packed_roots, sources, GPU_MACHINE_GLIBC)?;

    let out = kit.dir.join(CLOSURE_DIR);
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
        json!({
            "libraries": libraries,
            "tools": tools,
            "glibc": glibc,
            "glibc_newest_needed": format!("{}.{}", newest.0, newest.1),
        }),
    );
    Ok(())
}

/// What [`resolve`] found.
struct Resolved {
    /// glibc's sonames, which stay out of the closure.
    glibc: Vec<String>,
    members: Vec<Member>,
    /// The newest `GLIBC_x.y` any file needs.
    newest: (u32, u32),
}

/// The closure of the kit in `kit` (its roots: [`kit_roots`], and `packed`, the ELF
/// files it carries inside an archive) and of `sources`, and the check that no file
/// among them needs a glibc symbol version newer than `max`.
fn resolve(kit: &Path, packed: &[PathBuf], sources: &Sources, max: (u32, u32)) -> Result<Resolved> {
    let glibc = glibc_sonames(sources.sysroot)?;
    let mut roots = kit_roots(kit)?;
    roots.extend(packed.iter().cloned());
    for dir in &sources.more_roots {
        roots.extend(files_below(dir)?);
    }
    let mut extra: Vec<(&str, &str, bool)> = sources
        .dlopened
        .iter()
        .map(|(n, p)| (*n, *p, false))
        .collect();
    extra.extend(sources.tools.iter().map(|(n, p)| (*n, *p, true)));
    let resolver = Resolver::new(&glibc, sources.sysroot, kit, &sources.more_roots)?;
    let (members, needs) = resolver.closure(&roots, &extra)?;
    let newest = check_glibc_versions(&needs, max)?;
    eprintln!(
        "  glibc: {} files need glibc symbol versions, at most GLIBC_{}.{} (allowed: up to {}.{})",
        needs.len(),
        newest.0,
        newest.1,
        max.0,
        max.1
    );
    Ok(Resolved {
        glibc,
        members,
        newest,
    })
}

/// The roots of the closure among the kit's own files: every ELF file below `kit`, at
/// any depth and in any folder (whatever step put it there: `bin/`, `plugins/`,
/// `programs/`, `benchmarks/`, ...), but those in the closure's own folder
/// ([`CLOSURE_DIR`]). Files that are not ELF files (scripts, JSON, `lit.tar.xz`) are no
/// roots: the loader loads none, and they need no glibc version. The kit's cubins are
/// ELF files and roots too; they have no dynamic section and no version needs, so they
/// add nothing.
fn kit_roots(kit: &Path) -> Result<Vec<PathBuf>> {
    let own = kit.join(CLOSURE_DIR);
    let mut roots = Vec::new();
    for file in files_below(kit)? {
        if !file.starts_with(&own) && is_elf(&file)? {
            roots.push(file);
        }
    }
    Ok(roots)
}

/// Whether `path` starts with the ELF magic.
fn is_elf(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut magic = Vec::with_capacity(4);
    fs::File::open(path)
        .and_then(|f| f.take(4).read_to_end(&mut magic))
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(magic == b"\x7fELF")
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
        "  {} files: {} -> {} bytes with xz {XZ_PRESET}",
        members.len(),
        total.0,
        total.1
    );
    Ok(())
}

/// Every regular file below `dir`, at any depth, ELF or not, sorted (none when `dir`
/// does not exist).
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

/// The sonames of glibc's libraries (Debian's `libc6`, of the sysroot): `libc.so.6`,
/// `libm.so.6`, `ld-linux-x86-64.so.2`, ...
fn glibc_sonames(sysroot: Option<&Path>) -> Result<Vec<String>> {
    let sh = Shell::new()?;
    let files = util::read(cmd_in(&sh, sysroot, &["dpkg", "-L", "libc6"]))?;
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

/// `path` (absolute, as the sysroot's loader sees it) on this machine.
fn host_path(sysroot: Option<&Path>, path: &str) -> PathBuf {
    crate::debian_root::host_path(sysroot, Path::new(path))
}

/// The dynamic section of `data` (the file `path`); None for files that are not
/// dynamically linked ELF files (objects, archives, data). Search folders come back as
/// this machine's paths (`$ORIGIN` is the file's own folder; other folders are the
/// sysroot's).
fn dynamic_of(path: &Path, data: &[u8], sysroot: Option<&Path>) -> Result<Option<Dynamic>> {
    if !data.starts_with(b"\x7fELF") {
        return Ok(None);
    }
    let what = || format!("{}: malformed ELF", path.display());
    let header = FileHeader64::<Endianness>::parse(data).with_context(what)?;
    let endian = header.endian().with_context(what)?;
    let sections = header.sections(endian, data).with_context(what)?;
    let Some((entries, link)) = sections.dynamic(endian, data).with_context(what)? else {
        return Ok(None);
    };
    let strings = sections.strings(endian, data, link).with_context(what)?;
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
            dynamic.search.extend(value.split(':').map(|d| {
                if d.contains("$ORIGIN") || d.contains("${ORIGIN}") {
                    d.replace("$ORIGIN", &origin).replace("${ORIGIN}", &origin)
                } else {
                    host_path(sysroot, d).display().to_string()
                }
            }));
        }
    }
    Ok(Some(dynamic))
}

struct Resolver<'a> {
    glibc: &'a [String],
    /// The loader cache (`ldconfig -p`): soname -> file, x86-64 entries only.
    cache: HashMap<String, PathBuf>,
    sysroot: Option<&'a Path>,
    /// The kit's folder and the lit stores (for the names of roots in messages).
    kit: &'a Path,
    stores: &'a [PathBuf],
}

impl<'a> Resolver<'a> {
    fn new(
        glibc: &'a [String],
        sysroot: Option<&'a Path>,
        kit: &'a Path,
        stores: &'a [PathBuf],
    ) -> Result<Self> {
        let sh = Shell::new()?;
        let listing = util::read(cmd_in(&sh, sysroot, &["ldconfig", "-p"]))?;
        let cache = listing
            .lines()
            .filter(|l| l.contains("x86-64"))
            .filter_map(|l| {
                let (left, path) = l.split_once(" => ")?;
                let name = left.split_whitespace().next()?;
                Some((name.to_owned(), host_path(sysroot, path.trim())))
            })
            .collect();
        Ok(Resolver {
            glibc,
            cache,
            sysroot,
            kit,
            stores,
        })
    }

    /// A root's name in messages: the kit-relative path where it has one, "a lit test"
    /// for a stored lit program.
    fn display_name(&self, path: &Path) -> String {
        if self.stores.iter().any(|store| path.starts_with(store)) {
            return "a lit test".to_owned();
        }
        path.strip_prefix(self.kit)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// `path` with its links followed, which must stay inside the sysroot.
    fn canonical(&self, path: &Path) -> Result<PathBuf> {
        let canonical =
            fs::canonicalize(path).with_context(|| format!("{} is missing", path.display()))?;
        if let Some(root) = self.sysroot {
            ensure!(
                canonical.starts_with(fs::canonicalize(root)?),
                "{} leads out of {} (to {})",
                path.display(),
                root.display(),
                canonical.display()
            );
        }
        Ok(canonical)
    }

    fn find(&self, name: &str, search: &[String]) -> Option<PathBuf> {
        if name.contains('/') {
            return Some(host_path(self.sysroot, name)).filter(|p| p.is_file());
        }
        search
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
            .or_else(|| self.cache.get(name).cloned())
            .or_else(|| {
                DEFAULT_DIRS
                    .iter()
                    .map(|d| host_path(self.sysroot, d).join(name))
                    .find(|p| p.is_file())
            })
    }

    /// The closure of `roots` (not members themselves) and of `extra` (name, file,
    /// is a tool), which are members; and the glibc versions each ELF file among them
    /// needs, read as it is (each file is read once).
    fn closure(
        &self,
        roots: &[PathBuf],
        extra: &[(&str, &str, bool)],
    ) -> Result<(Vec<Member>, Vec<GlibcNeeds>)> {
        let mut needs = Vec::new();
        let mut members: BTreeMap<String, Member> = BTreeMap::new();
        let mut queue: VecDeque<(PathBuf, String)> = VecDeque::new();
        for root in roots {
            queue.push_back((root.clone(), self.display_name(root)));
        }
        for (name, file, is_tool) in extra {
            let source = self.canonical(&host_path(self.sysroot, file))?;
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
            let data = fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let versions = glibc_versions_needed(&file, &data)?;
            if !versions.is_empty() {
                needs.push((file.clone(), versions));
            }
            let Some(dynamic) = dynamic_of(&file, &data, self.sysroot)? else {
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
                let source = self.canonical(&found)?;
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
        Ok((members.into_values().collect(), needs))
    }
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

/// `xz` of `source` into `target`, from the cache when this file was compressed before.
fn cached_xz(source: &Path, target: &Path) -> Result<()> {
    let meta = fs::metadata(source)?;
    let mut h = DefaultHasher::new();
    (source, meta.len(), meta.modified()?, XZ_PRESET).hash(&mut h);
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

/// `archive` (tar, [`util::REPRODUCIBLE_TAR`], then [`xz`]) of the `members` of the
/// folder `dir`, with tar's `options` besides; `tar` is the uncompressed archive's
/// temporary path.
pub fn tar_xz(
    tar: &Path,
    dir: &Path,
    options: &[&str],
    members: &[&str],
    archive: &Path,
) -> Result<()> {
    let sh = Shell::new()?;
    let reproducible = util::REPRODUCIBLE_TAR;
    cmd!(
        sh,
        "tar --create {reproducible...} {options...} -f {tar} -C {dir} {members...}"
    )
    .run()?;
    xz(tar, archive)?;
    fs::remove_file(tar)?;
    Ok(())
}

/// The kit's xz preset. `-9e` made libLLVM-16 0.2% smaller for 27% more time (103 s
/// against 81 s on one core), in every CI run's two kits.
pub const XZ_PRESET: &str = "-9";

/// `xz` ([`XZ_PRESET`]) of `source` into `target` (written under a temporary name,
/// then renamed).
pub fn xz(source: &Path, target: &Path) -> Result<()> {
    if let Some(dir) = target.parent() {
        fs::create_dir_all(dir)?;
    }
    let sh = Shell::new()?;
    let compress = cmd!(sh, "xz {XZ_PRESET} -T1 --stdout {source}");
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

/// A file and the `GLIBC_x.y` versions it needs.
type GlibcNeeds = (PathBuf, Vec<(u32, u32)>);

/// Every `GLIBC_x.y` symbol version in `needs` must be at most `max`; returns the newest
/// one needed. Fails naming each file and version that a machine with glibc `max` could
/// not load.
pub fn check_glibc_versions(needs: &[GlibcNeeds], max: (u32, u32)) -> Result<(u32, u32)> {
    let mut newest = (0, 0);
    let mut too_new = Vec::new();
    for (file, versions) in needs {
        for &version in versions {
            newest = newest.max(version);
            if version > max {
                too_new.push(format!(
                    "{} needs GLIBC_{}.{}",
                    file.display(),
                    version.0,
                    version.1
                ));
            }
        }
    }
    too_new.sort();
    too_new.dedup();
    ensure!(
        too_new.is_empty(),
        "the GPU machines have glibc {}.{}, and {} file(s) need newer symbols: {}",
        max.0,
        max.1,
        too_new.len(),
        too_new.join("; ")
    );
    Ok(newest)
}

/// The `GLIBC_x.y[.z]` versions `data` (the file `path`) needs (none when it is not a
/// 64-bit ELF file).
fn glibc_versions_needed(path: &Path, data: &[u8]) -> Result<Vec<(u32, u32)>> {
    if !data.starts_with(b"\x7fELF") {
        return Ok(Vec::new());
    }
    let what = || format!("{}: malformed ELF", path.display());
    let header = FileHeader64::<Endianness>::parse(data).with_context(what)?;
    let endian = header.endian().with_context(what)?;
    let sections = header.sections(endian, data).with_context(what)?;
    let Some((mut needs, link)) = sections.gnu_verneed(endian, data).with_context(what)? else {
        return Ok(Vec::new());
    };
    let strings = sections.strings(endian, data, link).with_context(what)?;
    let mut versions = Vec::new();
    while let Some((_, mut auxes)) = needs.next().with_context(what)? {
        while let Some(aux) = auxes.next().with_context(what)? {
            let name = aux.name(endian, strings).with_context(what)?;
            if let Some(version) = parse_glibc_version(name) {
                versions.push(version);
            }
        }
    }
    Ok(versions)
}

/// `GLIBC_2.38` -> (2, 38); `GLIBC_2.2.5` -> (2, 2); None for other names.
fn parse_glibc_version(name: &[u8]) -> Option<(u32, u32)> {
    let rest = std::str::from_utf8(name).ok()?.strip_prefix("GLIBC_")?;
    let mut parts = rest.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_version_names_parse_and_others_do_not() {
        assert_eq!(parse_glibc_version(b"GLIBC_2.38"), Some((2, 38)));
        assert_eq!(parse_glibc_version(b"GLIBC_2.2.5"), Some((2, 2)));
        assert_eq!(parse_glibc_version(b"GLIBC_PRIVATE"), None);
        assert_eq!(parse_glibc_version(b"GLIBCXX_3.4.32"), None);
    }

    /// A small kit: real ELF executables in folders no list names (`benchmarks/`, as
    /// the LLVM 16 kit has, `some-new-step/`, nested, at the top), one in the closure's
    /// own folder, and files that are not ELF (a script, JSON, an xz archive). Returns
    /// the folder and the ELF files that must be roots.
    fn fake_kit(name: &str) -> (PathBuf, Vec<PathBuf>) {
        let kit = crate::test_scratch(name);
        let place = |relative: &str, from: &str| {
            let to = kit.join(relative);
            fs::create_dir_all(to.parent().unwrap()).unwrap();
            fs::copy(from, &to).unwrap_or_else(|e| panic!("copy {from}: {e}"));
            to
        };
        // /usr/bin/xz needs liblzma.so.5 (not glibc): it must come into the closure.
        let elf = vec![
            place("benchmarks/runtime.bench.sm_90", "/bin/true"),
            place("some-new-step/deep/er/tool", "/usr/bin/xz"),
            place("bin/test", "/bin/true"),
            place("top-level-elf", "/bin/true"),
        ];
        place("closure/libfoo.so.1", "/bin/true");
        fs::write(kit.join("closure/libfoo.so.1.xz"), b"\xfd7zXZ\0").unwrap();
        fs::write(kit.join("run.sh"), "#!/bin/bash\n").unwrap();
        fs::write(kit.join("some-new-step/manifest.json"), "{}\n").unwrap();
        fs::write(kit.join("tiny"), "\x7fE").unwrap();
        (kit, elf)
    }

    /// The roots are every ELF file of the kit, whatever its folder (a benchmark, a
    /// folder no list names, the top), and nothing else: not the closure's own folder,
    /// not the files that are not ELF.
    #[test]
    fn the_roots_are_every_elf_file_of_the_kit_but_the_closures_own() {
        let (kit, mut elf) = fake_kit("closure-roots");
        let roots = kit_roots(&kit).unwrap();
        elf.sort();
        assert_eq!(roots, elf, "the roots of {}", kit.display());
        assert!(
            !roots.iter().any(|r| r.starts_with(kit.join(CLOSURE_DIR))),
            "{roots:?}"
        );
        let _ = fs::remove_dir_all(&kit);
    }

    /// What `add_from` resolves and checks (everything but the compression) reaches the
    /// benchmark and the folder no list names: the glibc check names the benchmark when
    /// the limit is below what it needs, and the closure takes in what the new folder's
    /// executable loads (liblzma), needed by it.
    #[test]
    fn the_closure_and_the_glibc_check_reach_every_elf_file_of_the_kit() {
        let (kit, _) = fake_kit("closure-resolve");
        let sources = Sources {
            sysroot: None,
            dlopened: &[],
            tools: &[],
            more_roots: Vec::new(),
        };
        let err = match resolve(&kit, &[], &sources, (2, 1)) {
            Ok(_) => panic!("every glibc program needs more than glibc 2.1"),
            Err(e) => e.to_string(),
        };
        for file in [
            "benchmarks/runtime.bench.sm_90",
            "some-new-step/deep/er/tool",
        ] {
            assert!(
                err.contains(&kit.join(file).display().to_string()),
                "{file} not named: {err}"
            );
        }
        assert!(!err.contains("closure/libfoo"), "{err}");
        let resolved = resolve(&kit, &[], &sources, (2, 99)).expect("nothing needs glibc 2.99");
        let lzma = resolved
            .members
            .iter()
            .find(|m| m.name == "liblzma.so.5")
            .unwrap_or_else(|| {
                panic!(
                    "liblzma.so.5 is not in the closure: {:?}",
                    resolved.members.iter().map(|m| &m.name).collect::<Vec<_>>()
                )
            });
        assert_eq!(lzma.needed_by, "some-new-step/deep/er/tool");
        let _ = fs::remove_dir_all(&kit);
    }

    /// The check reads real version needs: this test's own executable needs some
    /// GLIBC_2.x, and a limit below it names the file.
    #[test]
    fn the_glibc_check_names_a_file_that_needs_more() {
        let exe = std::env::current_exe().expect("the test executable");
        let data = fs::read(&exe).expect("the test executable is readable");
        let needs = [(
            exe.clone(),
            glibc_versions_needed(&exe, &data).expect("an ELF file"),
        )];
        let newest = check_glibc_versions(&needs, (2, 99)).expect("nothing needs glibc 2.99");
        assert!(newest >= (2, 2), "{newest:?}");
        let err = check_glibc_versions(&needs, (2, 1))
            .expect_err("every glibc program needs more than 2.1");
        assert!(
            err.to_string().contains(&exe.display().to_string()),
            "{err}"
        );
    }
}
