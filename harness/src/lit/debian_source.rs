//! LLVM 16's libomptarget tests, taken from Debian's `llvm-toolchain-16` source package.
//!
//! Why Debian's source package: it is the source of the very libomptarget.so.16 the
//! suite runs against, and apt verifies it against the signed archive index. The
//! archive is never named here: the deb-src entry is derived at run time from the
//! apt entry that provides the installed `clang-16`.
//!
//! Only `*/openmp/libomptarget/test/*` is extracted from the 136 MB orig tarball, and
//! the result is cached under `target/llvm16-src/` (a stamp file marks a complete
//! extraction, so an interrupted run starts over instead of using half a tree).

use crate::util;
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// The Debian source package holding LLVM 16 (and its openmp tree).
const SOURCE_PACKAGE: &str = "llvm-toolchain-16";
/// The binary package whose version and archive the source must match.
const VERSION_ANCHOR_PACKAGE: &str = "clang-16";
/// Path of the test suite inside the source tree.
const TESTS_IN_TREE: &str = "openmp/libomptarget/test";
/// Written next to the extracted tree once extraction and patching are complete.
const STAMP: &str = ".omptarget-rs-extracted";
/// The deb-src entries we add (never an existing file of the machine).
const DEB_SRC_FILE_STEM: &str = "omptarget-rs-deb-src";

/// Returns `.../openmp/libomptarget/test` of Debian's llvm-toolchain-16, fetching and
/// extracting it on first use.
pub fn libomptarget_tests() -> Result<PathBuf> {
    let cache = util::target_dir().join("llvm16-src");
    libomptarget_tests_of(SOURCE_PACKAGE, &cache, |cache| {
        let start = std::time::Instant::now();
        download_source_package(cache)?;
        eprintln!(
            "lit: source package downloaded in {:.1} s",
            start.elapsed().as_secs_f64()
        );
        Ok(())
    })
}

/// `.../openmp/libomptarget/test` of Debian's source package `package` (e.g.
/// `llvm-toolchain-17`), cached in `cache`: when no complete extraction is there,
/// `download(cache)` must leave the package's `.orig.tar.*` and `.debian.tar.*` in
/// `cache` (for a release other than this machine's, apt inside that release's root does
/// it), and the tests are extracted and patched as for LLVM 16.
pub(crate) fn libomptarget_tests_of(
    package: &str,
    cache: &Path,
    download: impl FnOnce(&Path) -> Result<()>,
) -> Result<PathBuf> {
    let _lock = crate::cache_lock::lock(cache)?;
    if let Some(dir) = cached_tests(cache) {
        eprintln!("lit: using cached tests in {}", dir.display());
        return Ok(dir);
    }
    fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
    if find_orig_tarball(cache, package)?.is_none() || find_debian_tarball(cache, package).is_none()
    {
        download(cache)?;
    }
    let orig = find_orig_tarball(cache, package)?.with_context(|| {
        format!(
            "no {package}_*.orig.tar.* in {} after the download",
            cache.display()
        )
    })?;
    extract_tests(cache, &orig, package).map_err(|e| {
        for file in [Some(orig.clone()), find_debian_tarball(cache, package)]
            .into_iter()
            .flatten()
        {
            let _ = fs::remove_file(file);
        }
        e.context(format!(
            "extracting the tests failed; removed the downloaded tarballs from {}, run \
             again to download them anew",
            cache.display()
        ))
    })
}

/// The extracted test directory, if a previous run completed it.
fn cached_tests(cache: &Path) -> Option<PathBuf> {
    fs::read_dir(cache)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join(STAMP).is_file())
        .map(|p| p.join(TESTS_IN_TREE))
        .find(|t| t.join("lit.cfg").is_file())
}

/// `apt-get source --download-only` into `cache`; returns the orig tarball.
fn download_source_package(cache: &Path) -> Result<PathBuf> {
    let version = installed_version(VERSION_ANCHOR_PACKAGE)?;
    if let Some(orig) = find_orig_tarball(cache, SOURCE_PACKAGE)? {
        return Ok(orig);
    }
    enable_source_packages()?;
    // Pin the version of the installed compiler/runtime: the tests must match them.
    let sh = Shell::new()?;
    sh.change_dir(cache);
    cmd!(
        sh,
        "apt-get source --download-only -qq {SOURCE_PACKAGE}={version}"
    )
    .run()?;
    find_orig_tarball(cache, SOURCE_PACKAGE)?.with_context(|| {
        format!(
            "apt-get source left no {SOURCE_PACKAGE}_*.orig.tar.* in {}",
            cache.display()
        )
    })
}

