//! A loaded cubin laid out in host memory, as the driver lays it out on a GPU:
//!
//! - each allocatable data section (`.nv.global.init`, `.nv.global` (NOBITS: zeroed),
//!   `.nv.constant*`, any other SHF_ALLOC section that is not code; not the per-block
//!   `.nv.shared.*` nor the per-thread `.nv.local.*`) gets a host block holding its
//!   bytes; a data symbol's address is its section's block plus `st_value`;
//! - each code section gets an offset inside one `mmap(PROT_NONE)` region per module,
//!   so a function's address is distinct, stable, never readable and named back to its
//!   symbol;
//! - the relocations of the data sections are applied: [`R_CUDA_64`] and
//!   [`R_CUDA_G64`], both S + A, the only types nvlink writes there for a 64-bit pointer
//!   to a function (vtables, indirect-function holders) or to data (vtable holders,
//!   constant bank 4's global addresses). Any other type fails the load.
//!
//! Seen with ptxas/nvlink 13.5 (`llvm-readelf-22 -r`): a linked cubin's
//! `.rela.nv.global.init` holds type 2 against device functions (`_ZNK5Shape5sidesEv +
//! 0` in a vtable) and type 4 against data (`_ZTV5Shape + 0` in a vtable holder);
//! `.rela.nv.constant4` holds type 2 against globals. A whole-program cubin (ptxas
//! without `-c`) has no relocation for a function's address: ptxas stored an opaque
//! value the stand-in leaves as it is (and names "unknown").

use crate::errors::{Failure, Outcome, CUDA_ERROR_INVALID_IMAGE};
use crate::memory::{Block, DEVICE_ALIGN};
use object::elf;
use object::read::elf::{FileHeader, Rel as _, Rela as _, SectionHeader, SectionTable, Sym};
use object::{LittleEndian as LE, SectionIndex, SymbolIndex};
use std::collections::HashMap;

type Header = elf::FileHeader64<LE>;
type Sections<'a> = SectionTable<'a, Header, &'a [u8]>;
type Symbols<'a> = object::read::elf::SymbolTable<'a, Header, &'a [u8]>;

/// R_CUDA_64: a 64-bit address, S + A.
pub const R_CUDA_64: u32 = 2;
/// R_CUDA_G64: a 64-bit generic address, S + A.
pub const R_CUDA_G64: u32 = 4;
/// `st_other` bit of a kernel (an entry point), as ptxas writes it.
const STO_CUDA_ENTRY: u8 = 0x10;
const PAGE: usize = 4096;
/// Code sections start at least this aligned inside the region (instructions are 16
/// bytes).
const CODE_ALIGN: u64 = 128;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolKind {
    Function,
    Data,
}

/// A defined symbol of the module, with its address in this process.
#[derive(Clone, Debug)]
pub struct Symbol {
    pub name: String,
    pub kind: SymbolKind,
    pub addr: u64,
    pub size: u64,
    /// GLOBAL or WEAK binding.
    pub global: bool,
    /// A kernel (an entry point), as opposed to a device function.
    pub entry: bool,
}

struct DataSection {
    name: String,
    len: usize,
    block: Block,
}

/// One `PROT_NONE` mapping: the module's code addresses.
struct CodeRegion {
    base: u64,
    len: usize,
}

impl CodeRegion {
    fn reserve(len: usize) -> Outcome<CodeRegion> {
        let len = len.max(1).div_ceil(PAGE) * PAGE;
        // SAFETY: a fresh anonymous mapping at an address the kernel picks; it overlaps
        // nothing of ours and is never accessed (PROT_NONE).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Failure::new(
                crate::errors::CUDA_ERROR_OUT_OF_MEMORY,
                format!(
                    "reserving {len} bytes of code addresses: {}",
                    std::io::Error::last_os_error()
                ),
            ));
        }
        Ok(CodeRegion {
            base: base as u64,
            len,
        })
    }

    fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr - self.base < self.len as u64
    }
}

impl Drop for CodeRegion {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `reserve` with this length and is unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// A loaded cubin.
pub struct Module {
    data: Vec<DataSection>,
    code: CodeRegion,
    symbols: Vec<Symbol>,
    /// Name -> index into `symbols` (a global symbol wins over a local one).
    by_name: HashMap<String, usize>,
    /// Kernel -> bytes of its static shared memory (its `.nv.shared.<kernel>` section).
    shared: HashMap<String, u64>,
    /// The image's size in bytes.
    pub bytes: usize,
}

fn invalid(detail: impl Into<String>) -> Failure {
    Failure::new(CUDA_ERROR_INVALID_IMAGE, detail)
}

fn parse_error(what: &str) -> impl Fn(object::read::Error) -> Failure + '_ {
    move |e| invalid(format!("{what}: {e}"))
}

