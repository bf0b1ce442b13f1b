//! Clang offload bundles (`__CLANG_OFFLOAD_BUNDLE__`), the binary form written by
//! `clang-offload-bundler` for `-type=bc`, `gch`, `ast` and as the payload of `-compress`.
//!
//! ```text
//! "__CLANG_OFFLOAD_BUNDLE__" | u64 entry count
//! per entry: u64 offset | u64 size | u64 ID length | ID bytes (no NUL)
//! code objects at their offsets (padded to the bundle alignment)
//! ```
//! An entry ID is `<offload kind>-<triple>-<target ID>` (see [`BundleEntryId`]).

use crate::error::{Error, Result};
use crate::reader::Reader;
use crate::target_id::{is_known_offload_arch, TargetId};
use crate::triple::bundler_normal_form;
use std::io::Read as _;

pub const MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
const CONTAINER: &str = "offload bundle";
/// Bytes of one entry's fixed fields (offset, size, ID length).
const ENTRY_FIXED: u64 = 24;

/// One code object in a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleEntry<'a> {
    /// The entry ID exactly as stored.
    pub id: &'a str,
    /// Offset of the code object from the start of the bundle.
    pub offset: u64,
    pub data: &'a [u8],
}

/// A parsed (uncompressed) bundle; entries in the order of the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle<'a> {
    pub entries: Vec<BundleEntry<'a>>,
}

/// Does `data` start with the bundle magic?
pub fn is_bundle(data: &[u8]) -> bool {
    data.starts_with(MAGIC)
}

impl<'a> Bundle<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Self> {
        let r = Reader::new(data, CONTAINER);
        r.expect_magic(0, MAGIC)?;
        let count = r.u64(24, "number of bundle entries")?;
        // Every entry needs at least its fixed fields: this bounds the allocation.
        let max = (data.len() as u64).saturating_sub(32) / ENTRY_FIXED;
        if count > max {
            return Err(r.invalid(
                "number of bundle entries",
                24,
                count,
                "more entries than the header could hold",
            ));
        }
        let mut entries = Vec::with_capacity(count as usize);
        let mut at = 32u64;
        for _ in 0..count {
            let offset = r.u64(at, "code object offset")?;
            let size = r.u64(at + 8, "code object size")?;
            let id_len = r.u64(at + 16, "entry ID length")?;
            let id_bytes = r.bytes(at + 24, id_len, "entry ID")?;
            let id = std::str::from_utf8(id_bytes).map_err(|_| Error::BadString {
                container: CONTAINER,
                field: "entry ID",
                offset: at + 24,
            })?;
            let data = r.bytes(offset, size, "code object").map_err(|_| {
                r.invalid(
                    "code object offset",
                    at,
                    offset,
                    "code object (offset + size) lies outside the bundle",
                )
            })?;
            entries.push(BundleEntry { id, offset, data });
            at += ENTRY_FIXED + id_len;
        }
        Ok(Bundle { entries })
    }

    /// The entry whose ID is exactly `id`.
    pub fn get(&self, id: &str) -> Option<&BundleEntry<'a>> {
        self.entries.iter().find(|e| e.id == id)
    }

    /// The entries in the order `clang-offload-bundler -list` prints them: the tool
    /// keeps them in an LLVM `StringMap`, so this is that hash table's order, and a
    /// repeated ID is listed once.
    pub fn listing_order(&self) -> Vec<&BundleEntry<'a>> {
        let ids: Vec<&str> = self.entries.iter().map(|e| e.id).collect();
        crate::string_map_order::string_map_order(&ids)
            .into_iter()
            .map(|i| &self.entries[i])
            .collect()
    }
}

