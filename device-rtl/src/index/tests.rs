//! Host tests of the index: the builder against the lookup, both against a linear scan
//! (random and adversarial key sets), the two-bucket bound, and corrupted indexes.
extern crate std;

use super::*;
use crate::table::tests::large_keys;
use proptest::prelude::*;
use std::vec;
use std::vec::Vec;

fn table_of(keys: &[u64]) -> Vec<FptrMapEntry> {
    let mut keys = keys.to_vec();
    keys.sort_unstable();
    keys.dedup();
    keys.iter()
        .map(|&k| FptrMapEntry {
            host_ptr: k,
            // A value that differs from the key, so a hit is visible.
            tgt_ptr: k ^ 0xdead_beef_0000_0001,
        })
        .collect()
}

fn naive_translate(table: &[FptrMapEntry], key: u64) -> u64 {
    table
        .iter()
        .find(|e| e.key() == key)
        .map_or(key, |e| e.tgt_ptr)
}

type Buckets = Vec<Bucket>;

fn build_default(table: &[FptrMapEntry]) -> Result<Built<Buckets>, BuildError> {
    build::<SLOTS, _>(table, &BuildPolicy::DEFAULT, |n| vec![Bucket::default(); n])
}

/// Translate through the index, asserting that exactly two buckets (in range) are read.
fn checked_translate(view: &IndexView, key: u64) -> u64 {
    let mut reads = Vec::new();
    let got = view.translate_with_probe(key, |b| reads.push(b));
    assert_eq!(reads.len(), 2, "{reads:?}");
    assert!(reads.iter().all(|&b| b < view.buckets().len()), "{reads:?}");
    assert_eq!(reads, view.candidates(key));
    got
}

/// Build an index of `keys` and check every key, both neighbours of every key and
/// `extra` queries against the linear scan. Returns the build's attempts.
fn check_against_scan(keys: &[u64], extra: &[u64]) -> u32 {
    let table = table_of(keys);
    let built = build_default(&table).expect("the index builds");
    let view = IndexView::new(&built.buckets, built.seeds).unwrap();
    let mut queries: Vec<u64> = extra.to_vec();
    for e in &table {
        let k = e.key();
        queries.extend([k, k.wrapping_sub(1), k.wrapping_add(1)]);
    }
    queries.extend([0, 1, 1 << 63, u64::MAX]);
    for q in queries {
        assert_eq!(
            checked_translate(&view, q),
            naive_translate(&table, q),
            "query {q:#x}, {} keys",
            table.len()
        );
    }
    built.attempts
}

#[test]
fn header_is_four_native_words() {
    let header = FptrIndex {
        buckets: 1,
        bucket_count: 2,
        seeds: [3, 4],
    };
    let words: &[u64] = bytemuck::cast_slice(core::slice::from_ref(&header));
    assert_eq!(words, [1, 2, 3, 4]);
    assert_eq!(FptrIndex::NONE, FptrIndex::default());
}

#[test]
fn bucket_of_covers_its_range_and_no_more() {
    for count in [1u64, 2, 3, 1000, 1 << 40, u64::MAX] {
        for key in [0u64, 1, 16, 0x5555_5555_4000, u64::MAX] {
            for seed in [1u64, 0x9e37_79b9_7f4a_7c15, u64::MAX] {
                assert!((bucket_of(key, seed, count) as u64) < count);
            }
        }
    }
    // The largest product lands in the last bucket.
    assert_eq!(bucket_of(u64::MAX, 1, 10), 9);
    assert_eq!(bucket_of(0, 12345, 10), 0);
}

