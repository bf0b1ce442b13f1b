//! The symbols of an ELF device image, and the rule by which an offload entry's name
//! denotes one of them.
//!
//! Parsed once per load, without copying: exported names are looked up through the
//! image's own GNU hash table (what the dynamic loader's `dlsym` walks), and names the
//! dynamic symbol table lacks (clang 16 makes every `declare target` function hidden, so
//! the static linker turns it into a LOCAL symbol of `.symtab`) through an index of the
//! static symbol table, built the first time one is asked for.

use object::elf::{self, FileHeader64, SectionHeader64, Sym64};
use object::read::elf::{
    ElfFile64, GnuHashTable, ProgramHeader, SectionHeader, Sym, SymbolTable, VersionTable,
};
use object::{LittleEndian as LE, SymbolIndex};
use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry;
use std::ops::Range;
use std::sync::OnceLock;
use thiserror::Error;

type Elf = FileHeader64<LE>;

/// One defined symbol of the image: its ELF fields, addresses as the file gives them
/// (the loader adds its load bias).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub value: u64,
    pub size: u64,
    /// `STT_*`.
    pub kind: u8,
    /// `st_shndx`.
    pub section: u16,
}

impl Symbol {
    fn from_elf(sym: &Sym64<LE>) -> Self {
        Symbol {
            value: sym.st_value(LE),
            size: sym.st_size(LE),
            kind: sym.st_type(),
            section: sym.st_shndx(LE),
        }
    }

    /// Whether the symbol's address is `load bias + value` and names memory of the
    /// image, as the loader computes it for an ordinary symbol. TLS symbols (per thread),
    /// GNU indirect functions (their resolver decides the address), absolute symbols (no
    /// bias) and zero values (which `dlsym` skips) are not.
    pub fn is_plain(&self) -> bool {
        self.value != 0
            && self.section != elf::SHN_ABS
            && self.kind != elf::STT_TLS
            && self.kind != elf::STT_GNU_IFUNC
    }

    fn kind_name(&self) -> &'static str {
        match self.kind {
            elf::STT_NOTYPE => "an untyped symbol (STT_NOTYPE)",
            elf::STT_OBJECT => "a data object (STT_OBJECT)",
            elf::STT_FUNC => "a function (STT_FUNC)",
            elf::STT_TLS => "a thread-local variable (STT_TLS)",
            elf::STT_GNU_IFUNC => "a GNU indirect function (STT_GNU_IFUNC)",
            elf::STT_COMMON => "a common symbol (STT_COMMON)",
            _ => "a symbol of another type",
        }
    }
}

/// What the symbol an indirect entry names must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// The device function itself (the seed design's size-0 entries): `STT_FUNC`, in an
    /// executable segment.
    Function,
    /// A device global that holds a pointer (size-8 and vtable entries): a data symbol
    /// whose bytes the image loads.
    Data,
}

impl Wanted {
    fn noun(self) -> &'static str {
        match self {
            Wanted::Function => "function",
            Wanted::Data => "global",
        }
    }
}

/// A definition of a name in the static symbol table, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticDefinition {
    pub value: u64,
    /// The name of the `STT_FILE` symbol before it in `.symtab` (its translation unit),
    /// None if there is none or it has no name.
    pub file: Option<String>,
}

impl std::fmt::Display for StaticDefinition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "image address {:#x}", self.value)?;
        match &self.file {
            Some(file) => write!(f, " (from {file})"),
            None => write!(f, " (no file symbol names its source)"),
        }
    }
}

fn list(definitions: &[StaticDefinition]) -> String {
    let names: Vec<String> = definitions.iter().map(|d| d.to_string()).collect();
    names.join(" and ")
}