/// Write a bundle of `(entry ID, code object)` pairs in the given order, each code
/// object starting at a multiple of `align` (1 = packed; zero bytes pad). Produces the
/// same bytes as clang-offload-bundler 22 for the same (normalized) IDs and alignment.
pub fn write(entries: &[(&str, &[u8])], align: u64) -> Vec<u8> {
    let sizes: Vec<(&str, u64)> = entries
        .iter()
        .map(|(id, data)| (*id, data.len() as u64))
        .collect();
    let (mut out, offsets) = header(&sizes, align);
    for ((_, data), offset) in entries.iter().zip(&offsets) {
        out.resize(*offset as usize, 0);
        out.extend_from_slice(data);
    }
    out
}

/// The header of a bundle of `(entry ID, code object size)` pairs and the offset of
/// each code object: what [`write`] puts before the code objects, computed from the
/// sizes alone so a writer can stream the code objects after it (zero bytes pad each
/// one up to its offset).
pub fn header(entries: &[(&str, u64)], align: u64) -> (Vec<u8>, Vec<u64>) {
    let align = align.max(1);
    let align_to = |v: u64| v.div_ceil(align) * align;
    let mut header_len = MAGIC.len() as u64 + 8;
    for (id, _) in entries {
        header_len += ENTRY_FIXED + id.len() as u64;
    }
    let mut offsets = Vec::with_capacity(entries.len());
    let mut next = header_len;
    for (_, size) in entries {
        next = align_to(next);
        offsets.push(next);
        next += size;
    }
    let mut out = Vec::with_capacity(header_len as usize);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for ((id, size), offset) in entries.iter().zip(&offsets) {
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&(id.len() as u64).to_le_bytes());
        out.extend_from_slice(id.as_bytes());
    }
    (out, offsets)
}

/// Where one code object lies in a bundle file, read by [`read_entry_table`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRange {
    pub id: String,
    pub offset: u64,
    pub size: u64,
}

/// Read the header and entry table of a bundle of `len` bytes from `input`, positioned
/// at its start, without reading the code objects: the streaming form of
/// [`Bundle::parse`], with the same checks in the same order and so the same errors
/// (a field past `len` is `Truncated`, a code object outside `len` is invalid). The
/// outer error is an I/O failure, or `input` holding fewer than `len` bytes. The IDs
/// are the only part held in memory (so memory grows with the IDs' total length, which
/// the header states and `len` bounds; real bundles have IDs of tens of bytes).
pub fn read_entry_table<R: std::io::Read>(
    input: &mut R,
    len: u64,
) -> std::io::Result<Result<Vec<EntryRange>>> {
    let mut seq = Sequential { input, at: 0, len };
    macro_rules! field {
        ($e:expr) => {
            match $e? {
                Ok(v) => v,
                Err(e) => return Ok(Err(e)),
            }
        };
    }
    if field!(seq.bytes(MAGIC.len() as u64, "magic")) != MAGIC {
        return Ok(Err(Error::BadMagic {
            container: CONTAINER,
            offset: 0,
        }));
    }
    let count = field!(seq.u64("number of bundle entries"));
    if count > len.saturating_sub(32) / ENTRY_FIXED {
        return Ok(Err(Error::InvalidField {
            container: CONTAINER,
            field: "number of bundle entries",
            offset: 24,
            value: count,
            reason: "more entries than the header could hold",
        }));
    }
    // The count is bounded by the file's length, not by memory already held: reserve
    // little and grow with the entries actually read.
    let mut entries = Vec::with_capacity(count.min(64) as usize);
    for _ in 0..count {
        let at = seq.at;
        let offset = field!(seq.u64("code object offset"));
        let size = field!(seq.u64("code object size"));
        let id_len = field!(seq.u64("entry ID length"));
        let id = match String::from_utf8(field!(seq.bytes(id_len, "entry ID"))) {
            Ok(id) => id,
            Err(_) => {
                return Ok(Err(Error::BadString {
                    container: CONTAINER,
                    field: "entry ID",
                    offset: at + 24,
                }))
            }
        };
        if offset > len || size > len - offset {
            return Ok(Err(Error::InvalidField {
                container: CONTAINER,
                field: "code object offset",
                offset: at,
                value: offset,
                reason: "code object (offset + size) lies outside the bundle",
            }));
        }
        entries.push(EntryRange { id, offset, size });
    }
    Ok(Ok(entries))
}

