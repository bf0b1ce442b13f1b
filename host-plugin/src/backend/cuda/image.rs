//! CUDA image kinds and the SM rule are offload-formats' ([`offload_formats::cuda`]);
//! re-exported here where the CUDA backend and its tests name them. Beside them, what a
//! cubin defines ([`DefinedSymbols`]), so the backend asks the driver only for names the
//! image has.

pub use offload_formats::cuda::{classify, cubin_runs_on, CudaImage};

use object::read::elf::{ElfFile64, Sym};
use object::{elf, LittleEndian as LE};
use rustc_hash::{FxHashSet, FxHasher};
use std::hash::Hasher;

/// The names a cubin's symbol table defines, kept as 64-bit hashes (8 bytes a symbol,
/// whatever the name's length): a name whose hash is absent is certainly not defined,
/// so the driver is not asked for it (it would answer CUDA_ERROR_NOT_FOUND, which
/// compute-sanitizer reports as an API error). Two names of one hash only cost a lookup
/// the driver may fail.
#[derive(Debug, Default)]
pub struct DefinedSymbols(FxHashSet<u64>);

fn name_hash(name: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(name);
    h.write_u8(0xff);
    h.finish()
}

impl DefinedSymbols {
    /// The defined symbols of a cubin's `.symtab`; None for what is not a cubin (a
    /// fatbinary or PTX, which only the driver reads), or a cubin whose symbol table
    /// cannot be read.
    pub fn of_image(image: &[u8]) -> Option<DefinedSymbols> {
        let Some(CudaImage::Cubin { .. }) = classify(image) else {
            return None;
        };
        let file = ElfFile64::<LE>::parse(image).ok()?;
        let table = file.elf_symbol_table();
        let strings = table.strings();
        let mut names = FxHashSet::default();
        names.reserve(table.len());
        for sym in table.symbols() {
            let defined = sym.st_shndx(LE) != elf::SHN_UNDEF
                && !matches!(sym.st_type(), elf::STT_SECTION | elf::STT_FILE);
            if defined {
                names.insert(name_hash(sym.name(LE, strings).ok()?));
            }
        }
        // A cubin defines at least its kernels: an empty table tells nothing.
        (!names.is_empty()).then_some(DefinedSymbols(names))
    }

    /// False when the image certainly does not define `name`.
    pub fn may_define(&self, name: &[u8]) -> bool {
        self.0.contains(&name_hash(name))
    }
}
