//! What cuModuleLoadData was handed. The driver gets a pointer and no size, so the size
//! comes from the image's own header: a cubin (ELF, EM_CUDA) ends at the furthest of
//! its section header table, program header table and section contents; a fatbinary
//! says its size in its header; PTX ends at its NUL. A fatbinary's member for the
//! device is taken when it is a cubin stored uncompressed. Which kind an image is and
//! which SM a cubin was built for are `offload_formats::cuda`'s rules (the plugin's).

use crate::errors::{
    Failure, Outcome, CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_NOT_SUPPORTED,
    CUDA_ERROR_NO_BINARY_FOR_GPU,
};
use offload_formats::cuda::{cubin_runs_on, cubin_sm, is_ptx, FATBIN_MAGIC};

/// The largest image the stand-in believes a header about (a corrupt header must not
/// make it read gigabytes of someone else's memory).
const MAX_IMAGE: u64 = 1 << 31;
const ELF_HEADER: usize = 64;
const FATBIN_HEADER: usize = 16;
/// A fatbinary member's header, up to the fields read here.
const MEMBER_HEADER: usize = 64;
const MEMBER_PTX: u16 = 1;
const MEMBER_ELF: u16 = 2;
/// Member flags that mean compressed (the older LZ4 and the newer zstd bit).
const MEMBER_COMPRESSED: u64 = 0x2000 | 0x8000;

