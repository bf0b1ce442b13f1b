//! The host -> device function pointer table that `__kmpc_target_translate_fptr` searches.
//!
//! Pure: turns (host, device) address pairs into the sorted, duplicate-free table the
//! device runtime binary-searches. Keys are ordered as unsigned 64-bit addresses.
//!
//! **One host address, several device addresses.** The host's link may give several
//! functions one address where the device keeps them apart: clang aliases a derived
//! class's constructors and destructors to its base's when their bodies are the same
//! (`-mconstructor-aliases`, the default for ELF hosts; NVPTX and AMDGPU have no
//! aliases), and `--icf=all` folds functions of identical code. Calling any of the
//! device functions does what the host does at that address, so such an address is
//! kept with the device address of its first row in input (image entry) order, and the
//! others are reported ([`Table::shared`]). The rule applies when every row of the
//! address is a function: an indirect function entry or a vtable slot's contents.
//! Anything else is refused as inconsistent ([`FptrError::Conflict`]): a vtable word
//! (data, which no function and no other vtable shares an address with; `--icf=all`
//! folds only code), or a table handed over whole (`__tgt_rtl_set_function_ptr_map`),
//! whose author gave one address two targets.
//!
//! Rows that translate nothing are left out: a null device address, and the host
//! address itself (what the lookup returns for any address the table lacks). A vtable's
//! slots that hold no function give such rows: its offsets (the same on both sides) and
//! its RTTI pointer (null where the device has no RTTI, as on NVPTX). So is a row of the
//! null host address, which is no function's: the lookup keeps null null, which the
//! compiler plugin's per-call-site memo relies on (compiler-plugin/src/inline_lookup.rs).

use std::collections::{HashMap, HashSet};
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

impl Origin<'_> {
    /// True when the row's host address is a function's: the host link may have given
    /// it to several functions (see the module docs).
    pub fn is_function(&self) -> bool {
        matches!(self, Origin::Entry(_) | Origin::VtableSlot { .. })
    }
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
         `{first}` and {second_tgt:#x} by entry `{second}`: {why}"
    )]
    Conflict {
        host: u64,
        first: String,
        first_tgt: u64,
        second: String,
        second_tgt: u64,
        why: &'static str,
    },
}

/// Why a host address with several device addresses was refused.
const WHY_ROWS: &str = "a table handed over whole must give each host address one device address";
const WHY_VTABLE_WORD: &str =
    "a vtable's words share their addresses with no function and no other \
     vtable, so the entries contradict each other";
const WHY_UNKNOWN: &str = "the rows' origins are unknown, so they cannot be told to be functions \
     that the host's link gave one address";

/// A host address that several device functions share: the host's link gave them one
/// address (a constructor or destructor alias, or code folded by `--icf=all`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedAddress<'a> {
    pub host: u64,
    /// Each device address with the first row that gave it, in input order. The table
    /// keeps the first.
    pub targets: Vec<(u64, Origin<'a>)>,
}

impl std::fmt::Display for SharedAddress<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let targets: Vec<String> = self
            .targets
            .iter()
            .map(|(tgt, origin)| format!("{tgt:#x} (`{origin}`)"))
            .collect();
        write!(
            f,
            "host address {:#x} is one function on the host and {} on the device (a \
             constructor/destructor alias or code the host's link folded): {}; it \
             translates to the first, {:#x}",
            self.host,
            self.targets.len(),
            targets.join(", "),
            self.targets[0].0
        )
    }
}

/// A built table: its rows, and the host addresses several device functions shared.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table<'a> {
    pub rows: Vec<FptrMapEntry>,
    pub shared: Vec<SharedAddress<'a>>,
}

/// Sort by host address, drop exact duplicates, keep the first device address of a
/// host address that several device functions share, refuse any other host address
/// with two targets.
pub fn build(pairs: Vec<IndirectPair>) -> Result<Table, FptrError> {
    let rows = pairs
        .iter()
        .map(|p| FptrMapEntry {
            host_ptr: p.host_ptr,
            tgt_ptr: p.tgt_ptr,
        })
        .collect();
    build_rows(rows, |hosts| {
        let mut origins: HashMap<u64, Vec<Origin>> = HashMap::new();
        for p in pairs.iter().filter(|p| hosts.contains(&p.host_ptr)) {
            origins.entry(p.host_ptr).or_default().push(p.origin);
        }
        origins
    })
}

