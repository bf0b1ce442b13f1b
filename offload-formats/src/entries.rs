//! Host offload entry tables, read from an x86-64 (or other 64-bit little-endian) ELF
//! executable, shared object or relocatable object, with relocations applied.
//!
//! * LLVM 20+: section `llvm_offload_entries`, 56-byte entries ([`LlvmOffloadEntry`])
//!   `{u64 reserved; u16 version = 1; u16 kind; u32 flags; void *addr; char *name;
//!   u64 size; u64 data; void *aux}`.
//! * LLVM <= 19: section `omp_offloading_entries`, 32-byte entries ([`TgtOffloadEntry`])
//!   `{void *addr; char *name; u64 size; i32 flags; i32 reserved}`.
//!
//! In a relocatable object or a position-independent executable `addr` and `name` hold
//! 0 until relocated, so the reader applies the section's `R_X86_64_64` relocations
//! (objects) or the dynamic `R_X86_64_RELATIVE` / `R_X86_64_64` relocations (PIE).

use crate::error::{Error, Result};
use crate::reader::Reader;
use object::elf;
use object::read::elf::{ElfFile64, FileHeader};
use object::{
    Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationFlags, RelocationTarget,
    SectionIndex,
};
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::mem::{offset_of, size_of};

/// The offset of a field of an entry struct, as a file offset.
macro_rules! field {
    ($entry:ty, $field:ident) => {
        offset_of!($entry, $field) as u64
    };
}

/// Section of LLVM 20+ entries.
pub const SECTION_LLVM: &str = "llvm_offload_entries";
/// Section of LLVM <= 19 entries (libomptarget 16 collects these; our compiler plugin
/// and `omp_indirect.h` emit them).
pub const SECTION_LEGACY: &str = "omp_offloading_entries";

/// `__tgt_offload_entry` of LLVM <= 19, as the C side lays it out: libomptarget 16's
/// plugin ABI, what clang 16 emits into [`SECTION_LEGACY`]. The one definition of this
/// layout: the host plugin's ABI, the compiler plugin's IR ([`TGT_OFFLOAD_ENTRY_FIELDS`])
/// and this crate's table reader all take it from here; a test checks `omp_indirect.h`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TgtOffloadEntry {
    pub addr: *mut c_void,
    pub name: *mut c_char,
    pub size: usize,
    pub flags: i32,
    pub reserved: i32,
}

/// The LLVM 20+ offload entry (`llvm::offloading::EntryTy`), as stored in
/// [`SECTION_LLVM`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct LlvmOffloadEntry {
    pub reserved: u64,
    /// Always 1.
    pub version: u16,
    /// The offload kind (1 = OpenMP).
    pub kind: u16,
    pub flags: u32,
    pub addr: *mut c_void,
    pub name: *mut c_char,
    pub size: u64,
    pub data: u64,
    pub aux: *mut c_void,
}

// The sizes LLVM's static_asserts fix (on the 64-bit targets the readers accept).
const _: () = assert!(size_of::<TgtOffloadEntry>() == 32);
const _: () = assert!(size_of::<LlvmOffloadEntry>() == 56);

/// How a field of an entry is typed in C and in LLVM IR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// A pointer in address space 0 (`ptr`).
    Pointer,
    I64,
    I32,
}

impl FieldKind {
    pub const fn size(self) -> usize {
        match self {
            FieldKind::Pointer | FieldKind::I64 => 8,
            FieldKind::I32 => 4,
        }
    }
}

/// One field of [`TgtOffloadEntry`], for code that builds the entry in another language
/// (LLVM IR, C).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub kind: FieldKind,
    pub offset: usize,
}

/// [`TgtOffloadEntry`]'s fields in order, offsets taken from the struct.
pub const TGT_OFFLOAD_ENTRY_FIELDS: [Field; 5] = [
    Field {
        name: "addr",
        kind: FieldKind::Pointer,
        offset: offset_of!(TgtOffloadEntry, addr),
    },
    Field {
        name: "name",
        kind: FieldKind::Pointer,
        offset: offset_of!(TgtOffloadEntry, name),
    },
    Field {
        name: "size",
        kind: FieldKind::I64,
        offset: offset_of!(TgtOffloadEntry, size),
    },
    Field {
        name: "flags",
        kind: FieldKind::I32,
        offset: offset_of!(TgtOffloadEntry, flags),
    },
    Field {
        name: "reserved",
        kind: FieldKind::I32,
        offset: offset_of!(TgtOffloadEntry, reserved),
    },
];