/// Sections that hold per-block or per-thread memory, not global memory.
fn is_per_block_or_thread(name: &str) -> bool {
    name.starts_with(".nv.shared") || name.starts_with(".nv.local")
}

/// Where each section lives in this process: a data block's index, or an offset into the
/// code region.
#[derive(Clone, Copy)]
enum Home {
    Data(usize),
    Code(u64),
    Nowhere,
}

/// What the load needs of the ELF file beside the bytes.
struct Parsed<'a> {
    bytes: &'a [u8],
    sections: Sections<'a>,
    symbols: Symbols<'a>,
    names: Vec<String>,
}

impl<'a> Parsed<'a> {
    fn new(bytes: &'a [u8]) -> Outcome<Parsed<'a>> {
        let header = Header::parse(bytes).map_err(parse_error("the ELF header"))?;
        let sections = header
            .sections(LE, bytes)
            .map_err(parse_error("the section table"))?;
        let symbols = sections
            .symbols(LE, bytes, elf::SHT_SYMTAB)
            .map_err(parse_error("the symbol table"))?;
        let names = sections
            .iter()
            .map(|s| {
                sections
                    .section_name(LE, s)
                    .map(|n| String::from_utf8_lossy(n).into_owned())
                    .map_err(parse_error("a section name"))
            })
            .collect::<Outcome<Vec<_>>>()?;
        Ok(Parsed {
            bytes,
            sections,
            symbols,
            names,
        })
    }

    fn section_data(&self, index: usize) -> Outcome<&'a [u8]> {
        let section = self
            .sections
            .section(SectionIndex(index))
            .map_err(parse_error("a section"))?;
        section
            .data(LE, self.bytes)
            .map_err(parse_error(&self.names[index]))
    }
}

impl Module {
    /// Lay out `bytes` (a cubin) and apply its data relocations.
    pub fn load(bytes: &[u8]) -> Outcome<Module> {
        let parsed = Parsed::new(bytes)?;
        let (data, code_len, homes) = lay_out_data(&parsed)?;
        let code = CodeRegion::reserve(code_len as usize)?;
        let mut module = Module {
            data,
            code,
            symbols: Vec::new(),
            by_name: HashMap::new(),
            shared: HashMap::new(),
            bytes: bytes.len(),
        };
        module.collect_symbols(&parsed, &homes)?;
        module.collect_shared(&parsed);
        module.apply_relocations(&parsed, &homes)?;
        Ok(module)
    }

    /// The address of a section's start in this process.
    fn section_base(&self, homes: &[Home], index: usize) -> Option<u64> {
        match homes.get(index)? {
            Home::Data(d) => Some(self.data[*d].block.addr()),
            Home::Code(offset) => Some(self.code.base + offset),
            Home::Nowhere => None,
        }
    }

    fn collect_symbols(&mut self, parsed: &Parsed, homes: &[Home]) -> Outcome {
        for sym in parsed.symbols.iter() {
            let index = sym.st_shndx(LE) as usize;
            let kind = match (homes.get(index), sym.st_type()) {
                (_, elf::STT_SECTION | elf::STT_FILE) => continue,
                (Some(Home::Code(_)), elf::STT_FUNC) => SymbolKind::Function,
                (Some(Home::Data(_)), _) => SymbolKind::Data,
                _ => continue,
            };
            if sym.st_shndx(LE) == elf::SHN_UNDEF || index >= elf::SHN_LORESERVE as usize {
                continue;
            }
            let name = parsed
                .symbols
                .symbol_name(LE, sym)
                .map_err(parse_error("a symbol name"))?;
            let base = self.section_base(homes, index).expect("a placed section");
            let symbol = Symbol {
                name: String::from_utf8_lossy(name).into_owned(),
                kind,
                addr: base + sym.st_value(LE),
                size: sym.st_size(LE),
                global: sym.st_bind() != elf::STB_LOCAL,
                entry: sym.st_other() & STO_CUDA_ENTRY != 0,
            };
            let slot = self.symbols.len();
            match self.by_name.get(&symbol.name) {
                Some(&other) if self.symbols[other].global || !symbol.global => {}
                _ => {
                    self.by_name.insert(symbol.name.clone(), slot);
                }
            }
            self.symbols.push(symbol);
        }
        Ok(())
    }

