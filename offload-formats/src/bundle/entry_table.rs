//! A bundle's entry table read from a stream, without reading (or holding) the code
//! objects: where each one lies.

use super::{CONTAINER, ENTRY_FIXED, MAGIC};
use crate::error::{Error, Result};
use std::io::Read as _;

/// Where one code object lies in a bundle file, read by [`read_entry_table`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRange {
    pub id: String,
    pub offset: u64,
    pub size: u64,
}

/// Read the header and entry table of a bundle of `len` bytes from `input`, positioned
/// at its start, without reading the code objects: the streaming form of
/// [`Bundle::parse`](super::Bundle::parse), with the same checks in the same order and
/// so the same errors (a field past `len` is `Truncated`, a code object outside `len`
/// is invalid). The outer error is an I/O failure, or `input` holding fewer than `len`
/// bytes. The IDs are the only part held in memory (so memory grows with the IDs' total
/// length, which the header states and `len` bounds; real bundles have IDs of tens of
/// bytes).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{write, Bundle};

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
}