/// Sequential reads of a container of known length, failing the way [`Reader`] does.
struct Sequential<'r, R> {
    input: &'r mut R,
    at: u64,
    len: u64,
}

impl<R: std::io::Read> Sequential<'_, R> {
    fn bytes(&mut self, n: u64, field: &'static str) -> std::io::Result<Result<Vec<u8>>> {
        let available = self.len.saturating_sub(self.at);
        if n > available {
            return Ok(Err(Error::Truncated {
                container: CONTAINER,
                field,
                offset: self.at,
                needed: n,
                available,
            }));
        }
        // Grows with what is read, not with what the header claims.
        let mut buf = Vec::new();
        std::io::Read::take(&mut *self.input, n).read_to_end(&mut buf)?;
        if buf.len() as u64 != n {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "ended at byte {} but is {} bytes long (did it change while being read?)",
                    self.at + buf.len() as u64,
                    self.len
                ),
            ));
        }
        self.at += n;
        Ok(Ok(buf))
    }

    fn u64(&mut self, field: &'static str) -> std::io::Result<Result<u64>> {
        Ok(self.bytes(8, field)?.map(|b| {
            let mut v = [0u8; 8];
            v.copy_from_slice(&b);
            u64::from_le_bytes(v)
        }))
    }
}

/// Offload kinds clang-offload-bundler 22 accepts.
pub const OFFLOAD_KINDS: &[&str] = &["host", "openmp", "hip", "hipv4"];

/// A bundle entry ID, `<offload kind>-<arch>-<vendor>-<os>-<env>[-<target ID>]`, parsed
/// the way clang-offload-bundler 22 does (`OffloadTargetInfo`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BundleEntryId {
    pub kind: String,
    /// The four triple components as written (not yet normalized).
    pub triple: String,
    /// The target ID with its features, as written; empty when absent, or when its
    /// processor is not an offload architecture clang knows (the bundler drops it).
    pub target_id: String,
}

impl BundleEntryId {
    /// Parse with the bundler's rules: the kind, then at least four triple components;
    /// anything after the fifth `-` is the target ID, which may itself contain `-`.
    pub fn parse(text: &str) -> Result<Self> {
        let syntax = |reason: String| Error::Syntax {
            what: "bundle entry ID",
            text: text.to_owned(),
            reason,
        };
        let parts: Vec<&str> = text.splitn(6, '-').collect();
        if parts.len() < 5 {
            return Err(syntax(
                "expected <offload kind>-<arch>-<vendor>-<os>-<env>[-<target id>]".into(),
            ));
        }
        let target = if parts.len() == 6 { parts[5] } else { "" };
        let processor = target.split(':').next().unwrap_or("");
        let target_id = if is_known_offload_arch(processor) {
            target.to_owned()
        } else {
            String::new()
        };
        Ok(BundleEntryId {
            kind: parts[0].to_owned(),
            triple: parts[1..5].join("-"),
            target_id,
        })
    }

    pub fn is_known_kind(&self) -> bool {
        OFFLOAD_KINDS.contains(&self.kind.as_str())
    }

    pub fn is_host(&self) -> bool {
        self.kind == "host"
    }

    /// The ID as the bundler writes it: kind, normalized triple, target ID.
    pub fn to_bundler_string(&self) -> String {
        format!(
            "{}-{}-{}",
            self.kind,
            bundler_normal_form(&self.triple),
            self.target_id
        )
    }

    fn kind_compatible(&self, other: &BundleEntryId, hip_openmp_compatible: bool) -> bool {
        let hip = |k: &str| k == "hip" || k == "hipv4";
        self.kind == other.kind
            || (hip(&self.kind) && hip(&other.kind))
            || (hip_openmp_compatible
                && ((hip(&self.kind) && other.kind == "openmp")
                    || (self.kind == "openmp" && hip(&other.kind))))
    }