/// The field list covers the struct with no gaps: a packed struct of these kinds (what
/// an IR emitter builds) has the same offsets and size as the Rust one.
const _: () = {
    let mut next = 0;
    let mut i = 0;
    while i < TGT_OFFLOAD_ENTRY_FIELDS.len() {
        assert!(TGT_OFFLOAD_ENTRY_FIELDS[i].offset == next);
        next += TGT_OFFLOAD_ENTRY_FIELDS[i].kind.size();
        i += 1;
    }
    assert!(next == size_of::<TgtOffloadEntry>());
};

/// The device global an indirect entry names (the convention the host plugin reads on
/// every backend, docs/USER_GUIDE.md "Indirect entries the plugin understands"): the host entry
/// `{&fn, "<holder>", size 8, flags 0x08}` names it, each device image defines it,
/// holding the device function's (or vtable group's) address.
pub mod holder {
    /// Every holder global's name starts with this.
    pub const PREFIX: &str = "__omp_offloading_indirect_";

    /// A holder is one (device) pointer: the `size` of a function's entry.
    pub const SIZE: u64 = 8;

    /// What `OMP_DECLARE_INDIRECT(fn)` of `omp_indirect.h` (the seed convention, for
    /// compilers without our plugin) names its holder: this, then the function's name.
    pub const MACRO_PREFIX: &str = "__omp_indirect_fn_";

    /// The holder `OMP_DECLARE_INDIRECT(function)` defines.
    pub fn macro_name(function: &str) -> String {
        format!("{MACRO_PREFIX}{function}")
    }

    /// The holder's name for `symbol`; `unit` is the translation unit's identity for
    /// symbols with internal linkage, None for external ones. It must be the same in
    /// the host and device compile of one unit and unique in the program: external
    /// symbols are unique by themselves, internal (`static`) ones with the unit, as
    /// clang's own offload names do. Characters PTX does not allow in identifiers
    /// become `_` (the GPU loaders look the global up by this name).
    pub fn name(symbol: &str, unit: Option<&str>) -> String {
        let mut name = String::from(PREFIX);
        if let Some(unit) = unit {
            name.push_str(unit);
            name.push('_');
        }
        name.extend(symbol.chars().map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '$' {
                c
            } else {
                '_'
            }
        }));
        name
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn external_symbols_are_named_by_themselves() {
            assert_eq!(name("_Z3addi", None), "__omp_offloading_indirect__Z3addi");
        }

        #[test]
        fn internal_symbols_carry_the_unit_and_lose_characters_ptx_rejects() {
            assert_eq!(
                name("f.1", Some("803_1a2b")),
                "__omp_offloading_indirect_803_1a2b_f_1"
            );
        }
    }
}

/// Which entry layout a table uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum EntryLayout {
    /// 32 bytes, LLVM <= 19: [`TgtOffloadEntry`].
    Legacy32,
    /// 56 bytes, LLVM 20+: [`LlvmOffloadEntry`].
    Llvm56,
}

impl EntryLayout {
    pub fn size(self) -> u64 {
        match self {
            EntryLayout::Legacy32 => size_of::<TgtOffloadEntry>() as u64,
            EntryLayout::Llvm56 => size_of::<LlvmOffloadEntry>() as u64,
        }
    }

    /// Offsets of the `addr` and `name` pointer fields of the entry at `at`.
    fn pointer_offsets(self, at: u64) -> (u64, u64) {
        match self {
            EntryLayout::Llvm56 => (
                at + field!(LlvmOffloadEntry, addr),
                at + field!(LlvmOffloadEntry, name),
            ),
            EntryLayout::Legacy32 => (
                at + field!(TgtOffloadEntry, addr),
                at + field!(TgtOffloadEntry, name),
            ),
        }
    }
}

/// One entry as stored, pointers unrelocated. For the 32-byte layout `version`,
/// `kind`, `data` and `aux` are 0 and `reserved` is the trailing `i32`; for the 56-byte
/// layout `reserved` is the leading `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct RawEntry {
    pub reserved: u64,
    pub version: u16,
    pub kind: u16,
    pub flags: u32,
    pub addr: u64,
    pub name: u64,
    pub size: u64,
    pub data: u64,
    pub aux: u64,
}

