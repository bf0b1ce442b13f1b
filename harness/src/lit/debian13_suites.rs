//! `cargo xtask lit --llvm N` for N = 17 or 18: LLVM N's own libomptarget lit suite
//! (x86_64 host offloading), run in a cached Debian 13 (trixie) root, once through LLVM
//! N's own plugin and once through ours (the files `cargo xtask build-plugin` makes on
//! this Debian 12 machine: one plugin file serves libomptarget 16, 17 and 18, see
//! docs/LLVM_VERSIONS.md), and compared.
//!
//! - The root: `debootstrap --variant=minbase trixie` ([`debian_root`]) plus LLVM N's
//!   packages ([`debian13`]), cached in `target/debian13-root/`.
//! - The tests: Debian's `llvm-toolchain-N` source package at the version of the root's
//!   `clang-N`, fetched by apt inside the root, extracted and patched on this machine
//!   like LLVM 16's ([`debian_source`]), cached in `target/llvmN-src/`.
//! - Each run chroots into the root with its run folder, the tests and (ours) our plugin
//!   folder bind-mounted at their own paths, so lit, the loader logs and the load proof
//!   all read the same paths. libomptarget 17 and 18 dlopen `libomptarget.rtl.<t>.so`
//!   by bare name (no `.nextgen.so` names any more), so our folder first on
//!   `LD_LIBRARY_PATH` wins, and the load proof is the same as for 16.
//! - Results in `target/lit/llvmN-llvm/` and `target/lit/llvmN-ours/`.
//!
//! Passes when both runs' load proofs hold and the tests that pass through LLVM N's
//! plugin but not through ours are exactly the version's known differences
//! ([`known_differences`]; with a `--filter`, the listed tests that ran); tests passing
//! through ours only are reported.

use super::{debian_source, run, Args, LitSummary, Llvm, Options};
use crate::{debian13, debian_root, plugin, util};
use anyhow::{bail, ensure, Result};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `mapping/low_alignment.c` of LLVM 17's and 18's suites, and why it passes through
/// their plugins only.
const LOW_ALIGNMENT: (&str, &str) = (
    "mapping/low_alignment.c",
    "passes through LLVM's plugin by chance: its second region maps only `t.a` (4 bytes) \
     but writes `t.i` and `t.j`, 16 and 20 bytes past that device buffer, and `PASS 2` \
     reads them back from the enclosing `target data map(from: t.i, t.j)` buffer, which \
     the kernel never wrote. LLVM's plugin memory manager hands that 8-byte buffer \
     the one freed by the first part (struct S, where the kernel wrote 21 and 31), so \
     the expected values come back; our plugin gives a fresh buffer (seen with \
     LIBOMPTARGET_INFO=-1: same device address for both 8-byte buffers under LLVM's, \
     different under ours)",
);

/// Upstream's test marked broken on every GPU target.
const DEREFERENCED_ARRAY_POINTERS: (&str, &str) = (
    "mapping/target_derefence_array_pointrs.cpp",
    "marked broken on every GPU target upstream (`FIXME: This is currently broken on all \
     GPU targets`, UNSUPPORTED for nvptx64 and amdgcn): its maps of `(**t2d)[0:3]` and \
     deeper only work where the device reads host memory; the isolated device, like a \
     GPU, does not",
);

/// Tests of LLVM `major`'s suite that pass through our plugin in-process and fail on the
/// isolated host device, and why: each needs the host's memory, which a discrete GPU
/// does not share. LLVM 16's suite has its own list ([`super::ISOLATED_DIFFERENCES`]);
/// its `mapping/target_has_device_addr.c` passes isolated when built by clang 17 or 18.
pub fn isolated_differences(major: u32) -> Vec<(&'static str, &'static str)> {
    let mut list: Vec<(&str, &str)> = super::ISOLATED_DIFFERENCES
        .iter()
        .copied()
        .filter(|&(_, why)| why == super::REQUIRES_USM)
        .collect();
    list.push(DEREFERENCED_ARRAY_POINTERS);
    if major >= 18 {
        list.push((
            "offloading/force-usm.cpp",
            "built with -fopenmp-force-usm, which makes the program require unified shared \
             memory: refused by the isolated device, with the reason",
        ));
        list.push((
            "api/omp_indirect_call.c",
            "defines its own CPU variant of __llvm_omp_indirect_call_lookup that returns \
             the host pointer unchanged (\"unified addressing on the CPU\"), so the device \
             calls a host address: the isolated device faults there and names the host \
             function, as a GPU would",
        ));
    }
    list
}

