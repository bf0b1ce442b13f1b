//! What both lookup benches share: the tables and workloads, and the lookups we compare
//! `device_rtl::table::translate` with.
//!
//! - [`head_translate`]: what the device does now when the plugin installed the head and
//!   the index: the head first (a table of up to 4 rows answered from it alone, a key
//!   outside a larger table's range returned at once), then the index (`ours_head`).
//! - [`index_translate`]: what the device does when the plugin installed the index
//!   (`device_rtl::index`, 2 pairs per bucket): the header checked, two buckets read.
//!   [`Impl::IndexOneSlot`] and [`Impl::IndexFourSlots`] are the same cuckoo index with 1
//!   and 4 pairs per bucket, and [`RangeBuckets`] buckets over the address range pointing
//!   into the sorted table: the alternatives the index's design was chosen from.
//! - [`exported`]: the exported C function `__kmpc_target_translate_fptr` itself, called
//!   (not inlined) once per key, reading the globals on every call, with the index
//!   (`exported_index`) and without it (`exported_search`): what one call costs where the
//!   lookup cannot be inlined into the caller's loop.
//! - [`plain_lower_bound`]: the classic branchy lower-bound binary search, the style of
//!   upstream LLVM's device lookups.
//! - [`upstream_style`]: the shape of LLVM's `__llvm_omp_indirect_call_lookup` (early exit
//!   on equality, `Left = Current`). It never ends for a key strictly inside the table's
//!   range that is not in it, so it is only ever run on hits.
//! - [`PointerHashTable`]: what GCC's libgomp does instead: an open-addressing hash table
//!   of host -> device addresses (double hashing over a prime number of slots, hash = the
//!   pointer folded to 32 bits, empty slot = null key, at most half full).
//! - [`Eytzinger`]: the same entries in breadth-first (Eytzinger) order with a prefetch
//!   two levels ahead: only to see what a different table LAYOUT would buy at 64K/1M; the
//!   device table stays sorted (the design's globals describe a sorted array).

#![allow(dead_code)] // each bench binary uses a different part

use device_rtl::head::{Answer, FptrHead};
use device_rtl::index::{self, BuildPolicy, FptrIndex, IndexView};
use device_rtl::table::{self, FptrMapEntry};

/// Table sizes: 1, then every power of 4 from 16 to 1M entries.
pub const SIZES: [usize; 10] = [
    1,
    16,
    64,
    256,
    1 << 10,
    1 << 12,
    1 << 14,
    1 << 16,
    1 << 18,
    1 << 20,
];

/// Keys looked up per workload (one criterion iteration, one callgrind run; xtask's
/// bench.rs divides by the same number). Many, because every iteration repeats the same
/// keys: with a few thousand, a modern branch predictor learns the sequence and the
/// branchy searches look faster than they are on keys it has not seen.
pub const LOOKUPS: usize = 1 << 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Every key is in the table.
    Hits,
    /// Every key lies strictly between two table keys (for a 1-entry table, which has no
    /// gap, just below or just above its key).
    Misses,
    /// Half hits, half misses, interleaved at random.
    Mixed,
}

impl Workload {
    pub const ALL: [Workload; 3] = [Workload::Hits, Workload::Misses, Workload::Mixed];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Hits => "hits",
            Workload::Misses => "misses",
            Workload::Mixed => "mixed",
        }
    }

    pub fn parse(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == name)
    }
}

/// The lookups compared; [`Impl::UpstreamStyle`] runs on hits only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Impl {
    OursHead,
    OursIndex,
    Ours,
    PlainLowerBound,
    LibgompHash,
    UpstreamStyle,
    Eytzinger,
    IndexOneSlot,
    IndexFourSlots,
    RangeBuckets,
    ExportedIndex,
    ExportedSearch,
}