/// Decode an entry table (a section's bytes). The 56-byte layout must have version 1.
pub fn parse_table(data: &[u8], layout: EntryLayout) -> Result<Vec<RawEntry>> {
    let r = Reader::new(data, "offload entries");
    if !(data.len() as u64).is_multiple_of(layout.size()) {
        return Err(r.invalid(
            "section size",
            0,
            data.len() as u64,
            "not a multiple of the entry size",
        ));
    }
    let count = data.len() as u64 / layout.size();
    let mut out = Vec::with_capacity(count as usize);
    for index in 0..count {
        let at = index * layout.size();
        let entry = match layout {
            EntryLayout::Llvm56 => {
                let e = RawEntry {
                    reserved: r.u64(at + field!(LlvmOffloadEntry, reserved), "reserved")?,
                    version: r.u16(at + field!(LlvmOffloadEntry, version), "version")?,
                    kind: r.u16(at + field!(LlvmOffloadEntry, kind), "kind")?,
                    flags: r.u32(at + field!(LlvmOffloadEntry, flags), "flags")?,
                    addr: r.u64(at + field!(LlvmOffloadEntry, addr), "addr")?,
                    name: r.u64(at + field!(LlvmOffloadEntry, name), "name")?,
                    size: r.u64(at + field!(LlvmOffloadEntry, size), "size")?,
                    data: r.u64(at + field!(LlvmOffloadEntry, data), "data")?,
                    aux: r.u64(at + field!(LlvmOffloadEntry, aux), "aux")?,
                };
                if e.version != 1 {
                    let version_at = at + field!(LlvmOffloadEntry, version);
                    return Err(r.invalid("version", version_at, e.version.into(), "expected 1"));
                }
                e
            }
            EntryLayout::Legacy32 => RawEntry {
                addr: r.u64(at + field!(TgtOffloadEntry, addr), "addr")?,
                name: r.u64(at + field!(TgtOffloadEntry, name), "name")?,
                size: r.u64(at + field!(TgtOffloadEntry, size), "size")?,
                flags: r.u32(at + field!(TgtOffloadEntry, flags), "flags")?,
                reserved: r
                    .u32(at + field!(TgtOffloadEntry, reserved), "reserved")?
                    .into(),
                ..RawEntry::default()
            },
        };
        out.push(entry);
    }
    Ok(out)
}

/// Encode an entry table in `layout` (little-endian, as on x86-64). For the 32-byte
/// layout the low 32 bits of `reserved` are written and `version`, `kind`, `data`,
/// `aux` are dropped.
pub fn write_table(entries: &[RawEntry], layout: EntryLayout) -> Vec<u8> {
    let size = layout.size() as usize;
    let mut out = vec![0u8; entries.len() * size];
    for (e, entry) in entries.iter().zip(out.chunks_exact_mut(size)) {
        let mut put = |offset: usize, bytes: &[u8]| {
            entry[offset..offset + bytes.len()].copy_from_slice(bytes);
        };
        match layout {
            EntryLayout::Llvm56 => {
                put(
                    offset_of!(LlvmOffloadEntry, reserved),
                    &e.reserved.to_le_bytes(),
                );
                put(
                    offset_of!(LlvmOffloadEntry, version),
                    &e.version.to_le_bytes(),
                );
                put(offset_of!(LlvmOffloadEntry, kind), &e.kind.to_le_bytes());
                put(offset_of!(LlvmOffloadEntry, flags), &e.flags.to_le_bytes());
                put(offset_of!(LlvmOffloadEntry, addr), &e.addr.to_le_bytes());
                put(offset_of!(LlvmOffloadEntry, name), &e.name.to_le_bytes());
                put(offset_of!(LlvmOffloadEntry, size), &e.size.to_le_bytes());
                put(offset_of!(LlvmOffloadEntry, data), &e.data.to_le_bytes());
                put(offset_of!(LlvmOffloadEntry, aux), &e.aux.to_le_bytes());
            }
            EntryLayout::Legacy32 => {
                put(offset_of!(TgtOffloadEntry, addr), &e.addr.to_le_bytes());
                put(offset_of!(TgtOffloadEntry, name), &e.name.to_le_bytes());
                put(offset_of!(TgtOffloadEntry, size), &e.size.to_le_bytes());
                put(offset_of!(TgtOffloadEntry, flags), &e.flags.to_le_bytes());
                let reserved = e.reserved as u32;
                put(
                    offset_of!(TgtOffloadEntry, reserved),
                    &reserved.to_le_bytes(),
                );
            }
        }
    }
    out
}

