//! Host tests of the table search: fixed cases, probe bounds on virtual tables up to
//! 2^40 entries, and proptest against a naive linear scan.
extern crate std;

use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::vec::Vec;

fn table_of(keys: &[u64]) -> Vec<FptrMapEntry> {
    keys.iter()
        .map(|&k| FptrMapEntry {
            host_ptr: k,
            // A value that differs from the key, so a hit is visible in `translate`.
            tgt_ptr: k ^ 0xdead_beef_0000_0001,
        })
        .collect()
}

/// The reference: a linear scan with no ordering assumption.
fn naive_translate(table: &[FptrMapEntry], key: u64) -> u64 {
    table
        .iter()
        .find(|e| e.host_ptr == key)
        .map_or(key, |e| e.tgt_ptr)
}

/// `ceil(log2 n) + 2`: the bound the issue allows.
fn allowed_probes(n: u64) -> u32 {
    if n <= 1 {
        2
    } else {
        64 - (n - 1).leading_zeros() + 2
    }
}

/// Search a table, asserting every probe is in bounds and the probe count is within
/// the bound; returns the result.
fn checked_find(table: &[FptrMapEntry], key: u64) -> Option<&FptrMapEntry> {
    let mut probes = 0u32;
    let found = find_with_probe(table, key, |i| {
        assert!(
            i < table.len(),
            "probe {i} outside table of {}",
            table.len()
        );
        probes += 1;
    });
    assert!(
        probes <= allowed_probes(table.len() as u64),
        "{probes} probes for {} entries",
        table.len()
    );
    assert_eq!(probes, max_probes(table.len()));
    found
}

#[test]
fn entry_is_two_little_i64s() {
    let e = FptrMapEntry {
        host_ptr: 0x0102_0304_0506_0708,
        tgt_ptr: -2i64 as u64,
    };
    let bytes = bytemuck::bytes_of(&e);
    assert_eq!(bytes.len(), 16);
    assert_eq!(&bytes[..8], &0x0102_0304_0506_0708i64.to_ne_bytes());
    assert_eq!(&bytes[8..], &(-2i64).to_ne_bytes());
    let back: &[FptrMapEntry] = bytemuck::cast_slice(&[1i64, 2, 3, 4]);
    assert_eq!(
        back[1],
        FptrMapEntry {
            host_ptr: 3,
            tgt_ptr: 4
        }
    );
}

#[test]
fn max_probes_is_ceil_log2_plus_one() {
    let expected = [
        (0usize, 0u32),
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 3),
        (5, 4),
        (8, 4),
        (9, 5),
    ];
    for (n, p) in expected {
        assert_eq!(max_probes(n), p, "n = {n}");
    }
    assert_eq!(max_probes(1 << 40), 41);
    assert_eq!(max_probes((1 << 40) + 1), 42);
    assert_eq!(max_probes(usize::MAX), 65);
}

#[test]
fn empty_table_returns_argument() {
    for key in [0, 1, 0x1000, u64::MAX] {
        assert_eq!(checked_find(&[], key), None);
        assert_eq!(translate(&[], key), key);
    }
}

#[test]
fn single_entry_hit_below_above() {
    let t = table_of(&[0x4000]);
    assert_eq!(translate(&t, 0x4000), t[0].tgt_ptr);
    for miss in [0, 0x3fff, 0x4001, u64::MAX] {
        assert_eq!(checked_find(&t, miss), None);
        assert_eq!(translate(&t, miss), miss);
    }
}

#[test]
fn hits_gaps_and_ends() {
    let keys = [
        0x1000u64,
        0x1010,
        0x2000,
        0x2008,
        0x9000,
        0x9001,
        0xffff_0000,
    ];
    let t = table_of(&keys);
    for (i, &k) in keys.iter().enumerate() {
        assert_eq!(checked_find(&t, k), Some(&t[i]));
        assert_eq!(translate(&t, k), t[i].tgt_ptr);
    }
    // Null, below the first, inside every gap, above the last.
    let mut misses = std::vec![0u64, 1, 0xfff, 0xffff_0001, u64::MAX];
    for w in keys.windows(2) {
        misses.extend([w[0] + 1, (w[0] + w[1]) / 2, w[1] - 1]);
    }
    for m in misses.into_iter().filter(|m| !keys.contains(m)) {
        assert_eq!(checked_find(&t, m), None, "{m:#x}");
        assert_eq!(translate(&t, m), m);
    }
}

