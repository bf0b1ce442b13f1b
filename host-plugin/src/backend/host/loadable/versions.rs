//! Symbol versioning: the DT_VERNEED and DT_VERDEF chains and DT_VERSYM, every record,
//! link and name inside the image, and each requirement's file a library the image needs.

use super::dynamic::{dynamic_string, Tag};
use super::segments::Segments;
use object::elf::{self, Dyn64};
use object::read::elf::Dyn;
use object::LittleEndian as LE;

/// The libraries a version requirement may name: the image's DT_NEEDED entries and its
/// own DT_SONAME (glibc looks a requirement's file up among the loaded dependencies,
/// and asserts that it is there).
pub(super) fn dependency_names<'a>(
    dynamic: &[Dyn64<LE>],
    segs: &Segments<'a>,
    tag: Tag<'_>,
    strsz: u64,
) -> Result<Vec<&'a [u8]>, String> {
    dynamic
        .iter()
        .filter(|d| [elf::DT_NEEDED, elf::DT_SONAME].contains(&(d.d_tag(LE) as u32)))
        .map(|d| {
            dynamic_string(segs, tag, strsz, d.d_val(LE))
                .ok_or_else(|| format!("dynamic tag {:#x}: its name is not a string", d.d_tag(LE)))
        })
        .collect()
}

/// Version tables (DT_VERNEED / DT_VERDEF chains, DT_VERSYM): every record, link and
/// name inside the image, and every requirement's file one of `dependencies`; glibc
/// follows them before running anything.
pub(super) fn versions(
    segs: &Segments<'_>,
    tag: Tag<'_>,
    strsz: u64,
    nsyms: u64,
    dependencies: &[&[u8]],
) -> Result<(), String> {
    // The highest version index the tables define (0 and 1 are local and global).
    let mut max_index: u16 = 1;
    for (table, count, is_need) in [
        (elf::DT_VERNEED, elf::DT_VERNEEDNUM, true),
        (elf::DT_VERDEF, elf::DT_VERDEFNUM, false),
    ] {
        let Some(at) = tag(table) else { continue };
        let n = tag(count).ok_or_else(|| bad_version("no count"))?;
        if n > 4096 {
            return Err(bad_version("count"));
        }
        let chain = VersionChain {
            segs,
            tag,
            strsz,
            dependencies,
        };
        max_index = max_index.max(chain.walk(at, n, is_need)?);
    }
    // glibc indexes its version array with each symbol's version, unchecked.
    if let Some(vs) = tag(elf::DT_VERSYM) {
        let raw = segs
            .file_bytes(vs, nsyms * 2)
            .ok_or_else(|| bad_version("versym"))?;
        if raw
            .chunks_exact(2)
            .any(|v| u16::from_le_bytes([v[0], v[1]]) & 0x7fff > max_index)
        {
            return Err(bad_version("a symbol's version is not defined"));
        }
    }
    Ok(())
}

fn bad_version(what: &str) -> String {
    format!("malformed version table ({what})")
}

