//! What the dynamic loader reads from a library's dynamic section: its NEEDED
//! libraries, RUNPATH/RPATH and SONAME. Read through a cache of the file's pages, so
//! libLLVM (100 MB) is not read whole.

use anyhow::{Context, Result};
use object::elf;
use object::read::elf::{Dyn, FileHeader};
use object::read::ReadCache;
use object::Endianness;
use std::path::Path;

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Dynamic {
    pub needed: Vec<String>,
    pub runpath: Option<String>,
    pub rpath: Option<String>,
    pub soname: Option<String>,
}

/// The dynamic section of the 64-bit ELF file `path` (empty when it has none).
pub fn read(path: &Path) -> Result<Dynamic> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let data = ReadCache::new(file);
    parse(&data).with_context(|| format!("reading the dynamic section of {}", path.display()))
}

fn parse<'data, R: object::ReadRef<'data>>(data: R) -> Result<Dynamic> {
    let header = elf::FileHeader64::<Endianness>::parse(data)?;
    let endian = header.endian()?;
    let sections = header.sections(endian, data)?;
    let mut dynamic = Dynamic::default();
    let Some((entries, strings_index)) = sections.dynamic(endian, data)? else {
        return Ok(dynamic);
    };
    let strings = sections.strings(endian, data, strings_index)?;
    for entry in entries {
        let text = || -> Result<String> {
            let offset = entry
                .val32(endian)
                .context("a dynamic string's offset is out of range")?;
            let bytes = strings
                .get(offset)
                .ok()
                .context("a dynamic string is out of its table")?;
            Ok(String::from_utf8_lossy(bytes).into_owned())
        };
        match entry.tag32(endian) {
            Some(elf::DT_NEEDED) => dynamic.needed.push(text()?),
            Some(elf::DT_RUNPATH) => dynamic.runpath = Some(text()?),
            Some(elf::DT_RPATH) => dynamic.rpath = Some(text()?),
            Some(elf::DT_SONAME) => dynamic.soname = Some(text()?),
            Some(elf::DT_NULL) => break,
            _ => {}
        }
    }
    Ok(dynamic)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_programs_own_dynamic_section() {
        // Cargo's test executables are dynamically linked against the C library.
        let exe = std::env::current_exe().unwrap();
        let dynamic = read(&exe).unwrap();
        assert!(
            dynamic.needed.iter().any(|n| n.starts_with("libc.so")),
            "{dynamic:?}"
        );
    }

    #[test]
    fn a_file_that_is_not_elf_is_an_error_naming_it() {
        let not_elf = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        let e = read(&not_elf).unwrap_err();
        assert!(format!("{e:#}").contains("Cargo.toml"), "{e:#}");
    }
}
