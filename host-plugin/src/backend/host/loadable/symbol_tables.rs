//! The dynamic symbol and string tables: the loader's (the dynamic section's tags) must be
//! the ones the section headers describe, which the plugin reads, loaded at the same bytes;
//! and each dynamic symbol's name and bytes inside the image.

use super::dynamic::Tag;
use super::segments::Segments;
use object::elf::{self, FileHeader64, Sym64};
use object::read::elf::{ElfFile64, SectionHeader, Sym};
use object::LittleEndian as LE;

/// The dynamic symbol table as both the loader and the plugin read it.
pub(super) struct SymbolTables<'a> {
    pub(super) syms: object::read::elf::SymbolTable<'a, FileHeader64<LE>>,
    pub(super) nsyms: u64,
    pub(super) strsz: u64,
}

/// The loader's symbol and string tables must be the ones the sections describe, which
/// are the ones we read names and sizes from, loaded, at the same bytes both ways.
pub(super) fn symbol_tables<'a>(
    file: &ElfFile64<'a, LE>,
    bytes: &'a [u8],
    segs: &Segments<'a>,
    tag: Tag<'_>,
) -> Result<SymbolTables<'a>, String> {
    let sections = file.elf_section_table();
    let dynsym = sections
        .iter()
        .find(|s| s.sh_type(LE) == elf::SHT_DYNSYM)
        .ok_or("no dynamic symbol table")?;
    let syms = sections
        .symbols(LE, bytes, elf::SHT_DYNSYM)
        .map_err(|e| e.to_string())?;
    let nsyms = syms.len() as u64;
    let strtab = sections
        .section(object::SectionIndex(dynsym.sh_link(LE) as usize))
        .map_err(|e| e.to_string())?;
    if tag(elf::DT_SYMTAB) != Some(dynsym.sh_addr(LE)) {
        return Err("DT_SYMTAB is not the dynamic symbol table".into());
    }
    if tag(elf::DT_STRTAB) != Some(strtab.sh_addr(LE)) {
        return Err("DT_STRTAB is not the dynamic string table".into());
    }
    let strsz = tag(elf::DT_STRSZ).ok_or("no DT_STRSZ")?;
    if strsz > strtab.sh_size(LE) || segs.file_bytes(strtab.sh_addr(LE), strsz).is_none() {
        return Err("the dynamic string table is not loaded".into());
    }
    if segs.file_bytes(dynsym.sh_addr(LE), nsyms * 24).is_none() {
        return Err("the dynamic symbol table is not loaded".into());
    }
    // The plugin reads these sections through the section headers, the loader at their
    // addresses: both must see the same bytes, so a lookup of ours finds what dlsym
    // would.
    let hash_section = sections.iter().find(|s| s.sh_type(LE) == elf::SHT_GNU_HASH);
    if hash_section.map(|s| s.sh_addr(LE)) != tag(elf::DT_GNU_HASH) {
        return Err("DT_GNU_HASH is not the GNU hash section".into());
    }
    for (what, section) in [("dynamic symbol", Some(dynsym)), ("GNU hash", hash_section)] {
        if let Some(section) = section {
            if !segs.maps_at_offset(section.sh_addr(LE), section.sh_offset(LE)) {
                return Err(format!(
                    "the {what} table's address and file offset disagree"
                ));
            }
        }
    }
    if !segs.maps_at_offset(strtab.sh_addr(LE), strtab.sh_offset(LE)) {
        return Err("the dynamic string table's address and file offset disagree".into());
    }
    Ok(SymbolTables { syms, nsyms, strsz })
}

pub(super) fn check_symbol(sym: &Sym64<LE>, segs: &Segments<'_>, strsz: u64) -> Result<(), String> {
    if u64::from(sym.st_name(LE)) >= strsz.max(1) {
        return Err("a dynamic symbol's name lies outside the string table".into());
    }
    let shndx = sym.st_shndx(LE);
    let defined = shndx != elf::SHN_UNDEF && shndx != elf::SHN_ABS;
    if defined
        && sym.st_type() != elf::STT_TLS
        && !segs.in_memory(sym.st_value(LE), sym.st_size(LE))
    {
        return Err(format!(
            "dynamic symbol at {:#x} ({} bytes) lies outside the image",
            sym.st_value(LE),
            sym.st_size(LE)
        ));
    }
    Ok(())
}