/// What the pointer points at.
#[derive(Debug, PartialEq, Eq)]
pub enum Image<'a> {
    Cubin(&'a [u8]),
    Fatbin(&'a [u8]),
    Ptx,
}

fn invalid(detail: impl Into<String>) -> Failure {
    Failure::new(CUDA_ERROR_INVALID_IMAGE, detail)
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The end of the header, section header table and program header table of a 64-bit
/// little-endian ELF file, from its first 64 bytes.
pub fn elf_tables_end(header: &[u8]) -> Option<u64> {
    if header.get(..4)? != b"\x7fELF" || header.get(4) != Some(&2) || header.get(5) != Some(&1) {
        return None;
    }
    let (phoff, shoff) = (u64_at(header, 0x20)?, u64_at(header, 0x28)?);
    let (phentsize, phnum) = (u16_at(header, 0x36)?, u16_at(header, 0x38)?);
    let (shentsize, shnum) = (u16_at(header, 0x3a)?, u16_at(header, 0x3c)?);
    let end_of = |off: u64, size: u16, n: u16| off.checked_add(size as u64 * n as u64);
    Some(
        end_of(phoff, phentsize, phnum)?
            .max(end_of(shoff, shentsize, shnum)?)
            .max(ELF_HEADER as u64),
    )
}

/// The whole file's size: [`elf_tables_end`] and the end of every section that has
/// contents in the file. `bytes` must hold at least the tables.
pub fn elf_size(bytes: &[u8]) -> Option<u64> {
    let mut end = elf_tables_end(bytes)?;
    let shoff = u64_at(bytes, 0x28)? as usize;
    let (shentsize, shnum) = (u16_at(bytes, 0x3a)? as usize, u16_at(bytes, 0x3c)? as usize);
    for i in 0..shnum {
        let at = shoff.checked_add(i.checked_mul(shentsize)?)?;
        let sh_type = u32_at(bytes, at + 4)?;
        if sh_type == object::elf::SHT_NOBITS || sh_type == object::elf::SHT_NULL {
            continue;
        }
        let (offset, size) = (u64_at(bytes, at + 0x18)?, u64_at(bytes, at + 0x20)?);
        end = end.max(offset.checked_add(size)?);
    }
    Some(end)
}

/// A fatbinary's size from its 16-byte header.
pub fn fatbin_size(header: &[u8]) -> Option<u64> {
    let header_size = u16_at(header, 6)? as u64;
    header_size.checked_add(u64_at(header, 8)?)
}

/// A view of `len` bytes at `image`.
///
/// # Safety
/// `image .. image + len` must be readable for `'a`.
unsafe fn view<'a>(image: *const u8, len: u64) -> Outcome<&'a [u8]> {
    if len > MAX_IMAGE {
        return Err(invalid(format!(
            "the image's header says it is {len} bytes long"
        )));
    }
    // SAFETY: the caller promises the range is readable.
    Ok(unsafe { std::slice::from_raw_parts(image, len as usize) })
}

/// The first 4 bytes, or fewer followed by zeros where a NUL comes first.
///
/// # Safety
/// `image` must be readable up to its first NUL or its fourth byte, whichever is first.
unsafe fn magic_of(image: *const u8) -> [u8; 4] {
    let mut magic = [0u8; 4];
    for (i, byte) in magic.iter_mut().enumerate() {
        // SAFETY: the caller promises byte `i`: no NUL came before it.
        *byte = unsafe { image.add(i).read() };
        if *byte == 0 {
            break;
        }
    }
    magic
}

/// Read what cuModuleLoadData was given.
///
/// # Safety
/// `image` must point at a whole cubin, fatbinary or NUL-terminated PTX (the driver
/// API's contract), readable while the result is used.
pub unsafe fn from_raw<'a>(image: *const u8) -> Outcome<Image<'a>> {
    if image.is_null() {
        return Err(Failure::invalid_value("a null image"));
    }
    // SAFETY: the image is readable up to its end; both magic numbers are 4 bytes
    // without a NUL, and text stops at its NUL, so this reads nothing past the image.
    let magic = unsafe { magic_of(image) };
    if &magic == b"\x7fELF" {
        // SAFETY: an ELF file has its 64-byte header.
        let header = unsafe { view(image, ELF_HEADER as u64)? };
        let tables = elf_tables_end(header).ok_or_else(|| invalid("not a 64-bit ELF file"))?;
        // SAFETY: the file holds its own tables.
        let with_tables = unsafe { view(image, tables)? };
        let size = elf_size(with_tables).ok_or_else(|| invalid("a corrupt section table"))?;
        // SAFETY: the file holds every section its table lists.
        return Ok(Image::Cubin(unsafe { view(image, size)? }));
    }
    if u32::from_le_bytes(magic) == FATBIN_MAGIC {
        // SAFETY: a fatbinary has its 16-byte header.
        let header = unsafe { view(image, FATBIN_HEADER as u64)? };
        let size = fatbin_size(header).ok_or_else(|| invalid("a corrupt fatbinary header"))?;
        // SAFETY: the fatbinary holds what its header says.
        return Ok(Image::Fatbin(unsafe { view(image, size)? }));
    }
    // SAFETY: what is neither ELF nor a fatbinary must be NUL-terminated text.
    let text = unsafe { std::ffi::CStr::from_ptr(image.cast()) };
    if is_ptx(text.to_bytes()) {
        return Ok(Image::Ptx);
    }
    Err(invalid("neither a cubin, a fatbinary nor PTX"))
}

/// The cubin to load for a device of `sm` (90 for sm_90) out of `image`: a cubin that
/// runs there, or a fatbinary's first uncompressed cubin member that does.
pub fn cubin_for<'a>(image: &Image<'a>, sm: u32) -> Outcome<&'a [u8]> {
    let (major, minor) = ((sm / 10) as i32, (sm % 10) as i32);
    match *image {
        Image::Ptx => Err(Failure::new(
            CUDA_ERROR_NOT_SUPPORTED,
            "PTX: the stand-in cannot JIT PTX",
        )),
        Image::Cubin(bytes) => {
            let cubin = cubin_sm_of(bytes)?;
            if cubin_runs_on(cubin, major, minor) {
                Ok(bytes)
            } else {
                Err(Failure::new(
                    CUDA_ERROR_NO_BINARY_FOR_GPU,
                    format!("the cubin is for sm_{cubin}; the device is sm_{sm}"),
                ))
            }
        }
        Image::Fatbin(bytes) => fatbin_member(bytes, sm),
    }
}

/// A cubin's SM from its ELF header (EM_CUDA required).
pub fn cubin_sm_of(bytes: &[u8]) -> Outcome<u32> {
    let machine = u16_at(bytes, 0x12).ok_or_else(|| invalid("a truncated ELF header"))?;
    if machine != object::elf::EM_CUDA {
        return Err(invalid(format!(
            "an ELF file for machine {machine}, not EM_CUDA ({})",
            object::elf::EM_CUDA
        )));
    }
    let flags = u32_at(bytes, 0x30).ok_or_else(|| invalid("a truncated ELF header"))?;
    Ok(cubin_sm(flags, bytes[8]))
}