    /// May the code object with this ID be unbundled for `wanted`? Exact match, or same
    /// kind family and triple, same processor, and every feature the code object
    /// specifies specified identically by `wanted` (the bundler's
    /// `isCodeObjectCompatible`).
    pub fn is_code_object_compatible(
        &self,
        wanted: &BundleEntryId,
        hip_openmp_compatible: bool,
    ) -> bool {
        if self.to_bundler_string() == wanted.to_bundler_string() {
            return true;
        }
        if !self.kind_compatible(wanted, hip_openmp_compatible)
            || !crate::triple::compatible(&self.triple, &wanted.triple)
        {
            return false;
        }
        if self.target_id.is_empty() || wanted.target_id.is_empty() {
            return self.target_id.is_empty() && wanted.target_id.is_empty();
        }
        match (
            TargetId::parse(&self.target_id),
            TargetId::parse(&wanted.target_id),
        ) {
            (Ok(code), Ok(want)) => {
                code.features.len() <= want.features.len()
                    && crate::target_id::is_compatible(&code, &want)
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_normalize_like_the_bundler() {
        let cases = [
            (
                "openmp-nvptx64-nvidia-cuda-sm_90",
                "openmp-nvptx64-nvidia-cuda-sm_90-",
            ),
            (
                "openmp-nvptx64-nvidia-cuda--sm_90",
                "openmp-nvptx64-nvidia-cuda-unknown-sm_90",
            ),
            ("hip-amdgcn-amd-amdhsa-gfx90a", "hip-amdgcn-amd-amdhsa--"),
            (
                "hip-amdgcn-amd-amdhsa--gfx90a:sramecc-:xnack+",
                "hip-amdgcn-amd-amdhsa--gfx90a:sramecc-:xnack+",
            ),
            (
                "openmp-amdgcn--amdhsa-gfx906",
                "openmp-amdgcn-unknown-amdhsa--",
            ),
            (
                "hip-amdgcn-amd-amdhsa-unknown-gfx90a",
                "hip-amdgcn-amd-amdhsa--gfx90a",
            ),
            (
                "openmp-amdgcn-amd-amdhsa--gfx90A",
                "openmp-amdgcn-amd-amdhsa--",
            ),
            (
                "host-x86_64-unknown-linux-gnu",
                "host-x86_64-unknown-linux-gnu-",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                BundleEntryId::parse(input).unwrap().to_bundler_string(),
                want,
                "{input}"
            );
        }
        assert!(BundleEntryId::parse("openmp-nvptx64-nvidia-cuda").is_err());
    }

    #[test]
    fn write_then_parse() {
        let a = [1u8, 2, 3];
        let b = [9u8; 10];
        for align in [1, 8, 4096] {
            let bytes = write(
                &[
                    ("host-x86_64-unknown-linux-gnu-", &a),
                    ("openmp-x-y-z-w-", &b),
                ],
                align,
            );
            let bundle = Bundle::parse(&bytes).unwrap();
            assert_eq!(bundle.entries.len(), 2);
            assert_eq!(bundle.entries[0].data, a);
            assert_eq!(bundle.entries[1].data, b);
            assert_eq!(bundle.entries[1].offset % align, 0);
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = write(
            &[
                ("host-x86_64-unknown-linux-gnu-", b"abc"),
                ("openmp-x-y-z-w-", b"defg"),
            ],
            1,
        );
        for len in 0..bytes.len() {
            assert!(Bundle::parse(&bytes[..len]).is_err(), "len {len}");
        }
    }

    /// The streaming table reader fails exactly as `Bundle::parse` does, on every
    /// truncation and on corrupted fields, and finds the same ranges otherwise.
    #[test]
    fn entry_table_matches_parse() {
        let good = write(
            &[
                ("host-x86_64-unknown-linux-gnu-", b"abc"),
                ("openmp-x-y-z-w-", b"defg"),
            ],
            8,
        );
        let mut cases: Vec<Vec<u8>> = (0..=good.len()).map(|n| good[..n].to_vec()).collect();
        for (at, byte) in [
            (0, b'x'),
            (24, 0xff),
            (32, 0xff),
            (40, 0xff),
            (48, 0xff),
            (56, 0xff),
        ] {
            let mut bad = good.clone();
            bad[at] = byte;
            cases.push(bad);
        }
        for data in &cases {
            let streamed = read_entry_table(&mut &data[..], data.len() as u64).unwrap();
            let parsed = Bundle::parse(data).map(|b| {
                b.entries
                    .iter()
                    .map(|e| EntryRange {
                        id: e.id.to_owned(),
                        offset: e.offset,
                        size: e.data.len() as u64,
                    })
                    .collect::<Vec<_>>()
            });
            assert_eq!(streamed, parsed, "{data:?}");
        }
        // An input shorter than the length it was given is an I/O error, not a result.
        assert!(read_entry_table(&mut &good[..40], good.len() as u64).is_err());
    }

    #[test]
    fn huge_count_is_rejected_without_allocating() {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&u64::MAX.to_le_bytes());
        let err = Bundle::parse(&bytes).unwrap_err();
        assert!(
            err.to_string().contains("number of bundle entries"),
            "{err}"
        );
    }
}

/// Text bundles (`-type=ll`, `s`, `i`, ...): each code object between marker lines
/// written in the language's comment syntax:
/// `\n<comment> __CLANG_OFFLOAD_BUNDLE____START__ <id>\n<code>\n<comment> __CLANG_OFFLOAD_BUNDLE____END__ <id>\n`.
pub mod text {
    use super::MAGIC;

    /// The comment leader clang-offload-bundler uses for a text `-type`, `None` when
    /// the type is not a text type.
    pub fn comment_for_type(file_type: &str) -> Option<&'static str> {
        match file_type {
            "i" | "ii" | "cui" | "hipi" => Some("//"),
            "s" | "d" => Some("#"),
            "ll" => Some(";"),
            _ => None,
        }
    }

    fn marker(comment: &str, which: &str) -> String {
        format!(
            "\n{comment} {}__{which}__ ",
            std::str::from_utf8(MAGIC).unwrap_or_default()
        )
    }

    /// The start and end markers, each followed by an entry ID and `\n` in a bundle:
    /// `start id \n code end id \n` for each entry is what [`write`] writes.
    pub fn markers(comment: &str) -> (String, String) {
        (marker(comment, "START"), marker(comment, "END"))
    }

    /// Write a text bundle.
    pub fn write(entries: &[(&str, &[u8])], comment: &str) -> Vec<u8> {
        let (start, end) = markers(comment);
        let mut out = Vec::new();
        for (id, data) in entries {
            out.extend_from_slice(start.as_bytes());
            out.extend_from_slice(id.as_bytes());
            out.push(b'\n');
            out.extend_from_slice(data);
            out.extend_from_slice(end.as_bytes());
            out.extend_from_slice(id.as_bytes());
            out.push(b'\n');
        }
        out
    }

    /// One entry of a text bundle: the ID and the code between the markers.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct TextEntry<'a> {
        pub id: &'a str,
        pub offset: u64,
        pub data: &'a [u8],
    }

    /// Parse a text bundle. Text before the first marker is ignored (as the bundler
    /// does); a start marker without its end marker is an error.
    pub fn parse<'a>(data: &'a [u8], comment: &str) -> crate::Result<Vec<TextEntry<'a>>> {
        let (start, end) = (marker(comment, "START"), marker(comment, "END"));
        let mut out = Vec::new();
        let mut at = 0usize;
        while let Some(found) = find(&data[at..], start.as_bytes()) {
            let id_at = at + found + start.len();
            let id_end = id_at
                + find(&data[id_at..], b"\n").ok_or(crate::Error::Truncated {
                    container: "text offload bundle",
                    field: "entry ID line",
                    offset: id_at as u64,
                    needed: 1,
                    available: 0,
                })?;
            let id =
                std::str::from_utf8(&data[id_at..id_end]).map_err(|_| crate::Error::BadString {
                    container: "text offload bundle",
                    field: "entry ID",
                    offset: id_at as u64,
                })?;
            let code_at = id_end + 1;
            let code_len =
                find(&data[code_at..], end.as_bytes()).ok_or(crate::Error::Truncated {
                    container: "text offload bundle",
                    field: "end marker",
                    offset: code_at as u64,
                    needed: end.len() as u64,
                    available: (data.len() - code_at) as u64,
                })?;
            out.push(TextEntry {
                id,
                offset: code_at as u64,
                data: &data[code_at..code_at + code_len],
            });
            // Skip the end marker and its ID line.
            let after = code_at + code_len + end.len();
            at = after + find(&data[after..], b"\n").map_or(data.len() - after, |n| n + 1);
        }
        Ok(out)
    }

    /// The entries of a text bundle of `len` bytes, read from `input` without holding
    /// it: [`parse`] in a stream, with the same rules and the same errors, returning
    /// where each code object lies. The outer error is an I/O failure. Each marker
    /// search reads forward from where the last one ended through a fixed buffer, so the
    /// file is read about once; the IDs are the only part held.
    pub fn scan<R: std::io::Read + std::io::Seek>(
        input: &mut R,
        len: u64,
        comment: &str,
    ) -> std::io::Result<crate::Result<Vec<super::EntryRange>>> {
        let (start, end) = markers(comment);
        let mut out = Vec::new();
        let mut at = 0u64;
        while let Some(found) = find_in(input, len, at, start.as_bytes())? {
            let id_at = found + start.len() as u64;
            let Some(id_end) = find_in(input, len, id_at, b"\n")? else {
                return Ok(Err(crate::Error::Truncated {
                    container: "text offload bundle",
                    field: "entry ID line",
                    offset: id_at,
                    needed: 1,
                    available: 0,
                }));
            };
            let mut id = vec![0u8; (id_end - id_at) as usize];
            input.seek(std::io::SeekFrom::Start(id_at))?;
            input.read_exact(&mut id)?;
            let Ok(id) = String::from_utf8(id) else {
                return Ok(Err(crate::Error::BadString {
                    container: "text offload bundle",
                    field: "entry ID",
                    offset: id_at,
                }));
            };
            let code_at = id_end + 1;
            let Some(code_end) = find_in(input, len, code_at, end.as_bytes())? else {
                return Ok(Err(crate::Error::Truncated {
                    container: "text offload bundle",
                    field: "end marker",
                    offset: code_at,
                    needed: end.len() as u64,
                    available: len - code_at,
                }));
            };
            out.push(super::EntryRange {
                id,
                offset: code_at,
                size: code_end - code_at,
            });
            // Skip the end marker and its ID line.
            let after = code_end + end.len() as u64;
            at = find_in(input, len, after, b"\n")?.map_or(len, |n| n + 1);
        }
        Ok(Ok(out))
    }

    /// Offset of the first `needle` at or after `from` in the first `len` bytes of
    /// `input`, read through a fixed buffer that keeps the last `needle.len() - 1` bytes
    /// of each fill so a match across two fills is found.
    fn find_in<R: std::io::Read + std::io::Seek>(
        input: &mut R,
        len: u64,
        from: u64,
        needle: &[u8],
    ) -> std::io::Result<Option<u64>> {
        use std::io::Read;
        input.seek(std::io::SeekFrom::Start(from))?;
        let mut limited = input.take(len.saturating_sub(from));
        let mut buf = vec![0u8; (64 << 10).max(2 * needle.len())];
        let (mut filled, mut buf_at) = (0usize, from);
        loop {
            let n = limited.read(&mut buf[filled..])?;
            if n == 0 {
                return Ok(None);
            }
            filled += n;
            if let Some(i) = find(&buf[..filled], needle) {
                return Ok(Some(buf_at + i as u64));
            }
            let keep = (needle.len() - 1).min(filled);
            buf.copy_within(filled - keep..filled, 0);
            buf_at += (filled - keep) as u64;
            filled = keep;
        }
    }

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        if needle.is_empty() || hay.len() < needle.len() {
            return None;
        }
        memchr::memmem::find(hay, needle)
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn round_trip() {
            let bytes = super::write(&[("host-a-b-c-d-", b"x\n"), ("openmp-a-b-c-d-", b"y")], ";");
            let e = super::parse(&bytes, ";").unwrap();
            assert_eq!(e.len(), 2);
            assert_eq!((e[0].id, e[0].data), ("host-a-b-c-d-", &b"x\n"[..]));
            assert_eq!((e[1].id, e[1].data), ("openmp-a-b-c-d-", &b"y"[..]));
        }

        /// `scan` finds what `parse` finds and fails as it fails: on every truncation of
        /// a bundle, with text before, between and after the entries, and with a code
        /// object longer than the scan's buffer (a marker across two fills).
        #[test]
        fn scan_matches_parse() {
            let big: Vec<u8> = (0..70_000u32).map(|i| b'a' + (i % 26) as u8).collect();
            let mut bundle = b"preamble\n".to_vec();
            bundle.extend(super::write(
                &[
                    ("host-a-b-c-d-", b"x\n"),
                    ("openmp-a-b-c-d-", &big),
                    ("hip-a-b-c-d-", b""),
                ],
                ";",
            ));
            bundle.extend_from_slice(b"trailer");
            let mut cases: Vec<Vec<u8>> = (0..bundle.len())
                .filter(|n| *n < 400 || bundle.len() - n < 400 || n % 997 == 0)
                .map(|n| bundle[..n].to_vec())
                .collect();
            cases.push(bundle.clone());
            let mut bad_id = bundle.clone();
            let id_at = bundle.windows(4).position(|w| w == b"host").unwrap();
            bad_id[id_at] = 0xff;
            cases.push(bad_id);
            for data in &cases {
                let scanned =
                    super::scan(&mut std::io::Cursor::new(&data[..]), data.len() as u64, ";")
                        .unwrap();
                let parsed = super::parse(data, ";").map(|entries| {
                    entries
                        .iter()
                        .map(|e| crate::bundle::EntryRange {
                            id: e.id.to_owned(),
                            offset: e.offset,
                            size: e.data.len() as u64,
                        })
                        .collect::<Vec<_>>()
                });
                assert_eq!(scanned, parsed, "length {}", data.len());
            }
            let full = super::scan(
                &mut std::io::Cursor::new(&bundle[..]),
                bundle.len() as u64,
                ";",
            )
            .unwrap()
            .unwrap();
            assert_eq!(full.len(), 3);
            assert_eq!(full[1].size, big.len() as u64);
        }
    }
}

/// Prefix of the ELF sections in which `clang-offload-bundler -type=o` stores each
/// code object of an object-file bundle (`__CLANG_OFFLOAD_BUNDLE__<entry ID>`).
pub const OBJECT_SECTION_PREFIX: &str = "__CLANG_OFFLOAD_BUNDLE__";

/// The entries of an object-file bundle, in section order. The host entry's data is
/// the bundler's 1-byte placeholder: the host code is the object itself.
pub fn object_bundle_entries(elf: &[u8]) -> Result<Vec<BundleEntry<'_>>> {
    use object::{Object, ObjectSection};
    let file = object::File::parse(elf)?;
    let mut out = Vec::new();
    for section in file.sections() {
        let Ok(name) = section.name() else { continue };
        let Some(id) = name.strip_prefix(OBJECT_SECTION_PREFIX) else {
            continue;
        };
        let offset = section.file_range().map_or(0, |(o, _)| o);
        out.push(BundleEntry {
            id,
            offset,
            data: section.data()?,
        });
    }
    Ok(out)
}
