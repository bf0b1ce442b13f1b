//! LLVM's `OffloadBinary` container (section `.llvm.offloading`, magic `0x10FF10AD`).
//!
//! ```text
//! header (32): magic[4] = 10 FF 10 AD | u32 version = 1 | u64 size | u64 entry offset | u64 entry size
//! entry  (40): u16 image kind | u16 offload kind | u32 flags | u64 string offset
//!              u64 string count | u64 image offset | u64 image size
//! strings    : string count x { u64 key offset; u64 value offset } (NUL-terminated strings)
//! ```
//! All offsets are from the start of the binary. A section holds several binaries back
//! to back, each `size` bytes long (a multiple of 8). clang 22 and llvm-offload-binary 22
//! write version 1, one entry per binary: one binary per image.

use crate::error::{Error, Result};
use crate::reader::Reader;

pub const MAGIC: [u8; 4] = [0x10, 0xFF, 0x10, 0xAD];
pub const VERSION: u32 = 1;
const CONTAINER: &str = "OffloadBinary";
const HEADER_SIZE: u64 = 32;
const ENTRY_SIZE: u64 = 40;
const STRING_ENTRY_SIZE: u64 = 16;
/// Alignment of the image inside a binary and of the binary's total size.
const ALIGN: u64 = 8;

/// What the image is (`llvm::object::ImageKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ImageKind {
    None,
    Object,
    Bitcode,
    Cubin,
    Fatbinary,
    Ptx,
    Spirv,
    Unknown(u16),
}

impl ImageKind {
    pub fn from_raw(v: u16) -> Self {
        match v {
            0 => ImageKind::None,
            1 => ImageKind::Object,
            2 => ImageKind::Bitcode,
            3 => ImageKind::Cubin,
            4 => ImageKind::Fatbinary,
            5 => ImageKind::Ptx,
            6 => ImageKind::Spirv,
            v => ImageKind::Unknown(v),
        }
    }

    pub fn raw(self) -> u16 {
        match self {
            ImageKind::None => 0,
            ImageKind::Object => 1,
            ImageKind::Bitcode => 2,
            ImageKind::Cubin => 3,
            ImageKind::Fatbinary => 4,
            ImageKind::Ptx => 5,
            ImageKind::Spirv => 6,
            ImageKind::Unknown(v) => v,
        }
    }

    /// The name llvm-offload-binary uses on its command line (`kind=`-less: by extension).
    pub fn name(self) -> &'static str {
        match self {
            ImageKind::None => "none",
            ImageKind::Object => "o",
            ImageKind::Bitcode => "bc",
            ImageKind::Cubin => "cubin",
            ImageKind::Fatbinary => "fatbin",
            ImageKind::Ptx => "s",
            ImageKind::Spirv => "spv",
            ImageKind::Unknown(_) => "unknown",
        }
    }
}

/// The producer of an image (`llvm::object::OffloadKind`, a bit mask).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct OffloadKind(pub u16);

impl OffloadKind {
    pub const NONE: OffloadKind = OffloadKind(0);
    pub const OPENMP: OffloadKind = OffloadKind(1);
    pub const CUDA: OffloadKind = OffloadKind(2);
    pub const HIP: OffloadKind = OffloadKind(4);
    pub const SYCL: OffloadKind = OffloadKind(8);

    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "none",
            1 => "openmp",
            2 => "cuda",
            4 => "hip",
            8 => "sycl",
            _ => "unknown",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "openmp" => Self::OPENMP,
            "cuda" => Self::CUDA,
            "hip" => Self::HIP,
            "sycl" => Self::SYCL,
            _ => return None,
        })
    }
}

/// One parsed binary (zero-copy view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadBinary<'a> {
    pub version: u32,
    /// Total size of this binary (the header's `size`).
    pub size: u64,
    pub image_kind: ImageKind,
    pub offload_kind: OffloadKind,
    pub flags: u32,
    /// Key/value strings in stored order (`triple`, `arch`, ...).
    pub strings: Vec<(&'a str, &'a str)>,
    /// Offset of the image from the start of this binary.
    pub image_offset: u64,
    pub image: &'a [u8],
}

/// Does `data` start with the OffloadBinary magic?
pub fn is_offload_binary(data: &[u8]) -> bool {
    data.starts_with(&MAGIC)
}

