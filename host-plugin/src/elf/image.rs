//! What the plugin needs to know about an ELF device image before handing it to a backend:
//! is it one of ours, is it well formed; then its symbol tables ([`crate::elf::symbols`]).

pub use crate::elf::symbols::ImageSymbols;
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::LittleEndian;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ImageError {
    #[error("not a 64-bit little-endian ELF file ({0})")]
    NotElf(String),
    #[error("ELF machine {found} is not this plugin's ({expected})")]
    WrongMachine { found: u16, expected: u16 },
    #[error("not a shared object (ELF type {0}); the host device loads images with dlopen")]
    NotSharedObject(u16),
    #[error("truncated: a segment ends at byte {end}, the file has {len}")]
    Truncated { end: u64, len: usize },
    #[error("malformed ELF: {0}")]
    Malformed(#[from] object::Error),
    /// Well-formed as a file, but not something the dynamic loader can map safely: glibc's
    /// loader trusts these structures and crashes (or worse) on inconsistent ones.
    #[error("not a loadable shared object: {0}")]
    NotLoadable(String),
}

/// The `e_machine` of a 64-bit little-endian ELF image, or None if it is not one.
pub fn elf_machine(bytes: &[u8]) -> Option<u16> {
    let header = object::elf::FileHeader64::<LittleEndian>::parse(bytes).ok()?;
    Some(header.e_machine(LittleEndian))
}

/// A check of the parsed, well-formed image that its loader needs beyond this module's
/// (the host devices' x86-64 loadable rule): what is wrong, in words.
pub type LoaderCheck<'c> = &'c dyn Fn(&ElfFile64<'_, LittleEndian>, &[u8]) -> Result<(), String>;

/// Validate a shared-object image for `machine` and read its dynamic symbol table.
pub fn inspect_shared_object(bytes: &[u8], machine: u16) -> Result<ImageSymbols<'_>, ImageError> {
    inspect_shared_object_for(bytes, machine, &|_, _| Ok(()))
}

/// [`inspect_shared_object`] with the loader's own check, run after the file's and
/// before the symbols are read (a failure is [`ImageError::NotLoadable`]).
pub fn inspect_shared_object_for<'b>(
    bytes: &'b [u8],
    machine: u16,
    loader_check: LoaderCheck<'_>,
) -> Result<ImageSymbols<'b>, ImageError> {
    let found = elf_machine(bytes).ok_or_else(|| {
        ImageError::NotElf(match bytes.get(..4) {
            Some(b"\x7fELF") => "truncated or not ELF64 little-endian".into(),
            _ => "no ELF magic".into(),
        })
    })?;
    if found != machine {
        return Err(ImageError::WrongMachine {
            found,
            expected: machine,
        });
    }
    let file = ElfFile64::<LittleEndian>::parse(bytes)?;
    let e_type = file.elf_header().e_type(LittleEndian);
    if e_type != object::elf::ET_DYN {
        return Err(ImageError::NotSharedObject(e_type));
    }
    // Walk the program headers and sections too, so a truncated file fails here and not
    // inside the dynamic loader.
    for ph in file.elf_program_headers() {
        let end = ph
            .p_offset(LittleEndian)
            .saturating_add(ph.p_filesz(LittleEndian));
        if end > bytes.len() as u64 {
            return Err(ImageError::Truncated {
                end,
                len: bytes.len(),
            });
        }
    }
    loader_check(&file, bytes).map_err(ImageError::NotLoadable)?;
    Ok(ImageSymbols::parse(&file, bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An ELF64 x86-64 ET_DYN header whose table offsets and counts are arbitrary.
    fn header(phoff: u64, phnum: u16, shoff: u64, shnum: u16, shstrndx: u16) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2; // ELFCLASS64
        h[5] = 1; // little-endian
        h[6] = 1; // EV_CURRENT
        h[16..18].copy_from_slice(&object::elf::ET_DYN.to_le_bytes());
        h[18..20].copy_from_slice(&object::elf::EM_X86_64.to_le_bytes());
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        h[32..40].copy_from_slice(&phoff.to_le_bytes());
        h[40..48].copy_from_slice(&shoff.to_le_bytes());
        h[52..54].copy_from_slice(&64u16.to_le_bytes());
        h[54..56].copy_from_slice(&56u16.to_le_bytes());
        h[56..58].copy_from_slice(&phnum.to_le_bytes());
        h[58..60].copy_from_slice(&64u16.to_le_bytes());
        h[60..62].copy_from_slice(&shnum.to_le_bytes());
        h[62..64].copy_from_slice(&shstrndx.to_le_bytes());
        h
    }

    proptest! {
        // Whatever the bytes, inspection answers with a value or an error, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = inspect_shared_object(&bytes, object::elf::EM_X86_64);
            let _ = elf_machine(&bytes);
        }

        // A plausible header with wild table offsets and random contents behind it.
        #[test]
        fn wild_headers_never_panic(
            phoff in 0u64..1024, phnum in 0u16..8, shoff in 0u64..1024,
            shnum in 0u16..8, shstrndx in 0u16..8,
            rest in proptest::collection::vec(any::<u8>(), 0..1024),
        ) {
            let mut bytes = header(phoff, phnum, shoff, shnum, shstrndx);
            bytes.extend(rest);
            let _ = inspect_shared_object(&bytes, object::elf::EM_X86_64);
        }
    }

    /// clang 17's linker wrapper links x86_64 device images with `-Bsymbolic`
    /// (DT_SYMBOLIC); libomptarget 17's lit suite failed on every image before it was
    /// accepted.
    #[test]
    fn accepts_a_bsymbolic_shared_object() {
        let dir =
            std::env::temp_dir().join(format!("omptarget-rs-bsymbolic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, so) = (dir.join("k.c"), dir.join("k.so"));
        std::fs::write(&src, "int answer = 42;\nint get(void) { return answer; }\n").unwrap();
        let status = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-Wl,-Bsymbolic", "-o"])
            .arg(&so)
            .arg(&src)
            .status()
            .expect("cc runs");
        assert!(status.success());
        let bytes = std::fs::read(&so).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        use object::read::elf::{Dyn, FileHeader, ProgramHeader};
        let le = object::LittleEndian;
        let elf = object::elf::FileHeader64::<object::LittleEndian>::parse(&*bytes).unwrap();
        let symbolic = elf
            .program_headers(le, &*bytes)
            .unwrap()
            .iter()
            .filter_map(|ph| ph.dynamic(le, &*bytes).ok().flatten())
            .flatten()
            .any(|d| d.d_tag(le) == u64::from(object::elf::DT_SYMBOLIC));
        assert!(symbolic, "cc -Wl,-Bsymbolic made no DT_SYMBOLIC");
        inspect_shared_object(&bytes, object::elf::EM_X86_64).expect("a -Bsymbolic image loads");
    }

    #[test]
    fn rejects_non_elf_and_truncated() {
        assert!(matches!(
            inspect_shared_object(b"hello world", 62),
            Err(ImageError::NotElf(_))
        ));
        assert!(matches!(
            inspect_shared_object(b"\x7fELF\x02\x01", 62),
            Err(ImageError::NotElf(_))
        ));
        assert_eq!(elf_machine(&[]), None);
    }
}
