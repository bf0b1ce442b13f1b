//! THIRD-PARTY-NOTICES: every crate linked into what a package ships (the plugins and
//! the isolated device's process from host-plugin, offload-inspect, the compiler plugin
//! built for LLVM N, the doctor), found by walking cargo's resolved graph from those
//! packages over normal dependencies, for x86_64 Linux, with the features the LLVM N
//! build uses; each with its licence expression and the licence files its source
//! carries, verbatim (MIT and BSD ask for their text to travel with binaries).

use crate::util;
use anyhow::{Context, Result};
use cargo_metadata::{CargoOpt, DependencyKind, MetadataCommand, Package, PackageId};
use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The workspace packages whose artifacts a package ships.
const SHIPPED: &[&str] = &[
    "host-plugin",
    "offload-formats",
    "compiler-plugin",
    "doctor",
];

/// Write the notices for LLVM `major`'s packages to `to`; returns `to`.
pub fn write(major: u32, to: &Path) -> Result<PathBuf> {
    let crates = linked_crates(major)?;
    let mut text = format!(
        "Third-party software in omptarget-indirect (LLVM {major} build)\n\n\
         The programs and libraries of this package statically link the Rust crates\n\
         below. Each is listed with its licence and the licence files it carries.\n\
         libomptarget.devicertl.a is LLVM {major}'s own device runtime archive (Apache-2.0\n\
         WITH LLVM-exception, the LLVM project) with our device runtime added to it.\n"
    );
    for package in crates.values() {
        text.push_str(&notice(package)?);
    }
    fs::write(to, text).with_context(|| format!("writing {}", to.display()))?;
    Ok(to.to_path_buf())
}

/// Crates outside the workspace reachable from [`SHIPPED`], by name and version.
fn linked_crates(major: u32) -> Result<BTreeMap<(String, String), Package>> {
    let metadata = MetadataCommand::new()
        .cargo_path(util::cargo())
        .current_dir(util::root())
        .features(CargoOpt::NoDefaultFeatures)
        .features(CargoOpt::SomeFeatures(vec![format!(
            "compiler-plugin/llvm{major}"
        )]))
        .other_options(vec![
            "--filter-platform".into(),
            "x86_64-unknown-linux-gnu".into(),
        ])
        .exec()
        .context("cargo metadata")?;
    let resolve = metadata
        .resolve
        .as_ref()
        .context("cargo metadata: no resolve")?;
    let nodes: BTreeMap<&PackageId, _> = resolve.nodes.iter().map(|n| (&n.id, n)).collect();
    let packages: BTreeMap<&PackageId, &Package> =
        metadata.packages.iter().map(|p| (&p.id, p)).collect();
    let mut todo: Vec<&PackageId> = metadata
        .workspace_packages()
        .into_iter()
        .filter(|p| SHIPPED.contains(&p.name.as_str()))
        .map(|p| &p.id)
        .collect();
    let mut seen: HashSet<&PackageId> = todo.iter().copied().collect();
    while let Some(id) = todo.pop() {
        for dep in &nodes[id].deps {
            let linked = dep
                .dep_kinds
                .iter()
                .any(|k| k.kind == DependencyKind::Normal);
            if linked && seen.insert(&dep.pkg) {
                todo.push(&dep.pkg);
            }
        }
    }
    let members: HashSet<&PackageId> = metadata.workspace_members.iter().collect();
    Ok(seen
        .into_iter()
        .filter(|id| !members.contains(id))
        .map(|id| {
            let p = packages[id];
            ((p.name.to_string(), p.version.to_string()), p.clone())
        })
        .collect())
}

/// One crate's entry: name, version, licence expression, then its licence files.
fn notice(package: &Package) -> Result<String> {
    let license = package.license.as_deref().unwrap_or("(no licence field)");
    let mut text = format!(
        "\n{rule}\n{} {} ({license})\n{rule}\n",
        package.name,
        package.version,
        rule = "=".repeat(78)
    );
    let dir = package
        .manifest_path
        .parent()
        .context("a manifest has a folder")?;
    let mut files: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && is_licence_file(p))
        .collect();
    files.sort();
    if files.is_empty() {
        text.push_str("(the crate carries no licence file; its licence is named above)\n");
    }
    for file in files {
        let body =
            fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        text.push_str(&format!(
            "\n--- {} ---\n{}\n",
            file.file_name().unwrap().to_string_lossy(),
            body.trim_end()
        ));
    }
    Ok(text)
}

fn is_licence_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_uppercase())
        .unwrap_or_default();
    ["LICENSE", "LICENCE", "COPYING", "NOTICE", "COPYRIGHT"]
        .iter()
        .any(|stem| name.starts_with(stem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn licence_files_are_told_from_others() {
        for yes in [
            "LICENSE",
            "LICENSE-MIT",
            "license-apache",
            "COPYING",
            "NOTICE.md",
        ] {
            assert!(is_licence_file(Path::new(yes)), "{yes}");
        }
        for no in ["README.md", "Cargo.toml", "src"] {
            assert!(!is_licence_file(Path::new(no)), "{no}");
        }
    }

    #[test]
    fn the_llvm_17_notices_name_its_llvm_sys_and_not_16s() {
        let crates = linked_crates(17).unwrap();
        let llvm_sys: Vec<&String> = crates
            .keys()
            .filter(|(name, _)| name == "llvm-sys")
            .map(|(_, version)| version)
            .collect();
        assert_eq!(llvm_sys.len(), 1, "{llvm_sys:?}");
        assert!(llvm_sys[0].starts_with("170."), "{llvm_sys:?}");
        assert!(crates.keys().any(|(name, _)| name == "libloading"));
    }
}