impl<'a> OffloadBinary<'a> {
    /// Parse the binary at the start of `data` (which may continue with more binaries).
    pub fn parse(data: &'a [u8]) -> Result<Self> {
        let r = Reader::new(data, CONTAINER);
        r.expect_magic(0, &MAGIC)?;
        let version = r.u32(4, "version")?;
        if version != VERSION {
            return Err(r.invalid("version", 4, version.into(), "expected 1"));
        }
        let size = r.u64(8, "size")?;
        if size < HEADER_SIZE || size > data.len() as u64 {
            return Err(r.invalid(
                "size",
                8,
                size,
                "smaller than the header or larger than the input",
            ));
        }
        // From here on, everything must lie inside this binary.
        let r = Reader::new(&data[..size as usize], CONTAINER);
        let entry_offset = r.u64(16, "entry offset")?;
        let entry_size = r.u64(24, "entry size")?;
        if entry_size < ENTRY_SIZE {
            return Err(r.invalid("entry size", 24, entry_size, "smaller than one entry (40)"));
        }
        r.bytes(entry_offset, entry_size, "entry")?;
        let e = entry_offset;
        let image_kind = ImageKind::from_raw(r.u16(e, "image kind")?);
        let offload_kind = OffloadKind(r.u16(e + 2, "offload kind")?);
        let flags = r.u32(e + 4, "flags")?;
        let string_offset = r.u64(e + 8, "string offset")?;
        let num_strings = r.u64(e + 16, "string count")?;
        let image_offset = r.u64(e + 24, "image offset")?;
        let image_size = r.u64(e + 32, "image size")?;
        if num_strings > size / STRING_ENTRY_SIZE {
            return Err(r.invalid(
                "string count",
                e + 16,
                num_strings,
                "more strings than the binary could hold",
            ));
        }
        let mut strings = Vec::with_capacity(num_strings as usize);
        for i in 0..num_strings {
            let at = string_offset
                .checked_add(i * STRING_ENTRY_SIZE)
                .ok_or_else(|| r.invalid("string offset", e + 8, string_offset, "overflows"))?;
            let key_at = r.u64(at, "string key offset")?;
            let value_at = r.u64(at + 8, "string value offset")?;
            strings.push((
                r.c_str(key_at, "string key")?,
                r.c_str(value_at, "string value")?,
            ));
        }
        let image = r.bytes(image_offset, image_size, "image")?;
        Ok(OffloadBinary {
            version,
            size,
            image_kind,
            offload_kind,
            flags,
            strings,
            image_offset,
            image,
        })
    }

    /// The value of string `key`.
    pub fn string(&self, key: &str) -> Option<&'a str> {
        self.strings
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    pub fn triple(&self) -> Option<&'a str> {
        self.string("triple")
    }

    pub fn arch(&self) -> Option<&'a str> {
        self.string("arch")
    }
}

/// Parse every binary in a `.llvm.offloading` section (binaries back to back; the
/// offset of each parsed binary is returned with it).
pub fn parse_all(data: &[u8]) -> Result<Vec<(u64, OffloadBinary<'_>)>> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < data.len() {
        let bin = OffloadBinary::parse(&data[at..]).map_err(|e| shift(e, at as u64))?;
        let size = bin.size as usize;
        out.push((at as u64, bin));
        at += size;
    }
    Ok(out)
}

/// Make an error's offset relative to an enclosing buffer.
pub(crate) fn shift(e: Error, by: u64) -> Error {
    match e {
        Error::Truncated {
            container,
            field,
            offset,
            needed,
            available,
        } => Error::Truncated {
            container,
            field,
            offset: offset + by,
            needed,
            available,
        },
        Error::BadMagic { container, offset } => Error::BadMagic {
            container,
            offset: offset + by,
        },
        Error::InvalidField {
            container,
            field,
            offset,
            value,
            reason,
        } => Error::InvalidField {
            container,
            field,
            offset: offset + by,
            value,
            reason,
        },
        Error::BadString {
            container,
            field,
            offset,
        } => Error::BadString {
            container,
            field,
            offset: offset + by,
        },
        Error::Decompress {
            container,
            offset,
            reason,
        } => Error::Decompress {
            container,
            offset: offset + by,
            reason,
        },
        other => other,
    }
}

/// An image to write into an OffloadBinary.
#[derive(Debug, Clone)]
pub struct OffloadingImage<'a> {
    pub image_kind: ImageKind,
    pub offload_kind: OffloadKind,
    pub flags: u32,
    /// Key/value strings, written in this order.
    pub strings: Vec<(&'a str, &'a str)>,
    pub image: &'a [u8],
}

