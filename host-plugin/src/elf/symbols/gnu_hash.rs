//! The image's GNU hash table, read in place: the lookup glibc's `dlsym` does, by name
//! and by the GNU hash of the name, and the addresses a lookup will read, so that a batch
//! of lookups can ask for them early ([`super::ImageSymbols::dynamic_batch`]).

use object::elf::{self, FileHeader64, SectionHeader64, Sym64};
use object::read::elf::{ElfFile64, SectionHeader, Sym, SymbolTable};
use object::LittleEndian as LE;

/// The GNU hash of a symbol name (object's `elf::gnu_hash`: `h = h * 33 + byte` from
/// 5381), four bytes per step: `h * 33^4` plus the bytes times `33^3 .. 1`, so each step
/// waits for one multiply instead of four. A million names hash in a third of the time.
pub(super) fn gnu_hash(name: &[u8]) -> u32 {
    let mut hash: u32 = 5381;
    let mut quads = name.chunks_exact(4);
    for q in &mut quads {
        hash = hash
            .wrapping_mul(33 * 33 * 33 * 33)
            .wrapping_add(u32::from(q[0]) * (33 * 33 * 33))
            .wrapping_add(u32::from(q[1]) * (33 * 33))
            .wrapping_add(u32::from(q[2]) * 33)
            .wrapping_add(u32::from(q[3]));
    }
    for &b in quads.remainder() {
        hash = hash.wrapping_mul(33).wrapping_add(u32::from(b));
    }
    hash
}

/// The image's GNU hash table over `.dynsym`, read in place: the lookup glibc's dlsym
/// does (`do_lookup_x`), and the addresses it will read, for
/// [`super::ImageSymbols::dynamic_batch`] to ask for early.
///
/// Hand-written over object's parsed sections rather than object's
/// `GnuHashTable::find`: that one checks the bloom filter (one more cache miss, useless
/// when nearly every name is there), finds each candidate's name end with memchr over
/// the string table and resolves its version record; at 10k entries it was the larger
/// half of our lookups (callgrind: 256 of 574 instructions per name). Every read here is
/// bounds-checked and every chain walk ends, whatever the image holds.
pub(super) struct GnuHash<'a> {
    /// `{nbuckets, symoffset, bloom_size, bloom_shift}`, bloom words, buckets, chains.
    pub(super) bytes: &'a [u8],
    bloom_words: u32,
    buckets: u32,
    symoffset: u32,
    pub(super) symbols: &'a [Sym64<LE>],
    strings: &'a [u8],
    /// `.gnu.version`: a symbol whose entry has the hidden bit is not found by an
    /// unversioned lookup (dlsym).
    versions: &'a [object::elf::Versym<LE>],
}

impl<'a> GnuHash<'a> {
    /// The GNU hash section linked to `table`, if it has at least one bucket and a
    /// power of two of bloom words (an image without them is looked up through a map;
    /// the x86_64 checks refuse it first).
    pub(super) fn parse(
        file: &ElfFile64<'a, LE>,
        bytes: &'a [u8],
        table: &SymbolTable<'a, FileHeader64<LE>>,
    ) -> Result<Option<Self>, object::Error> {
        let sections = file.elf_section_table();
        let Some(section) = sections.iter().find(|s| {
            s.sh_type(LE) == elf::SHT_GNU_HASH && s.sh_link(LE) as usize == table.section().0
        }) else {
            return Ok(None);
        };
        let data = |s: &SectionHeader64<LE>| s.data(LE, bytes).ok();
        let hash = data(section).unwrap_or_default();
        let word = |i: usize| -> Option<u32> {
            let w = hash.get(4 * i..4 * i + 4)?;
            Some(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        };
        let (Some(buckets), Some(symoffset), Some(bloom_words)) = (word(0), word(1), word(2))
        else {
            return Ok(None);
        };
        if buckets == 0 || !bloom_words.is_power_of_two() {
            return Ok(None);
        }
        let strings = sections
            .section(table.string_section())
            .ok()
            .and_then(data)
            .unwrap_or_default();
        let versions = match sections.gnu_versym(LE, bytes)? {
            Some((versions, link)) if link == table.section() => versions,
            _ => &[],
        };
        Ok(Some(GnuHash {
            bytes: hash,
            bloom_words,
            buckets,
            symoffset,
            symbols: table.symbols(),
            strings,
            versions,
        }))
    }

    /// The name of `sym` (one of this table's symbols), if its string is in bounds.
    pub(super) fn name_of(&self, sym: &Sym64<LE>) -> Option<&'a [u8]> {
        let rest = self.strings.get(sym.st_name(LE) as usize..)?;
        let len = rest.iter().position(|&b| b == 0)?;
        Some(&rest[..len])
    }

