//! Text bundles (`-type=ll`, `s`, `i`, ...): each code object between marker lines
//! written in the language's comment syntax:
//! `\n<comment> __CLANG_OFFLOAD_BUNDLE____START__ <id>\n<code>\n<comment> __CLANG_OFFLOAD_BUNDLE____END__ <id>\n`.

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
        let code_len = find(&data[code_at..], end.as_bytes()).ok_or(crate::Error::Truncated {
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
                super::scan(&mut std::io::Cursor::new(&data[..]), data.len() as u64, ";").unwrap();
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