/// Why an indirect entry's name denotes no usable symbol.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SymbolError {
    #[error(
        "no {} `{name}` in the image: neither its dynamic symbol table nor its static one \
         (.symtab) defines it",
        wanted.noun()
    )]
    NotFound { name: String, wanted: Wanted },
    #[error(
        "no {} `{name}` in the image's dynamic symbol table, and the image has no static \
         symbol table (.symtab was stripped), where a hidden {} would be: link the device \
         image without stripping it, or register it with a size-8 entry (omp_indirect.h)",
        wanted.noun(),
        wanted.noun()
    )]
    Stripped { name: String, wanted: Wanted },
    #[error(
        "`{name}` has {} definitions in the image's static symbol table (.symtab), at {}: \
         static functions of different translation units cannot be told apart by name; \
         give them distinct names, or register them with size-8 entries (omp_indirect.h)",
        definitions.len(),
        list(definitions)
    )]
    Ambiguous {
        name: String,
        definitions: Vec<StaticDefinition>,
    },
    #[error("`{name}` is {found}, not a {}", wanted.noun())]
    WrongKind {
        name: String,
        wanted: Wanted,
        found: &'static str,
    },
    #[error(
        "`{name}` at image address {value:#x} ({size} bytes) does not lie in {}",
        if *wanted == Wanted::Function { "an executable segment of the image" }
        else { "a loaded segment of the image" }
    )]
    OutsideSegments {
        name: String,
        wanted: Wanted,
        value: u64,
        size: u64,
    },
}

/// One PT_LOAD: the image addresses it covers, and whether it holds code.
#[derive(Clone, Debug)]
struct Segment {
    memory: Range<u64>,
    executable: bool,
}

/// The dynamic symbol table and the means to look names up in it.
enum Dynamic<'a> {
    /// The image's GNU hash table over its `.dynsym`.
    Hashed(Box<Hashed<'a>>),
    /// No usable GNU hash table: every defined dynamic symbol, by name.
    Map(FxHashMap<&'a [u8], Symbol>),
}

/// `.dynsym` and the GNU hash table over it.
struct Hashed<'a> {
    table: SymbolTable<'a, Elf>,
    hash: GnuHashTable<'a, Elf>,
    versions: VersionTable<'a, Elf>,
    hints: HashLayout<'a>,
}

/// Defined symbols of `.symtab` by name: most names have one definition, a few
/// (static functions of several translation units) more.
#[derive(Default)]
struct StaticIndex<'a> {
    first: FxHashMap<&'a [u8], u32>,
    /// Further definitions of names in `first`: (name, symbol index).
    more: Vec<(&'a [u8], u32)>,
}

/// The symbol tables of one image.
pub struct ImageSymbols<'a> {
    dynamic: Dynamic<'a>,
    /// `.symtab`, None when the image was stripped.
    statics: Option<SymbolTable<'a, Elf>>,
    static_index: OnceLock<StaticIndex<'a>>,
    segments: Vec<Segment>,
    /// (address, size) of every defined symbol with a size, sorted by address: built on
    /// the first [`ImageSymbols::within_one_symbol`] (only vtable entries need it).
    extents: OnceLock<Vec<(u64, u64)>>,
}

/// How many symbols starting at or below an address `within_one_symbol` looks at: enough
/// for symbols nested in or aliasing one another, and a bound on the work.
const NESTED_SYMBOLS_SEARCHED: usize = 16;

fn is_definition(sym: &Sym64<LE>) -> bool {
    let section = sym.st_shndx(LE);
    section != elf::SHN_UNDEF && sym.st_type() != elf::STT_FILE && sym.st_type() != elf::STT_SECTION
}

impl<'a> ImageSymbols<'a> {
    /// The symbol tables of a parsed image. Nothing is copied or indexed here except the
    /// program headers' load ranges (and, for an image without a GNU hash table, its
    /// dynamic symbols by name).
    pub fn parse(file: &ElfFile64<'a, LE>, bytes: &'a [u8]) -> Result<Self, object::Error> {
        let sections = file.elf_section_table();
        let table = sections.symbols(LE, bytes, elf::SHT_DYNSYM)?;
        let hash = match sections.gnu_hash(LE, bytes)? {
            Some((hash, link)) if link == table.section() => {
                HashLayout::parse(file, bytes, &table)?.map(|hints| (hash, hints))
            }
            _ => None,
        };
        let dynamic = match hash {
            Some((hash, hints)) => Dynamic::Hashed(Box::new(Hashed {
                table,
                hash,
                versions: sections.versions(LE, bytes)?.unwrap_or_default(),
                hints,
            })),
            None => {
                let mut map = FxHashMap::default();
                for sym in table.symbols().iter().filter(|s| is_definition(s)) {
                    map.insert(sym.name(LE, table.strings())?, Symbol::from_elf(sym));
                }
                Dynamic::Map(map)
            }
        };
        let statics = sections.symbols(LE, bytes, elf::SHT_SYMTAB)?;
        let segments = file
            .elf_program_headers()
            .iter()
            .filter(|ph| ph.p_type(LE) == elf::PT_LOAD)
            .filter_map(|ph| {
                let start = ph.p_vaddr(LE);
                Some(Segment {
                    memory: start..start.checked_add(ph.p_memsz(LE))?,
                    executable: ph.p_flags(LE) & elf::PF_X != 0,
                })
            })
            .collect();
        Ok(ImageSymbols {
            dynamic,
            statics: (!statics.is_empty()).then_some(statics),
            static_index: OnceLock::new(),
            segments,
            extents: OnceLock::new(),
        })
    }