    fn collect_shared(&mut self, parsed: &Parsed) {
        for (section, name) in parsed.sections.iter().zip(&parsed.names) {
            if let Some(kernel) = name.strip_prefix(".nv.shared.") {
                self.shared.insert(kernel.to_owned(), section.sh_size(LE));
            }
        }
    }

    fn apply_relocations(&mut self, parsed: &Parsed, homes: &[Home]) -> Outcome {
        for (index, section) in parsed.sections.iter().enumerate() {
            let target = section.sh_info(LE) as usize;
            let Some(Home::Data(d)) = homes.get(target).copied() else {
                continue;
            };
            let rela = section
                .rela(LE, parsed.bytes)
                .map_err(parse_error(&parsed.names[index]))?;
            let rel = section
                .rel(LE, parsed.bytes)
                .map_err(parse_error(&parsed.names[index]))?;
            let name = &parsed.names[index];
            if let Some((entries, _)) = rela {
                for r in entries {
                    let (sym, ty) = (r.r_sym(LE, false), r.r_type(LE, false));
                    let fix = Fixup {
                        section: name,
                        offset: r.r_offset(LE),
                        symbol: sym,
                        ty,
                        addend: Some(r.r_addend(LE)),
                    };
                    self.apply(parsed, homes, d, fix)?;
                }
            }
            if let Some((entries, _)) = rel {
                for r in entries {
                    let fix = Fixup {
                        section: name,
                        offset: r.r_offset(LE),
                        symbol: r.r_sym(LE),
                        ty: r.r_type(LE),
                        addend: None,
                    };
                    self.apply(parsed, homes, d, fix)?;
                }
            }
        }
        Ok(())
    }

    /// Write S + A into data section `d`.
    fn apply(&mut self, parsed: &Parsed, homes: &[Home], d: usize, fix: Fixup) -> Outcome {
        if fix.ty != R_CUDA_64 && fix.ty != R_CUDA_G64 {
            return Err(invalid(format!(
                "relocation type {} at {}+{:#x}: the stand-in applies only R_CUDA_64 (2) \
                 and R_CUDA_G64 (4) in data sections",
                fix.ty, fix.section, fix.offset
            )));
        }
        let s = self.symbol_value(parsed, homes, fix.symbol, &fix)?;
        let len = self.data[d].len;
        let place = usize::try_from(fix.offset)
            .ok()
            .filter(|&o| o.checked_add(8).is_some_and(|end| end <= len))
            .ok_or_else(|| {
                invalid(format!(
                    "a relocation at {}+{:#x} lies outside its {len} bytes",
                    fix.section, fix.offset
                ))
            })?;
        let word = &mut self.data[d].block.bytes_mut(len)[place..place + 8];
        let addend = match fix.addend {
            Some(a) => a,
            None => i64::from_le_bytes(word.try_into().expect("8 bytes")),
        };
        word.copy_from_slice(&s.wrapping_add_signed(addend).to_le_bytes());
        Ok(())
    }

    /// S: the address of relocation symbol `index`.
    fn symbol_value(
        &self,
        parsed: &Parsed,
        homes: &[Home],
        index: u32,
        fix: &Fixup,
    ) -> Outcome<u64> {
        let sym = parsed
            .symbols
            .symbol(SymbolIndex(index as usize))
            .map_err(parse_error("a relocation's symbol"))?;
        let name = parsed
            .symbols
            .symbol_name(LE, sym)
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        if sym.st_shndx(LE) == elf::SHN_UNDEF {
            if sym.st_bind() == elf::STB_WEAK {
                return Ok(0);
            }
            return Err(invalid(format!(
                "a relocation at {}+{:#x} refers to the undefined symbol `{name}`",
                fix.section, fix.offset
            )));
        }
        let base = self
            .section_base(homes, sym.st_shndx(LE) as usize)
            .ok_or_else(|| {
                invalid(format!(
                    "a relocation at {}+{:#x} refers to `{name}`, in a section that is \
                     neither global memory nor code",
                    fix.section, fix.offset
                ))
            })?;
        Ok(base + sym.st_value(LE))
    }

    /// A data symbol: (address, size).
    pub fn global(&self, name: &str) -> Option<(u64, u64)> {
        let s = &self.symbols[*self.by_name.get(name)?];
        (s.kind == SymbolKind::Data).then_some((s.addr, s.size))
    }

