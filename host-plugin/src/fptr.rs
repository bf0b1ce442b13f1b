//! The host -> device function pointer table that `__kmpc_target_translate_fptr` searches.
//!
//! Pure: turns (host, device) address pairs into the sorted, duplicate-free table the
//! device runtime binary-searches. Keys are ordered as unsigned 64-bit addresses.

use thiserror::Error;

/// One row of the device table: the device runtime's own type, so the plugin writes
/// exactly what `__kmpc_target_translate_fptr` reads.
pub use device_rtl::FptrMapEntry;

/// A pair found while loading an image, with the offload entry it came from (for errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndirectPair<'a> {
    pub host_ptr: u64,
    pub tgt_ptr: u64,
    pub origin: Origin<'a>,
}

/// Where a pair came from. Borrowed and formatted only when a message names it: a load
/// of a million entries would otherwise allocate a million names no one reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin<'a> {
    /// An offload entry, by name.
    Entry(&'a [u8]),
    /// What one slot of an indirect vtable entry holds (a host function).
    VtableSlot { entry: &'a [u8], slot: usize },
    /// The address of one word of an indirect vtable entry (where a vptr may point).
    VtableWord { entry: &'a [u8], word: usize },
    /// A row of a table handed over whole (`__tgt_rtl_set_function_ptr_map`).
    Row(usize),
}

impl std::fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Entry(name) => write!(f, "{}", String::from_utf8_lossy(name)),
            Origin::VtableSlot { entry, slot } => {
                write!(f, "{}[{slot}]", String::from_utf8_lossy(entry))
            }
            Origin::VtableWord { entry, word } => {
                write!(f, "&{}[{word}]", String::from_utf8_lossy(entry))
            }
            Origin::Row(i) => write!(f, "row {i}"),
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FptrError {
    #[error(
        "host address {host:#x} is mapped to two device addresses: {first_tgt:#x} by entry \
         `{first}` and {second_tgt:#x} by entry `{second}`"
    )]
    Conflict {
        host: u64,
        first: String,
        first_tgt: u64,
        second: String,
        second_tgt: u64,
    },
}

/// Sort by host address, drop exact duplicates, reject a host address with two targets.
pub fn build(pairs: Vec<IndirectPair>) -> Result<Vec<FptrMapEntry>, FptrError> {
    let rows = pairs
        .iter()
        .map(|p| FptrMapEntry {
            host_ptr: p.host_ptr,
            tgt_ptr: p.tgt_ptr,
        })
        .collect();
    build_rows(rows, |host, rank| {
        let mut same_host = pairs.iter().filter(|p| p.host_ptr == host);
        same_host.nth(rank).map(|p| p.origin)
    })
}

/// [`build`] for rows gathered without their origins (a million-entry load would keep
/// 48 bytes per pair for names only an error reads): `origin(host, rank)` names the
/// `rank`-th input row with host address `host`, counted in input order from 0; it is
/// asked only to describe a conflict.
pub fn build_rows<'a>(
    rows: Vec<FptrMapEntry>,
    origin: impl Fn(u64, usize) -> Option<Origin<'a>>,
) -> Result<Vec<FptrMapEntry>, FptrError> {
    sorted_table(rows, |c| {
        let name = |rank| origin(c.host, rank).map_or_else(String::new, |o| o.to_string());
        FptrError::Conflict {
            host: c.host,
            first: name(0),
            first_tgt: c.first_tgt,
            second: name(c.second_rank),
            second_tgt: c.second_tgt,
        }
    })
}

/// Validate a table handed to us whole (`__tgt_rtl_set_function_ptr_map`): same rules.
pub fn from_rows(rows: &[FptrMapEntry]) -> Result<Vec<FptrMapEntry>, FptrError> {
    build_rows(rows.to_vec(), |host, rank| {
        let mut same_host = rows.iter().enumerate().filter(|(_, r)| r.host_ptr == host);
        same_host.nth(rank).map(|(i, _)| Origin::Row(i))
    })
}

/// Two input rows of one host address with different targets: the first row of that
/// address in input order, and the first after it with another target (rank: its place
/// among the rows of that address).
struct Collision {
    host: u64,
    first_tgt: u64,
    second_tgt: u64,
    second_rank: usize,
}

