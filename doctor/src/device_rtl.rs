//! Which GPU architectures our device RTL is installed for: the members of ours in
//! `<prefix>/lib/omptarget-indirect/libomptarget.devicertl.a`, one per (target,
//! architecture), named `omptarget-indirect-<nvptx64|amdgcn>-<arch>.o` (xtask's
//! `OffloadTools::offload_object`). clang's linker wrapper takes a member only for
//! the exact architecture it links, so a program for a GPU gets our lookup only when
//! the GPU's architecture (or the one it was built for) has a member.

use anyhow::{Context, Result};
use object::read::archive::ArchiveFile;
use object::read::ReadCache;
use std::path::Path;

const MEMBER_PREFIX: &str = "omptarget-indirect-";

/// `(target, arch)` of each of our members (`("nvptx64", "sm_90")`).
pub fn installed_arches(archive: &Path) -> Result<Vec<(String, String)>> {
    let file =
        std::fs::File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    let data = ReadCache::new(file);
    let parsed =
        ArchiveFile::parse(&data).with_context(|| format!("reading {}", archive.display()))?;
    let mut arches = Vec::new();
    for member in parsed.members() {
        let member = member.with_context(|| format!("reading {}", archive.display()))?;
        if let Some(pair) = member_arch(&String::from_utf8_lossy(member.name())) {
            arches.push(pair);
        }
    }
    Ok(arches)
}

/// `omptarget-indirect-nvptx64-sm_90.o` -> `("nvptx64", "sm_90")`.
pub fn member_arch(name: &str) -> Option<(String, String)> {
    let rest = name.strip_prefix(MEMBER_PREFIX)?.strip_suffix(".o")?;
    let (target, arch) = rest.split_once('-')?;
    Some((target.to_owned(), arch.to_owned()))
}

/// Of `installed` (sm_XY names), the one whose code runs on compute capability
/// (`major`, `minor`): the same one, else the highest of the same major version and a
/// lower minor one (a cubin runs on later GPUs of its major version only).
pub fn nvptx_arch_for(installed: &[String], major: i32, minor: i32) -> Option<String> {
    let cc = |s: &str| -> Option<(i32, i32)> {
        let n: i32 = s.strip_prefix("sm_")?.parse().ok()?;
        Some((n / 10, n % 10))
    };
    installed
        .iter()
        .filter_map(|s| Some((cc(s)?, s)))
        .filter(|&((ma, mi), _)| ma == major && mi <= minor)
        .max()
        .map(|(_, s)| s.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names() {
        assert_eq!(
            member_arch("omptarget-indirect-nvptx64-sm_90.o"),
            Some(("nvptx64".into(), "sm_90".into()))
        );
        assert_eq!(
            member_arch("omptarget-indirect-amdgcn-gfx90a.o"),
            Some(("amdgcn".into(), "gfx90a".into()))
        );
        assert_eq!(member_arch("devicertl-amdgpu-gfx1101.o"), None);
    }

    #[test]
    fn a_cubin_runs_on_later_gpus_of_its_major_version() {
        let installed: Vec<String> = ["sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90"]
            .map(String::from)
            .to_vec();
        assert_eq!(nvptx_arch_for(&installed, 9, 0).as_deref(), Some("sm_90"));
        assert_eq!(nvptx_arch_for(&installed, 8, 7).as_deref(), Some("sm_86"));
        assert_eq!(nvptx_arch_for(&installed, 10, 0), None);
        assert_eq!(nvptx_arch_for(&installed, 6, 1), None);
    }
}
