//! The host entries of an ELF file ([`read_host_entries`]): every entry section of
//! either layout, its pointers relocated (section relocations in an object, dynamic
//! ones in a linked file) and its names read from the file.

use super::{parse_table, EntryLayout, SECTION_LEGACY, SECTION_LLVM};
use crate::error::{Error, Result};
use crate::reader::Reader;
use object::elf;
use object::read::elf::{ElfFile64, FileHeader};
use object::{
    Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationFlags, RelocationTarget,
    SectionIndex,
};
use std::collections::HashMap;

/// One entry, relocated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OffloadEntry {
    pub layout: EntryLayout,
    /// Offset of the entry inside its section.
    pub offset: u64,
    /// 56-byte layout only: the `version` and `kind` fields (0 for the 32-byte layout).
    pub version: u16,
    pub kind: u16,
    pub flags: u32,
    /// The host address (virtual address in a linked file, section offset of the
    /// target in an object).
    pub addr: u64,
    /// The symbol at `addr` (the host function or variable), when one is known.
    pub host_symbol: Option<String>,
    /// The entry name: the device symbol the runtime looks up.
    pub name: String,
    pub size: u64,
    pub data: u64,
    pub aux: u64,
}

/// A value a relocation puts into a pointer field.
#[derive(Clone, Copy)]
enum Resolved {
    /// A virtual address / absolute value.
    Address(u64),
    /// An offset inside a section (relocatable objects).
    InSection(SectionIndex, u64),
}

/// Read every host offload entry of an ELF file (both layouts, every entry section).
pub fn read_host_entries(elf_bytes: &[u8]) -> Result<Vec<OffloadEntry>> {
    let file = ElfFile64::<object::Endianness>::parse(elf_bytes)?;
    if !file.is_little_endian() {
        return Err(Error::Elf("big-endian ELF is not supported".into()));
    }
    let relocatable = file.elf_header().e_type(file.endian()) == elf::ET_REL;
    let symbols = SymbolIndex::new(&file);
    let dynamic = if relocatable {
        HashMap::new()
    } else {
        dynamic_relocations(&file)
    };
    let mut out = Vec::new();
    for section in file.sections() {
        let layout = match section.name() {
            Ok(SECTION_LLVM) => EntryLayout::Llvm56,
            Ok(SECTION_LEGACY) => EntryLayout::Legacy32,
            _ => continue,
        };
        let data = section.data()?;
        let relocs: HashMap<u64, Resolved> = if relocatable {
            section_relocations(&file, &section)
        } else {
            HashMap::new()
        };
        let table = parse_table(data, layout)?;
        let r = Reader::new(data, "offload entries");
        let base = section.address();
        for (index, raw) in table.iter().enumerate() {
            let at = index as u64 * layout.size();
            let (addr_at, name_at) = layout.pointer_offsets(at);
            // The value a pointer field holds once relocated.
            let pointer = |field_at: u64, value: u64| -> Resolved {
                if relocatable {
                    return relocs
                        .get(&field_at)
                        .copied()
                        .unwrap_or(Resolved::Address(value));
                }
                Resolved::Address(dynamic.get(&(base + field_at)).copied().unwrap_or(value))
            };
            let addr = pointer(addr_at, raw.addr);
            let name_ptr = pointer(name_at, raw.name);
            let name = read_c_string(&file, name_ptr).ok_or_else(|| {
                r.invalid(
                    "name",
                    name_at,
                    raw_of(name_ptr),
                    "does not point to a NUL-terminated string in the file",
                )
            })?;
            out.push(OffloadEntry {
                layout,
                offset: at,
                version: raw.version,
                kind: raw.kind,
                flags: raw.flags,
                addr: raw_of(addr),
                host_symbol: symbols.name_at(addr),
                name,
                size: raw.size,
                data: raw.data,
                aux: raw.aux,
            });
        }
    }
    Ok(out)
}

fn raw_of(r: Resolved) -> u64 {
    match r {
        Resolved::Address(a) | Resolved::InSection(_, a) => a,
    }
}