#[test]
fn keys_are_ordered_as_unsigned_addresses() {
    // Sorted as u64: 0 < 1 < i64::MAX < 1<<63 (i64::MIN) < u64::MAX (-1 as i64).
    let keys = [0u64, 1, i64::MAX as u64, 1 << 63, u64::MAX];
    let t = table_of(&keys);
    for (i, &k) in keys.iter().enumerate() {
        assert_eq!(checked_find(&t, k), Some(&t[i]), "{k:#x}");
    }
    for m in [2u64, i64::MAX as u64 - 1, (1 << 63) + 1, u64::MAX - 1] {
        assert_eq!(translate(&t, m), m, "{m:#x}");
    }
}

#[test]
fn null_is_found_only_if_it_is_a_key() {
    let with_null = table_of(&[0, 0x100]);
    assert_eq!(translate(&with_null, 0), with_null[0].tgt_ptr);
    let without = table_of(&[0x100, 0x200]);
    assert_eq!(translate(&without, 0), 0);
}

#[test]
fn unsorted_table_still_terminates_within_bound() {
    // Out of contract: the search may miss, but must end, stay in bounds and never
    // return an entry whose key differs.
    let t = table_of(&[50, 10, 40, 20, 30, 0, u64::MAX, 7]);
    for key in 0..64 {
        if let Some(e) = checked_find(&t, key) {
            assert_eq!(e.key(), key);
        }
    }
}

/// Virtual tables (keys computed from the index) up to 2^40 entries: the probe count
/// stays within ceil(log2 n) + 2, indices stay in bounds, and indices above 2^32 are
/// reached (no 32-bit truncation of the size or of an index).
#[test]
fn probe_bound_holds_up_to_2_pow_40() {
    let key_of = |i: usize| 0x10_0000 + 16 * i as u64;
    let sizes = [
        1usize,
        2,
        3,
        1000,
        (1 << 31) + 1,
        (1 << 32) - 1,
        1 << 32,
        (1 << 32) + 1,
        (1 << 40) - 1,
        1 << 40,
    ];
    for n in sizes {
        let mut targets = std::vec![0usize, n / 2, n - 1];
        if n > (1 << 32) + 5 {
            targets.push((1 << 32) + 5);
        }
        let mut queries: Vec<(u64, Option<usize>)> = Vec::new();
        for &i in &targets {
            queries.push((key_of(i), Some(i)));
            queries.push((key_of(i) + 8, None)); // in the gap after i
        }
        queries.extend([(0, None), (key_of(0) - 1, None), (u64::MAX, None)]);
        for (key, expected) in queries {
            let mut probes = 0u32;
            let got = find_index_by(n, key, |i| {
                assert!(i < n);
                probes += 1;
                key_of(i)
            });
            assert_eq!(got, expected, "n = {n}, key = {key:#x}");
            assert!(
                probes <= allowed_probes(n as u64),
                "n = {n}: {probes} probes"
            );
        }
    }
}

/// Check every key, every gap neighbour and both ends of a table against the oracle
/// that the table's own construction gives (key i is at index i).
fn check_all_keys_and_gaps(keys: &[u64]) -> Result<(), TestCaseError> {
    let t = table_of(keys);
    for (i, &k) in keys.iter().enumerate() {
        prop_assert_eq!(checked_find(&t, k), Some(&t[i]));
        if let Some(&next) = keys.get(i + 1) {
            if next - k > 1 {
                prop_assert_eq!(checked_find(&t, k + 1), None);
                prop_assert_eq!(checked_find(&t, next - 1), None);
            }
        }
    }
    if let Some(&first) = keys.first() {
        if first > 0 {
            prop_assert_eq!(translate(&t, first - 1), first - 1);
            prop_assert_eq!(translate(&t, 0), 0);
        }
    }
    if let Some(&last) = keys.last() {
        if last < u64::MAX {
            prop_assert_eq!(translate(&t, last + 1), last + 1);
            prop_assert_eq!(translate(&t, u64::MAX), u64::MAX);
        }
    }
    Ok(())
}