    /// Defined dynamic symbols only, from (name, address, size) triples: for tests of
    /// the address rules.
    #[cfg(test)]
    fn from_dynamic(symbols: impl IntoIterator<Item = (&'a [u8], Symbol)>) -> Self {
        ImageSymbols {
            dynamic: Dynamic::Map(symbols.into_iter().collect()),
            statics: None,
            static_index: OnceLock::new(),
            segments: Vec::new(),
            extents: OnceLock::new(),
        }
    }

    /// The exported definition of `name`, as the dynamic loader finds it by name.
    pub fn dynamic(&self, name: &[u8]) -> Option<Symbol> {
        self.dynamic_hashed(name, elf::gnu_hash(name))
    }

    /// [`Self::dynamic`] for many names, same answers (`found` gets one per name, in
    /// order). In a table of millions of symbols every lookup misses the cache four
    /// times (bloom word, bucket, chain, symbol) and once more for the name; one after
    /// another they cost more than dlsym's. Here the memory each lookup will read is
    /// requested for the whole batch first, stage by stage, so the misses overlap.
    pub fn dynamic_batch(&self, names: &[&[u8]], found: &mut Vec<Option<Symbol>>) {
        found.clear();
        let Dynamic::Hashed(hashed) = &self.dynamic else {
            found.extend(names.iter().map(|n| self.dynamic(n)));
            return;
        };
        let hashes: Vec<u32> = names.iter().map(|n| elf::gnu_hash(n)).collect();
        let hints = &hashed.hints;
        for &h in &hashes {
            hints.request_bucket(h);
        }
        let chains: Vec<u32> = hashes.iter().map(|&h| hints.request_chain(h)).collect();
        for &at in &chains {
            hints.request_name(at);
        }
        found.extend(
            names
                .iter()
                .zip(&hashes)
                .map(|(n, &h)| self.dynamic_hashed(n, h)),
        );
    }

    fn dynamic_hashed(&self, name: &[u8], name_hash: u32) -> Option<Symbol> {
        match &self.dynamic {
            Dynamic::Hashed(h) => {
                let (_, sym) = h
                    .hash
                    .find(LE, name, name_hash, None, &h.table, &h.versions)?;
                // The loader skips undefined and local symbols in a chain; a well-formed
                // image has none there.
                (is_definition(sym) && sym.st_bind() != elf::STB_LOCAL)
                    .then(|| Symbol::from_elf(sym))
            }
            Dynamic::Map(map) => map.get(name).copied(),
        }
    }

    /// Size of a defined dynamic symbol, None if the image does not export it.
    pub fn size_of(&self, name: &[u8]) -> Option<u64> {
        self.dynamic(name).map(|s| s.size)
    }

    /// Image address (`st_value`) of a defined dynamic symbol.
    pub fn address_of(&self, name: &[u8]) -> Option<u64> {
        self.dynamic(name).map(|s| s.value)
    }

    /// Whether the image has a static symbol table (`.symtab`): stripped images do not.
    pub fn has_static_table(&self) -> bool {
        self.statics.is_some()
    }

    /// The symbol an indirect entry's name denotes, by the one rule every backend that
    /// reads the image's symbols follows: the dynamic symbol table's definition (what
    /// `dlsym` would find); else the static symbol table's, which must be the only one
    /// of that name (static functions of two translation units may share it). Either
    /// way it must be what `wanted` says and lie inside the image's segments.
    pub fn indirect_target(&self, name: &[u8], wanted: Wanted) -> Result<Symbol, SymbolError> {
        self.indirect_target_given(name, wanted, self.dynamic(name))
    }

    /// [`Self::indirect_target`] where `dynamic` is `name`'s dynamic lookup, done
    /// already ([`Self::dynamic_batch`]).
    pub fn indirect_target_given(
        &self,
        name: &[u8],
        wanted: Wanted,
        dynamic: Option<Symbol>,
    ) -> Result<Symbol, SymbolError> {
        let named = || String::from_utf8_lossy(name).into_owned();
        let sym = match dynamic {
            Some(sym) => sym,
            None => self.static_definition(name, wanted)?,
        };
        let kind_ok = match wanted {
            Wanted::Function => sym.kind == elf::STT_FUNC,
            Wanted::Data => matches!(
                sym.kind,
                elf::STT_OBJECT | elf::STT_NOTYPE | elf::STT_COMMON
            ),
        };
        if !kind_ok || !sym.is_plain() {
            return Err(SymbolError::WrongKind {
                name: named(),
                wanted,
                found: sym.kind_name(),
            });
        }
        if !self.inside_segment(sym, wanted == Wanted::Function) {
            return Err(SymbolError::OutsideSegments {
                name: named(),
                wanted,
                value: sym.value,
                size: sym.size,
            });
        }
        Ok(sym)
    }

    /// The one static definition of `name` of the wanted kind.
    fn static_definition(&self, name: &[u8], wanted: Wanted) -> Result<Symbol, SymbolError> {
        let named = || String::from_utf8_lossy(name).into_owned();
        let Some(statics) = &self.statics else {
            return Err(SymbolError::Stripped {
                name: named(),
                wanted,
            });
        };
        let index = self.static_index(statics);
        let mut found: Vec<(u32, Symbol)> = index
            .first
            .get(name)
            .into_iter()
            .chain(
                index
                    .more
                    .iter()
                    .filter(|(n, _)| *n == name)
                    .map(|(_, i)| i),
            )
            .filter_map(|&i| {
                let sym = statics.symbol(SymbolIndex(i as usize)).ok()?;
                Some((i, Symbol::from_elf(sym)))
            })
            .collect();
        // A function's aliases share its address: one definition.
        found.sort_by_key(|&(i, s)| (s.value, i));
        found.dedup_by_key(|(_, s)| s.value);
        match found.as_slice() {
            [] => Err(SymbolError::NotFound {
                name: named(),
                wanted,
            }),
            [(_, sym)] => Ok(*sym),
            several => Err(SymbolError::Ambiguous {
                name: named(),
                definitions: several
                    .iter()
                    .map(|&(i, s)| StaticDefinition {
                        value: s.value,
                        file: file_symbol_before(statics, i),
                    })
                    .collect(),
            }),
        }
    }

    fn static_index(&self, statics: &SymbolTable<'a, Elf>) -> &StaticIndex<'a> {
        self.static_index.get_or_init(|| {
            let mut index = StaticIndex::default();
            let strings = statics.strings();
            for (i, sym) in statics.symbols().iter().enumerate() {
                if !is_definition(sym) {
                    continue;
                }
                let (Ok(name), Ok(i)) = (sym.name(LE, strings), u32::try_from(i)) else {
                    continue;
                };
                if name.is_empty() {
                    continue;
                }
                match index.first.entry(name) {
                    Entry::Occupied(_) => index.more.push((name, i)),
                    Entry::Vacant(slot) => {
                        slot.insert(i);
                    }
                }
            }
            index
        })
    }

    /// `sym`'s bytes (at least its first) lie in one PT_LOAD, an executable one if asked.
    fn inside_segment(&self, sym: Symbol, executable: bool) -> bool {
        let Some(end) = sym.value.checked_add(sym.size.max(1)) else {
            return false;
        };
        self.segments.iter().any(|s| {
            s.memory.start <= sym.value && end <= s.memory.end && (s.executable || !executable)
        })
    }

    fn extents(&self) -> &[(u64, u64)] {
        self.extents.get_or_init(|| {
            let sized = |sym: &Symbol| (sym.size > 0).then_some((sym.value, sym.size));
            let mut extents: Vec<(u64, u64)> = match &self.dynamic {
                Dynamic::Hashed(h) => h
                    .table
                    .symbols()
                    .iter()
                    .filter(|s| is_definition(s))
                    .filter_map(|s| sized(&Symbol::from_elf(s)))
                    .collect(),
                Dynamic::Map(map) => map.values().filter_map(sized).collect(),
            };
            // Hidden objects (a vtable clang 16 made hidden) are only in `.symtab`.
            if let Some(statics) = &self.statics {
                extents.extend(
                    statics
                        .symbols()
                        .iter()
                        .filter(|s| is_definition(s))
                        .filter_map(|s| sized(&Symbol::from_elf(s))),
                );
            }
            extents.sort_unstable();
            extents.dedup();
            extents
        })
    }

    /// Whether the image range `addr .. addr + len` lies inside one defined symbol of
    /// either table: what the plugin requires before it reads memory that an image's
    /// data points to.
    pub fn within_one_symbol(&self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        let extents = self.extents();
        let starts_at_or_below = extents.partition_point(|&(a, _)| a <= addr);
        extents[..starts_at_or_below]
            .iter()
            .rev()
            .take(NESTED_SYMBOLS_SEARCHED)
            .any(|&(a, size)| a.checked_add(size).is_some_and(|e| e >= end))
    }
}

/// Where a GNU hash lookup reads, for [`ImageSymbols::dynamic_batch`] to ask for it
/// early. Only hints: the lookup itself is object's; a wrong hint costs time, nothing
/// else (every read here is bounds-checked and prefetches never fault).
struct HashLayout<'a> {
    /// `{nbuckets, symoffset, bloom_size, bloom_shift}`, bloom words, buckets, chains.
    bytes: &'a [u8],
    bloom_words: u32,
    buckets: u32,
    symoffset: u32,
    symbols: &'a [Sym64<LE>],
    strings: &'a [u8],
}

impl<'a> HashLayout<'a> {
    /// None where object's lookup could not use the table: it divides by the bucket
    /// count and masks with the bloom word count, so at least one bucket and a power of
    /// two of bloom words (an image without them is looked up through a map; the x86_64
    /// checks refuse it first).
    fn parse(
        file: &ElfFile64<'a, LE>,
        bytes: &'a [u8],
        table: &SymbolTable<'a, Elf>,
    ) -> Result<Option<Self>, object::Error> {
        let sections = file.elf_section_table();
        let Some(section) = sections.iter().find(|s| s.sh_type(LE) == elf::SHT_GNU_HASH) else {
            return Ok(None);
        };
        let Some(header) = sections.gnu_hash_header(LE, bytes)? else {
            return Ok(None);
        };
        let (buckets, bloom_words) = (header.bucket_count.get(LE), header.bloom_count.get(LE));
        if buckets == 0 || !bloom_words.is_power_of_two() {
            return Ok(None);
        }
        let data = |s: &SectionHeader64<LE>| s.data(LE, bytes).ok();
        let strings = sections
            .section(table.string_section())
            .ok()
            .and_then(data)
            .unwrap_or_default();
        Ok(Some(HashLayout {
            bytes: data(section).unwrap_or_default(),
            bloom_words,
            buckets,
            symoffset: header.symbol_base.get(LE),
            symbols: table.symbols(),
            strings,
        }))
    }