impl Impl {
    pub const ALL: [Impl; 12] = [
        Impl::OursHead,
        Impl::OursIndex,
        Impl::Ours,
        Impl::PlainLowerBound,
        Impl::LibgompHash,
        Impl::UpstreamStyle,
        Impl::Eytzinger,
        Impl::IndexOneSlot,
        Impl::IndexFourSlots,
        Impl::RangeBuckets,
        Impl::ExportedIndex,
        Impl::ExportedSearch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Impl::OursHead => "ours_head",
            Impl::OursIndex => "ours_index",
            Impl::Ours => "ours",
            Impl::PlainLowerBound => "plain_lower_bound",
            Impl::LibgompHash => "libgomp_hash",
            Impl::UpstreamStyle => "upstream_style",
            Impl::Eytzinger => "eytzinger",
            Impl::IndexOneSlot => "index_1slot",
            Impl::IndexFourSlots => "index_4slots",
            Impl::RangeBuckets => "range_buckets",
            Impl::ExportedIndex => "exported_index",
            Impl::ExportedSearch => "exported_search",
        }
    }

    /// Whether this lookup can run `workload` at all (terminates on every key of it).
    pub fn runs(self, workload: Workload) -> bool {
        self != Impl::UpstreamStyle || workload == Workload::Hits
    }
}

/// splitmix64: a tiny deterministic generator, so every run measures the same keys.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform enough in `0..n` for picking keys (n is far below 2^32 here).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }
}

/// A sorted table of `len` entries whose keys look like the addresses of functions in a
/// PIE's text segment: 16-byte aligned, gaps of 16 to 256 bytes (so every gap holds keys
/// that miss). Device addresses are unrelated, also 16-byte aligned.
pub fn make_table(len: usize) -> Vec<FptrMapEntry> {
    let mut rng = Rng::new(0x5eed ^ len as u64);
    let mut host = 0x5555_5555_4000u64;
    (0..len)
        .map(|_| {
            host += 16 * (1 + rng.below(16) as u64);
            FptrMapEntry {
                host_ptr: host,
                tgt_ptr: 0x7f00_0000_0000 + 16 * rng.below(1 << 30) as u64,
            }
        })
        .collect()
}

/// [`LOOKUPS`] keys for `workload` over `table` (sorted, unique, non-empty), in random
/// order so that neither branch predictors nor caches see a pattern.
pub fn make_keys(table: &[FptrMapEntry], workload: Workload) -> Vec<u64> {
    let mut rng = Rng::new(0xc0ffee ^ table.len() as u64);
    let hit = |rng: &mut Rng| table[rng.below(table.len())].key();
    let miss = |rng: &mut Rng| {
        if table.len() == 1 {
            let k = table[0].key();
            return if rng.next_u64() & 1 == 0 {
                k - 8
            } else {
                k + 8
            };
        }
        // A key strictly inside the gap after entry i (gaps are at least 16 wide).
        let i = rng.below(table.len() - 1);
        let (lo, hi) = (table[i].key(), table[i + 1].key());
        lo + 1 + rng.next_u64() % (hi - lo - 1)
    };
    (0..LOOKUPS)
        .map(|_| match workload {
            Workload::Hits => hit(&mut rng),
            Workload::Misses => miss(&mut rng),
            Workload::Mixed if rng.next_u64() & 1 == 0 => hit(&mut rng),
            Workload::Mixed => miss(&mut rng),
        })
        .collect()
}

