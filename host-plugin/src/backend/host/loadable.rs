//! What the dynamic loader reads before any of the image's code runs, checked for
//! consistency: segments, the dynamic section, the tables it points at, relocations and
//! the constructor/destructor pointers. Found necessary by the dlopen sweep of `cargo
//! xtask fuzz` (docs/RELIABILITY.md, "Fuzzing"): each check stops a class of mutated
//! images that passed the header checks and then crashed glibc's loader.
//!
//! x86-64 only: the rule of glibc's loader, which the host backends (in-process and
//! isolated) hand images to; [`crate::image::inspect_shared_object`] asks it for them.

use object::elf::{self, Dyn64, FileHeader64, ProgramHeader64, Rela64, Sym64};
use object::read::elf::{Dyn, ElfFile64, FileHeader, ProgramHeader, Rela, SectionHeader, Sym};
use object::LittleEndian as LE;
use std::ops::Range;

/// One PT_LOAD: where it lies in memory and which file bytes back it.
struct Load {
    mem: Range<u64>,
    file_start: u64,
    file_len: u64,
    exec: bool,
    writable: bool,
}

struct Segments<'a> {
    bytes: &'a [u8],
    loads: Vec<Load>,
}

impl<'a> Segments<'a> {
    /// `addr .. addr + len` lies in one segment's memory.
    fn in_memory(&self, addr: u64, len: u64) -> bool {
        self.find(addr, len).is_some()
    }

    fn find(&self, addr: u64, len: u64) -> Option<&Load> {
        let end = addr.checked_add(len)?;
        self.loads
            .iter()
            .find(|l| l.mem.start <= addr && end <= l.mem.end)
    }

    /// The file bytes the loader maps at `addr .. addr + len`, if all are file-backed.
    fn file_bytes(&self, addr: u64, len: u64) -> Option<&'a [u8]> {
        let l = self.find(addr, len)?;
        let off = addr - l.mem.start;
        if off.checked_add(len)? > l.file_len {
            return None;
        }
        let start = usize::try_from(l.file_start + off).ok()?;
        self.bytes
            .get(start..start.checked_add(usize::try_from(len).ok()?)?)
    }

    /// The loader maps file offset `offset` at image address `addr`.
    fn maps_at_offset(&self, addr: u64, offset: u64) -> bool {
        self.find(addr, 0).is_some_and(|l| {
            addr - l.mem.start < l.file_len && l.file_start + (addr - l.mem.start) == offset
        })
    }

    fn executable(&self, addr: u64) -> bool {
        self.find(addr, 1).is_some_and(|l| l.exec)
    }

    /// Relocations write here: a read-only or code page would fault in the loader.
    fn writable(&self, addr: u64, len: u64) -> bool {
        self.find(addr, len).is_some_and(|l| l.writable)
    }
}

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

/// The loader's view of the dynamic section: a tag's value (the first, if repeated).
type Tag<'t> = &'t dyn Fn(u32) -> Option<u64>;

/// The dynamic symbol table as both the loader and the plugin read it.
struct SymbolTables<'a> {
    syms: object::read::elf::SymbolTable<'a, FileHeader64<LE>>,
    nsyms: u64,
    strsz: u64,
}