/// The flag bits of an OpenMP offload entry.
pub mod flags {
    pub const LINK: u32 = 0x1;
    pub const CTOR: u32 = 0x2;
    pub const DTOR: u32 = 0x4;
    pub const INDIRECT: u32 = 0x8;
    pub const REQUIRES: u32 = 0x10;
    /// An indirect vtable. LLVM's loader (`setupIndirectCallTable`) treats an entry as one
    /// whenever this bit is set, with or without [`INDIRECT`]; so do we.
    pub const INDIRECT_VTABLE: u32 = 0x20;

    /// The entry goes into the indirect function table (a function or a vtable).
    pub const fn is_indirect(flags: u32) -> bool {
        flags & (INDIRECT | INDIRECT_VTABLE) != 0
    }

    /// Names of the set bits, plus `0x..` for bits we do not know.
    pub fn names(flags: u32) -> Vec<String> {
        let known = [
            (LINK, "link"),
            (CTOR, "ctor"),
            (DTOR, "dtor"),
            (INDIRECT, "indirect"),
            (REQUIRES, "requires"),
            (INDIRECT_VTABLE, "indirect_vtable"),
        ];
        let mut out: Vec<String> = known
            .iter()
            .filter(|(bit, _)| flags & bit != 0)
            .map(|(_, n)| (*n).to_owned())
            .collect();
        let unknown = flags & !known.iter().fold(0, |a, (b, _)| a | b);
        if unknown != 0 {
            out.push(format!("{unknown:#x}"));
        }
        out
    }
}

/// What an entry describes, from its flags and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum EntryRole {
    /// A target region (kernel): size 0, no ctor/dtor/indirect flag.
    Kernel,
    Ctor,
    Dtor,
    /// A `declare target indirect` function: its address may be called on the device.
    IndirectFunction,
    /// An indirect vtable.
    IndirectVtable,
    /// A global variable (`size` bytes); `link` globals have the link flag.
    Global,
    /// The `requires` flags record.
    Requires,
}

/// What a loader must do with an entry: the one classification the plugin and the
/// inspector share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum EntryKind {
    /// A kernel (also ctor/dtor thunks): resolve the device function.
    Kernel,
    /// A declare-target global of `size` bytes: resolve the device global.
    Global,
    /// Seed convention: the device symbol is the indirect function itself (size 0).
    IndirectFunction,
    /// clang 18+ convention: an 8-byte device global holds the device function's address.
    IndirectThroughGlobal,
    /// Indirect vtable (`size` bytes of host vtable): a device global holds the device
    /// vtable's address.
    IndirectVtable,
}

/// Classify an entry by flags and size; `None` for combinations no compiler emits.
/// [`flags::INDIRECT_VTABLE`] wins over [`flags::INDIRECT`], as in LLVM's loader.
pub fn classify(flags: u32, size: u64) -> Option<EntryKind> {
    if !flags::is_indirect(flags) {
        return Some(if size == 0 {
            EntryKind::Kernel
        } else {
            EntryKind::Global
        });
    }
    if flags & flags::INDIRECT_VTABLE != 0 {
        return (size != 0 && size.is_multiple_of(8)).then_some(EntryKind::IndirectVtable);
    }
    match size {
        0 => Some(EntryKind::IndirectFunction),
        8 => Some(EntryKind::IndirectThroughGlobal),
        _ => None,
    }
}

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

impl OffloadEntry {
    pub fn role(&self) -> EntryRole {
        let f = self.flags;
        if f & flags::INDIRECT_VTABLE != 0 {
            EntryRole::IndirectVtable
        } else if f & flags::INDIRECT != 0 {
            EntryRole::IndirectFunction
        } else if f & flags::REQUIRES != 0 {
            EntryRole::Requires
        } else if f & flags::CTOR != 0 {
            EntryRole::Ctor
        } else if f & flags::DTOR != 0 {
            EntryRole::Dtor
        } else if self.size == 0 {
            EntryRole::Kernel
        } else {
            EntryRole::Global
        }
    }