#[test]
fn headers_that_cannot_be_valid_are_ignored() {
    let buckets = [Bucket::default(); 4];
    let base = buckets.as_ptr().expose_provenance() as u64;
    let header = |buckets, bucket_count| FptrIndex {
        buckets,
        bucket_count,
        seeds: [1, 3],
    };
    // SAFETY: (all calls) each header is either rejected before any read or describes
    // `buckets`, which outlives the views.
    unsafe {
        assert!(IndexView::<SLOTS>::from_header(FptrIndex::NONE).is_none());
        assert!(IndexView::<SLOTS>::from_header(header(0, 4)).is_none());
        assert!(IndexView::<SLOTS>::from_header(header(base, 0)).is_none());
        assert!(IndexView::<SLOTS>::from_header(header(base + 4, 4)).is_none());
        assert!(IndexView::<SLOTS>::from_header(header(base, u64::MAX)).is_none());
        assert!(IndexView::<SLOTS>::from_header(header(base, 1 << 59)).is_none());
        let even_seed = FptrIndex {
            seeds: [1, 2],
            ..header(base, 4)
        };
        assert!(IndexView::<SLOTS>::from_header(even_seed).is_none());
        let view = IndexView::<SLOTS>::from_header(header(base, 4)).unwrap();
        assert_eq!(view.buckets().len(), 4);
        assert_eq!(view.seeds(), [1, 3]);
    }
}

#[test]
fn empty_unsorted_and_duplicate_tables_get_no_index() {
    assert_eq!(build_default(&[]).unwrap_err(), BuildError::Empty);
    let mut table = table_of(&[1, 2, 3]);
    table.swap(0, 2);
    assert_eq!(build_default(&table).unwrap_err(), BuildError::NotSorted);
    let dup = [table[0], table[0]];
    assert_eq!(build_default(&dup).unwrap_err(), BuildError::NotSorted);
    // Sorted as unsigned: a "negative" key sorts last.
    let signed = table_of(&[u64::MAX, 5]);
    assert_eq!(signed[1].key(), u64::MAX);
    assert!(build_default(&signed).is_ok());
    let short = build::<SLOTS, _>(&table_of(&[1, 2]), &BuildPolicy::DEFAULT, |n| {
        vec![Bucket::default(); n + 1]
    });
    assert_eq!(short.unwrap_err(), BuildError::BadStorage);
}

#[test]
fn keys_that_are_small_numbers_get_a_filler_that_is_no_key() {
    // 0, 1, 2 are keys: empty slots must hold 3, and 3 must still miss.
    let table = table_of(&[0, 1, 2, 10]);
    let built = build_default(&table).unwrap();
    assert!(built
        .buckets
        .iter()
        .flatten()
        .any(|s| s.key() == 3 && s.tgt_ptr == 3));
    check_against_scan(&[0, 1, 2, 10], &[3, 4, 9, 11]);
}

#[test]
fn one_entry_tables_get_no_index_by_default_but_would_work() {
    assert_eq!(
        build_default(&table_of(&[7])).unwrap_err(),
        BuildError::TooSmall { len: 1 }
    );
    let any_size = BuildPolicy {
        min_len: 1,
        ..BuildPolicy::DEFAULT
    };
    for key in [0u64, 1, 0x5555_5555_4010, u64::MAX] {
        let table = table_of(&[key]);
        let built = build::<SLOTS, _>(&table, &any_size, |n| vec![Bucket::default(); n]).unwrap();
        let view = IndexView::new(&built.buckets, built.seeds).unwrap();
        for q in [key, key.wrapping_add(1), key.wrapping_sub(1), 0, u64::MAX] {
            assert_eq!(checked_translate(&view, q), naive_translate(&table, q));
        }
    }
}

#[test]
fn memory_per_entry_follows_the_load_factor() {
    let p = BuildPolicy::DEFAULT;
    assert_eq!(bucket_count::<SLOTS>(1, &p, 0), 1);
    assert_eq!(bucket_count::<SLOTS>(16, &p, 0), 10);
    assert_eq!(bucket_count::<SLOTS>(1 << 20, &p, 0), 655_360);
    // 20 bytes of buckets per entry at 80 %.
    assert_eq!(
        bucket_count::<SLOTS>(1 << 20, &p, 0) * BUCKET_BYTES,
        20 << 20
    );
    // Each growth step adds 25 %.
    assert_eq!(bucket_count::<SLOTS>(16, &p, 1), 13);
    // Absurd sizes saturate instead of wrapping to a small count (the allocation fails).
    assert!(bucket_count::<SLOTS>(usize::MAX, &p, 3) > 1 << 57);
}