/// Whether glibc's loader can map and relocate the image without trusting anything
/// inconsistent: each step below stops one kind of broken image, in this order.
pub fn check(file: &ElfFile64<'_, LE>, bytes: &[u8]) -> Result<(), String> {
    let header: &FileHeader64<LE> = file.elf_header();
    if header.e_phentsize(LE) as usize != std::mem::size_of::<ProgramHeader64<LE>>() {
        return Err(format!("program header size {}", header.e_phentsize(LE)));
    }
    let segs = segments(file.elf_program_headers(), bytes)?;
    check_relro(file.elf_program_headers(), &segs)?;
    let dynamic = dynamic_section(file.elf_program_headers(), &segs)?;
    let tag = |t: u32| -> Option<u64> {
        dynamic
            .iter()
            .find(|d| d.d_tag(LE) == u64::from(t))
            .map(|d| d.d_val(LE))
    };
    check_tags_known_once(dynamic)?;
    let tables = symbol_tables(file, bytes, &segs, &tag)?;
    check_relocation_tags(&tag)?;
    check_tag_values(file, dynamic, &segs, tables.strsz)?;
    let dependencies = dependency_names(dynamic, &segs, &tag, tables.strsz)?;
    versions(&segs, &tag, tables.strsz, tables.nsyms, &dependencies)?;
    if let Some(h) = tag(elf::DT_GNU_HASH) {
        gnu_hash(&segs, h, tables.nsyms)?;
    }
    if let Some(h) = tag(elf::DT_HASH) {
        sysv_hash(&segs, h, tables.nsyms)?;
    }
    for sym in tables.syms.iter() {
        check_symbol(sym, &segs, tables.strsz)?;
    }
    let arrays = init_fini_arrays(&segs, &tag)?;
    check_relocations(&segs, &tag, tables.nsyms, &arrays)
}

/// The loader mprotects the RELRO range read-only: outside the image's writable segment
/// it would seal whatever else is mapped there.
fn check_relro(phdrs: &[ProgramHeader64<LE>], segs: &Segments<'_>) -> Result<(), String> {
    for ph in phdrs {
        if ph.p_type(LE) == elf::PT_GNU_RELRO && !segs.writable(ph.p_vaddr(LE), ph.p_memsz(LE)) {
            return Err("PT_GNU_RELRO is not inside a writable segment".into());
        }
    }
    Ok(())
}