    /// A function symbol with GLOBAL or WEAK binding.
    pub fn function(&self, name: &str) -> Option<&Symbol> {
        let s = &self.symbols[*self.by_name.get(name)?];
        (s.kind == SymbolKind::Function && s.global).then_some(s)
    }

    pub fn symbols(&self) -> &[Symbol] {
        &self.symbols
    }

    /// Bytes of static shared memory of a kernel (0 without a `.nv.shared.<kernel>`).
    pub fn static_shared(&self, kernel: &str) -> u64 {
        self.shared.get(kernel).copied().unwrap_or(0)
    }

    /// Every data section: (address, length, name), for the memory registry.
    pub fn data_ranges(&self) -> impl Iterator<Item = (u64, usize, &str)> {
        self.data
            .iter()
            .map(|d| (d.block.addr(), d.len, d.name.as_str()))
    }

    /// `symbol+offset` for an address inside this module (the smallest symbol that
    /// covers it, a global one first), None when no symbol does.
    pub fn name_of(&self, addr: u64) -> Option<String> {
        let code = self.code.contains(addr);
        let in_data = self
            .data
            .iter()
            .any(|d| addr >= d.block.addr() && addr - d.block.addr() < d.len.max(1) as u64);
        if !code && !in_data {
            return None;
        }
        let kind = if code {
            SymbolKind::Function
        } else {
            SymbolKind::Data
        };
        self.symbols
            .iter()
            .filter(|s| s.kind == kind && addr >= s.addr && addr - s.addr < s.size.max(1))
            .min_by_key(|s| (s.size, !s.global, s.name.clone()))
            .map(|s| format!("{}+{}", s.name, addr - s.addr))
    }
}

/// One relocation, whatever its table's format.
struct Fixup<'a> {
    section: &'a str,
    offset: u64,
    symbol: u32,
    ty: u32,
    /// RELA's addend; REL's is the word in place.
    addend: Option<i64>,
}