/// The classic lower-bound binary search (`lo = mid + 1` / `hi = mid`), then one
/// equality check: what `translate` would be written as first. No bounds checks in the
/// loop, as its C original has none.
#[inline]
pub fn plain_lower_bound(table: &[FptrMapEntry], key: u64) -> u64 {
    let (mut lo, mut hi) = (0usize, table.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        // SAFETY: lo <= mid < hi <= table.len().
        if unsafe { table.get_unchecked(mid) }.key() < key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    match table.get(lo) {
        Some(e) if e.key() == key => e.tgt_ptr,
        _ => key,
    }
}

/// The shape of LLVM's `__llvm_omp_indirect_call_lookup`: range check, then a search that
/// stops at the first equal key and narrows with `left = current`. That step makes no
/// progress once `right == left + 1` and the key is above `left`'s: the loop never ends
/// for an in-range key that is absent. Call it with keys that are in the table only.
#[inline]
pub fn upstream_style(table: &[FptrMapEntry], key: u64) -> u64 {
    let (first, last) = match (table.first(), table.last()) {
        (Some(f), Some(l)) => (f.key(), l.key()),
        _ => return key,
    };
    if key < first || key > last {
        return key;
    }
    let (mut left, mut right) = (0usize, table.len());
    while left != right {
        let current = left + (right - left) / 2;
        // SAFETY: left <= current < right <= table.len().
        let entry = *unsafe { table.get_unchecked(current) };
        if entry.key() == key {
            return entry.tgt_ptr;
        }
        if key < entry.key() {
            right = current;
        } else {
            left = current;
        }
    }
    key
}

/// `x % d` for 32-bit `x` by two multiplications instead of a division (libgomp's table
/// does the same with precomputed inverses): `m = ceil(2^64 / d)`, then the high 64 bits
/// of `(m * x mod 2^64) * d` are the remainder (exact for every 32-bit `x` and `d > 1`).
#[derive(Clone, Copy)]
struct FastMod {
    d: u64,
    m: u64,
}

impl FastMod {
    fn new(d: u32) -> FastMod {
        assert!(d > 1);
        FastMod {
            d: d as u64,
            m: (u64::MAX / d as u64).wrapping_add(1),
        }
    }

    #[inline(always)]
    fn rem(self, x: u32) -> u32 {
        let low = self.m.wrapping_mul(x as u64);
        ((low as u128 * self.d as u128) >> 64) as u32
    }
}

/// An open-addressing hash table of host -> device addresses in the manner of libgomp's
/// `hashtab.h` (which GCC's device runtime uses for indirect calls): a prime number of
/// slots at least twice the entries, primary slot `hash % p`, probe step
/// `1 + hash % (p - 2)`, a null key marks an empty slot.
pub struct PointerHashTable {
    slots: Vec<FptrMapEntry>,
    primary: FastMod,
    step: FastMod,
}

impl PointerHashTable {
    /// Build from a table with unique, non-null keys.
    pub fn new(table: &[FptrMapEntry]) -> PointerHashTable {
        let size = next_prime((2 * table.len()).max(7) as u64);
        let size32 = u32::try_from(size).expect("table too large for 32-bit hashes");
        let mut hash_table = PointerHashTable {
            slots: vec![FptrMapEntry::default(); size as usize],
            primary: FastMod::new(size32),
            step: FastMod::new(size32 - 2),
        };
        for entry in table {
            assert_ne!(entry.key(), 0, "a null key would read as an empty slot");
            let slot = hash_table.probe(entry.key());
            assert_eq!(hash_table.slots[slot].key(), 0, "duplicate key");
            hash_table.slots[slot] = *entry;
        }
        hash_table
    }

    /// The pointer folded to 32 bits, as libgomp's `hash_pointer`.
    #[inline(always)]
    fn hash(key: u64) -> u32 {
        (key ^ (key >> 32)) as u32
    }

    /// Index of the slot holding `key`, or of the empty slot where probing stopped.
    #[inline(always)]
    fn probe(&self, key: u64) -> usize {
        let hash = Self::hash(key);
        let mut index = self.primary.rem(hash) as usize;
        let first = self.slots[index].key();
        if first == key || first == 0 {
            return index;
        }
        let step = 1 + self.step.rem(hash) as usize;
        loop {
            index += step;
            if index >= self.slots.len() {
                index -= self.slots.len();
            }
            let k = self.slots[index].key();
            if k == key || k == 0 {
                return index;
            }
        }
    }

    /// Bytes of slots per table entry.
    pub fn bytes_per_entry(&self, entries: usize) -> f64 {
        (self.slots.len() * std::mem::size_of::<FptrMapEntry>()) as f64 / entries as f64
    }

    /// Same result as `table::translate` on the table this was built from.
    #[inline]
    pub fn translate(&self, key: u64) -> u64 {
        let entry = self.slots[self.probe(key)];
        if entry.key() == key && key != 0 {
            entry.tgt_ptr
        } else {
            key
        }
    }
}

/// Four entries: one 64-byte cache line, so `slots[4 * i..4 * i + 4]` (the grandchildren
/// of node `i`) is exactly one line.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Line([FptrMapEntry; 4]);

/// The table in Eytzinger order: node `i` (from 1) has children `2i` and `2i + 1`, and an
/// in-order walk gives the sorted keys. The search descends without branching on data and
/// prefetches the line of the grandchildren of every node it visits.
pub struct Eytzinger {
    lines: Vec<Line>,
    len: usize,
}

impl Eytzinger {
    pub fn new(sorted: &[FptrMapEntry]) -> Eytzinger {
        let len = sorted.len();
        // Nodes 1..=len; node 0 unused. Prefetches may point past the end (harmless).
        let mut lines = vec![Line::default(); len / 4 + 1];
        let mut next = 0;
        fill(&mut lines, sorted, 1, &mut next);
        assert_eq!(next, len);
        return Eytzinger { lines, len };

        fn fill(lines: &mut [Line], sorted: &[FptrMapEntry], node: usize, next: &mut usize) {
            if node > sorted.len() {
                return;
            }
            fill(lines, sorted, 2 * node, next);
            lines[node / 4].0[node % 4] = sorted[*next];
            *next += 1;
            fill(lines, sorted, 2 * node + 1, next);
        }
    }

    fn slots(&self) -> &[FptrMapEntry] {
        // Line is repr(C) of 4 entries with no padding (64 == 4 * 16).
        bytemuck_free_flatten(&self.lines)
    }

    #[inline]
    pub fn translate(&self, key: u64) -> u64 {
        let slots = self.slots();
        let mut node = 1usize;
        while node <= self.len {
            prefetch(slots, 4 * node);
            node = 2 * node + usize::from(slots[node].key() < key);
        }
        // Undo the final right turns and the last left turn: the node of the lower bound
        // (0 if every key is below `key`).
        let lower_bound = node >> (node.trailing_ones() + 1);
        let entry = slots[lower_bound];
        if lower_bound != 0 && entry.key() == key {
            entry.tgt_ptr
        } else {
            key
        }
    }
}

/// The entries of `lines`, in order.
fn bytemuck_free_flatten(lines: &[Line]) -> &[FptrMapEntry] {
    // SAFETY: Line is repr(C, align(64)) holding exactly [FptrMapEntry; 4] (64 bytes, so
    // no padding between or after), hence `lines` is `4 * lines.len()` initialized,
    // aligned entries, borrowed for the same lifetime.
    unsafe { std::slice::from_raw_parts(lines.as_ptr().cast(), 4 * lines.len()) }
}

#[inline(always)]
fn prefetch(slots: &[FptrMapEntry], index: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let at = slots.as_ptr().wrapping_add(index).cast::<i8>();
        // SAFETY: a prefetch never faults, whatever the address (it may lie past the
        // table for the deepest nodes; wrapping_add makes forming it sound).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (slots, index);
}

/// What `__kmpc_target_translate_fptr` does with the index global's `header` and the
/// table globals' `table`: the index when the header is valid, else the search.
#[inline(always)]
pub fn index_translate(header: &FptrIndex, table: &[FptrMapEntry], key: u64) -> u64 {
    // SAFETY: the benches' headers describe buckets owned by their `Setup`, alive and
    // unchanged while it is borrowed.
    match unsafe { IndexView::<{ index::SLOTS }>::from_header(*header) } {
        Some(view) => view.translate(key),
        None => table::translate(table, key),
    }
}

/// What `__kmpc_target_translate_fptr` does with the head global's `head`, then the
/// index global's `header` and the table globals' `table`.
#[inline(always)]
pub fn head_translate(
    head: &FptrHead,
    header: &FptrIndex,
    table: &[FptrMapEntry],
    key: u64,
) -> u64 {
    match head.answer_for(key) {
        Answer::Done(result) => result,
        Answer::AskTable => index_translate(header, table, key),
    }
}

/// Point the device runtime's globals at `setup`'s table and, with `index`, its head and
/// index (else the empty head and index header), then run `f`. The globals are process-wide: the benches
/// run one lookup loop at a time.
pub fn with_globals<R>(setup: &Setup, index: bool, f: impl FnOnce() -> R) -> R {
    // SAFETY: single-threaded benches; the globals describe `setup`'s table and index,
    // which outlive `f` (they are reset to "nothing" before returning).
    unsafe {
        device_rtl::__omp_offloading_fptr_map_p = setup.table.as_ptr();
        device_rtl::__omp_offloading_fptr_map_size = setup.table.len() as u64;
        device_rtl::__omptarget_rs_fptr_index = if index {
            setup.index_header
        } else {
            FptrIndex::NONE
        };
        device_rtl::__omptarget_rs_fptr_head = if index { setup.head } else { FptrHead::NONE };
    }
    let result = f();
    // SAFETY: as above.
    unsafe {
        device_rtl::__omp_offloading_fptr_map_p = std::ptr::null();
        device_rtl::__omp_offloading_fptr_map_size = 0;
        device_rtl::__omptarget_rs_fptr_index = FptrIndex::NONE;
        device_rtl::__omptarget_rs_fptr_head = FptrHead::NONE;
    }
    result
}

/// One call of the exported `__kmpc_target_translate_fptr` (the globals set by
/// [`with_globals`]).
#[inline(always)]
pub fn exported(key: u64) -> u64 {
    // SAFETY: with_globals points the globals at a live table and index.
    unsafe { device_rtl::__kmpc_target_translate_fptr(key as *mut std::ffi::c_void) as u64 }
}

/// A cuckoo index with `S` pairs per bucket, its buckets 64-byte aligned (so a bucket of 1
/// or 2 pairs never straddles a cache line, and one of 4 is one line).
pub struct CuckooIndex<const S: usize> {
    lines: Vec<Line>,
    count: usize,
    seeds: [u64; 2],
}

impl<const S: usize> CuckooIndex<S> {
    /// Built with device-rtl's builder and `policy`; None where the policy builds none.
    pub fn build(table: &[FptrMapEntry], policy: &BuildPolicy) -> Option<CuckooIndex<S>> {
        match index::build::<S, _>(table, policy, AlignedBuckets::<S>::new) {
            Ok(built) => Some(CuckooIndex {
                count: built.buckets.count,
                lines: built.buckets.lines,
                seeds: built.seeds,
            }),
            Err(index::BuildError::TooSmall { .. }) => None,
            Err(e) => panic!("no {S}-slot index of {} keys: {e:?}", table.len()),
        }
    }

    /// An experiment's index, at `max_load_percent` and any table size.
    pub fn new(table: &[FptrMapEntry], max_load_percent: u64) -> CuckooIndex<S> {
        let policy = BuildPolicy {
            min_len: 1,
            max_load_percent,
            ..BuildPolicy::DEFAULT
        };
        Self::build(table, &policy).expect("min_len 1 builds every table")
    }

    pub fn buckets(&self) -> &[[FptrMapEntry; S]] {
        // SAFETY: `lines` holds at least `count * S` entries (see AlignedBuckets::new):
        // repr(C) arrays of FptrMapEntry, no padding, aligned for them.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast(), self.count) }
    }

    pub fn view(&self) -> IndexView<'_, S> {
        IndexView::new(self.buckets(), self.seeds).expect("at least one bucket")
    }

    /// The header the plugin would write for these buckets.
    pub fn header(&self) -> FptrIndex {
        FptrIndex {
            buckets: self.buckets().as_ptr().expose_provenance() as u64,
            bucket_count: self.count as u64,
            seeds: self.seeds,
        }
    }

    /// Bytes of buckets per table entry.
    pub fn bytes_per_entry(&self, entries: usize) -> f64 {
        (self.count * S * std::mem::size_of::<FptrMapEntry>()) as f64 / entries as f64
    }
}