/// Sorted unique keys drawn from everywhere, clustered near zero, and near the u64/i64
/// boundaries, so the signed/unsigned ordering and the extremes are exercised.
pub(crate) fn keys_strategy(max_len: usize) -> impl Strategy<Value = Vec<u64>> {
    let key = prop_oneof![
        any::<u64>(),
        0u64..64,
        (i64::MAX as u64 - 32)..=(i64::MAX as u64 + 32),
        (u64::MAX - 32)..=u64::MAX,
        Just(0u64),
        Just(1u64),
        Just(u64::MAX),
    ];
    prop::collection::btree_set(key, 0..max_len)
        .prop_map(|s: BTreeSet<u64>| s.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Small tables: every query against the naive linear scan.
    #[test]
    fn small_tables_match_linear_scan(keys in keys_strategy(64), extra in prop::collection::vec(any::<u64>(), 0..32)) {
        let t = table_of(&keys);
        let mut queries = extra;
        for &k in &keys {
            queries.extend([k, k.wrapping_sub(1), k.wrapping_add(1)]);
        }
        queries.extend([0, 1, i64::MAX as u64, 1 << 63, u64::MAX]);
        for q in queries {
            prop_assert_eq!(translate(&t, q), naive_translate(&t, q), "query {:#x}", q);
            checked_find(&t, q);
        }
        check_all_keys_and_gaps(&keys)?;
    }
}

/// Sorted unique keys for a large table, made from a seed with a small xorshift
/// generator (a proptest collection strategy of 100,000 elements is too slow in debug
/// builds); `extremes` adds the boundary keys.
pub(crate) fn large_keys(seed: u64, len: usize, extremes: bool) -> Vec<u64> {
    let mut state = seed | 1;
    let mut keys: Vec<u64> = (0..len)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Mix spread-out keys with dense runs, so gaps of 1 and huge gaps both occur.
            if i % 4 == 0 {
                state % 4096
            } else {
                state
            }
        })
        .collect();
    if extremes {
        keys.extend([0, 1, i64::MAX as u64, 1 << 63, u64::MAX]);
    }
    keys.sort_unstable();
    keys.dedup();
    keys
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Tables up to 100,000 entries: every key and gap by construction, and random
    /// queries against the naive scan.
    #[test]
    fn large_tables_hits_and_every_gap(
        seed in any::<u64>(),
        len in 0usize..=100_000,
        extremes in any::<bool>(),
        queries in prop::collection::vec(any::<u64>(), 16),
    ) {
        let keys = large_keys(seed, len, extremes);
        check_all_keys_and_gaps(&keys)?;
        let t = table_of(&keys);
        for q in queries.into_iter().chain(keys.iter().step_by(997).copied()) {
            prop_assert_eq!(translate(&t, q), naive_translate(&t, q));
        }
    }
}

/// Both ways of finding the first step of the search (one per target) agree, on every
/// small length and around every power of two.
#[test]
fn power_of_two_below_agrees_on_every_target_path() {
    let mut lens: Vec<usize> = (2..5000).collect();
    for k in 1..usize::BITS {
        let p = 1usize << k;
        lens.extend([p - 1, p, p + 1].into_iter().filter(|&n| n >= 2));
    }
    lens.push(usize::MAX);
    for n in lens {
        let expected = super::power_of_two_below_by_clz(n);
        assert!(
            expected.is_power_of_two() && expected < n && expected >= n / 2,
            "n = {n}"
        );
        assert_eq!(
            super::power_of_two_below_by_smearing(n),
            expected,
            "n = {n}"
        );
    }
}

/// Tables long enough for the prefetching steps (`PREFETCH_MIN_LEN` and a few more, so
/// the first probe is not at 0): every key and the gaps around it are found or missed as
/// the linear scan says, with the exact probe count; in debug builds every prefetch is
/// checked to lie inside the table.
#[test]
fn prefetching_tables_hits_and_gaps() {
    for len in [PREFETCH_MIN_LEN, PREFETCH_MIN_LEN + 3] {
        let keys: Vec<u64> = (0..len as u64).map(|i| 0x1000 + 32 * i).collect();
        let table = table_of(&keys);
        let probe_all = |key: u64| {
            let expected = keys.binary_search(&key).ok().map(|i| &table[i]);
            assert_eq!(checked_find(&table, key), expected, "key {key:#x}");
            assert_eq!(translate(&table, key), naive_or_hit(expected, key));
        };
        // Every 97th key (with its neighbours), plus both ends.
        for &k in keys
            .iter()
            .step_by(97)
            .chain([keys[0], keys[len - 1]].iter())
        {
            for key in [k - 1, k, k + 1] {
                probe_all(key);
            }
        }
        probe_all(0);
        probe_all(u64::MAX);
    }
}

fn naive_or_hit(entry: Option<&FptrMapEntry>, key: u64) -> u64 {
    entry.map_or(key, |e| e.tgt_ptr)
}