/// Sort rows by host address (stable: rows of one address keep their input order, so
/// an error names entries in image order), drop exact duplicates; a host address with
/// two targets becomes `conflict(..)`.
fn sorted_table(
    mut rows: Vec<FptrMapEntry>,
    conflict: impl FnOnce(Collision) -> FptrError,
) -> Result<Vec<FptrMapEntry>, FptrError> {
    crate::radix::sort_by_u64_key(&mut rows, |r| r.host_ptr);
    let mut kept = 0;
    let mut group_start = 0;
    for i in 0..rows.len() {
        let row = rows[i];
        if kept > 0 && rows[kept - 1].host_ptr == row.host_ptr {
            if rows[kept - 1].tgt_ptr != row.tgt_ptr {
                return Err(conflict(Collision {
                    host: row.host_ptr,
                    first_tgt: rows[kept - 1].tgt_ptr,
                    second_tgt: row.tgt_ptr,
                    second_rank: i - group_start,
                }));
            }
            continue;
        }
        group_start = i;
        rows[kept] = row;
        kept += 1;
    }
    rows.truncate(kept);
    Ok(rows)
}

/// Pairs for an indirect vtable: host slot i -> device slot i, both read as 8-byte words.
/// Null host slots (offset-to-top of zero, absent RTTI) carry no function and are skipped.
pub fn vtable_pairs<'a>(
    entry: &'a [u8],
    host_vtable: &[u8],
    device_vtable: &[u8],
) -> Vec<IndirectPair<'a>> {
    host_vtable
        .chunks_exact(8)
        .zip(device_vtable.chunks_exact(8))
        .enumerate()
        .filter_map(|(slot, (h, d))| {
            let host_ptr = u64::from_ne_bytes(h.try_into().ok()?);
            let tgt_ptr = u64::from_ne_bytes(d.try_into().ok()?);
            (host_ptr != 0).then_some(IndirectPair {
                host_ptr,
                tgt_ptr,
                origin: Origin::VtableSlot { entry, slot },
            })
        })
        .collect()
}

/// Pairs for an indirect vtable's words (LLVM 22's rule): host `vtable + 8i` -> device
/// `vtable + 8i` for every word of the group, so a vptr (which points inside the group,
/// past offset-to-top and RTTI) translates to the same place in the device's group.
pub fn vtable_word_pairs(
    entry: &[u8],
    host_vtable: u64,
    device_vtable: u64,
    len: usize,
) -> impl Iterator<Item = IndirectPair<'_>> {
    (0..len / 8).map(move |word| {
        let offset = 8 * word as u64;
        IndirectPair {
            host_ptr: host_vtable.wrapping_add(offset),
            tgt_ptr: device_vtable.wrapping_add(offset),
            origin: Origin::VtableWord { entry, word },
        }
    })
}