/// [`build`] for rows gathered without their origins (a million-entry load would keep
/// 48 bytes per pair for names only an error reads): `origins(hosts)` gives, for each of
/// the host addresses `hosts` (those with several device addresses), the origins of its
/// input rows in input order. It is asked once, and only when there are such addresses.
pub fn build_rows<'a>(
    rows: Vec<FptrMapEntry>,
    origins: impl FnOnce(&HashSet<u64>) -> HashMap<u64, Vec<Origin<'a>>>,
) -> Result<Table<'a>, FptrError> {
    let (rows, collisions) = sorted_table(rows);
    if collisions.is_empty() {
        return Ok(Table {
            rows,
            shared: Vec::new(),
        });
    }
    let hosts: HashSet<u64> = collisions.iter().map(|c| c.host).collect();
    let mut origins = origins(&hosts);
    let shared = collisions
        .into_iter()
        .map(|c| {
            let of_host = origins.remove(&c.host).unwrap_or_default();
            c.judge(&of_host)
        })
        .collect::<Result<_, _>>()?;
    Ok(Table { rows, shared })
}

/// Validate a table handed to us whole (`__tgt_rtl_set_function_ptr_map`): sorted and
/// deduplicated as [`build`] does; a host address with two targets is refused.
pub fn from_rows(rows: &[FptrMapEntry]) -> Result<Vec<FptrMapEntry>, FptrError> {
    let table = build_rows(rows.to_vec(), |hosts| {
        let mut origins: HashMap<u64, Vec<Origin>> = HashMap::new();
        for (i, r) in rows.iter().enumerate() {
            if hosts.contains(&r.host_ptr) {
                origins.entry(r.host_ptr).or_default().push(Origin::Row(i));
            }
        }
        origins
    })?;
    Ok(table.rows)
}

/// The input rows of one host address that have more than one target: their targets in
/// input order.
struct Collision {
    host: u64,
    targets: Vec<u64>,
}

impl Collision {
    /// A [`SharedAddress`] when every row of the address that translates something is a
    /// function (`origins`: one per row, in input order), else the conflict between the
    /// first of those rows and the first with another target.
    fn judge<'a>(self, origins: &[Origin<'a>]) -> Result<SharedAddress<'a>, FptrError> {
        let known = origins.len() == self.targets.len();
        let useful: Vec<usize> = (0..self.targets.len())
            .filter(|&i| translates(self.host, self.targets[i]))
            .collect();
        let origin_of = |i: usize| origins.get(i).filter(|_| known);
        let why = if !known {
            Some(WHY_UNKNOWN)
        } else if useful
            .iter()
            .any(|&i| matches!(origin_of(i), Some(Origin::Row(_))))
        {
            Some(WHY_ROWS)
        } else if !useful
            .iter()
            .all(|&i| origin_of(i).is_some_and(Origin::is_function))
        {
            Some(WHY_VTABLE_WORD)
        } else {
            None
        };
        if let Some(why) = why {
            let first = useful[0];
            let first_tgt = self.targets[first];
            let second = useful
                .iter()
                .copied()
                .find(|&i| self.targets[i] != first_tgt)
                .unwrap_or(first);
            let name = |i: usize| origin_of(i).map_or_else(String::new, Origin::to_string);
            return Err(FptrError::Conflict {
                host: self.host,
                first: name(first),
                first_tgt,
                second: name(second),
                second_tgt: self.targets[second],
                why,
            });
        }
        let mut targets: Vec<(u64, Origin<'a>)> = Vec::new();
        for &i in &useful {
            let tgt = self.targets[i];
            if targets.iter().all(|&(t, _)| t != tgt) {
                targets.push((tgt, origins[i]));
            }
        }
        Ok(SharedAddress {
            host: self.host,
            targets,
        })
    }
}

/// Whether a row translates anything: a null device address is never one to call, and a
/// row to the host address itself is what the lookup does for any address it lacks (the
/// offset and RTTI words of a vtable, which hold no function, give such rows).
fn translates(host: u64, tgt: u64) -> bool {
    host != 0 && tgt != 0 && tgt != host
}