/// One member of a fatbinary.
struct Member<'a> {
    kind: u16,
    arch: u32,
    compressed: bool,
    payload: &'a [u8],
}

fn members(bytes: &[u8]) -> Outcome<Vec<Member<'_>>> {
    let corrupt = || invalid("a corrupt fatbinary member table");
    let start = u16_at(bytes, 6).ok_or_else(corrupt)? as usize;
    let mut at = start;
    let mut out = Vec::new();
    while at < bytes.len() {
        let header = bytes.get(at..at + MEMBER_HEADER).ok_or_else(corrupt)?;
        let header_size = u32_at(header, 4).ok_or_else(corrupt)? as usize;
        let size = u64_at(header, 8).ok_or_else(corrupt)? as usize;
        let payload_at = at.checked_add(header_size).ok_or_else(corrupt)?;
        let end = payload_at.checked_add(size).ok_or_else(corrupt)?;
        let flags = u64_at(header, 40).ok_or_else(corrupt)?;
        out.push(Member {
            kind: u16_at(header, 0).ok_or_else(corrupt)?,
            arch: u32_at(header, 28).ok_or_else(corrupt)?,
            compressed: flags & MEMBER_COMPRESSED != 0 || u64_at(header, 56) != Some(0),
            payload: bytes.get(payload_at..end).ok_or_else(corrupt)?,
        });
        at = end;
    }
    Ok(out)
}