/// Bucket storage for the builder, on 64-byte aligned lines.
struct AlignedBuckets<const S: usize> {
    lines: Vec<Line>,
    count: usize,
}

impl<const S: usize> AlignedBuckets<S> {
    fn new(count: usize) -> Self {
        AlignedBuckets {
            lines: vec![Line::default(); (count * S).div_ceil(4)],
            count,
        }
    }
}

impl<const S: usize> AsMut<[[FptrMapEntry; S]]> for AlignedBuckets<S> {
    fn as_mut(&mut self) -> &mut [[FptrMapEntry; S]] {
        // SAFETY: `lines` holds `4 * lines.len() >= count * S` entries (repr(C), no
        // padding, 64-byte aligned), borrowed mutably for the result's lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), self.count) }
    }
}

/// Buckets over the address range, pointing into the sorted table: bucket `b` holds the
/// keys in `[min + b << shift, min + (b + 1) << shift)`, `starts[b]` the index of its
/// first key (`starts[buckets]` = the table's length), about one key per bucket. A
/// lookup reads `starts[b]` and `starts[b + 1]` (one line), then searches that bucket's
/// keys in the table: `1 + ceil(log2 k) + 1` dependent loads for a bucket of `k` keys,
/// which adversarial keys (all in one bucket) make `ceil(log2 n) + 2`.
pub struct RangeBuckets {
    min: u64,
    max: u64,
    shift: u32,
    starts: Vec<u32>,
}