    fn word(&self, at: usize) -> Option<u32> {
        let b = self.bytes.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn buckets_at(&self) -> usize {
        16 + 8 * self.bloom_words as usize
    }

    fn bucket_of(&self, hash: u32) -> usize {
        self.buckets_at() + 4 * (hash % self.buckets) as usize
    }

    /// Ask for the bloom word and the bucket of `hash`.
    fn request_bucket(&self, hash: u32) {
        let bloom = 16 + 8 * ((hash / 64) & (self.bloom_words - 1)) as usize;
        prefetch(self.bytes, bloom);
        prefetch(self.bytes, self.bucket_of(hash));
    }

    /// Read the bucket (requested before), ask for its chain word and first symbol;
    /// returns that symbol's index (0: none).
    fn request_chain(&self, hash: u32) -> u32 {
        let Some(index) = self
            .word(self.bucket_of(hash))
            .filter(|&i| i >= self.symoffset && i > 0)
        else {
            return 0;
        };
        let chains = self.buckets_at() + 4 * self.buckets as usize;
        prefetch(self.bytes, chains + 4 * (index - self.symoffset) as usize);
        prefetch(self.symbols, index as usize);
        index
    }

    /// Read the symbol (requested before), ask for its name.
    fn request_name(&self, index: u32) {
        if let Some(sym) = self.symbols.get(index as usize).filter(|_| index > 0) {
            prefetch(self.strings, sym.st_name(LE) as usize);
        }
    }
}

/// Ask the CPU to bring `items[at]` into the cache, if `at` is inside `items`.
fn prefetch<T>(items: &[T], at: usize) {
    if let Some(item) = items.get(at) {
        crate::prefetch::read(item);
    }
}

/// The name of the nearest `STT_FILE` symbol before symbol `index`: linkers keep each
/// object file's local symbols after its file symbol.
fn file_symbol_before(statics: &SymbolTable<'_, Elf>, index: u32) -> Option<String> {
    let symbols = statics.symbols().get(..index as usize)?;
    let file = symbols
        .iter()
        .rev()
        .find(|s| s.st_type() == elf::STT_FILE)?;
    let name = file.name(LE, statics.strings()).ok()?;
    (!name.is_empty()).then(|| String::from_utf8_lossy(name).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(value: u64, size: u64) -> Symbol {
        Symbol {
            value,
            size,
            kind: elf::STT_OBJECT,
            section: 1,
        }
    }

    fn symbols() -> ImageSymbols<'static> {
        ImageSymbols::from_dynamic([
            (&b"vtable"[..], sym(0x1000, 24)),
            (&b"inner"[..], sym(0x1008, 8)),
            (&b"func"[..], sym(0x2000, 5)),
            (&b"marker"[..], sym(0x3000, 0)),
        ])
    }

    #[test]
    fn ranges_must_lie_inside_one_symbol() {
        let s = symbols();
        assert!(s.within_one_symbol(0x1000, 24));
        assert!(
            s.within_one_symbol(0x1008, 16),
            "inside vtable, past the nested symbol"
        );
        assert!(!s.within_one_symbol(0x1000, 25), "one byte past the end");
        assert!(
            !s.within_one_symbol(0x2000, 24),
            "a function smaller than the range"
        );
        assert!(!s.within_one_symbol(0x0fff, 8), "below every symbol");
        assert!(
            !s.within_one_symbol(0x3000, 1),
            "a zero-sized symbol holds nothing"
        );
        assert!(!s.within_one_symbol(u64::MAX - 4, 8), "wrapping range");
    }

    #[test]
    fn names_give_address_and_size() {
        let s = symbols();
        assert_eq!(s.address_of(b"func"), Some(0x2000));
        assert_eq!(s.size_of(b"vtable"), Some(24));
        assert_eq!(s.size_of(b"missing"), None);
    }

    #[test]
    fn a_stripped_image_says_so() {
        let s = symbols();
        assert!(!s.has_static_table());
        let err = s.indirect_target(b"hidden", Wanted::Function).unwrap_err();
        assert!(matches!(err, SymbolError::Stripped { .. }), "{err}");
        assert!(err.to_string().contains("stripped"), "{err}");
    }

    #[test]
    fn kinds_and_segments_are_checked() {
        let s = symbols();
        // A data object named by a size-0 entry is no function.
        let err = s.indirect_target(b"vtable", Wanted::Function).unwrap_err();
        assert!(matches!(err, SymbolError::WrongKind { .. }), "{err}");
        // No segments at all: nothing lies inside one.
        let err = s.indirect_target(b"vtable", Wanted::Data).unwrap_err();
        assert!(matches!(err, SymbolError::OutsideSegments { .. }), "{err}");
    }
}
