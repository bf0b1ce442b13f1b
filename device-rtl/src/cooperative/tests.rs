//! Host tests of the warp-cooperative search: every lane of a warp played in lock step
//! (proptest, every lane count 1..=32), and `find_index_by` itself run by one thread per
//! lane with a barrier-synchronized vote, as a warp runs it.
extern crate std;

use super::*;
use crate::table::tests::{keys_strategy, large_keys};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Barrier;
use std::vec::Vec;

/// The index of `key` in sorted `keys`, by a linear scan.
fn naive_index(keys: &[u64], key: u64) -> Option<usize> {
    keys.iter().position(|&k| k == key)
}

/// One search with `lanes` lanes played in lock step: each round asks every lane for
/// its probe and counts the votes, as `vote.ballot` + `popc` do on a GPU. Returns the
/// result and the number of rounds; asserts every probe is inside the table and, for
/// `sorted` keys, that the lanes voting true are the lowest ranks.
fn lockstep(keys: &[u64], key: u64, lanes: u32, sorted: bool) -> (Option<usize>, u32) {
    if keys.is_empty() {
        return (None, 0);
    }
    let pieces_log2 = piece_count_log2(lanes);
    let mut window = Window::new(keys.len());
    let mut rounds_taken = 0;
    while !window.is_narrowed() {
        let mut votes = 0;
        let mut last_true_rank = None;
        for rank in 0..lanes {
            if let Some(index) = window.probe(pieces_log2, rank, keys.len()) {
                assert!(
                    index < keys.len(),
                    "lane {rank} probes {index} of {}",
                    keys.len()
                );
                if keys[index] <= key {
                    votes += 1;
                    last_true_rank = Some(rank);
                }
            }
        }
        if sorted {
            // Sorted keys: the lanes voting true are exactly the lowest ranks.
            assert_eq!(last_true_rank.map_or(0, |r| r + 1), votes);
        }
        window.narrow(pieces_log2, votes);
        rounds_taken += 1;
        assert!(window.base() < keys.len());
    }
    let candidate = window.base();
    ((keys[candidate] == key).then_some(candidate), rounds_taken)
}

/// Every key, the neighbours of every key and the extremes, for every lane count.
fn check_all_lane_counts(keys: &[u64], extra: &[u64]) -> Result<(), TestCaseError> {
    let mut queries: Vec<u64> = extra.to_vec();
    for &k in keys {
        queries.extend([k, k.wrapping_sub(1), k.wrapping_add(1)]);
    }
    queries.extend([0, 1, i64::MAX as u64, 1 << 63, u64::MAX]);
    for lanes in 1..=32 {
        for &q in &queries {
            let (found, rounds_taken) = lockstep(keys, q, lanes, true);
            prop_assert_eq!(found, naive_index(keys, q), "key {:#x}, {} lanes", q, lanes);
            prop_assert_eq!(rounds_taken, rounds(keys.len(), lanes));
        }
    }
    Ok(())
}

#[test]
fn pieces_per_round_use_the_lanes_there_are() {
    // (lanes, log2 pieces): 2^s - 1 probing lanes <= lanes.
    for (lanes, expected) in [
        (1, 1),
        (2, 1),
        (3, 2),
        (6, 2),
        (7, 3),
        (16, 4),
        (31, 5),
        (32, 5),
    ] {
        assert_eq!(piece_count_log2(lanes), expected, "{lanes} lanes");
        assert!((1u32 << expected) - 1 <= lanes);
    }
}

#[test]
fn a_full_warp_needs_a_fifth_of_the_binary_rounds() {
    assert_eq!(rounds(1, 32), 0);
    assert_eq!(rounds(2, 32), 1);
    assert_eq!(rounds(32, 32), 1);
    assert_eq!(rounds(33, 32), 2);
    assert_eq!(rounds(1 << 20, 32), 4);
    assert_eq!(rounds(1_000_000, 32), 4);
    // One lane is a binary search.
    assert_eq!(rounds(1_000_000, 1), 20);
}

#[test]
fn empty_and_single_entry_tables() {
    assert_eq!(lockstep(&[], 5, 32, true), (None, 0));
    assert_eq!(lockstep(&[7], 7, 32, true), (Some(0), 0));
    assert_eq!(lockstep(&[7], 6, 32, true), (None, 0));
    assert_eq!(lockstep(&[7], 8, 1, true), (None, 0));
}

#[test]
fn unsorted_tables_still_end_in_the_same_rounds() {
    let keys: Vec<u64> = (0..1000u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect();
    for lanes in [1, 5, 32] {
        for &q in keys.iter().step_by(37) {
            let (found, rounds_taken) = lockstep(&keys, q, lanes, false);
            assert_eq!(rounds_taken, rounds(keys.len(), lanes));
            if let Some(i) = found {
                assert_eq!(keys[i], q, "a found index always holds the key");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Small tables, every lane count: same answer as a linear scan.
    #[test]
    fn small_tables_every_lane_count(keys in keys_strategy(80), extra in prop::collection::vec(any::<u64>(), 0..8)) {
        check_all_lane_counts(&keys, &extra)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Tables up to 100,000 entries with 1, a few and 32 lanes: sampled keys and gaps.
    #[test]
    fn large_tables_sampled_keys(seed in any::<u64>(), len in 0usize..=100_000, queries in prop::collection::vec(any::<u64>(), 8)) {
        let keys = large_keys(seed, len, true);
        for lanes in [1, 3, 7, 31, 32] {
            for q in queries.iter().copied().chain(keys.iter().step_by(499).flat_map(|&k| [k, k.wrapping_add(1)])) {
                let (found, _) = lockstep(&keys, q, lanes, true);
                prop_assert_eq!(found, keys.binary_search(&q).ok());
            }
        }
    }
}

/// `find_index_by` run by `lanes` threads, one per lane, whose vote is a barrier-
/// synchronized count (the host's stand-in for `vote.ballot.sync` + `popc`). Returns each
/// lane's answer.
fn run_as_threads(keys: &[u64], key: u64, lanes: u32) -> Vec<Option<usize>> {
    let barrier = Barrier::new(lanes as usize);
    let votes = AtomicU32::new(0);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..lanes)
            .map(|rank| {
                let (barrier, votes) = (&barrier, &votes);
                scope.spawn(move || {
                    find_index_by(
                        keys.len(),
                        key,
                        lanes,
                        rank,
                        |i| {
                            assert!(i < keys.len());
                            keys[i]
                        },
                        |at_or_below| {
                            if at_or_below {
                                votes.fetch_add(1, Ordering::SeqCst);
                            }
                            barrier.wait();
                            let count = votes.load(Ordering::SeqCst);
                            // Everyone has read the count before it is reset for the
                            // next round, and it is reset before anyone votes again.
                            barrier.wait();
                            if rank == 0 {
                                votes.store(0, Ordering::SeqCst);
                            }
                            barrier.wait();
                            count
                        },
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn lanes_as_threads_agree_and_find_every_key() {
    let keys = large_keys(0x5eed, 5000, true);
    for lanes in [1, 2, 7, 32] {
        for q in keys
            .iter()
            .step_by(611)
            .flat_map(|&k| [k, k.wrapping_add(1)])
            .chain([0, u64::MAX, 1 << 63])
        {
            let answers = run_as_threads(&keys, q, lanes);
            let expected = keys.binary_search(&q).ok();
            assert!(
                answers.iter().all(|a| *a == expected),
                "key {q:#x}, {lanes} lanes: {answers:?}, expected {expected:?}"
            );
        }
    }
}