    fn word(&self, at: usize) -> Option<u32> {
        let b = self.bytes.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn buckets_at(&self) -> usize {
        16 + 8 * self.bloom_words as usize
    }

    /// Where `hash`'s bucket lies in the table.
    pub(super) fn bucket_of(&self, hash: u32) -> usize {
        self.buckets_at() + 4 * (hash % self.buckets) as usize
    }

    fn chain_of(&self, index: u32) -> usize {
        self.buckets_at() + 4 * self.buckets as usize + 4 * (index - self.symoffset) as usize
    }

    /// The first symbol of the chain of the bucket at `bucket`, 0 if none.
    pub(super) fn first(&self, bucket: usize) -> u32 {
        self.word(bucket)
            .filter(|&i| i >= self.symoffset && i > 0)
            .unwrap_or(0)
    }

    /// The symbol named `name` whose GNU hash is `hash`, as dlsym finds it: along the
    /// chain that starts at symbol `first` (its bucket's), a matching hash (bit 0 marks
    /// the chain's end), then the name, then a version that is not hidden.
    pub(super) fn find_from(&self, name: &[u8], hash: u32, first: u32) -> Option<&'a Sym64<LE>> {
        let mut index = first;
        if index == 0 {
            return None;
        }
        loop {
            let chain = self.word(self.chain_of(index))?;
            if chain | 1 == hash | 1 {
                let sym = self.symbols.get(index as usize)?;
                if self.is_named(sym, name) && self.visible(index) {
                    return Some(sym);
                }
            }
            if chain & 1 != 0 {
                return None;
            }
            index = index.checked_add(1)?;
        }
    }

    /// The symbol's name is `name`: its bytes, then the terminating NUL.
    fn is_named(&self, sym: &Sym64<LE>, name: &[u8]) -> bool {
        let at = sym.st_name(LE) as usize;
        let Some(end) = at.checked_add(name.len()) else {
            return false;
        };
        self.strings.get(at..end) == Some(name) && self.strings.get(end) == Some(&0)
    }

    fn visible(&self, index: u32) -> bool {
        self.versions
            .get(index as usize)
            .is_none_or(|v| v.0.get(LE) & elf::VERSYM_HIDDEN == 0)
    }

    /// Read the bucket at `bucket` (requested before), ask for its chain word and first
    /// symbol; returns that symbol's index (0: none).
    pub(super) fn request_chain(&self, bucket: usize) -> u32 {
        let index = self.first(bucket);
        if index != 0 {
            prefetch(self.bytes, self.chain_of(index));
            prefetch(self.symbols, index as usize);
        }
        index
    }

    /// Read the symbol (requested before), ask for its name.
    pub(super) fn request_name(&self, index: u32) {
        if let Some(sym) = self.symbols.get(index as usize).filter(|_| index > 0) {
            prefetch(self.strings, sym.st_name(LE) as usize);
        }
    }
}

/// Ask the CPU to bring `items[at]` into the cache, if `at` is inside `items`.
pub(super) fn prefetch<T>(items: &[T], at: usize) {
    if let Some(item) = items.get(at) {
        crate::support::prefetch::read(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn gnu_hash_is_objects(name in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)) {
            proptest::prop_assert_eq!(gnu_hash(&name), elf::gnu_hash(&name));
        }
    }

    #[test]
    fn gnu_hash_of_known_names() {
        // The values commonly quoted for these names (and object's, above).
        assert_eq!(gnu_hash(b""), 0x0000_1505);
        assert_eq!(gnu_hash(b"printf"), 0x156b_2bb8);
        assert_eq!(gnu_hash(b"exit"), 0x7c96_7e3f);
        assert_eq!(gnu_hash(b"syscall"), 0xbac2_12a0);
    }
}