#[test]
fn builds_are_deterministic() {
    let table = table_of(&large_keys(7, 5000, true));
    let a = build_default(&table).unwrap();
    let b = build_default(&table).unwrap();
    assert_eq!(a.buckets, b.buckets);
    assert_eq!(a.seeds, b.seeds);
}

/// Keys like the functions of one binary: 16-byte aligned, dense, and a million of them.
#[test]
fn a_million_function_addresses_build_first_time() {
    let keys: Vec<u64> = (0..1u64 << 20)
        .map(|i| 0x5555_5555_4000 + 16 * i + 16 * (i % 7))
        .collect();
    let table = table_of(&keys);
    let built = build_default(&table).unwrap();
    assert_eq!(built.attempts, 1);
    let view = IndexView::new(&built.buckets, built.seeds).unwrap();
    for e in table.iter().step_by(61) {
        assert_eq!(checked_translate(&view, e.key()), e.tgt_ptr);
        assert_eq!(checked_translate(&view, e.key() + 8), e.key() + 8);
    }
}

// Adversarial key sets.

#[test]
fn consecutive_keys() {
    let by_one: Vec<u64> = (0..10_000).collect();
    check_against_scan(&by_one, &[10_000, 10_001]);
    let by_16: Vec<u64> = (0..10_000).map(|i| 0x4000 + 16 * i).collect();
    check_against_scan(&by_16, &[]);
    // All in one 64 KiB range of the address space, a million apart from everything.
    let top: Vec<u64> = (0..4096).map(|i| u64::MAX - 16 * i).collect();
    check_against_scan(&top, &[]);
}

#[test]
fn keys_differing_only_in_high_bits() {
    let base = 0x0000_5555_5555_4010u64;
    let bits40: Vec<u64> = (0..4096u64).map(|j| base ^ (j << 40)).collect();
    check_against_scan(&bits40, &[base ^ (4096 << 40)]);
    // The top byte alone: 256 keys, which a hash of the low bits would put in one bucket.
    let top_byte: Vec<u64> = (0..256u64).map(|j| 0x10 | (j << 56)).collect();
    check_against_scan(&top_byte, &[0x10 | (1 << 55)]);
    // Two keys (the smallest indexed table) at the two ends of the address space.
    check_against_scan(&[0, u64::MAX], &[1, u64::MAX - 1]);
}

/// Keys all in ONE bucket of the first hash function of the first attempt: `x0 + j * s^-1`
/// times `s` is `x0 * s + j`, whose high bits do not change. The second hash spreads them.
#[test]
fn keys_colliding_under_one_hash_function() {
    let seed = seeds_for(0)[0];
    let inverse = inverse_mod_2_64(seed);
    assert_eq!(seed.wrapping_mul(inverse), 1);
    let x0 = 0x5555_5555_4000u64;
    let keys: Vec<u64> = (0..5000u64)
        .map(|j| x0.wrapping_add(j.wrapping_mul(inverse)))
        .collect();
    let count = bucket_count::<SLOTS>(keys.len(), &BuildPolicy::DEFAULT, 0) as u64;
    let first: Vec<usize> = keys.iter().map(|&k| bucket_of(k, seed, count)).collect();
    assert!(
        first.iter().all(|&b| b == first[0]),
        "the construction failed"
    );
    check_against_scan(&keys, &[]);
}

/// Five keys whose two buckets are the same two buckets under the first attempt's seeds:
/// four slots for five keys, so the first attempt must fail and a later one succeed.
#[test]
fn keys_colliding_under_both_hash_functions_force_a_retry() {
    let keys = fully_colliding_keys(5);
    let table = table_of(&keys);
    let built = build_default(&table).unwrap();
    assert!(built.attempts > 1, "attempts: {}", built.attempts);
    check_against_scan(&keys, &[]);
    // With one try and no growth the builder gives up: no index, never a wrong one.
    let strict = BuildPolicy {
        seed_tries: 1,
        growth_steps: 0,
        ..BuildPolicy::DEFAULT
    };
    let gave_up = build::<SLOTS, _>(&table, &strict, |n| vec![Bucket::default(); n]);
    assert_eq!(gave_up.unwrap_err(), BuildError::GaveUp { attempts: 1 });
}

