//! Criterion timings of one fptr lookup: ours with the index (`device_rtl::index`) and
//! without it (`table::translate`), against a plain
//! lower-bound binary search, a libgomp-style hash table, (hits only) the shape of LLVM's
//! `__llvm_omp_indirect_call_lookup` and an Eytzinger-layout experiment; table sizes 1 to
//! 1M, hit / miss / mixed keys. See docs/BENCHMARKS.md.
//!
//! One iteration looks up the workload's 65536 keys in random order (independent lookups,
//! so this is throughput: the CPU may overlap consecutive searches). Run short, e.g.
//! `cargo xtask bench cpu`, or
//! `cargo bench -p device-rtl --bench lookup -- --warm-up-time 0.5 --measurement-time 1`.

mod common;

use common::{
    exported, head_translate, index_translate, plain_lower_bound, upstream_style, with_globals,
    Impl, Setup, Workload, SIZES,
};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use device_rtl::table;
use std::hint::black_box;

/// Sum of the translations of `keys` (summed so no lookup can be optimized away).
#[inline(always)]
fn sum_lookups(keys: &[u64], lookup: impl Fn(u64) -> u64) -> u64 {
    black_box(keys)
        .iter()
        .fold(0u64, |acc, &k| acc.wrapping_add(lookup(k)))
}

fn lookups(c: &mut Criterion) {
    for size in SIZES {
        let setup = Setup::new(size);
        for workload in Workload::ALL {
            let keys = setup.keys(workload);
            let mut group = c.benchmark_group(format!("lookup/{}/{size}", workload.name()));
            group.throughput(Throughput::Elements(keys.len() as u64));
            for imp in Impl::ALL.into_iter().filter(|i| i.runs(workload)) {
                let t = &setup.table;
                let header = &setup.index_header;
                group.bench_function(imp.name(), |b| match imp {
                    Impl::OursHead => {
                        let head = &setup.head;
                        b.iter(|| sum_lookups(keys, |k| head_translate(head, header, t, k)))
                    }
                    Impl::OursIndex => {
                        b.iter(|| sum_lookups(keys, |k| index_translate(header, t, k)))
                    }
                    Impl::IndexOneSlot => {
                        let view = setup.index_1slot.view();
                        b.iter(|| sum_lookups(keys, |k| view.translate(k)))
                    }
                    Impl::IndexFourSlots => {
                        let view = setup.index_4slots.view();
                        b.iter(|| sum_lookups(keys, |k| view.translate(k)))
                    }
                    Impl::RangeBuckets => {
                        b.iter(|| sum_lookups(keys, |k| setup.range.translate(t, k)))
                    }
                    Impl::ExportedIndex => {
                        with_globals(&setup, true, || b.iter(|| sum_lookups(keys, exported)))
                    }
                    Impl::ExportedSearch => {
                        with_globals(&setup, false, || b.iter(|| sum_lookups(keys, exported)))
                    }
                    Impl::Ours => b.iter(|| sum_lookups(keys, |k| table::translate(t, k))),
                    Impl::PlainLowerBound => {
                        b.iter(|| sum_lookups(keys, |k| plain_lower_bound(t, k)))
                    }
                    Impl::LibgompHash => b.iter(|| sum_lookups(keys, |k| setup.hash.translate(k))),
                    Impl::UpstreamStyle => b.iter(|| sum_lookups(keys, |k| upstream_style(t, k))),
                    Impl::Eytzinger => {
                        b.iter(|| sum_lookups(keys, |k| setup.eytzinger.translate(k)))
                    }
                });
            }
            group.finish();
        }
    }
}

criterion_group!(benches, lookups);
criterion_main!(benches);
