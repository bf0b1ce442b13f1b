//! Entry tables as stored: a section's bytes decoded into [`RawEntry`]s and encoded
//! from them, in either [`EntryLayout`].

use super::{EntryLayout, LlvmOffloadEntry, TgtOffloadEntry};
use crate::error::Result;
use crate::reader::Reader;
use std::mem::offset_of;

/// One entry as stored, pointers unrelocated. For the 32-byte layout `version`,
/// `kind`, `data` and `aux` are 0 and `reserved` is the trailing `i32`; for the 56-byte
/// layout `reserved` is the leading `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct RawEntry {
    pub reserved: u64,
    pub version: u16,
    pub kind: u16,
    pub flags: u32,
    pub addr: u64,
    pub name: u64,
    pub size: u64,
    pub data: u64,
    pub aux: u64,
}

/// Decode an entry table (a section's bytes). The 56-byte layout must have version 1.
pub fn parse_table(data: &[u8], layout: EntryLayout) -> Result<Vec<RawEntry>> {
    let r = Reader::new(data, "offload entries");
    if !(data.len() as u64).is_multiple_of(layout.size()) {
        return Err(r.invalid(
            "section size",
            0,
            data.len() as u64,
            "not a multiple of the entry size",
        ));
    }
    let count = data.len() as u64 / layout.size();
    let mut out = Vec::with_capacity(count as usize);
    for index in 0..count {
        let at = index * layout.size();
        let entry = match layout {
            EntryLayout::Llvm56 => {
                let e = RawEntry {
                    reserved: r.u64(at + field!(LlvmOffloadEntry, reserved), "reserved")?,
                    version: r.u16(at + field!(LlvmOffloadEntry, version), "version")?,
                    kind: r.u16(at + field!(LlvmOffloadEntry, kind), "kind")?,
                    flags: r.u32(at + field!(LlvmOffloadEntry, flags), "flags")?,
                    addr: r.u64(at + field!(LlvmOffloadEntry, addr), "addr")?,
                    name: r.u64(at + field!(LlvmOffloadEntry, name), "name")?,
                    size: r.u64(at + field!(LlvmOffloadEntry, size), "size")?,
                    data: r.u64(at + field!(LlvmOffloadEntry, data), "data")?,
                    aux: r.u64(at + field!(LlvmOffloadEntry, aux), "aux")?,
                };
                if e.version != 1 {
                    let version_at = at + field!(LlvmOffloadEntry, version);
                    return Err(r.invalid("version", version_at, e.version.into(), "expected 1"));
                }
                e
            }
            EntryLayout::Legacy32 => RawEntry {
                addr: r.u64(at + field!(TgtOffloadEntry, addr), "addr")?,
                name: r.u64(at + field!(TgtOffloadEntry, name), "name")?,
                size: r.u64(at + field!(TgtOffloadEntry, size), "size")?,
                flags: r.u32(at + field!(TgtOffloadEntry, flags), "flags")?,
                reserved: r
                    .u32(at + field!(TgtOffloadEntry, reserved), "reserved")?
                    .into(),
                ..RawEntry::default()
            },
        };
        out.push(entry);
    }
    Ok(out)
}

/// Encode an entry table in `layout` (little-endian, as on x86-64). For the 32-byte
/// layout the low 32 bits of `reserved` are written and `version`, `kind`, `data`,
/// `aux` are dropped.
pub fn write_table(entries: &[RawEntry], layout: EntryLayout) -> Vec<u8> {
    let size = layout.size() as usize;
    let mut out = vec![0u8; entries.len() * size];
    for (e, entry) in entries.iter().zip(out.chunks_exact_mut(size)) {
        let mut put = |offset: usize, bytes: &[u8]| {
            entry[offset..offset + bytes.len()].copy_from_slice(bytes);
        };
        match layout {
            EntryLayout::Llvm56 => {
                put(
                    offset_of!(LlvmOffloadEntry, reserved),
                    &e.reserved.to_le_bytes(),
                );
                put(
                    offset_of!(LlvmOffloadEntry, version),
                    &e.version.to_le_bytes(),
                );
                put(offset_of!(LlvmOffloadEntry, kind), &e.kind.to_le_bytes());
                put(offset_of!(LlvmOffloadEntry, flags), &e.flags.to_le_bytes());
                put(offset_of!(LlvmOffloadEntry, addr), &e.addr.to_le_bytes());
                put(offset_of!(LlvmOffloadEntry, name), &e.name.to_le_bytes());
                put(offset_of!(LlvmOffloadEntry, size), &e.size.to_le_bytes());
                put(offset_of!(LlvmOffloadEntry, data), &e.data.to_le_bytes());
                put(offset_of!(LlvmOffloadEntry, aux), &e.aux.to_le_bytes());
            }
            EntryLayout::Legacy32 => {
                put(offset_of!(TgtOffloadEntry, addr), &e.addr.to_le_bytes());
                put(offset_of!(TgtOffloadEntry, name), &e.name.to_le_bytes());
                put(offset_of!(TgtOffloadEntry, size), &e.size.to_le_bytes());
                put(offset_of!(TgtOffloadEntry, flags), &e.flags.to_le_bytes());
                let reserved = e.reserved as u32;
                put(
                    offset_of!(TgtOffloadEntry, reserved),
                    &reserved.to_le_bytes(),
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entries::flags;

    fn sample() -> Vec<RawEntry> {
        vec![
            RawEntry {
                version: 1,
                kind: 1,
                flags: flags::INDIRECT,
                addr: 0x11c0,
                name: 0x60c8,
                size: 8,
                ..RawEntry::default()
            },
            RawEntry {
                version: 1,
                kind: 1,
                addr: 0x8038,
                name: 0x60c0,
                size: 4,
                data: 7,
                aux: 9,
                reserved: 3,
                ..RawEntry::default()
            },
        ]
    }

    #[test]
    fn tables_round_trip() {
        let entries = sample();
        let bytes = write_table(&entries, EntryLayout::Llvm56);
        assert_eq!(bytes.len(), 112);
        assert_eq!(parse_table(&bytes, EntryLayout::Llvm56).unwrap(), entries);
        let legacy: Vec<RawEntry> = entries
            .iter()
            .map(|e| RawEntry {
                addr: e.addr,
                name: e.name,
                size: e.size,
                flags: e.flags,
                reserved: e.reserved,
                ..RawEntry::default()
            })
            .collect();
        let bytes = write_table(&legacy, EntryLayout::Legacy32);
        assert_eq!(bytes.len(), 64);
        assert_eq!(parse_table(&bytes, EntryLayout::Legacy32).unwrap(), legacy);
    }

    #[test]
    fn bad_tables_are_errors() {
        let bytes = write_table(&sample(), EntryLayout::Llvm56);
        for len in 1..bytes.len() {
            if len % 56 != 0 {
                let e = parse_table(&bytes[..len], EntryLayout::Llvm56).unwrap_err();
                assert!(e.to_string().contains("section size"), "{e}");
            }
        }
        let mut bad = bytes.clone();
        bad[56 + 8] = 2;
        let e = parse_table(&bad, EntryLayout::Llvm56)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`version`") && e.contains("0x40"), "{e}");
    }
}
