//! The dynamic section: found once, inside a loaded segment at its file offset; its tags
//! ones we check, none repeated; what each tag's value points at or names inside the
//! image; and the strings of its string table.

use super::segments::Segments;
use object::elf::{self, Dyn64, ProgramHeader64};
use object::read::elf::{Dyn, ElfFile64, ProgramHeader, SectionHeader};
use object::LittleEndian as LE;

/// Dynamic tags glibc acts on that we have no check for are refused; these are the
/// ones linkers put in shared objects.
const KNOWN_TAGS: &[u32] = &[
    elf::DT_NULL,
    elf::DT_NEEDED,
    elf::DT_PLTRELSZ,
    elf::DT_PLTGOT,
    elf::DT_HASH,
    elf::DT_STRTAB,
    elf::DT_SYMTAB,
    elf::DT_RELA,
    elf::DT_RELASZ,
    elf::DT_RELAENT,
    elf::DT_STRSZ,
    elf::DT_SYMENT,
    elf::DT_INIT,
    elf::DT_FINI,
    elf::DT_SONAME,
    elf::DT_PLTREL,
    elf::DT_DEBUG,
    elf::DT_JMPREL,
    elf::DT_BIND_NOW,
    // `-Bsymbolic`: clang 17's linker wrapper links x86_64 device images with it. The
    // loader only tests its presence (the image's own definitions first); the value
    // points at nothing.
    elf::DT_SYMBOLIC,
    elf::DT_INIT_ARRAY,
    elf::DT_FINI_ARRAY,
    elf::DT_INIT_ARRAYSZ,
    elf::DT_FINI_ARRAYSZ,
    elf::DT_RUNPATH,
    elf::DT_FLAGS,
    elf::DT_GNU_HASH,
    elf::DT_VERSYM,
    elf::DT_RELACOUNT,
    elf::DT_FLAGS_1,
    elf::DT_VERDEF,
    elf::DT_VERDEFNUM,
    elf::DT_VERNEED,
    elf::DT_VERNEEDNUM,
];

/// The loader's view of the dynamic section: a tag's value (the first, if repeated).
pub(super) type Tag<'t> = &'t dyn Fn(u32) -> Option<u64>;

pub(super) fn dynamic_section<'a>(
    phdrs: &[ProgramHeader64<LE>],
    segs: &Segments<'a>,
) -> Result<&'a [Dyn64<LE>], String> {
    let mut dynamics = phdrs.iter().filter(|p| p.p_type(LE) == elf::PT_DYNAMIC);
    let ph = dynamics.next().ok_or("no PT_DYNAMIC")?;
    if dynamics.next().is_some() {
        return Err("two PT_DYNAMIC".into());
    }
    // The loader reads the dynamic section at its address, the tools at its offset.
    let raw = segs
        .file_bytes(ph.p_vaddr(LE), ph.p_filesz(LE))
        .ok_or("PT_DYNAMIC is not inside a loaded segment")?;
    if raw.as_ptr() as usize - segs.bytes.as_ptr() as usize != ph.p_offset(LE) as usize {
        return Err("PT_DYNAMIC's address and offset disagree".into());
    }
    let dyns: &[Dyn64<LE>] = object::pod::slice_from_all_bytes(&raw[..raw.len() / 16 * 16])
        .map_err(|()| "misaligned dynamic section".to_string())?;
    let end = dyns
        .iter()
        .position(|d| d.d_tag(LE) == u64::from(elf::DT_NULL))
        .ok_or("dynamic section without DT_NULL")?;
    Ok(&dyns[..end])
}

/// Every dynamic tag is one we check, and none but DT_NEEDED repeats.
pub(super) fn check_tags_known_once(dynamic: &[Dyn64<LE>]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for d in dynamic {
        let t = d.d_tag(LE);
        if !u32::try_from(t).is_ok_and(|t| KNOWN_TAGS.contains(&t)) {
            return Err(format!("unknown dynamic tag {t:#x}"));
        }
        // glibc keeps the last of a repeated tag, `tag` the first: no repeats.
        if t != u64::from(elf::DT_NEEDED) && !seen.insert(t) {
            return Err(format!("dynamic tag {t:#x} appears twice"));
        }
    }
    Ok(())
}

/// What each tag's value points at or names lies inside the image.
pub(super) fn check_tag_values(
    file: &ElfFile64<'_, LE>,
    dynamic: &[Dyn64<LE>],
    segs: &Segments<'_>,
    strsz: u64,
) -> Result<(), String> {
    let sections = file.elf_section_table();
    for d in dynamic {
        let (t, v) = (d.d_tag(LE) as u32, d.d_val(LE));
        match t {
            elf::DT_NEEDED | elf::DT_SONAME | elf::DT_RUNPATH if v >= strsz => {
                return Err(format!("dynamic tag {t:#x} names string {v} of {strsz}"));
            }
            elf::DT_PLTGOT
            | elf::DT_HASH
            | elf::DT_GNU_HASH
            | elf::DT_VERSYM
            | elf::DT_VERDEF
            | elf::DT_VERNEED
                if segs.file_bytes(v, 8).is_none() =>
            {
                return Err(format!(
                    "dynamic tag {t:#x} points outside the image ({v:#x})"
                ));
            }
            // The loader calls them: they must start an executable section (.init,
            // .fini), not point anywhere into code.
            elf::DT_INIT | elf::DT_FINI
                if !segs.executable(v)
                    || !sections.iter().any(|s| {
                        s.sh_flags(LE) & u64::from(elf::SHF_EXECINSTR) != 0 && s.sh_addr(LE) == v
                    }) =>
            {
                return Err(format!("DT_INIT/DT_FINI {v:#x} is not the start of code"));
            }
            elf::DT_PLTREL if v != u64::from(elf::DT_RELA) => {
                return Err("PLT relocations are not RELA".into());
            }
            _ => {}
        }
    }
    Ok(())
}

/// The NUL-terminated string at `off` of the dynamic string table, None when it does not
/// end inside the table.
pub(super) fn dynamic_string<'a>(
    segs: &Segments<'a>,
    tag: Tag<'_>,
    strsz: u64,
    off: u64,
) -> Option<&'a [u8]> {
    let table = segs.file_bytes(tag(elf::DT_STRTAB)?, strsz)?;
    let rest = table.get(usize::try_from(off).ok()?..)?;
    rest.iter().position(|&b| b == 0).map(|end| &rest[..end])
}