/// Every dynamic tag is one we check, and none but DT_NEEDED repeats.
fn check_tags_known_once(dynamic: &[Dyn64<LE>]) -> Result<(), String> {
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

/// The loader's symbol and string tables must be the ones the sections describe, which
/// are the ones we read names and sizes from, loaded, at the same bytes both ways.
fn symbol_tables<'a>(
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

/// Entry sizes are the ELF64 ones, and each relocation table comes with what glibc reads
/// about it unasked.
fn check_relocation_tags(tag: Tag<'_>) -> Result<(), String> {
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

/// What each tag's value points at or names lies inside the image.
fn check_tag_values(
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

/// The constructor and destructor arrays, each inside a writable segment.
fn init_fini_arrays(segs: &Segments<'_>, tag: Tag<'_>) -> Result<Vec<Range<u64>>, String> {
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
fn check_relocations(
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

fn segments<'a>(phdrs: &[ProgramHeader64<LE>], bytes: &'a [u8]) -> Result<Segments<'a>, String> {
    let mut loads: Vec<Load> = Vec::new();
    for ph in phdrs.iter().filter(|p| p.p_type(LE) == elf::PT_LOAD) {
        let (vaddr, memsz) = (ph.p_vaddr(LE), ph.p_memsz(LE));
        let (offset, filesz, align) = (ph.p_offset(LE), ph.p_filesz(LE), ph.p_align(LE));
        let end = vaddr.checked_add(memsz).ok_or("segment wraps")?;
        let exec = ph.p_flags(LE) & elf::PF_X != 0;
        // An executable segment's zero fill would be run as code.
        if filesz > memsz
            || (exec && filesz != memsz)
            || !align.is_power_of_two()
            || vaddr % align != offset % align
        {
            return Err(format!("inconsistent PT_LOAD at {vaddr:#x}"));
        }
        if loads.last().is_some_and(|l| l.mem.end > vaddr) {
            return Err("PT_LOAD segments overlap or are out of order".into());
        }
        loads.push(Load {
            mem: vaddr..end,
            file_start: offset,
            file_len: filesz,
            exec,
            writable: ph.p_flags(LE) & elf::PF_W != 0,
        });
    }
    if loads.is_empty() {
        return Err("no PT_LOAD segment".into());
    }
    Ok(Segments { bytes, loads })
}

fn dynamic_section<'a>(
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

fn check_symbol(sym: &Sym64<LE>, segs: &Segments<'_>, strsz: u64) -> Result<(), String> {
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

/// The NUL-terminated string at `off` of the dynamic string table, None when it does not
/// end inside the table.
fn dynamic_string<'a>(segs: &Segments<'a>, tag: Tag<'_>, strsz: u64, off: u64) -> Option<&'a [u8]> {
    let table = segs.file_bytes(tag(elf::DT_STRTAB)?, strsz)?;
    let rest = table.get(usize::try_from(off).ok()?..)?;
    rest.iter().position(|&b| b == 0).map(|end| &rest[..end])
}

/// The libraries a version requirement may name: the image's DT_NEEDED entries and its
/// own DT_SONAME (glibc looks a requirement's file up among the loaded dependencies,
/// and asserts that it is there).
fn dependency_names<'a>(
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
fn versions(
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

/// `n` little-endian 32-bit words of the image at `addr`, read in place (a hash
/// table's chains are a word per symbol: no copy of them per load).
fn words<'a>(segs: &Segments<'a>, addr: u64, n: u64) -> Option<Words<'a>> {
    Some(Words(segs.file_bytes(addr, n.checked_mul(4)?)?))
}

struct Words<'a>(&'a [u8]);

impl Words<'_> {
    fn get(&self, i: usize) -> Option<u32> {
        let w = self.0.get(i.checked_mul(4)?..)?.get(..4)?;
        Some(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    }
}

/// DT_GNU_HASH: `{nbuckets, symoffset, bloom_size, bloom_shift}`, the bloom words,
/// the buckets, then one chain word per hashed symbol (the last of a chain has bit 0
/// set). Every bucket and chain must stay inside the symbol table.
fn gnu_hash(segs: &Segments<'_>, at: u64, nsyms: u64) -> Result<(), String> {
    let bad = |what: &str| format!("malformed DT_GNU_HASH ({what})");
    let h = words(segs, at, 4).ok_or_else(|| bad("header"))?;
    let field = |i| h.get(i).map(u64::from).ok_or_else(|| bad("header"));
    let (nbuckets, symoffset, bloom, shift) = (field(0)?, field(1)?, field(2)?, field(3)?);
    if nbuckets == 0 || symoffset > nsyms || !bloom.is_power_of_two() || shift >= 64 {
        return Err(bad("header"));
    }
    let buckets_at = at + 16 + bloom * 8;
    segs.file_bytes(at + 16, bloom * 8)
        .ok_or_else(|| bad("bloom filter"))?;
    let buckets = words(segs, buckets_at, nbuckets).ok_or_else(|| bad("buckets"))?;
    let chains_at = buckets_at + nbuckets * 4;
    let chains = words(segs, chains_at, nsyms - symoffset).ok_or_else(|| bad("chains"))?;
    for b in buckets.iter() {
        let b = u64::from(b);
        if b == 0 {
            continue;
        }
        if b < symoffset || b >= nsyms {
            return Err(bad("bucket"));
        }
        // Walk the chain: it must end (bit 0) before the symbol table does.
        let mut i = b - symoffset;
        loop {
            let Some(c) = chains.get(i as usize) else {
                return Err(bad("unterminated chain"));
            };
            if c & 1 != 0 {
                break;
            }
            i += 1;
        }
    }
    Ok(())
}

/// DT_HASH: `{nbucket, nchain}`, buckets, chains; every index below nchain == nsyms.
fn sysv_hash(segs: &Segments<'_>, at: u64, nsyms: u64) -> Result<(), String> {
    let bad = || "malformed DT_HASH".to_string();
    let h = words(segs, at, 2).ok_or_else(bad)?;
    let (nbucket, nchain) = (
        u64::from(h.get(0).ok_or_else(bad)?),
        u64::from(h.get(1).ok_or_else(bad)?),
    );
    if nbucket == 0 || nchain != nsyms {
        return Err(bad());
    }
    let all = words(segs, at + 8, nbucket + nchain).ok_or_else(bad)?;
    if all.iter().any(|i| u64::from(i) >= nchain) {
        return Err(bad());
    }
    Ok(())
}