fn installed_version(package: &str) -> Result<String> {
    util::ensure_debian_packages(&[package])?;
    let sh = Shell::new()?;
    let version_format = "-f=${Version}";
    let v = util::read(cmd!(sh, "dpkg-query -W {version_format} {package}"))?;
    let v = v.trim();
    if v.is_empty() {
        bail!("dpkg-query reports no version for {package}");
    }
    Ok(v.to_owned())
}

fn find_orig_tarball(cache: &Path, package: &str) -> Result<Option<PathBuf>> {
    let prefix = format!("{package}_");
    Ok(fs::read_dir(cache)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.contains(".orig.tar."))
        }))
}

fn find_debian_tarball(cache: &Path, package: &str) -> Option<PathBuf> {
    let prefix = format!("{package}_");
    fs::read_dir(cache)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.contains(".debian.tar."))
        })
}

/// Makes `apt-get source` work: if apt knows no source for the package, adds deb-src
/// twins of the apt entries that serve the installed compiler, then `apt-get update`.
fn enable_source_packages() -> Result<()> {
    if source_package_known()? {
        return Ok(());
    }
    if !util::is_root() {
        bail!(
            "apt has no deb-src entry for {SOURCE_PACKAGE}; as root, add `deb-src` twins of \
             your `deb` entries (e.g. `sed 's/^Types: deb$/Types: deb-src/' \
             /etc/apt/sources.list.d/debian.sources`) and run `apt-get update`"
        );
    }
    let origin = archive_uri_of(VERSION_ANCHOR_PACKAGE)?;
    let sources_d = Path::new("/etc/apt/sources.list.d");
    let mut deb822 = String::new();
    let mut one_line = String::new();
    for entry in fs::read_dir(sources_d)?.filter_map(|e| e.ok()) {
        let path = entry.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with(DEB_SRC_FILE_STEM) {
            continue;
        }
        if name.ends_with(".sources") {
            deb822.push_str(&deb_src_stanzas(
                &fs::read_to_string(&path)?,
                origin.as_deref(),
            ));
        } else if name.ends_with(".list") {
            one_line.push_str(&deb_src_lines(
                &fs::read_to_string(&path)?,
                origin.as_deref(),
            ));
        }
    }
    if let Ok(classic) = fs::read_to_string("/etc/apt/sources.list") {
        one_line.push_str(&deb_src_lines(&classic, origin.as_deref()));
    }
    if deb822.is_empty() && one_line.is_empty() {
        bail!("found no apt `deb` entry to derive a deb-src entry from");
    }
    let header = "# Added by `cargo xtask lit`: source packages for LLVM 16's lit tests.\n";
    if !deb822.is_empty() {
        let file = sources_d.join(format!("{DEB_SRC_FILE_STEM}.sources"));
        eprintln!("lit: writing {}", file.display());
        fs::write(&file, format!("{header}{deb822}"))?;
    }
    if !one_line.is_empty() {
        let file = sources_d.join(format!("{DEB_SRC_FILE_STEM}.list"));
        eprintln!("lit: writing {}", file.display());
        fs::write(&file, format!("{header}{one_line}"))?;
    }
    let sh = Shell::new()?;
    cmd!(sh, "apt-get update -qq").run()?;
    if !source_package_known()? {
        bail!("apt still knows no source package {SOURCE_PACKAGE} after enabling deb-src");
    }
    Ok(())
}

fn source_package_known() -> Result<bool> {
    let sh = Shell::new()?;
    let out = cmd!(sh, "apt-cache showsrc {SOURCE_PACKAGE}")
        .quiet()
        .ignore_status()
        .output()
        .context("running apt-cache")?;
    Ok(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("Package:"))
}

/// The archive URI serving the candidate of `package` (from `apt-cache policy`), so
/// only that archive gets a deb-src twin. None when apt cannot tell (then all `deb`
/// entries are twinned).
fn archive_uri_of(package: &str) -> Result<Option<String>> {
    let sh = Shell::new()?;
    let policy = util::read(cmd!(sh, "apt-cache policy {package}"))?;
    Ok(archive_uri_in_policy(&policy))
}

/// Parses `apt-cache policy` output: the first version-table origin line
/// (`     500 <uri> <suite>/<component> <arch> Packages`).
fn archive_uri_in_policy(policy: &str) -> Option<String> {
    policy.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let _priority: i64 = f.next()?.parse().ok()?;
        let uri = f.next()?;
        let is_archive = uri.contains("://") && l.trim_end().ends_with("Packages");
        is_archive.then(|| normalize_uri(uri))
    })
}

fn normalize_uri(uri: &str) -> String {
    uri.trim_end_matches('/').to_owned()
}