/// Tests of LLVM `major`'s suite that pass through its own plugin and not through ours,
/// and why. A listed test that passes through both makes the list stale (an error).
pub fn known_differences(major: u32) -> &'static [(&'static str, &'static str)] {
    match major {
        17 | 18 => &[LOW_ALIGNMENT],
        _ => &[],
    }
}

pub fn main(args: &Args) -> Result<()> {
    let major = args.llvm;
    ensure!(
        util::is_root(),
        "`cargo xtask lit --llvm {major}` needs root (debootstrap, chroot, mount)"
    );
    let ours_dir = match &args.plugin_dir {
        Some(dir) => dir.clone(),
        None => plugin::build_plugins()?,
    };
    util::section(&format!("lit --llvm {major}: the Debian 13 root"));
    let (root, root_secs) = debian13::root(major)?;
    let tests = tests(&root, major)?;
    let llvm = Llvm {
        major,
        prefix: debian13::llvm_prefix(major),
        root: Some(root),
        binds: vec![tests_cache(major)],
        tests,
    };
    let options = |plugin_dir, isolated| Options {
        plugin_dir,
        filter: args.filter.as_deref(),
        jobs: args.jobs,
        isolated,
    };
    let theirs = run(&llvm, &options(None, false))?;
    let ours = run(&llvm, &options(Some(&ours_dir), false))?;
    let isolated = if args.isolated {
        Some(run(&llvm, &options(Some(&ours_dir), true))?)
    } else {
        None
    };
    util::section(&format!(
        "lit --llvm {major}: LLVM {major}'s plugin against ours"
    ));
    match root_secs {
        Some(s) => eprintln!("root: made now in {s:.0} s"),
        None => eprintln!("root: cached"),
    }
    let theirs_name = format!("LLVM {major}'s plugin");
    let runs = [(theirs_name.as_str(), Some(&theirs)), ("ours", Some(&ours))];
    let isolated_run = [("ours, isolated", isolated.as_ref())];
    for (name, s) in runs.iter().chain(&isolated_run) {
        if let Some(s) = s {
            eprintln!("{name:17} {}", one_line(s));
        }
    }
    let ran: BTreeSet<&str> = theirs.results.iter().map(|r| r.path()).collect();
    let compared = expect_differences(
        &theirs_name,
        &theirs,
        "ours",
        &ours,
        known_differences(major),
        &ran,
    );
    let isolated_compared = isolated.as_ref().map_or(Ok(()), |isolated| {
        expect_differences(
            "ours",
            &ours,
            "ours, isolated",
            isolated,
            &isolated_differences(major),
            &ran,
        )
    });
    compared.and(isolated_compared)
}

/// Passes when the tests passing in `a` but not in `b` are exactly the listed ones that
/// ran (each printed with why); tests passing in `b` only are reported.
fn expect_differences(
    a_name: &str,
    a: &LitSummary,
    b_name: &str,
    b: &LitSummary,
    listed: &[(&str, &str)],
    ran: &BTreeSet<&str>,
) -> Result<()> {
    let comparison = Comparison::new(a, b);
    eprintln!("{}", comparison.report(a_name, b_name));
    for (test, why) in listed {
        if comparison.only_a.iter().any(|t| t == test) {
            eprintln!("known difference {test}: {why}");
        }
    }
    let known: BTreeSet<&str> = listed
        .iter()
        .map(|(t, _)| *t)
        .filter(|t| ran.contains(t))
        .collect();
    let got: BTreeSet<&str> = comparison.only_a.iter().map(String::as_str).collect();
    if got != known {
        bail!(
            "tests passing through {a_name} but not through {b_name}: {:?}; expected \
             exactly the known differences {:?} (new: {:?}; listed but not differing: {:?})",
            got,
            known,
            got.difference(&known).collect::<Vec<_>>(),
            known.difference(&got).collect::<Vec<_>>()
        );
    }
    Ok(())
}

fn one_line(s: &LitSummary) -> String {
    format!(
        "{} tests: {} ({:.0} s)",
        s.total,
        s.counts(),
        s.run_time.as_secs_f64()
    )
}

/// Which tests pass in one run and not the other.
struct Comparison {
    only_a: Vec<String>,
    only_b: Vec<String>,
}

impl Comparison {
    fn new(a: &LitSummary, b: &LitSummary) -> Self {
        let passed = |s: &LitSummary| -> BTreeSet<String> {
            s.results
                .iter()
                .filter(|r| r.status.passed())
                .map(|r| r.path().to_owned())
                .collect()
        };
        let (a, b) = (passed(a), passed(b));
        Comparison {
            only_a: a.difference(&b).cloned().collect(),
            only_b: b.difference(&a).cloned().collect(),
        }
    }