/// Write one binary (version 1). The string table is laid out like LLVM's ELF-kind
/// `StringTableBuilder` (leading NUL, strings sorted by their reversed bytes in
/// descending order, shared tails merged), so the bytes match llvm-offload-binary's for
/// the same strings in the same order.
pub fn write(img: &OffloadingImage<'_>) -> Vec<u8> {
    let (table, offsets) = string_table(img.strings.iter().flat_map(|(k, v)| [*k, *v]));
    let string_offset = HEADER_SIZE + ENTRY_SIZE;
    let table_offset = string_offset + STRING_ENTRY_SIZE * img.strings.len() as u64;
    let image_offset = (table_offset + table.len() as u64).div_ceil(ALIGN) * ALIGN;
    let size = (image_offset + img.image.len() as u64).div_ceil(ALIGN) * ALIGN;
    let mut out = Vec::with_capacity(size as usize);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&HEADER_SIZE.to_le_bytes());
    out.extend_from_slice(&ENTRY_SIZE.to_le_bytes());
    out.extend_from_slice(&img.image_kind.raw().to_le_bytes());
    out.extend_from_slice(&img.offload_kind.0.to_le_bytes());
    out.extend_from_slice(&img.flags.to_le_bytes());
    out.extend_from_slice(&string_offset.to_le_bytes());
    out.extend_from_slice(&(img.strings.len() as u64).to_le_bytes());
    out.extend_from_slice(&image_offset.to_le_bytes());
    out.extend_from_slice(&(img.image.len() as u64).to_le_bytes());
    for (k, v) in &img.strings {
        for s in [k, v] {
            out.extend_from_slice(&(table_offset + offsets[*s]).to_le_bytes());
        }
    }
    out.extend_from_slice(&table);
    out.resize(image_offset as usize, 0);
    out.extend_from_slice(img.image);
    out.resize(size as usize, 0);
    out
}

/// Build a tail-merged string table; returns it and each string's offset in it.
fn string_table<'s>(
    strings: impl Iterator<Item = &'s str>,
) -> (Vec<u8>, std::collections::HashMap<&'s str, u64>) {
    let mut unique: Vec<&str> = strings.collect();
    unique.sort_unstable();
    unique.dedup();
    // Descending by reversed bytes: a string comes right after the longer strings that
    // end with it, so it can share their tail.
    unique.sort_by(|a, b| b.bytes().rev().cmp(a.bytes().rev()));
    let mut table = vec![0u8];
    let mut offsets = std::collections::HashMap::new();
    let mut previous: &str = "";
    for s in unique {
        if previous.ends_with(s) {
            offsets.insert(s, (table.len() - 1 - s.len()) as u64);
            continue;
        }
        offsets.insert(s, table.len() as u64);
        table.extend_from_slice(s.as_bytes());
        table.push(0);
        previous = s;
    }
    (table, offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        write(&OffloadingImage {
            image_kind: ImageKind::Cubin,
            offload_kind: OffloadKind::OPENMP,
            flags: 0,
            strings: vec![("arch", "sm_90"), ("triple", "nvptx64-nvidia-cuda")],
            image: &[7u8; 13],
        })
    }

    #[test]
    fn round_trip() {
        let bytes = sample();
        assert_eq!(bytes.len() % 8, 0);
        let b = OffloadBinary::parse(&bytes).unwrap();
        assert_eq!(b.image_kind, ImageKind::Cubin);
        assert_eq!(b.triple(), Some("nvptx64-nvidia-cuda"));
        assert_eq!(b.arch(), Some("sm_90"));
        assert_eq!(b.image, &[7u8; 13]);
        let mut two = bytes.clone();
        two.extend_from_slice(&bytes);
        assert_eq!(parse_all(&two).unwrap().len(), 2);
    }

    #[test]
    fn shared_tails() {
        let (table, offs) = string_table(["arch", "sm_90", "triple", "le", "ple"].into_iter());
        assert_eq!(
            &table[offs["ple"] as usize..offs["ple"] as usize + 4],
            b"ple\0"
        );
        assert_eq!(offs["le"], offs["ple"] + 1);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = sample();
        for len in 0..bytes.len() {
            assert!(OffloadBinary::parse(&bytes[..len]).is_err(), "len {len}");
        }
    }
}