/// deb822 stanzas of `text` whose `Types` include `deb` (and whose URIs include
/// `origin`, when given), rewritten as `Types: deb-src`.
fn deb_src_stanzas(text: &str, origin: Option<&str>) -> String {
    let mut out = String::new();
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_owned())
            })
        };
        let Some(types) = field("Types") else {
            continue;
        };
        if !types.split_whitespace().any(|t| t == "deb") {
            continue;
        }
        if field("Enabled").is_some_and(|e| e.eq_ignore_ascii_case("no")) {
            continue;
        }
        let uris = field("URIs").unwrap_or_default();
        if let Some(origin) = origin {
            if !uris.split_whitespace().any(|u| normalize_uri(u) == origin) {
                continue;
            }
        }
        for line in stanza.lines() {
            let is_types = line
                .split_once(':')
                .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("Types"));
            if is_types {
                out.push_str("Types: deb-src\n");
            } else if !line.trim_start().starts_with('#') {
                out.push_str(line);
                out.push('\n');
            }
        }
        out.push('\n');
    }
    out
}

/// One-line `deb [options] uri suite components` entries of `text` (matching `origin`
/// when given), rewritten as `deb-src`.
pub(crate) fn deb_src_lines(text: &str, origin: Option<&str>) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let Some(rest) = trimmed.strip_prefix("deb ") else {
            continue;
        };
        let rest = rest.trim_start();
        // Skip the optional `[key=value ...]` block to reach the URI.
        let after_options = match rest.strip_prefix('[') {
            Some(r) => r.split_once(']').map(|(_, tail)| tail).unwrap_or(""),
            None => rest,
        };
        let Some(uri) = after_options.split_whitespace().next() else {
            continue;
        };
        if origin.is_some_and(|o| normalize_uri(uri) != o) {
            continue;
        }
        out.push_str("deb-src ");
        out.push_str(rest);
        out.push('\n');
    }
    out
}

/// Extracts the test directory (and nothing else) from the orig tarball, applies the
/// Debian patches that touch it, and stamps the tree complete.
fn extract_tests(cache: &Path, orig: &Path, package: &str) -> Result<PathBuf> {
    let staging = cache.join("extracting");
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    fs::create_dir_all(&staging)?;
    util::ensure_debian_packages(&["xz-utils", "tar"])?;
    let sh = Shell::new()?;
    let pattern = format!("*/{TESTS_IN_TREE}/*");
    cmd!(sh, "tar -xf {orig} -C {staging} --wildcards {pattern}").run()?;
    let top = fs::read_dir(&staging)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.join(TESTS_IN_TREE).join("lit.cfg").is_file())
        .with_context(|| format!("{} holds no {TESTS_IN_TREE}/lit.cfg", orig.display()))?;
    match find_debian_tarball(cache, package) {
        Some(debian) => apply_debian_patches(&top, &debian, &staging)?,
        None => bail!("no {package}_*.debian.tar.* next to {}", orig.display()),
    }
    let final_top = cache.join(top.file_name().context("tarball top directory")?);
    if final_top.exists() {
        fs::remove_dir_all(&final_top)?;
    }
    fs::rename(&top, &final_top)?;
    fs::remove_dir_all(&staging)?;
    fs::write(final_top.join(STAMP), format!("from {}\n", orig.display()))?;
    Ok(final_top.join(TESTS_IN_TREE))
}

/// Applies, in `series` order, the parts of Debian's patches that touch the test
/// directory (today none do, but the suite must be the one Debian ships).
fn apply_debian_patches(tree: &Path, debian_tarball: &Path, staging: &Path) -> Result<()> {
    let debian_dir = staging.join("debian-packaging");
    fs::create_dir_all(&debian_dir)?;
    let sh = Shell::new()?;
    cmd!(
        sh,
        "tar -xf {debian_tarball} -C {debian_dir} debian/patches"
    )
    .run()?;
    let patches = debian_dir.join("debian/patches");
    let series = fs::read_to_string(patches.join("series")).unwrap_or_default();
    let mut applied = 0;
    for name in series
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
    {
        // A series line may carry patch options after the name.
        let file = name.split_whitespace().next().unwrap_or(name);
        let Ok(text) = fs::read_to_string(patches.join(file)) else {
            continue;
        };
        let relevant = file_sections_touching(&text, TESTS_IN_TREE);
        if relevant.is_empty() {
            continue;
        }
        eprintln!("lit: applying the test-suite part of Debian patch {file}");
        util::ensure_debian_packages(&["patch"])?;
        let part = staging.join("test-part.patch");
        fs::write(&part, relevant)?;
        let _in_tree = sh.push_dir(tree);
        cmd!(sh, "patch -p1 --batch --forward -i {part}").run()?;
        applied += 1;
    }
    eprintln!("lit: {applied} Debian patch(es) touch {TESTS_IN_TREE}");
    fs::remove_dir_all(&debian_dir)?;
    Ok(())
}

