//! `lookup_count SIZE WORKLOAD [ROUNDS]` (`lookup_count --list` prints the pairs to run): runs every lookup implementation once over the
//! workload's keys, each in its own never-inlined `count_*` function, for
//! `valgrind --tool=callgrind` to count instructions per function (`cargo xtask bench cpu`
//! divides them by the number of keys). Prints the checksums so nothing is optimized out.
//!
//! With ROUNDS it also times each implementation ROUNDS times, interleaved, and prints
//! the fastest round per implementation (`time <impl> <ns per lookup>`): the minimum is
//! what a loaded machine disturbs least, a cross-check of criterion's estimates.
//!
//! It also prints the memory each structure adds beside the sorted table, in bytes per
//! entry (`memory <impl> <bytes>`).

mod common;

use common::{
    exported, head_translate, index_translate, plain_lower_bound, upstream_style, with_globals,
    CuckooIndex, Eytzinger, Impl, PointerHashTable, RangeBuckets, Setup, Workload, SIZES,
};
use device_rtl::head::FptrHead;
use device_rtl::index::FptrIndex;
use device_rtl::table::{self, FptrMapEntry};
use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn count_ours(table: &[FptrMapEntry], keys: &[u64]) -> u64 {
    keys.iter()
        .fold(0u64, |acc, &k| acc.wrapping_add(table::translate(table, k)))
}

#[inline(never)]
fn count_ours_head(
    head: &FptrHead,
    header: &FptrIndex,
    table: &[FptrMapEntry],
    keys: &[u64],
) -> u64 {
    keys.iter().fold(0u64, |acc, &k| {
        acc.wrapping_add(head_translate(head, header, table, k))
    })
}

#[inline(never)]
fn count_ours_index(header: &FptrIndex, table: &[FptrMapEntry], keys: &[u64]) -> u64 {
    keys.iter().fold(0u64, |acc, &k| {
        acc.wrapping_add(index_translate(header, table, k))
    })
}

#[inline(never)]
fn count_index_1slot(index: &CuckooIndex<1>, keys: &[u64]) -> u64 {
    let view = index.view();
    keys.iter()
        .fold(0u64, |acc, &k| acc.wrapping_add(view.translate(k)))
}

#[inline(never)]
fn count_index_4slots(index: &CuckooIndex<4>, keys: &[u64]) -> u64 {
    let view = index.view();
    keys.iter()
        .fold(0u64, |acc, &k| acc.wrapping_add(view.translate(k)))
}

#[inline(never)]
fn count_range_buckets(range: &RangeBuckets, table: &[FptrMapEntry], keys: &[u64]) -> u64 {
    keys.iter()
        .fold(0u64, |acc, &k| acc.wrapping_add(range.translate(table, k)))
}

/// The exported function, once per key, with the index installed (setting the globals
/// is a handful of instructions against 65536 lookups). The two functions differ in that
/// constant, so the compiler cannot fold them into one symbol.
#[inline(never)]
fn count_exported_index(setup: &Setup, keys: &[u64]) -> u64 {
    with_globals(setup, true, || {
        keys.iter()
            .fold(0u64, |acc, &k| acc.wrapping_add(exported(k)))
    })
}

/// The same with the empty index header: the search, through the exported function.
#[inline(never)]
fn count_exported_search(setup: &Setup, keys: &[u64]) -> u64 {
    with_globals(setup, false, || {
        keys.iter()
            .fold(0u64, |acc, &k| acc.wrapping_add(exported(k)))
    })
}

#[inline(never)]
fn count_plain_lower_bound(table: &[FptrMapEntry], keys: &[u64]) -> u64 {
    keys.iter().fold(0u64, |acc, &k| {
        acc.wrapping_add(plain_lower_bound(table, k))
    })
}

#[inline(never)]
fn count_libgomp_hash(hash: &PointerHashTable, keys: &[u64]) -> u64 {
    keys.iter()
        .fold(0u64, |acc, &k| acc.wrapping_add(hash.translate(k)))
}