fn fatbin_member(bytes: &[u8], sm: u32) -> Outcome<&[u8]> {
    let (major, minor) = ((sm / 10) as i32, (sm % 10) as i32);
    let all = members(bytes)?;
    let runs = |m: &&Member| m.kind == MEMBER_ELF && cubin_runs_on(m.arch, major, minor);
    // The exact SM first, then the newest that still runs (the driver's preference).
    let mut candidates: Vec<&Member> = all.iter().filter(runs).collect();
    candidates.sort_by_key(|m| (m.arch != sm, std::cmp::Reverse(m.arch)));
    if let Some(m) = candidates.iter().find(|m| !m.compressed) {
        return Ok(m.payload);
    }
    let found: Vec<String> = all
        .iter()
        .map(|m| {
            let kind = match m.kind {
                MEMBER_ELF => "cubin",
                MEMBER_PTX => "PTX",
                _ => "other",
            };
            let packed = if m.compressed { " (compressed)" } else { "" };
            format!("{kind} sm_{}{packed}", m.arch)
        })
        .collect();
    let code = if candidates.is_empty() {
        CUDA_ERROR_NO_BINARY_FOR_GPU
    } else {
        CUDA_ERROR_NOT_SUPPORTED
    };
    Err(Failure::new(
        code,
        format!(
            "fatbinary: no uncompressed cubin for sm_{sm} (members: {}); the stand-in \
             neither decompresses nor JITs",
            found.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fatbinary laid out as `fatbinary --create` writes one (seen with CUDA 13.5's).
    fn fatbin(members: &[(u16, u32, u64, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for (kind, arch, flags, payload) in members {
            let mut h = vec![0u8; MEMBER_HEADER];
            h[0..2].copy_from_slice(&kind.to_le_bytes());
            h[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
            h[4..8].copy_from_slice(&(MEMBER_HEADER as u32).to_le_bytes());
            h[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
            h[28..32].copy_from_slice(&arch.to_le_bytes());
            h[40..48].copy_from_slice(&flags.to_le_bytes());
            body.extend(h);
            body.extend(*payload);
        }
        let mut out = FATBIN_MAGIC.to_le_bytes().to_vec();
        out.extend(1u16.to_le_bytes());
        out.extend(16u16.to_le_bytes());
        out.extend((body.len() as u64).to_le_bytes());
        out.extend(body);
        out
    }

    fn fake_cubin(sm: u32) -> Vec<u8> {
        let mut h = vec![0u8; ELF_HEADER];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        h[8] = 8;
        h[0x12..0x14].copy_from_slice(&object::elf::EM_CUDA.to_le_bytes());
        h[0x30..0x34].copy_from_slice(&(sm << 8).to_le_bytes());
        h
    }

    #[test]
    fn a_fatbinary_gives_its_uncompressed_cubin_for_the_device() {
        let c80 = fake_cubin(80);
        let c90 = fake_cubin(90);
        let bytes = fatbin(&[
            (MEMBER_PTX, 90, 0x11, b".version 8.0\0"),
            (MEMBER_ELF, 80, 0x11, &c80),
            (MEMBER_ELF, 90, 0x11, &c90),
        ]);
        assert_eq!(fatbin_size(&bytes), Some(bytes.len() as u64));
        // SAFETY: `bytes` is a whole fatbinary.
        let image = unsafe { from_raw(bytes.as_ptr()) }.unwrap();
        assert_eq!(cubin_for(&image, 90).unwrap(), &c90[..]);
        assert_eq!(cubin_for(&image, 86).unwrap(), &c80[..]);
        let none = cubin_for(&image, 70).unwrap_err();
        assert_eq!(none.code, CUDA_ERROR_NO_BINARY_FOR_GPU);
        assert!(none.detail.contains("PTX sm_90"), "{none:?}");
    }

    #[test]
    fn a_compressed_member_is_refused() {
        let c90 = fake_cubin(90);
        let bytes = fatbin(&[(MEMBER_ELF, 90, 0x8011, &c90)]);
        // SAFETY: `bytes` is a whole fatbinary.
        let image = unsafe { from_raw(bytes.as_ptr()) }.unwrap();
        let refused = cubin_for(&image, 90).unwrap_err();
        assert_eq!(refused.code, CUDA_ERROR_NOT_SUPPORTED);
        assert!(refused.detail.contains("(compressed)"), "{refused:?}");
    }

    #[test]
    fn ptx_is_refused_and_junk_is_invalid() {
        let ptx = b"//\n// Generated\n.version 8.0\n.target sm_90\n\0";
        // SAFETY: NUL-terminated text.
        let image = unsafe { from_raw(ptx.as_ptr()) }.unwrap();
        assert_eq!(image, Image::Ptx);
        let refused = cubin_for(&image, 90).unwrap_err();
        assert_eq!(refused.code, CUDA_ERROR_NOT_SUPPORTED);
        assert!(refused.detail.contains("cannot JIT PTX"));
        // SAFETY: NUL-terminated text.
        let junk = unsafe { from_raw(c"hello world".as_ptr().cast()) }.unwrap_err();
        assert_eq!(junk.code, CUDA_ERROR_INVALID_IMAGE);
    }

    /// Fatbinaries from CUDA's own `fatbinary` tool: the cubin comes back whole from an
    /// uncompressed one; a compressed one is refused.
    #[test]
    fn real_fatbinaries_give_their_cubin_or_are_refused() {
        use crate::test_cubin::{fatbinary_of, linked_cubin};
        let cubin = linked_cubin();
        let plain = fatbinary_of(cubin, false);
        // SAFETY: a whole fatbinary.
        let image = unsafe { from_raw(plain.as_ptr()) }.unwrap();
        assert_eq!(image, Image::Fatbin(&plain[..]), "its size is its header's");
        assert_eq!(cubin_for(&image, 90).unwrap(), cubin);
        assert_eq!(
            cubin_for(&image, 80).unwrap_err().code,
            CUDA_ERROR_NO_BINARY_FOR_GPU
        );
        let packed = fatbinary_of(cubin, true);
        // SAFETY: a whole fatbinary.
        let image = unsafe { from_raw(packed.as_ptr()) }.unwrap();
        let refused = cubin_for(&image, 90).unwrap_err();
        assert_eq!(refused.code, CUDA_ERROR_NOT_SUPPORTED, "{refused:?}");
        assert!(
            refused.detail.contains("cubin sm_90 (compressed)"),
            "{refused:?}"
        );
    }

    #[test]
    fn a_cubin_for_another_sm_has_no_binary_for_the_gpu() {
        let c80 = fake_cubin(80);
        let refused = cubin_for(&Image::Cubin(&c80), 90).unwrap_err();
        assert_eq!(refused.code, CUDA_ERROR_NO_BINARY_FOR_GPU);
        assert_eq!(cubin_for(&Image::Cubin(&c80), 86).unwrap(), &c80[..]);
    }
}
