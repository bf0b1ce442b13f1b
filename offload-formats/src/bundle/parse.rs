//! A bundle held in memory: its header and entry table checked, each code object
//! borrowed from the input.

use super::{CONTAINER, ENTRY_FIXED, MAGIC};
use crate::error::{Error, Result};
use crate::reader::Reader;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::write;

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
