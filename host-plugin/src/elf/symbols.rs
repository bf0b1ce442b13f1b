//! The symbols of an ELF device image, and the rule by which an offload entry's name
//! denotes one of them.
//!
//! Parsed once per load, without copying: exported names are looked up through the
//! image's own GNU hash table (what the dynamic loader's `dlsym` walks, [`mod@gnu_hash`]),
//! and names the dynamic symbol table lacks (clang 16 makes every `declare target`
//! function hidden, so the static linker turns it into a LOCAL symbol of `.symtab`)
//! through an index of the static symbol table, built the first time one is asked for.

mod gnu_hash;

use gnu_hash::{gnu_hash, prefetch, GnuHash};
use object::elf::{self, FileHeader64, Sym64};
use object::read::elf::{ElfFile64, ProgramHeader, Sym, SymbolTable};
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
    Hashed(GnuHash<'a>),
    /// No usable GNU hash table: every defined dynamic symbol, by name.
    Map(FxHashMap<&'a [u8], Symbol>),
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

/// Names [`ImageSymbols::dynamic_batch`] looks up together: enough lookups in flight to
/// cover the memory's latency, few enough that the lines they bring stay in L1.
pub const LOOKUP_BATCH: usize = 32;

/// How many symbols starting at or below an address `within_one_symbol` looks at: enough
/// for symbols nested in or aliasing one another, and a bound on the work.
const NESTED_SYMBOLS_SEARCHED: usize = 16;

/// A symbol the GNU hash table leads to, as a definition the loader would use: it skips
/// undefined and local symbols in a chain (a well-formed image has none there).
fn exported(sym: &Sym64<LE>) -> Option<Symbol> {
    (is_definition(sym) && sym.st_bind() != elf::STB_LOCAL).then(|| Symbol::from_elf(sym))
}

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
        let dynamic = match GnuHash::parse(file, bytes, &table)? {
            Some(hash) => Dynamic::Hashed(hash),
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

    /// Every exported definition of the dynamic symbol table, with its name (for a
    /// vendor whose loaded module answers names from its own map: HIP).
    pub fn dynamic_definitions(&self) -> Vec<(&'a [u8], Symbol)> {
        match &self.dynamic {
            Dynamic::Hashed(hash) => hash
                .symbols
                .iter()
                .filter_map(|sym| Some((hash.name_of(sym)?, exported(sym)?)))
                .collect(),
            Dynamic::Map(map) => map.iter().map(|(name, sym)| (*name, *sym)).collect(),
        }
    }

    /// The exported definition of `name`, as the dynamic loader finds it by name.
    pub fn dynamic(&self, name: &[u8]) -> Option<Symbol> {
        self.dynamic_hashed(name, gnu_hash(name))
    }

    /// [`Self::dynamic`] for many names, same answers (`found` gets one per name, in
    /// order). In a table of millions of symbols every lookup misses the cache four
    /// times (bloom word, bucket, chain, symbol) and once more for the name; one after
    /// another they cost more than dlsym's. Here the memory each lookup will read is
    /// requested for the whole batch first, stage by stage, so the misses overlap.
    pub fn dynamic_batch(&self, names: &[&[u8]], found: &mut Vec<Option<Symbol>>) {
        found.clear();
        let Dynamic::Hashed(hints) = &self.dynamic else {
            found.extend(names.iter().map(|n| self.dynamic(n)));
            return;
        };
        for batch in names.chunks(LOOKUP_BATCH) {
            let mut hashes = [0u32; LOOKUP_BATCH];
            let mut buckets = [0usize; LOOKUP_BATCH];
            let mut firsts = [0u32; LOOKUP_BATCH];
            let n = batch.len();
            for ((hash, bucket), name) in hashes.iter_mut().zip(&mut buckets).zip(batch) {
                *hash = gnu_hash(name);
                *bucket = hints.bucket_of(*hash);
                prefetch(hints.bytes, *bucket);
            }
            for (first, &bucket) in firsts.iter_mut().zip(&buckets[..n]) {
                *first = hints.request_chain(bucket);
            }
            for &first in &firsts[..n] {
                hints.request_name(first);
            }
            found.extend(batch.iter().zip(hashes.iter().zip(&firsts)).map(
                |(name, (&hash, &first))| hints.find_from(name, hash, first).and_then(exported),
            ));
        }
    }

    fn dynamic_hashed(&self, name: &[u8], name_hash: u32) -> Option<Symbol> {
        match &self.dynamic {
            Dynamic::Hashed(h) => {
                let first = h.first(h.bucket_of(name_hash));
                h.find_from(name, name_hash, first).and_then(exported)
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
        // The common case (an exported symbol that qualifies) without building errors.
        if let Some(sym) = dynamic.filter(|&s| self.qualifies(s, wanted)) {
            return Ok(sym);
        }
        let named = || String::from_utf8_lossy(name).into_owned();
        let sym = match dynamic {
            Some(sym) => sym,
            None => self.static_definition(name, wanted)?,
        };
        if !Self::kind_qualifies(sym, wanted) {
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

    /// Whether a definition is what an indirect entry needs (the last part of
    /// [`Self::indirect_target`]'s rule): the wanted kind, an ordinary address, inside
    /// the image's segments.
    pub fn qualifies(&self, sym: Symbol, wanted: Wanted) -> bool {
        Self::kind_qualifies(sym, wanted) && self.inside_segment(sym, wanted == Wanted::Function)
    }

    fn kind_qualifies(sym: Symbol, wanted: Wanted) -> bool {
        let kind_ok = match wanted {
            Wanted::Function => sym.kind == elf::STT_FUNC,
            Wanted::Data => matches!(
                sym.kind,
                elf::STT_OBJECT | elf::STT_NOTYPE | elf::STT_COMMON
            ),
        };
        kind_ok && sym.is_plain()
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
        // Only definitions of the wanted kind compete (a static variable of the same
        // name in another file is no rival for a function); with none of that kind, the
        // one there is gets its precise refusal from the caller.
        if found.iter().any(|&(_, s)| Self::kind_qualifies(s, wanted)) {
            found.retain(|&(_, s)| Self::kind_qualifies(s, wanted));
        }
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
                    .symbols
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