/// The table as the bytes the device reads.
pub fn as_bytes(table: &[FptrMapEntry]) -> &[u8] {
    bytemuck::cast_slice(table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pair(h: u64, t: u64, o: &'static str) -> IndirectPair<'static> {
        IndirectPair {
            host_ptr: h,
            tgt_ptr: t,
            origin: Origin::Entry(o.as_bytes()),
        }
    }

    #[test]
    fn sorts_as_unsigned() {
        let t = build(vec![
            pair(u64::MAX, 1, "a"),
            pair(0x10, 2, "b"),
            pair(0x8000_0000_0000_0000, 3, "c"),
        ])
        .unwrap();
        let keys: Vec<u64> = t.iter().map(|e| e.host_ptr).collect();
        assert_eq!(keys, vec![0x10, 0x8000_0000_0000_0000, u64::MAX]);
        assert_eq!(t[2].tgt_ptr, 1);
    }

    #[test]
    fn same_pair_twice_is_deduplicated() {
        let t = build(vec![pair(5, 50, "a"), pair(5, 50, "b"), pair(1, 10, "c")]).unwrap();
        assert_eq!(
            t,
            vec![
                FptrMapEntry {
                    host_ptr: 1,
                    tgt_ptr: 10
                },
                FptrMapEntry {
                    host_ptr: 5,
                    tgt_ptr: 50
                }
            ]
        );
    }

    #[test]
    fn conflict_names_both_entries() {
        let err = build(vec![pair(5, 50, "first"), pair(5, 51, "second")]).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("`first`") && msg.contains("`second`"), "{msg}");
        assert!(msg.contains("0x32") && msg.contains("0x33"), "{msg}");
    }

    #[test]
    fn a_conflict_among_many_names_the_first_two_entries_in_input_order() {
        // Enough rows for the radix sort; the conflict is at host 0x5000 + 16 * 40.
        let n = 5000u64;
        let names: Vec<String> = (0..n).map(|i| format!("e{i}")).collect();
        let mut pairs: Vec<IndirectPair> = (0..n)
            .map(|i| IndirectPair {
                host_ptr: 0x5000 + 16 * ((i * 37) % n),
                tgt_ptr: 0x9000 + i,
                origin: Origin::Entry(names[i as usize].as_bytes()),
            })
            .collect();
        let victim = pairs
            .iter()
            .position(|p| p.host_ptr == 0x5000 + 16 * 40)
            .unwrap();
        let same = pairs[victim];
        pairs.push(same); // an exact duplicate: fine
        pairs.push(IndirectPair {
            tgt_ptr: 0x1,
            origin: Origin::Entry(b"late"),
            ..same
        });
        pairs.push(IndirectPair {
            tgt_ptr: 0x2,
            origin: Origin::Entry(b"later"),
            ..same
        });
        let err = build(pairs).unwrap_err();
        assert_eq!(
            err,
            FptrError::Conflict {
                host: same.host_ptr,
                first: format!("e{victim}"),
                first_tgt: same.tgt_ptr,
                second: "late".into(),
                second_tgt: 0x1,
            }
        );
        let rows: Vec<FptrMapEntry> = (0..5000u64)
            .map(|i| FptrMapEntry {
                host_ptr: 0x7000 + 8 * (i % 4990),
                tgt_ptr: i,
            })
            .collect();
        let err = from_rows(&rows).unwrap_err().to_string();
        assert!(
            err.contains("`row 0`") && err.contains("`row 4990`"),
            "{err}"
        );
    }

    #[test]
    fn every_vtable_word_pairs_with_the_same_device_word() {
        let pairs: Vec<_> = vtable_word_pairs(b"vt", 0x1000, 0x9000, 24).collect();
        let rows: Vec<(u64, u64)> = pairs.iter().map(|p| (p.host_ptr, p.tgt_ptr)).collect();
        assert_eq!(
            rows,
            vec![(0x1000, 0x9000), (0x1008, 0x9008), (0x1010, 0x9010)]
        );
        assert_eq!(pairs[2].origin.to_string(), "&vt[2]");
        // A partial trailing word is not a word.
        assert_eq!(vtable_word_pairs(b"vt", 0x1000, 0x9000, 12).count(), 1);
    }

    #[test]
    fn vtable_slots_pair_up_and_skip_null() {
        let host: Vec<u8> = [0u64, 0x100, 0x200]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        let dev: Vec<u8> = [0u64, 0x900, 0xa00]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        let pairs = vtable_pairs(b"vt", &host, &dev);
        let seen: Vec<(u64, u64, String)> = pairs
            .iter()
            .map(|p| (p.host_ptr, p.tgt_ptr, p.origin.to_string()))
            .collect();
        assert_eq!(
            seen,
            vec![
                (0x100, 0x900, "vt[1]".to_string()),
                (0x200, 0xa00, "vt[2]".to_string())
            ]
        );
    }

    #[test]
    fn bytes_are_pairs_of_native_words() {
        let t = [FptrMapEntry {
            host_ptr: 1,
            tgt_ptr: 2,
        }];
        let b = as_bytes(&t);
        assert_eq!(b.len(), 16);
        assert_eq!(u64::from_ne_bytes(b[8..16].try_into().unwrap()), 2);
    }

    proptest! {
        // Whatever the input order and duplication, the table is strictly increasing,
        // and every input pair is found in it by binary search (when build succeeds).
        #[test]
        fn table_is_sorted_unique_and_complete(
            raw in proptest::collection::vec((any::<u64>(), 0u64..4), 0..64),
            dups in proptest::collection::vec(any::<prop::sample::Index>(), 0..16),
        ) {
            // Device address derived from host address: consistent, so no conflicts.
            let mut pairs: Vec<IndirectPair> = raw.iter()
                .map(|&(h, _)| pair(h, h.wrapping_mul(3), "p")).collect();
            if !pairs.is_empty() {
                for d in &dups {
                    let p = pairs[d.index(pairs.len())];
                    pairs.push(p);
                }
            }
            let table = build(pairs.clone()).unwrap();
            prop_assert!(table.windows(2).all(|w| w[0].host_ptr < w[1].host_ptr));
            for p in &pairs {
                let i = table.binary_search_by_key(&p.host_ptr, |e| e.host_ptr).unwrap();
                prop_assert_eq!(table[i].tgt_ptr, p.tgt_ptr);
            }
        }

        // Any host address given two different targets is rejected.
        #[test]
        fn any_conflict_is_rejected(
            hosts in proptest::collection::vec(any::<u64>(), 1..32),
            pick in any::<prop::sample::Index>(),
        ) {
            let mut pairs: Vec<IndirectPair> = hosts.iter().map(|&h| pair(h, 7, "x")).collect();
            let h = hosts[pick.index(hosts.len())];
            pairs.push(pair(h, 8, "y"));
            let is_conflict = matches!(build(pairs), Err(FptrError::Conflict { .. }));
            prop_assert!(is_conflict);
        }
    }
}
