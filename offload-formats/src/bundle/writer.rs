//! Writing a bundle: the whole bundle from its code objects, or the header alone from
//! their sizes so the code objects can be streamed after it.

use super::{ENTRY_FIXED, MAGIC};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::Bundle;

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
}