#[inline(never)]
fn count_upstream_style(table: &[FptrMapEntry], keys: &[u64]) -> u64 {
    keys.iter()
        .fold(0u64, |acc, &k| acc.wrapping_add(upstream_style(table, k)))
}

#[inline(never)]
fn count_eytzinger(eytzinger: &Eytzinger, keys: &[u64]) -> u64 {
    keys.iter()
        .fold(0u64, |acc, &k| acc.wrapping_add(eytzinger.translate(k)))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` runs every bench binary with `--bench`: do nothing then.
    let (size, workload, rounds) = match args.as_slice() {
        [list] if list == "--list" => {
            for size in SIZES {
                for workload in Workload::ALL {
                    println!("{size} {}", workload.name());
                }
            }
            return;
        }
        [size, workload, rest @ ..] if rest.len() <= 1 => (
            size.parse::<usize>().expect("SIZE must be a number"),
            Workload::parse(workload).expect("WORKLOAD must be hits, misses or mixed"),
            rest.first()
                .map_or(0, |r| r.parse::<u32>().expect("ROUNDS must be a number")),
        ),
        _ => {
            eprintln!(
                "usage: lookup_count SIZE hits|misses|mixed [ROUNDS] (see `cargo xtask bench cpu`)"
            );
            return;
        }
    };
    let setup = Setup::new(size);
    let keys = black_box(setup.keys(workload));
    let table = black_box(&setup.table[..]);
    println!("keys {}", keys.len());
    let impls: Vec<Impl> = Impl::ALL.into_iter().filter(|i| i.runs(workload)).collect();
    let run = |imp: Impl| match imp {
        Impl::OursHead => count_ours_head(
            black_box(&setup.head),
            black_box(&setup.index_header),
            table,
            keys,
        ),
        Impl::OursIndex => count_ours_index(black_box(&setup.index_header), table, keys),
        Impl::IndexOneSlot => count_index_1slot(black_box(&setup.index_1slot), keys),
        Impl::IndexFourSlots => count_index_4slots(black_box(&setup.index_4slots), keys),
        Impl::RangeBuckets => count_range_buckets(black_box(&setup.range), table, keys),
        Impl::ExportedIndex => count_exported_index(&setup, keys),
        Impl::ExportedSearch => count_exported_search(&setup, keys),
        Impl::Ours => count_ours(table, keys),
        Impl::PlainLowerBound => count_plain_lower_bound(table, keys),
        Impl::LibgompHash => count_libgomp_hash(black_box(&setup.hash), keys),
        Impl::UpstreamStyle => count_upstream_style(table, keys),
        Impl::Eytzinger => count_eytzinger(black_box(&setup.eytzinger), keys),
    };
    for &imp in &impls {
        println!("{} {:#x}", imp.name(), run(imp));
    }
    let n = setup.table.len();
    for (imp, bytes) in [
        (
            Impl::OursIndex,
            setup.index.as_ref().map_or(0.0, |i| i.bytes_per_entry(n)),
        ),
        (Impl::IndexOneSlot, setup.index_1slot.bytes_per_entry(n)),
        (Impl::IndexFourSlots, setup.index_4slots.bytes_per_entry(n)),
        (Impl::RangeBuckets, setup.range.bytes_per_entry(n)),
        (Impl::LibgompHash, setup.hash.bytes_per_entry(n)),
    ] {
        println!("memory {} {bytes:.2}", imp.name());
    }
    let mut fastest = vec![Duration::MAX; impls.len()];
    for _ in 0..rounds {
        for (best, &imp) in fastest.iter_mut().zip(&impls) {
            let start = Instant::now();
            black_box(run(imp));
            *best = (*best).min(start.elapsed());
        }
    }
    if rounds > 0 {
        for (best, imp) in fastest.iter().zip(&impls) {
            let ns = best.as_secs_f64() * 1e9 / keys.len() as f64;
            println!("time {} {ns:.2}", imp.name());
        }
    }
}