    fn report(&self, a_name: &str, b_name: &str) -> String {
        format!(
            "passing through {a_name} only: {}: {:?}\npassing through {b_name} only: {}: {:?}",
            self.only_a.len(),
            self.only_a,
            self.only_b.len(),
            self.only_b
        )
    }
}

fn tests_cache(major: u32) -> PathBuf {
    util::target_dir().join(format!("llvm{major}-src"))
}

/// `openmp/libomptarget/test` of `llvm-toolchain-<major>` at the version of the root's
/// clang-<major> (fetched and extracted when not cached).
///
/// apt inside the root names the source package's files with their SHA-256 from the
/// signed Sources index (`apt-get source --print-uris`); the two tarballs are downloaded
/// here and checked against those. Not `apt-get source --download-only`: the archive
/// this machine reaches answers 404 for llvm-toolchain-17's `.dsc` (seen 2026-11-26),
/// and nothing here needs the `.dsc`.
pub(crate) fn tests(root: &Path, major: u32) -> Result<PathBuf> {
    let source_package = format!("llvm-toolchain-{major}");
    let clang = format!("clang-{major}");
    debian_source::libomptarget_tests_of(&source_package, &tests_cache(major), |cache| {
        util::ensure_debian_packages(&["curl"])?;
        let sh = xshell::Shell::new()?;
        let version = util::read(debian_root::chroot_cmd(
            &sh,
            root,
            // The source's version: a binary rebuild's (`+b2`) is not one.
            &["dpkg-query", "-W", "-f=${source:Version}", &clang],
        ))?;
        let version = version.trim();
        ensure!(!version.is_empty(), "no {clang} in {}", root.display());
        let script =
            format!("cd /tmp && apt-get source --print-uris -qq {source_package}={version}");
        let uris = util::read(debian_root::chroot_cmd(&sh, root, &["sh", "-c", &script]))?;
        let files = source_files(&uris);
        ensure!(
            files.iter().any(|f| f.name.contains(".orig.tar."))
                && files.iter().any(|f| f.name.contains(".debian.tar.")),
            "apt-get source --print-uris named no orig and debian tarball: {uris}"
        );
        let start = Instant::now();
        for file in files.iter().filter(|f| f.name.contains(".tar.")) {
            let part = cache.join(format!("{}.part", file.name));
            let uri = &file.uri;
            xshell::cmd!(sh, "curl -fsSL --retry 3 -o {part} {uri}").run()?;
            let sum = util::read(xshell::cmd!(sh, "sha256sum {part}"))?;
            let got = sum.split_whitespace().next().unwrap_or_default();
            if got != file.sha256 {
                fs::remove_file(&part)?;
                bail!(
                    "{}: SHA-256 {got}, the Sources index says {}",
                    file.name,
                    file.sha256
                );
            }
            fs::rename(&part, cache.join(&file.name))?;
        }
        eprintln!(
            "lit: {source_package} {version} downloaded and checked in {:.1} s",
            start.elapsed().as_secs_f64()
        );
        Ok(())
    })
}

/// One file of `apt-get source --print-uris`.
#[derive(Debug, PartialEq)]
struct SourceFile {
    uri: String,
    name: String,
    sha256: String,
}

/// `'<uri>' <name> <size> SHA256:<hex>` lines.
fn source_files(print_uris: &str) -> Vec<SourceFile> {
    print_uris
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let [uri, name, _size, sum] = f[..] else {
                return None;
            };
            let name_ok = !name.contains('/') && !name.starts_with('.');
            Some(SourceFile {
                uri: uri.trim_matches('\'').to_owned(),
                name: name.to_owned(),
                sha256: sum.strip_prefix("SHA256:")?.to_owned(),
            })
            .filter(|_| name_ok)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn print_uris_lines_are_read() {
        let out = "'http://archive.example/debian/pool/main/l/x/x_1.dsc' x_1.dsc 8295 SHA256:ab\n\
                   'http://archive.example/debian/pool/main/l/x/x_1.orig.tar.xz' x_1.orig.tar.xz 14 SHA256:cd\n\
                   'http://e/../evil' ../evil 1 SHA256:ef\n";
        let files = source_files(out);
        assert_eq!(files.len(), 2);
        assert_eq!(
            files[1],
            SourceFile {
                uri: "http://archive.example/debian/pool/main/l/x/x_1.orig.tar.xz".to_owned(),
                name: "x_1.orig.tar.xz".to_owned(),
                sha256: "cd".to_owned(),
            }
        );
    }
}