impl RangeBuckets {
    pub fn new(table: &[FptrMapEntry]) -> RangeBuckets {
        let (min, max) = (table[0].key(), table[table.len() - 1].key());
        // The smallest power-of-two bucket width that gives at most `len` buckets.
        let span = max - min;
        let mut shift = 0;
        while (span >> shift) >= table.len() as u64 {
            shift += 1;
        }
        let buckets = (span >> shift) as usize + 1;
        let mut starts = Vec::with_capacity(buckets + 1);
        let mut next = 0usize;
        for b in 0..buckets as u64 {
            let start = min + (b << shift);
            while next < table.len() && table[next].key() < start {
                next += 1;
            }
            starts.push(next as u32);
        }
        starts.push(table.len() as u32);
        RangeBuckets {
            min,
            max,
            shift,
            starts,
        }
    }

    #[inline]
    pub fn translate(&self, table: &[FptrMapEntry], key: u64) -> u64 {
        if key < self.min || key > self.max {
            return key;
        }
        let b = ((key - self.min) >> self.shift) as usize;
        // SAFETY: key <= max, so b <= (max - min) >> shift = starts.len() - 2.
        let (lo, hi) = unsafe {
            (
                *self.starts.get_unchecked(b) as usize,
                *self.starts.get_unchecked(b + 1) as usize,
            )
        };
        // SAFETY: lo <= hi <= table.len() (starts is non-decreasing, ends at len).
        let bucket = unsafe { table.get_unchecked(lo..hi) };
        table::translate(bucket, key)
    }