/// The per-file sections (`--- a/..` / `+++ b/..` plus hunks) of a unified diff whose
/// target path, less its first component, starts with `dir`.
fn file_sections_touching(diff: &str, dir: &str) -> String {
    let lines: Vec<&str> = diff.lines().collect();
    let mut out = String::new();
    let mut keep = false;
    let mut i = 0;
    while i < lines.len() {
        let starts_section =
            lines[i].starts_with("--- ") && lines.get(i + 1).is_some_and(|n| n.starts_with("+++ "));
        if starts_section {
            let target = lines[i + 1][4..].split_whitespace().next().unwrap_or("");
            let stripped = target.split_once('/').map(|(_, rest)| rest).unwrap_or("");
            keep = stripped.starts_with(dir);
        } else if lines[i].starts_with("diff ") || lines[i].starts_with("Index: ") {
            keep = false;
        }
        if keep {
            out.push_str(lines[i]);
            out.push('\n');
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEB822: &str = "Types: deb\n# comment\nURIs: http://archive.example/debian\n\
        Suites: bookworm bookworm-updates\nComponents: main\n\
        Signed-By: /usr/share/keyrings/k.gpg\n\n\
        Types: deb\nURIs: http://other.example/x\nSuites: s\nComponents: main\n";

    #[test]
    fn deb822_twin_keeps_fields_and_only_matching_origin() {
        let out = deb_src_stanzas(DEB822, Some("http://archive.example/debian"));
        assert_eq!(
            out,
            "Types: deb-src\nURIs: http://archive.example/debian\n\
             Suites: bookworm bookworm-updates\nComponents: main\n\
             Signed-By: /usr/share/keyrings/k.gpg\n\n"
        );
        let all = deb_src_stanzas(DEB822, None);
        assert_eq!(all.matches("Types: deb-src").count(), 2);
    }

    #[test]
    fn deb822_skips_source_only_and_disabled_stanzas() {
        let text = "Types: deb-src\nURIs: http://a/\n\nTypes: deb\nURIs: http://a/\nEnabled: no\n";
        assert_eq!(deb_src_stanzas(text, None), "");
    }

    #[test]
    fn one_line_twin_keeps_options() {
        let text = "# deb http://x/ y main\ndeb [arch=amd64 signed-by=/k.gpg] http://a/debian/ bookworm main\n\
                    deb-src http://a/debian bookworm main\ndeb http://b/ s main\n";
        assert_eq!(
            deb_src_lines(text, Some("http://a/debian")),
            "deb-src [arch=amd64 signed-by=/k.gpg] http://a/debian/ bookworm main\n"
        );
        assert_eq!(deb_src_lines(text, None).lines().count(), 2);
    }

    #[test]
    fn policy_origin_is_the_first_archive_line() {
        let policy = "clang-16:\n  Installed: 1:16.0.6-15~deb12u1\n  Candidate: 1:16.0.6-15~deb12u1\n  \
            Version table:\n *** 1:16.0.6-15~deb12u1 500\n        500 http://a/debian bookworm/main amd64 Packages\n        \
            100 /var/lib/dpkg/status\n";
        assert_eq!(
            archive_uri_in_policy(policy).as_deref(),
            Some("http://a/debian")
        );
        assert_eq!(
            archive_uri_in_policy("clang-16:\n  Installed: (none)\n"),
            None
        );
    }

    #[test]
    fn diff_sections_are_filtered_by_directory() {
        let diff = "Description: x\n--- a/openmp/runtime/a.c\n+++ b/openmp/runtime/a.c\n@@ -1 +1 @@\n-a\n+b\n\
                    --- a/openmp/libomptarget/test/lit.cfg\n+++ b/openmp/libomptarget/test/lit.cfg\n@@ -1 +1 @@\n-c\n+d\n\
                    Index: z\n--- a/llvm/x\n+++ b/llvm/x\n@@ -1 +1 @@\n-e\n+f\n";
        assert_eq!(
            file_sections_touching(diff, TESTS_IN_TREE),
            "--- a/openmp/libomptarget/test/lit.cfg\n+++ b/openmp/libomptarget/test/lit.cfg\n@@ -1 +1 @@\n-c\n+d\n"
        );
        assert_eq!(
            file_sections_touching("--- a/x\n+++ b/x\n", TESTS_IN_TREE),
            ""
        );
    }
}