/// `n` keys with the same pair of candidate buckets under attempt 0, at the bucket count
/// the default policy picks for `n` keys (found by a deterministic search).
fn fully_colliding_keys(n: usize) -> Vec<u64> {
    let seeds = seeds_for(0);
    let count = bucket_count::<SLOTS>(n, &BuildPolicy::DEFAULT, 0) as u64;
    let pair = |k: u64| (bucket_of(k, seeds[0], count), bucket_of(k, seeds[1], count));
    let target = (0, 1);
    let mut keys = Vec::new();
    let mut candidate = 0x5555_5555_4000u64;
    while keys.len() < n {
        candidate += 16;
        if pair(candidate) == target {
            keys.push(candidate);
        }
    }
    keys
}

fn inverse_mod_2_64(odd: u64) -> u64 {
    // Newton's iteration: each step doubles the number of correct low bits.
    let mut x = odd;
    for _ in 0..6 {
        x = x.wrapping_mul(2u64.wrapping_sub(odd.wrapping_mul(x)));
    }
    x
}

/// Other bucket sizes (the benchmarks measure 1 and 4) build and look up alike.
#[test]
fn other_bucket_sizes_agree_with_the_scan() {
    let table = table_of(&large_keys(11, 3000, true));
    fn check<const S: usize>(table: &[FptrMapEntry]) {
        let policy = BuildPolicy {
            max_load_percent: if S == 1 { 45 } else { 80 },
            ..BuildPolicy::DEFAULT
        };
        let built = build::<S, _>(table, &policy, |n| vec![[FptrMapEntry::default(); S]; n])
            .unwrap_or_else(|e| panic!("{S} slots: {e:?}"));
        let view = IndexView::<S>::new(&built.buckets, built.seeds).unwrap();
        for e in table {
            assert_eq!(view.translate(e.key()), e.tgt_ptr);
            assert_eq!(
                view.translate(e.key() ^ 1),
                naive_translate(table, e.key() ^ 1)
            );
        }
    }
    check::<1>(&table);
    check::<4>(&table);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Random tables (any 64-bit keys, dense runs, extremes): every key, both neighbours
    /// of every key and random queries agree with the linear scan; two buckets per lookup.
    #[test]
    fn random_tables_match_the_linear_scan(
        seed in any::<u64>(),
        len in 1usize..3000,
        extremes in any::<bool>(),
        queries in prop::collection::vec(any::<u64>(), 32),
    ) {
        let keys = large_keys(seed, len, extremes);
        prop_assume!(!keys.is_empty());
        check_against_scan(&keys, &queries);
    }

    /// A corrupted index (any bucket contents, any seeds, any bucket count): the lookup
    /// reads its two buckets and nothing else, and returns the key or a value stored in
    /// one of them under that key; it cannot loop, and cannot read outside the buckets.
    #[test]
    fn corrupted_indexes_stay_inside_their_buckets(
        words in prop::collection::vec(any::<u64>(), 4..=256),
        seeds in any::<[u64; 2]>(),
        queries in prop::collection::vec(any::<u64>(), 16),
    ) {
        let count = words.len() / 4;
        let buckets: Vec<Bucket> = words
            .chunks_exact(4)
            .map(|w| [
                FptrMapEntry { host_ptr: w[0], tgt_ptr: w[1] },
                FptrMapEntry { host_ptr: w[2], tgt_ptr: w[3] },
            ])
            .collect();
        prop_assert_eq!(buckets.len(), count);
        let view = IndexView::new(&buckets, seeds).unwrap();
        let stored: Vec<u64> = buckets.iter().flatten().map(|s| s.key()).collect();
        for q in queries.into_iter().chain(stored) {
            let got = checked_translate(&view, q);
            let [a, b] = view.candidates(q);
            let allowed = buckets[a].iter().chain(buckets[b].iter())
                .any(|s| s.key() == q && s.tgt_ptr == got);
            prop_assert!(got == q || allowed, "{:#x} -> {:#x}", q, got);
        }
    }
}