    pub fn bytes_per_entry(&self, entries: usize) -> f64 {
        (self.starts.len() * 4) as f64 / entries as f64
    }
}

fn next_prime(mut n: u64) -> u64 {
    let is_prime = |n: u64| {
        n >= 2
            && (2..)
                .take_while(|d| d * d <= n)
                .all(|d| !n.is_multiple_of(d))
    };
    while !is_prime(n) {
        n += 1;
    }
    n
}

/// One table size: the sorted table, the hash table built from it, and each workload's
/// keys. Building it checks that every implementation agrees with `table::translate`
/// on every key it will be timed on, so a broken baseline cannot produce a number.
pub struct Setup {
    pub table: Vec<FptrMapEntry>,
    pub hash: PointerHashTable,
    pub eytzinger: Eytzinger,
    /// The production index (2 pairs per bucket, the plugin's policy: none for 1 entry)
    /// and its header (the empty one without an index: the device searches).
    pub index: Option<CuckooIndex<{ index::SLOTS }>>,
    pub index_header: FptrIndex,
    /// The head the plugin writes for the table.
    pub head: FptrHead,
    pub index_1slot: CuckooIndex<1>,
    pub index_4slots: CuckooIndex<4>,
    pub range: RangeBuckets,
    pub keys: Vec<(Workload, Vec<u64>)>,
}