/// The little-endian u16 at `base + off` in the loaded file bytes. Record addresses
/// come from the file: saturate, so a wild one reads as "outside".
fn u16_at(segs: &Segments<'_>, base: u64, off: u64) -> Option<u16> {
    segs.file_bytes(base.saturating_add(off), 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
}

/// As [`u16_at`], a u32.
fn u32_at(segs: &Segments<'_>, base: u64, off: u64) -> Option<u32> {
    segs.file_bytes(base.saturating_add(off), 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// What a version chain is checked against.
struct VersionChain<'s, 'a> {
    segs: &'s Segments<'a>,
    tag: Tag<'s>,
    strsz: u64,
    /// The libraries a requirement may name ([`dependency_names`]).
    dependencies: &'s [&'a [u8]],
}

impl VersionChain<'_, '_> {
    /// One chain of `n` version records from `at` (Verneed with `is_need`, else
    /// Verdef): the highest version index it defines.
    fn walk(&self, mut at: u64, n: u64, is_need: bool) -> Result<u16, String> {
        let (segs, strsz) = (self.segs, self.strsz);
        let bad = bad_version;
        let mut max_index: u16 = 1;
        // glibc walks both chains until a zero `next`, whatever the counts say: walk them
        // the same way, bounded, and require the counts to agree.
        let mut records = 0u64;
        loop {
            records += 1;
            if records > n {
                return Err(bad("chain longer than its count"));
            }
            // Verneed {u16 version, u16 cnt, u32 file, u32 aux, u32 next};
            // Verdef {u16 version, u16 flags, u16 ndx, u16 cnt, u32 hash, u32 aux, u32 next}.
            if !is_need {
                max_index = max_index.max(u16_at(segs, at, 4).ok_or_else(|| bad("verdef"))?);
            }
            let (cnt, aux, next) = if is_need {
                let file = u32_at(segs, at, 4).ok_or_else(|| bad("verneed"))?;
                if u64::from(file) >= strsz {
                    return Err(bad("file name"));
                }
                let name = dynamic_string(segs, self.tag, strsz, u64::from(file))
                    .ok_or_else(|| bad("file name"))?;
                if !self.dependencies.contains(&name) {
                    return Err(bad(
                        "a version requirement names a library the image does not need",
                    ));
                }
                (
                    u16_at(segs, at, 2),
                    u32_at(segs, at, 8),
                    u32_at(segs, at, 12),
                )
            } else {
                (
                    u16_at(segs, at, 6),
                    u32_at(segs, at, 12),
                    u32_at(segs, at, 16),
                )
            };
            let (cnt, aux, next) = (
                cnt.ok_or_else(|| bad("record"))?,
                aux.ok_or_else(|| bad("record"))?,
                next.ok_or_else(|| bad("record"))?,
            );
            let first_aux = at.checked_add(u64::from(aux)).ok_or_else(|| bad("aux"))?;
            max_index = max_index.max(version_auxes(segs, first_aux, cnt, is_need, strsz)?);
            if next == 0 {
                break;
            }
            at = at.checked_add(u64::from(next)).ok_or_else(|| bad("link"))?;
        }
        if records != n {
            return Err(bad("chain shorter than its count"));
        }
        Ok(max_index)
    }
}

/// The `cnt` auxiliary records of one version record, from `a` (Vernaux with
/// `is_need`, else Verdaux): the highest version index they define (a requirement's
/// `vna_other`; 0 for definitions).
fn version_auxes(
    segs: &Segments<'_>,
    mut a: u64,
    cnt: u16,
    is_need: bool,
    strsz: u64,
) -> Result<u16, String> {
    let bad = bad_version;
    let mut max_index: u16 = 0;
    // Vernaux {u32 hash, u16 flags, u16 other, u32 name, u32 next};
    // Verdaux {u32 name, u32 next}.
    let mut auxes = 0u16;
    loop {
        auxes = auxes.checked_add(1).ok_or_else(|| bad("aux chain"))?;
        if auxes > cnt {
            return Err(bad("aux chain longer than its count"));
        }
        let (name, anext) = if is_need {
            (u32_at(segs, a, 8), u32_at(segs, a, 12))
        } else {
            (u32_at(segs, a, 0), u32_at(segs, a, 4))
        };
        let name = name.ok_or_else(|| bad("aux"))?;
        if is_need {
            // vna_other: the version index this requirement defines.
            max_index = max_index.max(u16_at(segs, a, 6).ok_or_else(|| bad("aux"))?);
        }
        let anext = anext.ok_or_else(|| bad("aux"))?;
        if u64::from(name) >= strsz {
            return Err(bad("version name"));
        }
        if anext == 0 {
            break;
        }
        a = a
            .checked_add(u64::from(anext))
            .ok_or_else(|| bad("aux link"))?;
    }
    if auxes != cnt {
        return Err(bad("aux chain shorter than its count"));
    }
    Ok(max_index)
}
