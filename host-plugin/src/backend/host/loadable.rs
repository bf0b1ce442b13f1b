//! What the dynamic loader reads before any of the image's code runs, checked for
//! consistency: segments, the dynamic section, the tables it points at, relocations and
//! the constructor/destructor pointers. Found necessary by the dlopen sweep of `cargo
//! xtask fuzz` (docs/RELIABILITY.md, "Fuzzing"): each check stops a class of mutated
//! images that passed the header checks and then crashed glibc's loader.
//!
//! x86-64 only: the rule of glibc's loader, which the host backends (in-process and
//! isolated) hand images to; [`crate::elf::image::inspect_shared_object`] asks it for them.
//!
//! One module per part the loader reads: [`mod@segments`], the [`dynamic`] section, the
//! [`mod@symbol_tables`], the [`mod@versions`], the [`hash_tables`] and the [`relocations`]
//! (with the constructor/destructor arrays); [`check`] runs their checks in order.

mod dynamic;
mod hash_tables;
mod relocations;
mod segments;
mod symbol_tables;
mod versions;

use dynamic::{check_tag_values, check_tags_known_once, dynamic_section};
use hash_tables::{gnu_hash, sysv_hash};
use object::elf::{self, FileHeader64, ProgramHeader64};
use object::read::elf::{Dyn, ElfFile64, FileHeader};
use object::LittleEndian as LE;
use relocations::{check_relocation_tags, check_relocations, init_fini_arrays};
use segments::{check_relro, segments};
use symbol_tables::{check_symbol, symbol_tables};
use versions::{dependency_names, versions};

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
