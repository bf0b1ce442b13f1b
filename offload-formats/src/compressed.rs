//! Compressed clang offload bundles (`CCOB`), as clang-offload-bundler 22 writes them
//! with `-compress`.
//!
//! ```text
//! v1: magic "CCOB" | u16 version | u16 method | u32 uncompressed size | u64 hash | payload
//! v2: magic "CCOB" | u16 version | u16 method | u32 total size | u32 uncompressed size | u64 hash | payload
//! v3: magic "CCOB" | u16 version | u16 method | u64 total size | u64 uncompressed size | u64 hash | payload
//! ```
//! `method` is 0 for zlib, 1 for zstd; `total size` counts the whole file, header
//! included; `hash` is the first 8 bytes (little-endian) of the MD5 of the
//! uncompressed bundle. The payload decompresses to a plain bundle.

use crate::error::{Error, Result};
use crate::reader::Reader;
use std::io::Read;

mod stream;
// zstd's C API, the system's or the built-in copy's: the crate's only unsafe code.
#[allow(unsafe_code)]
pub mod zstd_library;

pub use stream::{CompressedWriter, DecompressedReader};

pub const MAGIC: &[u8; 4] = b"CCOB";
const CONTAINER: &str = "compressed offload bundle";

/// Compression method of a compressed bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Method {
    Zlib = 0,
    Zstd = 1,
}

/// The header of a compressed bundle plus a view of its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressedBundle<'a> {
    pub version: u16,
    pub method: Method,
    /// The `total size` field (v2, v3); `None` for v1.
    pub total_size: Option<u64>,
    pub uncompressed_size: u64,
    pub hash: u64,
    /// The compressed bytes (bounded by `total size` when the header has one).
    pub payload: &'a [u8],
    /// Offset of the payload from the start of the container.
    pub payload_offset: u64,
}

/// Does `data` start with the compressed-bundle magic?
pub fn is_compressed_bundle(data: &[u8]) -> bool {
    data.starts_with(MAGIC)
}

/// Upper bound on the compression ratio we accept: above what zstd (at most ~43690x,
/// a 3-byte header per 128 KiB RLE block) or zlib (~1032x) can reach, so only a header
/// that lies is rejected.
const MAX_RATIO: u64 = 65536;
/// Memory reserved up front for decompression; the rest grows with the data actually
/// produced, so a header that lies about the size cannot force a huge allocation.
const MAX_PREALLOCATION: u64 = 64 << 20;

/// The fields of a compressed bundle's header, read from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u16,
    pub method: Method,
    /// The `total size` field (v2, v3); `None` for v1.
    pub total_size: Option<u64>,
    pub uncompressed_size: u64,
    pub hash: u64,
    /// Offset of the payload from the start of the container.
    pub payload_offset: u64,
    /// Where the payload ends: `total size`, else the file's length.
    pub payload_end: u64,
}

/// The longest header (version 3).
pub const MAX_HEADER_LEN: usize = 32;

impl Header {
    /// Parse the header at the start of `prefix`, the first bytes (at least
    /// [`MAX_HEADER_LEN`] where the file has them) of a file of `file_len` bytes.
    pub fn parse(prefix: &[u8], file_len: u64) -> Result<Self> {
        let r = Reader::new(prefix, CONTAINER);
        r.expect_magic(0, MAGIC)?;
        let version = r.u16(4, "version")?;
        let method = match r.u16(6, "method")? {
            0 => Method::Zlib,
            1 => Method::Zstd,
            m => return Err(r.invalid("method", 6, m.into(), "expected 0 (zlib) or 1 (zstd)")),
        };
        let (total_size, uncompressed_size, hash_at) = match version {
            1 => (None, u64::from(r.u32(8, "uncompressed size")?), 12),
            2 => (
                Some(u64::from(r.u32(8, "total size")?)),
                u64::from(r.u32(12, "uncompressed size")?),
                16,
            ),
            3 => (
                Some(r.u64(8, "total size")?),
                r.u64(16, "uncompressed size")?,
                24,
            ),
            v => return Err(r.invalid("version", 4, v.into(), "expected 1, 2 or 3")),
        };
        let hash = r.u64(hash_at, "hash")?;
        let payload_offset = hash_at + 8;
        let payload_end = match total_size {
            Some(total) => {
                if total < payload_offset || total > file_len {
                    return Err(r.invalid(
                        "total size",
                        8,
                        total,
                        "smaller than the header or larger than the input",
                    ));
                }
                total
            }
            None => file_len.max(payload_offset),
        };
        let payload_len = payload_end - payload_offset;
        if uncompressed_size > (payload_len + 64).saturating_mul(MAX_RATIO) {
            return Err(r.invalid(
                "uncompressed size",
                hash_at - 8,
                uncompressed_size,
                "implausibly large for the payload",
            ));
        }
        Ok(Header {
            version,
            method,
            total_size,
            uncompressed_size,
            hash,
            payload_offset,
            payload_end,
        })
    }
}