/// Relocations of a section of a relocatable object, keyed by the field offset.
fn section_relocations<'d>(
    file: &ElfFile64<'d, object::Endianness>,
    section: &object::read::elf::ElfSection64<'d, '_, object::Endianness>,
) -> HashMap<u64, Resolved> {
    let mut out = HashMap::new();
    for (offset, reloc) in section.relocations() {
        let RelocationFlags::Elf { r_type } = reloc.flags() else {
            continue;
        };
        if r_type != elf::R_X86_64_64 && r_type != elf::R_AARCH64_ABS64 {
            continue;
        }
        let addend = reloc.addend() as u64;
        let resolved = match reloc.target() {
            RelocationTarget::Symbol(idx) => match file.symbol_by_index(idx) {
                Ok(sym) => match sym.section_index() {
                    Some(sec) => Resolved::InSection(sec, sym.address().wrapping_add(addend)),
                    None => Resolved::Address(sym.address().wrapping_add(addend)),
                },
                Err(_) => continue,
            },
            RelocationTarget::Section(sec) => Resolved::InSection(sec, addend),
            RelocationTarget::Absolute => Resolved::Address(addend),
            _ => continue,
        };
        out.insert(offset, resolved);
    }
    out
}

/// Dynamic relocations of a linked file that write a pointer: vaddr -> value.
fn dynamic_relocations(file: &ElfFile64<'_, object::Endianness>) -> HashMap<u64, u64> {
    let mut out = HashMap::new();
    let Some(relocs) = file.dynamic_relocations() else {
        return out;
    };
    for (vaddr, reloc) in relocs {
        let RelocationFlags::Elf { r_type } = reloc.flags() else {
            continue;
        };
        let addend = reloc.addend() as u64;
        let value = match r_type {
            elf::R_X86_64_RELATIVE | elf::R_AARCH64_RELATIVE => addend,
            elf::R_X86_64_64 | elf::R_AARCH64_ABS64 => match reloc.target() {
                RelocationTarget::Symbol(idx) => match file
                    .dynamic_symbol_table()
                    .and_then(|t| t.symbol_by_index(idx).ok())
                {
                    // An undefined symbol (value 0) is resolved at run time: keep 0 + addend.
                    Some(sym) => sym.address().wrapping_add(addend),
                    None => continue,
                },
                _ => addend,
            },
            _ => continue,
        };
        out.insert(vaddr, value);
    }
    out
}

/// The NUL-terminated string a resolved pointer points at, if it lies in the file.
fn read_c_string(file: &ElfFile64<'_, object::Endianness>, at: Resolved) -> Option<String> {
    let (data, offset) = match at {
        Resolved::InSection(sec, off) => (file.section_by_index(sec).ok()?.data().ok()?, off),
        Resolved::Address(addr) => {
            let sec = file.sections().find(|s| {
                s.kind() != object::SectionKind::UninitializedData
                    && addr >= s.address()
                    && addr - s.address() < s.size()
                    && s.address() != 0
            })?;
            (sec.data().ok()?, addr - sec.address())
        }
    };
    let rest = data.get(usize::try_from(offset).ok()?..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&rest[..end]).ok().map(str::to_owned)
}

/// Named symbols by (section, offset) for objects and by address for linked files.
struct SymbolIndex {
    by_section: HashMap<(SectionIndex, u64), String>,
    by_address: HashMap<u64, String>,
}

impl SymbolIndex {
    fn new(file: &ElfFile64<'_, object::Endianness>) -> Self {
        let mut by_section = HashMap::new();
        let mut by_address = HashMap::new();
        let named = file.symbols().chain(file.dynamic_symbols()).filter(|s| {
            matches!(
                s.kind(),
                object::SymbolKind::Text | object::SymbolKind::Data
            ) && s.is_definition()
        });
        for sym in named {
            let Ok(name) = sym.name() else { continue };
            if name.is_empty() {
                continue;
            }
            // Prefer global names over local aliases.
            let global = sym.is_global();
            if let Some(sec) = sym.section_index() {
                let key = (sec, sym.address());
                if global || !by_section.contains_key(&key) {
                    by_section.insert(key, name.to_owned());
                }
            }
            if global || !by_address.contains_key(&sym.address()) {
                by_address.insert(sym.address(), name.to_owned());
            }
        }
        SymbolIndex {
            by_section,
            by_address,
        }
    }

    fn name_at(&self, at: Resolved) -> Option<String> {
        match at {
            Resolved::InSection(sec, off) => self.by_section.get(&(sec, off)).cloned(),
            Resolved::Address(0) => None,
            Resolved::Address(a) => self.by_address.get(&a).cloned(),
        }
    }
}