/// Allocate and fill a block per data section; give each code section its offset in
/// the code region. Returns the blocks, the code region's length, and each section's
/// home.
fn lay_out_data(parsed: &Parsed) -> Outcome<(Vec<DataSection>, u64, Vec<Home>)> {
    let mut data = Vec::new();
    let mut homes = Vec::new();
    let mut code_len = 0u64;
    for (index, section) in parsed.sections.iter().enumerate() {
        let flags = section.sh_flags(LE);
        let name = &parsed.names[index];
        let alloc = flags & elf::SHF_ALLOC as u64 != 0;
        let exec = flags & elf::SHF_EXECINSTR as u64 != 0;
        let size = section.sh_size(LE);
        let home = if !alloc || is_per_block_or_thread(name) {
            Home::Nowhere
        } else if exec {
            let align = section.sh_addralign(LE).max(CODE_ALIGN);
            let offset = code_len.div_ceil(align) * align;
            code_len = offset + size;
            Home::Code(offset)
        } else {
            let len =
                usize::try_from(size).map_err(|_| invalid(format!("{name}: {size} bytes")))?;
            let align = (section.sh_addralign(LE) as usize).max(DEVICE_ALIGN);
            let mut block = Block::zeroed(len, align.next_power_of_two())?;
            if section.sh_type(LE) != elf::SHT_NOBITS {
                let contents = parsed.section_data(index)?;
                block.bytes_mut(len)[..contents.len()].copy_from_slice(contents);
            }
            data.push(DataSection {
                name: name.clone(),
                len,
                block,
            });
            Home::Data(data.len() - 1)
        };
        homes.push(home);
    }
    Ok((data, code_len, homes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_cubin::linked_cubin;
    use object::{Object, ObjectSection};

    /// `len` bytes of the module's data at `addr`.
    fn bytes_at(module: &Module, addr: u64, len: usize) -> Vec<u8> {
        let inside = module
            .data
            .iter()
            .any(|d| addr >= d.block.addr() && addr + len as u64 <= d.block.addr() + d.len as u64);
        assert!(inside, "{addr:#x}+{len} is not inside a data section");
        // SAFETY: the range lies inside the section's block, which the module owns.
        unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec()
    }

    fn word(module: &Module, addr: u64) -> u64 {
        u64::from_le_bytes(bytes_at(module, addr, 8).try_into().unwrap())
    }

    #[test]
    fn its_size_is_read_from_its_header() {
        let cubin = linked_cubin();
        assert_eq!(crate::image::elf_size(cubin), Some(cubin.len() as u64));
        assert_eq!(crate::image::cubin_sm_of(cubin).unwrap(), 90);
    }

    #[test]
    fn function_pointers_in_data_point_at_the_functions_code_addresses() {
        let module = Module::load(linked_cubin()).unwrap();
        let f1 = module.function("f1").unwrap().addr;
        let f2 = module.function("f2").unwrap().addr;
        let kern = module.function("kern").unwrap();
        assert!(kern.entry && !module.function("f1").unwrap().entry);
        let (holder, size) = module.global("holder").unwrap();
        assert_eq!(size, 8);
        assert_eq!(word(&module, holder), f1);
        let (vtable, _) = module.global("vtable").unwrap();
        assert_eq!(word(&module, vtable), 0);
        assert_eq!(word(&module, vtable + 16), f1);
        assert_eq!(word(&module, vtable + 24), f2);
        assert_eq!(module.name_of(f1).as_deref(), Some("f1+0"));
        assert_eq!(module.name_of(f2 + 16).as_deref(), Some("f2+16"));
        // Code addresses: distinct, inside the module's unreadable region.
        let functions: Vec<u64> = ["f1", "f2", "kern", "plain"]
            .iter()
            .map(|f| module.function(f).unwrap().addr)
            .collect();
        let mut distinct = functions.clone();
        distinct.dedup();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 4);
        assert!(functions.iter().all(|&a| module.code.contains(a)));
        assert!(module.global("f1").is_none(), "a function is not a global");
        assert!(
            module.function("holder").is_none(),
            "a global is not a function"
        );
    }

    #[test]
    fn data_pointers_point_into_the_data() {
        let module = Module::load(linked_cubin()).unwrap();
        let (vtable, _) = module.global("vtable").unwrap();
        let (vholder, _) = module.global("vholder").unwrap();
        assert_eq!(word(&module, vholder), vtable + 16);
        assert_eq!(module.name_of(vtable + 16).as_deref(), Some("vtable+16"));
        let (data, _) = module.global("data").unwrap();
        let (dptr, _) = module.global("dptr").unwrap();
        assert_eq!(word(&module, dptr), data + 4);
        let ints: Vec<u8> = [1i32, 2, 3, 4]
            .iter()
            .flat_map(|i| i.to_le_bytes())
            .collect();
        assert_eq!(
            bytes_at(&module, data, 16),
            ints,
            ".nv.global.init's contents"
        );
        // .nv.global (NOBITS): zeroed, 400 bytes.
        let (zeroed, size) = module.global("zeroed").unwrap();
        assert_eq!(size, 400);
        assert!((0..50).all(|i| word(&module, zeroed + 8 * i) == 0));
        assert_eq!(module.name_of(zeroed + 399).as_deref(), Some("zeroed+399"));
        assert_eq!(module.name_of(0x10), None);
    }

    #[test]
    fn static_shared_memory_is_the_kernels_shared_section() {
        let cubin = linked_cubin();
        let file = object::File::parse(cubin).unwrap();
        let shared = file.section_by_name(".nv.shared.kern").unwrap().size();
        assert!(shared >= 256, "tile is 256 bytes, the section {shared}");
        let module = Module::load(cubin).unwrap();
        assert_eq!(module.static_shared("kern"), shared);
        assert_eq!(module.static_shared("plain"), 0);
        assert!(
            module
                .data_ranges()
                .all(|(_, _, name)| !name.starts_with(".nv.shared")),
            "shared memory is not global memory"
        );
    }

    /// The cubin with its first data relocation's type replaced by `ty`.
    fn with_relocation_type(ty: u32) -> Vec<u8> {
        let mut bytes = linked_cubin().to_vec();
        let file = object::File::parse(&*bytes).unwrap();
        let rela = file.section_by_name(".rela.nv.global.init").unwrap();
        let (offset, _) = rela.file_range().unwrap();
        // r_info's low 32 bits are the type (Elf64_Rela: r_offset, r_info, r_addend).
        let at = offset as usize + 8;
        bytes[at..at + 4].copy_from_slice(&ty.to_le_bytes());
        bytes
    }

    #[test]
    fn any_other_relocation_type_in_data_fails_the_load() {
        let refused = Module::load(&with_relocation_type(0x38)).err().unwrap();
        assert_eq!(refused.code, CUDA_ERROR_INVALID_IMAGE);
        assert!(
            refused.detail.contains("relocation type 56")
                && refused.detail.contains(".rela.nv.global.init"),
            "{refused:?}"
        );
        // The two supported types still load.
        assert!(Module::load(&with_relocation_type(R_CUDA_G64)).is_ok());
    }
}