impl<'a> CompressedBundle<'a> {
    /// Parse the header. Does not decompress.
    pub fn parse(data: &'a [u8]) -> Result<Self> {
        let h = Header::parse(data, data.len() as u64)?;
        let r = Reader::new(data, CONTAINER);
        let payload = r.bytes(
            h.payload_offset,
            h.payload_end - h.payload_offset,
            "payload",
        )?;
        Ok(CompressedBundle {
            version: h.version,
            method: h.method,
            total_size: h.total_size,
            uncompressed_size: h.uncompressed_size,
            hash: h.hash,
            payload,
            payload_offset: h.payload_offset,
        })
    }

    /// Decompress the payload and check its size and hash against the header.
    pub fn decompress(&self) -> Result<Vec<u8>> {
        let fail = |reason: String| Error::Decompress {
            container: CONTAINER,
            offset: self.payload_offset,
            reason,
        };
        let limit = self.uncompressed_size;
        let mut out = Vec::with_capacity(limit.min(MAX_PREALLOCATION) as usize);
        // Read at most one byte more than announced so an overlong stream is caught
        // without decompressing it all.
        let read = match self.method {
            Method::Zstd => zstd::stream::read::Decoder::new(self.payload)
                .map_err(|e| fail(e.to_string()))?
                .take(limit + 1)
                .read_to_end(&mut out),
            Method::Zlib => flate2::read::ZlibDecoder::new(self.payload)
                .take(limit + 1)
                .read_to_end(&mut out),
        };
        read.map_err(|e| fail(e.to_string()))?;
        if out.len() as u64 != limit {
            return Err(fail(format!(
                "decompressed to {} bytes, header says {limit}",
                out.len()
            )));
        }
        if truncated_md5(&out) != self.hash {
            return Err(fail(
                "hash of the decompressed bundle does not match".into(),
            ));
        }
        Ok(out)
    }
}

/// The `hash` field: the MD5 of the uncompressed bundle, first 8 bytes little-endian.
pub fn truncated_md5(data: &[u8]) -> u64 {
    low_64(&md5::compute(data).0)
}

/// The first 8 bytes of an MD5 digest, little-endian (LLVM's `MD5Result::low`).
fn low_64(digest: &[u8; 16]) -> u64 {
    let mut low = [0u8; 8];
    low.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(low)
}

/// zstd the way LLVM's `compression::zstd::compress` does for the bundler: in one
/// call, so the bytes are its bytes at any size (see [`zstd_library`]).
fn zstd_compress(data: &[u8], level: i32) -> std::io::Result<Vec<u8>> {
    zstd_library::compress_one_shot(data, level)
}

/// Compress a plain bundle into the `CCOB` form, header `version` 2 or 3.
pub fn compress(bundle: &[u8], version: u16, method: Method, level: i32) -> Result<Vec<u8>> {
    let header_len = header_len(version)?;
    let payload = match method {
        Method::Zstd => zstd_compress(bundle, level),
        Method::Zlib => {
            use std::io::Write;
            let level = flate2::Compression::new(level.clamp(0, 9) as u32);
            let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), level);
            enc.write_all(bundle).and_then(|_| enc.finish())
        }
    }
    .map_err(|e| Error::Decompress {
        container: CONTAINER,
        offset: 0,
        reason: format!("compression failed: {e}"),
    })?;
    let total = header_len + payload.len() as u64;
    let mut out = header(
        version,
        method,
        total,
        bundle.len() as u64,
        truncated_md5(bundle),
    )?;
    out.reserve(payload.len());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// The length of a version 2 or 3 header (what [`header`] writes).
pub fn header_len(version: u16) -> Result<u64> {
    match version {
        2 => Ok(24),
        3 => Ok(32),
        v => Err(Error::Syntax {
            what: "compressed bundle version",
            text: v.to_string(),
            reason: "we write versions 2 and 3".into(),
        }),
    }
}

/// A version 2 or 3 header: `total` counts the whole file, `uncompressed` the plain
/// bundle whose truncated MD5 is `hash`.
pub fn header(
    version: u16,
    method: Method,
    total: u64,
    uncompressed: u64,
    hash: u64,
) -> Result<Vec<u8>> {
    let too_big = |what: &'static str, value: u64| Error::InvalidField {
        container: CONTAINER,
        field: what,
        offset: 8,
        value,
        reason: "does not fit the 32-bit field of version 2",
    };
    let mut out = Vec::with_capacity(header_len(version)? as usize);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(method as u16).to_le_bytes());
    if version == 2 {
        let t = u32::try_from(total).map_err(|_| too_big("total size", total))?;
        let u =
            u32::try_from(uncompressed).map_err(|_| too_big("uncompressed size", uncompressed))?;
        out.extend_from_slice(&t.to_le_bytes());
        out.extend_from_slice(&u.to_le_bytes());
    } else {
        out.extend_from_slice(&total.to_le_bytes());
        out.extend_from_slice(&uncompressed.to_le_bytes());
    }
    out.extend_from_slice(&hash.to_le_bytes());
    Ok(out)
}
