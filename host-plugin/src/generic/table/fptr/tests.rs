//! The table builder's rules, each shown on rows it is given: order, duplicates, a host
//! address that several device functions share, conflicts, rows that translate nothing,
//! vtable pairing, and the bytes the device reads.

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