/// The highest load a cuckoo table with 1-pair buckets can be built at is 50 %; 45 % is
/// its counterpart of the 2-pair index's 80 %. 4-pair buckets build up to about 97 %.
pub const LOAD_1SLOT: u64 = 45;
pub const LOAD_4SLOTS: u64 = 90;

impl Setup {
    pub fn new(size: usize) -> Setup {
        let table = make_table(size);
        let hash = PointerHashTable::new(&table);
        let eytzinger = Eytzinger::new(&table);
        let index = CuckooIndex::build(&table, &BuildPolicy::DEFAULT);
        let index_header = index.as_ref().map_or(FptrIndex::NONE, CuckooIndex::header);
        let keys = Workload::ALL
            .into_iter()
            .map(|w| (w, make_keys(&table, w)))
            .collect();
        let setup = Setup {
            hash,
            eytzinger,
            index,
            index_header,
            head: FptrHead::of(&table),
            index_1slot: CuckooIndex::new(&table, LOAD_1SLOT),
            index_4slots: CuckooIndex::new(&table, LOAD_4SLOTS),
            range: RangeBuckets::new(&table),
            table,
            keys,
        };
        for (workload, keys) in &setup.keys {
            for &key in keys {
                let expected = table::translate(&setup.table, key);
                match workload {
                    Workload::Hits => assert_ne!(expected, key, "hit workload missed"),
                    Workload::Misses => assert_eq!(expected, key, "miss workload hit"),
                    Workload::Mixed => {}
                }
                for imp in Impl::ALL.into_iter().filter(|i| i.runs(*workload)) {
                    assert_eq!(
                        setup.lookup(imp, key),
                        expected,
                        "{} disagrees on {key:#x} (size {size})",
                        imp.name()
                    );
                }
            }
        }
        setup
    }

    pub fn keys(&self, workload: Workload) -> &[u64] {
        &self.keys.iter().find(|(w, _)| *w == workload).unwrap().1
    }

    /// One lookup by `imp` (dispatching; the timed loops call the functions directly).
    pub fn lookup(&self, imp: Impl, key: u64) -> u64 {
        match imp {
            Impl::OursHead => head_translate(&self.head, &self.index_header, &self.table, key),
            Impl::OursIndex => index_translate(&self.index_header, &self.table, key),
            Impl::IndexOneSlot => self.index_1slot.view().translate(key),
            Impl::IndexFourSlots => self.index_4slots.view().translate(key),
            Impl::RangeBuckets => self.range.translate(&self.table, key),
            Impl::ExportedIndex => with_globals(self, true, || exported(key)),
            Impl::ExportedSearch => with_globals(self, false, || exported(key)),
            Impl::Ours => table::translate(&self.table, key),
            Impl::PlainLowerBound => plain_lower_bound(&self.table, key),
            Impl::LibgompHash => self.hash.translate(key),
            Impl::UpstreamStyle => upstream_style(&self.table, key),
            Impl::Eytzinger => self.eytzinger.translate(key),
        }
    }
}
