//! Relocations and the constructor/destructor arrays: every relocation one glibc can
//! apply inside the image's writable data, and every constructor and destructor slot
//! relocated to code.

use super::dynamic::Tag;
use super::segments::Segments;
use object::elf::{self, Rela64};
use object::read::elf::Rela;
use object::LittleEndian as LE;
use std::ops::Range;

/// x86-64 relocation types a shared object's dynamic relocations use.
const KNOWN_RELOCS: &[u32] = &[
    elf::R_X86_64_NONE,
    elf::R_X86_64_64,
    elf::R_X86_64_GLOB_DAT,
    elf::R_X86_64_JUMP_SLOT,
    elf::R_X86_64_RELATIVE,
    elf::R_X86_64_DTPMOD64,
    elf::R_X86_64_DTPOFF64,
    elf::R_X86_64_TPOFF64,
];

/// Entry sizes are the ELF64 ones, and each relocation table comes with what glibc reads
/// about it unasked.
pub(super) fn check_relocation_tags(tag: Tag<'_>) -> Result<(), String> {
    if tag(elf::DT_SYMENT).is_some_and(|e| e != 24) || tag(elf::DT_RELAENT).is_some_and(|e| e != 24)
    {
        return Err("unexpected symbol or relocation entry size".into());
    }
    // glibc reads DT_RELAENT whenever there is DT_RELA, and DT_PLTREL whenever there is
    // DT_JMPREL, without asking whether they exist.
    if (tag(elf::DT_RELA).is_some() && tag(elf::DT_RELAENT).is_none())
        || (tag(elf::DT_JMPREL).is_some() && tag(elf::DT_PLTREL).is_none())
    {
        return Err("relocations without their entry size or kind".into());
    }
    Ok(())
}

/// The constructor and destructor arrays, each inside a writable segment.
pub(super) fn init_fini_arrays(
    segs: &Segments<'_>,
    tag: Tag<'_>,
) -> Result<Vec<Range<u64>>, String> {
    let mut arrays = Vec::new();
    for (addr, size) in [
        (elf::DT_INIT_ARRAY, elf::DT_INIT_ARRAYSZ),
        (elf::DT_FINI_ARRAY, elf::DT_FINI_ARRAYSZ),
    ] {
        if let Some(a) = tag(addr) {
            let n = tag(size).unwrap_or(0);
            if !n.is_multiple_of(8) || !segs.writable(a, n) {
                return Err("constructor/destructor array outside the image".into());
            }
            arrays.push(a..a + n);
        }
    }
    Ok(arrays)
}

/// Every relocation is one glibc can apply inside the image, and every constructor and
/// destructor slot is filled by a relative relocation (each checked to point at code):
/// a slot without one would be called as it is in the file.
pub(super) fn check_relocations(
    segs: &Segments<'_>,
    tag: Tag<'_>,
    nsyms: u64,
    arrays: &[Range<u64>],
) -> Result<(), String> {
    let mut relocated_slots = std::collections::HashSet::new();
    for (table, size) in [
        (elf::DT_RELA, elf::DT_RELASZ),
        (elf::DT_JMPREL, elf::DT_PLTRELSZ),
    ] {
        let Some(at) = tag(table) else { continue };
        let len = tag(size).ok_or("relocation table without a size")?;
        let raw = segs
            .file_bytes(at, len)
            .filter(|_| len % 24 == 0)
            .ok_or("relocation table outside the image")?;
        let relas: &[Rela64<LE>] = object::pod::slice_from_all_bytes(raw)
            .map_err(|()| "misaligned relocation table".to_string())?;
        if table == elf::DT_RELA {
            // glibc applies the first DT_RELACOUNT entries as relative ones unchecked.
            let count = tag(elf::DT_RELACOUNT).unwrap_or(0);
            if count > relas.len() as u64
                || relas
                    .iter()
                    .take(count as usize)
                    .any(|r| r.r_type(LE, false) != elf::R_X86_64_RELATIVE)
            {
                return Err("DT_RELACOUNT does not count the relative relocations".into());
            }
        }
        for r in relas {
            check_reloc(r, segs, nsyms, arrays)?;
            // Only slots of the arrays matter (a million-entry image has a million
            // relative relocations, one per function pointer global).
            let slot = r.r_offset(LE);
            if r.r_type(LE, false) == elf::R_X86_64_RELATIVE
                && arrays.iter().any(|a| a.contains(&slot))
            {
                relocated_slots.insert(slot);
            }
        }
    }
    for a in arrays {
        if (a.start..a.end)
            .step_by(8)
            .any(|slot| !relocated_slots.contains(&slot))
        {
            return Err("a constructor/destructor slot is not relocated to code".into());
        }
    }
    Ok(())
}

fn check_reloc(
    r: &Rela64<LE>,
    segs: &Segments<'_>,
    nsyms: u64,
    arrays: &[Range<u64>],
) -> Result<(), String> {
    let (offset, ty, sym) = (r.r_offset(LE), r.r_type(LE, false), r.r_sym(LE, false));
    if !KNOWN_RELOCS.contains(&ty) {
        return Err(format!("relocation type {ty}"));
    }
    if ty != elf::R_X86_64_NONE && !segs.writable(offset, 8) {
        return Err(format!(
            "relocation at {offset:#x} outside the image's writable data"
        ));
    }
    if u64::from(sym) >= nsyms {
        return Err(format!("relocation names symbol {sym} of {nsyms}"));
    }
    if ty == elf::R_X86_64_RELATIVE {
        let target = r.r_addend(LE) as u64;
        // A constructor or destructor slot must point at code.
        let in_array = arrays.iter().any(|a| a.contains(&offset));
        if (in_array && !segs.executable(target)) || !segs.in_memory(target, 0) {
            return Err(format!("relative relocation at {offset:#x} to {target:#x}"));
        }
    }
    Ok(())
}