/// Sort rows by host address (stable: rows of one address keep their input order) and
/// keep the first row of each address that [`translates`] anything. Addresses whose
/// translating rows have more than one target are returned beside, with every one of
/// their rows' targets in input order (to match their origins one to one).
fn sorted_table(mut rows: Vec<FptrMapEntry>) -> (Vec<FptrMapEntry>, Vec<Collision>) {
    crate::radix::sort_by_u64_key(&mut rows, |r| r.host_ptr);
    let mut collisions: Vec<Collision> = Vec::new();
    let mut kept = 0;
    let mut start = 0;
    while start < rows.len() {
        let host = rows[start].host_ptr;
        let end = rows[start..]
            .iter()
            .position(|r| r.host_ptr != host)
            .map_or(rows.len(), |n| start + n);
        let group = &rows[start..end];
        let mut useful = group.iter().filter(|r| translates(host, r.tgt_ptr));
        if let Some(&first) = useful.next() {
            if useful.any(|r| r.tgt_ptr != first.tgt_ptr) {
                collisions.push(Collision {
                    host,
                    targets: group.iter().map(|r| r.tgt_ptr).collect(),
                });
            }
            // `kept` <= `start`: this overwrites only rows already read.
            rows[kept] = first;
            kept += 1;
        }
        start = end;
    }
    rows.truncate(kept);
    (rows, collisions)
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

    fn slot(h: u64, t: u64, entry: &'static str, slot: usize) -> IndirectPair<'static> {
        IndirectPair {
            host_ptr: h,
            tgt_ptr: t,
            origin: Origin::VtableSlot {
                entry: entry.as_bytes(),
                slot,
            },
        }
    }

    fn row(h: u64, t: u64) -> FptrMapEntry {
        FptrMapEntry {
            host_ptr: h,
            tgt_ptr: t,
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
        let keys: Vec<u64> = t.rows.iter().map(|e| e.host_ptr).collect();
        assert_eq!(keys, vec![0x10, 0x8000_0000_0000_0000, u64::MAX]);
        assert_eq!(t.rows[2].tgt_ptr, 1);
        assert!(t.shared.is_empty());
    }

    #[test]
    fn same_pair_twice_is_deduplicated() {
        let t = build(vec![pair(5, 50, "a"), pair(5, 50, "b"), pair(1, 10, "c")]).unwrap();
        assert_eq!(t.rows, vec![row(1, 10), row(5, 50)]);
        assert!(t.shared.is_empty());
    }

    /// A destructor the host aliased to its base's: the base's vtable slot and the
    /// derived one's hold one host address and two device functions. The first in input
    /// order is kept, and both are reported.
    #[test]
    fn a_host_alias_of_two_device_functions_keeps_the_first_and_says_so() {
        let t = build(vec![
            slot(0x100, 0x900, "_ZTV5Shape", 2),
            pair(0x200, 0xa00, "f"),
            slot(0x100, 0x980, "_ZTV6Hidden", 2),
            slot(0x100, 0x900, "_ZTV6Square", 2),
        ])
        .unwrap();
        assert_eq!(t.rows, vec![row(0x100, 0x900), row(0x200, 0xa00)]);
        assert_eq!(
            t.shared,
            vec![SharedAddress {
                host: 0x100,
                targets: vec![
                    (
                        0x900,
                        Origin::VtableSlot {
                            entry: b"_ZTV5Shape",
                            slot: 2
                        }
                    ),
                    (
                        0x980,
                        Origin::VtableSlot {
                            entry: b"_ZTV6Hidden",
                            slot: 2
                        }
                    ),
                ],
            }]
        );
        let said = t.shared[0].to_string();
        assert!(
            said.contains("host address 0x100 is one function on the host and 2 on the device")
                && said.contains("0x900 (`_ZTV5Shape[2]`), 0x980 (`_ZTV6Hidden[2]`)")
                && said.ends_with("translates to the first, 0x900"),
            "{said}"
        );
    }

    /// `--icf=all` folded two indirect functions: two entries, one host address.
    #[test]
    fn functions_the_host_link_folded_keep_the_first_entrys_device_function() {
        let t = build(vec![pair(0x40, 0x700, "g"), pair(0x40, 0x600, "f")]).unwrap();
        assert_eq!(t.rows, vec![row(0x40, 0x700)]);
        assert_eq!(t.shared.len(), 1);
        assert_eq!(t.shared[0].targets[1], (0x600, Origin::Entry(b"f")));
    }

    /// A vtable's offset words (the same on both sides) and its RTTI slot (null on a
    /// device without RTTI) translate nothing: left out, and no conflict with a row of
    /// the same host address that does translate. So is a row of the null host address.
    #[test]
    fn rows_to_null_or_to_their_own_host_address_are_left_out() {
        let t = build(vec![
            slot(0x8, 0x8, "_ZTV1B", 0),
            slot(u64::MAX - 31, u64::MAX - 31, "_ZTV1B", 2),
            slot(0x4000, 0, "_ZTV1B", 3),
            pair(0x4000, 0x9000, "f"),
            slot(0x5000, 0x9100, "_ZTV1B", 4),
        ])
        .unwrap();
        assert_eq!(t.rows, vec![row(0x4000, 0x9000), row(0x5000, 0x9100)]);
        assert!(t.shared.is_empty());
        // Nor does the null host address: the lookup keeps null null.
        let t = build(vec![pair(0, 0x9000, "null"), pair(0x4000, 0x9000, "f")]).unwrap();
        assert_eq!(t.rows, vec![row(0x4000, 0x9000)]);
        assert_eq!(from_rows(&[row(0, 0x9000)]).unwrap(), vec![]);
        // Among several targets, the left-out rows are not named either.
        let t = build(vec![
            slot(0x4000, 0, "_ZTV1B", 3),
            pair(0x4000, 0x9000, "f"),
            pair(0x4000, 0x9200, "g"),
        ])
        .unwrap();
        assert_eq!(t.rows, vec![row(0x4000, 0x9000)]);
        assert_eq!(
            t.shared[0].targets,
            vec![(0x9000, Origin::Entry(b"f")), (0x9200, Origin::Entry(b"g"))]
        );
    }

    /// A vtable word is data: no function and no other vtable shares its address, so
    /// two device addresses there are refused, naming both rows.
    #[test]
    fn a_vtable_word_with_two_targets_is_refused_naming_both() {
        let word = |h, t, w| IndirectPair {
            host_ptr: h,
            tgt_ptr: t,
            origin: Origin::VtableWord {
                entry: b"_ZTV1A",
                word: w,
            },
        };
        let err = build(vec![word(0x1010, 0x9010, 2), pair(0x1010, 0x500, "f")]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("host address 0x1010 is mapped to two device addresses")
                && msg.contains("0x9010 by entry `&_ZTV1A[2]`")
                && msg.contains("0x500 by entry `f`")
                && msg.contains("contradict each other"),
            "{msg}"
        );
        let err = build(vec![word(0x1010, 0x9010, 2), word(0x1010, 0x9110, 2)]).unwrap_err();
        assert!(matches!(err, FptrError::Conflict { why, .. } if why == WHY_VTABLE_WORD));
    }

    #[test]
    fn a_conflict_among_many_names_the_first_two_rows_in_input_order() {
        // Enough rows for the radix sort; the conflict is at host 0x5000 + 16 * 40.
        let n = 5000u64;
        let names: Vec<String> = (0..n).map(|i| format!("e{i}")).collect();
        let mut pairs: Vec<IndirectPair> = (0..n)
            .map(|i| IndirectPair {
                host_ptr: 0x5000 + 16 * ((i * 37) % n),
                tgt_ptr: 0x9000 + i,
                origin: Origin::VtableWord {
                    entry: names[i as usize].as_bytes(),
                    word: 0,
                },
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
                first: format!("&e{victim}[0]"),
                first_tgt: same.tgt_ptr,
                second: "late".into(),
                second_tgt: 0x1,
                why: WHY_VTABLE_WORD,
            }
        );
        let rows: Vec<FptrMapEntry> = (0..5000u64)
            .map(|i| row(0x7000 + 8 * (i % 4990), 0x100 + i))
            .collect();
        let err = from_rows(&rows).unwrap_err().to_string();
        assert!(
            err.contains("`row 0`") && err.contains("`row 4990`") && err.contains(WHY_ROWS),
            "{err}"
        );
    }

    /// Many shared addresses among many rows: each keeps its first row's target, and the
    /// origins are asked for once, for exactly those addresses.
    #[test]
    fn many_shared_addresses_are_judged_from_one_question() {
        let n = 6000u64;
        // Host addresses from 0x10 (the null address is no key).
        let mut rows: Vec<FptrMapEntry> = (1..=n).map(|i| row(0x10 * i, 0x5_0000 + i)).collect();
        let shared_hosts: Vec<u64> = (1..=n).step_by(7).map(|i| 0x10 * i).collect();
        for &h in &shared_hosts {
            rows.push(row(h, 0xdead));
        }
        let asked = std::cell::Cell::new(0);
        let table = build_rows(rows, |hosts| {
            asked.set(asked.get() + 1);
            assert_eq!(hosts.len(), shared_hosts.len());
            hosts
                .iter()
                .map(|&h| (h, vec![Origin::Entry(b"a"), Origin::Entry(b"b")]))
                .collect()
        })
        .unwrap();
        assert_eq!(asked.get(), 1);
        assert_eq!(table.rows.len(), n as usize);
        assert!(table.rows.iter().all(|r| r.tgt_ptr != 0xdead));
        assert_eq!(table.shared.len(), shared_hosts.len());
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
        let t = [row(1, 2)];
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
            // Device address derived from host address: consistent, so no conflicts
            // (and never null or the host address: every row translates).
            let mut pairs: Vec<IndirectPair> = raw.iter()
                .map(|&(h, _)| pair(h, h.wrapping_mul(3) | 1 ^ (h & 1) << 1, "p")).collect();
            if !pairs.is_empty() {
                for d in &dups {
                    let p = pairs[d.index(pairs.len())];
                    pairs.push(p);
                }
            }
            let table = build(pairs.clone()).unwrap();
            prop_assert!(table.shared.is_empty());
            prop_assert!(table.rows.windows(2).all(|w| w[0].host_ptr < w[1].host_ptr));
            for p in &pairs {
                let i = table.rows.binary_search_by_key(&p.host_ptr, |e| e.host_ptr).unwrap();
                prop_assert_eq!(table.rows[i].tgt_ptr, p.tgt_ptr);
            }
        }

        // Functions with several targets keep their first in input order; a vtable word
        // among them makes it a conflict; so does any duplicate in a table handed over
        // whole.
        #[test]
        fn the_first_target_wins_unless_a_word_is_involved(
            raw in proptest::collection::vec((0u64..24, 0u64..3, any::<bool>()), 1..48),
        ) {
            let pairs: Vec<IndirectPair> = raw.iter().map(|&(h, t, is_word)| IndirectPair {
                host_ptr: h,
                tgt_ptr: t,
                origin: if is_word {
                    Origin::VtableWord { entry: b"vt", word: 0 }
                } else {
                    Origin::Entry(b"f")
                },
            }).collect();
            // The model: rows that translate nothing (of the null host address, to 0, or to
            // their own host address) are left out; among the others, the first target of each address wins.
            let mut first: HashMap<u64, u64> = HashMap::new();
            let mut targets: HashMap<u64, HashSet<u64>> = HashMap::new();
            let mut has_word: HashSet<u64> = HashSet::new();
            for p in pairs
                .iter()
                .filter(|p| p.host_ptr != 0 && p.tgt_ptr != 0 && p.tgt_ptr != p.host_ptr)
            {
                first.entry(p.host_ptr).or_insert(p.tgt_ptr);
                targets.entry(p.host_ptr).or_default().insert(p.tgt_ptr);
                if !p.origin.is_function() {
                    has_word.insert(p.host_ptr);
                }
            }
            let refused = targets.iter().any(|(h, t)| t.len() > 1 && has_word.contains(h));
            match build(pairs.clone()) {
                Ok(table) => {
                    prop_assert!(!refused);
                    prop_assert_eq!(table.rows.len(), first.len());
                    for r in &table.rows {
                        prop_assert_eq!(Some(&r.tgt_ptr), first.get(&r.host_ptr));
                    }
                    let shared = targets.values().filter(|t| t.len() > 1).count();
                    prop_assert_eq!(table.shared.len(), shared);
                }
                Err(FptrError::Conflict { host, first_tgt, second_tgt, .. }) => {
                    prop_assert!(refused);
                    prop_assert!(has_word.contains(&host));
                    prop_assert_ne!(first_tgt, second_tgt);
                }
            }
            let rows: Vec<FptrMapEntry> = pairs.iter().map(|p| row(p.host_ptr, p.tgt_ptr)).collect();
            let any_two = targets.values().any(|t| t.len() > 1);
            prop_assert_eq!(from_rows(&rows).is_err(), any_two);
        }
    }
}