    pub fn is_indirect(&self) -> bool {
        flags::is_indirect(self.flags)
    }

    /// What a loader does with it ([`classify`]).
    pub fn load_kind(&self) -> Option<EntryKind> {
        classify(self.flags, self.size)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<RawEntry> {
        vec![
            RawEntry {
                version: 1,
                kind: 1,
                flags: flags::INDIRECT,
                addr: 0x11c0,
                name: 0x60c8,
                size: 8,
                ..RawEntry::default()
            },
            RawEntry {
                version: 1,
                kind: 1,
                addr: 0x8038,
                name: 0x60c0,
                size: 4,
                data: 7,
                aux: 9,
                reserved: 3,
                ..RawEntry::default()
            },
        ]
    }

    #[test]
    fn tables_round_trip() {
        let entries = sample();
        let bytes = write_table(&entries, EntryLayout::Llvm56);
        assert_eq!(bytes.len(), 112);
        assert_eq!(parse_table(&bytes, EntryLayout::Llvm56).unwrap(), entries);
        let legacy: Vec<RawEntry> = entries
            .iter()
            .map(|e| RawEntry {
                addr: e.addr,
                name: e.name,
                size: e.size,
                flags: e.flags,
                reserved: e.reserved,
                ..RawEntry::default()
            })
            .collect();
        let bytes = write_table(&legacy, EntryLayout::Legacy32);
        assert_eq!(bytes.len(), 64);
        assert_eq!(parse_table(&bytes, EntryLayout::Legacy32).unwrap(), legacy);
    }

    #[test]
    fn bad_tables_are_errors() {
        let bytes = write_table(&sample(), EntryLayout::Llvm56);
        for len in 1..bytes.len() {
            if len % 56 != 0 {
                let e = parse_table(&bytes[..len], EntryLayout::Llvm56).unwrap_err();
                assert!(e.to_string().contains("section size"), "{e}");
            }
        }
        let mut bad = bytes.clone();
        bad[56 + 8] = 2;
        let e = parse_table(&bad, EntryLayout::Llvm56)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`version`") && e.contains("0x40"), "{e}");
    }

    #[test]
    fn classification() {
        use flags::{CTOR, INDIRECT, INDIRECT_VTABLE};
        assert_eq!(classify(0, 0), Some(EntryKind::Kernel));
        assert_eq!(classify(CTOR, 0), Some(EntryKind::Kernel));
        assert_eq!(classify(0, 4), Some(EntryKind::Global));
        assert_eq!(classify(INDIRECT, 0), Some(EntryKind::IndirectFunction));
        assert_eq!(
            classify(INDIRECT, 8),
            Some(EntryKind::IndirectThroughGlobal)
        );
        assert_eq!(classify(INDIRECT, 4), None);
        assert_eq!(
            classify(INDIRECT | INDIRECT_VTABLE, 24),
            Some(EntryKind::IndirectVtable)
        );
        assert_eq!(classify(INDIRECT | INDIRECT_VTABLE, 12), None);
        // 0x20 without 0x08 is a vtable too: LLVM's loader tests either bit, and the
        // inspector's role() says the same.
        assert_eq!(
            classify(INDIRECT_VTABLE, 24),
            Some(EntryKind::IndirectVtable)
        );
        assert_eq!(classify(INDIRECT_VTABLE, 0), None);
        let vtable_only = OffloadEntry {
            layout: EntryLayout::Llvm56,
            offset: 0,
            version: 1,
            kind: 1,
            flags: INDIRECT_VTABLE,
            addr: 0x1000,
            host_symbol: None,
            name: "vt".into(),
            size: 24,
            data: 0,
            aux: 0,
        };
        assert_eq!(vtable_only.role(), EntryRole::IndirectVtable);
        assert!(vtable_only.is_indirect());
        assert_eq!(vtable_only.load_kind(), Some(EntryKind::IndirectVtable));
    }

    #[test]
    fn flag_names() {
        assert_eq!(flags::names(0x8), ["indirect"]);
        assert_eq!(flags::names(0x21), ["link", "indirect_vtable"]);
        assert_eq!(flags::names(0x106), ["ctor", "dtor", "0x100"]);
    }
}
