//! The optional index beside the sorted table: a bucketized cuckoo hash table of the same
//! `{host_ptr, tgt_ptr}` pairs, so that a lookup costs two dependent loads at any table
//! size instead of `ceil(log2 n) + 1`.
//!
//! Layout (everything the device reads, defined here once; the host builds it with
//! [`build`], which places every key with [`bucket_of`], the function the lookup uses):
//! - the header [`FptrIndex`] (32 bytes), held in the device global
//!   `__omptarget_rs_fptr_index` itself: the buckets' address, their count and the two
//!   hash seeds. Reading it is the first dependent load (its four words share one line);
//! - `bucket_count` buckets of [`SLOTS`] pairs each ([`BUCKET_BYTES`] = 32 bytes: one
//!   32-byte sector of an NVIDIA GPU's memory system, half an x86 cache line; the plugin
//!   aligns them to 32 bytes). A key lives in one of its two candidate buckets
//!   `bucket_of(key, seeds[0], count)` and `bucket_of(key, seeds[1], count)`; both are
//!   read, independently of each other: the second dependent load, and the answer is in
//!   it (the pair holds the device address).
//!
//! A lookup reads exactly those two buckets, compares every slot and returns the matching
//! slot's `tgt_ptr`, or the key unchanged: no loop over data, no branch on data. An empty
//! slot holds the pair `{F, F}` for a filler `F` that is not a key of the table, so an
//! empty slot that "matches" returns the key unchanged, exactly like a miss.
//!
//! What the device trusts, and what it checks: it checks that the header's bucket address
//! is non-null and 8-byte aligned, that `1 <= bucket_count <= isize::MAX / 32` and that
//! both seeds are odd;
//! otherwise it ignores the index and searches the sorted table. It trusts that
//! `bucket_count` buckets are readable at that address (the plugin allocates them). Every
//! bucket index is `< bucket_count` by construction of [`bucket_of`] (a 64x64 -> 128-bit
//! multiply, high half), whatever the seeds and the key, so a corrupted bucket or seed can
//! give a wrong answer but cannot make the lookup read outside the buckets or loop.

use crate::hint::prefetch_read as prefetch;
use crate::table::FptrMapEntry;
use bytemuck::{Pod, Zeroable};

/// Pairs per bucket. Chosen by measurement (docs/BENCHMARKS.md, "The index"): 2 reads one
/// 32-byte sector per bucket on a GPU and costs 4 compare-and-selects per lookup; 1 slot
/// needs twice the memory (a cuckoo table with one slot per bucket fills only to 50 %),
/// 4 slots read twice the bytes and double the compares for a smaller table.
pub const SLOTS: usize = 2;

/// One bucket: `SLOTS` pairs, laid out as the sorted table's rows.
pub type Bucket = [FptrMapEntry; SLOTS];

/// Bytes per bucket, the alignment the plugin gives the bucket array.
pub const BUCKET_BYTES: usize = core::mem::size_of::<Bucket>();
const _: () = assert!(BUCKET_BYTES == 32);

/// The header of an index, as the device global `__omptarget_rs_fptr_index` holds it.
/// All zero: no index (the device searches the sorted table).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FptrIndex {
    /// Device address of the first bucket; 0 = no index.
    pub buckets: u64,
    /// Number of buckets at `buckets`.
    pub bucket_count: u64,
    /// The multipliers of the two hash functions (odd).
    pub seeds: [u64; 2],
}

// The plugin writes this header byte for byte into the device global: the layout is fixed.
const _: () = assert!(core::mem::size_of::<FptrIndex>() == 32);
const _: () = assert!(core::mem::align_of::<FptrIndex>() == 8);
const _: () = assert!(core::mem::offset_of!(FptrIndex, bucket_count) == 8);
const _: () = assert!(core::mem::offset_of!(FptrIndex, seeds) == 16);

// SAFETY: four u64 words, repr(C), size 32 == 4 * 8 (asserted above): no padding; the
// all-zero bit pattern is a valid value.
unsafe impl Zeroable for FptrIndex {}
// SAFETY: repr(C), no padding (asserted above), every field is Pod, Copy and 'static.
unsafe impl Pod for FptrIndex {}

impl FptrIndex {
    /// No index: what the device global holds until the plugin writes one.
    pub const NONE: FptrIndex = FptrIndex {
        buckets: 0,
        bucket_count: 0,
        seeds: [0, 0],
    };
}

/// The bucket of `key` for one hash function: the key times an odd seed (a bijection of
/// 64-bit values whose high bits depend on every bit of the key), scaled to
/// `0..bucket_count` by the high half of a 64x64-bit product. Always `< bucket_count`
/// (for `bucket_count >= 1`), for every key and seed.
#[inline(always)]
pub fn bucket_of(key: u64, seed: u64, bucket_count: u64) -> usize {
    let mixed = key.wrapping_mul(seed);
    ((u128::from(mixed) * u128::from(bucket_count)) >> 64) as usize
}

/// An index in memory: `S` pairs per bucket (the device uses [`SLOTS`]; the benchmarks
/// also measure other bucket sizes).
#[derive(Clone, Copy, Debug)]
pub struct IndexView<'a, const S: usize = SLOTS> {
    buckets: &'a [[FptrMapEntry; S]],
    seeds: [u64; 2],
}

impl<'a, const S: usize> IndexView<'a, S> {
    /// A view of `buckets` with the seeds they were built with; None for no buckets.
    pub fn new(buckets: &'a [[FptrMapEntry; S]], seeds: [u64; 2]) -> Option<Self> {
        (!buckets.is_empty()).then_some(IndexView { buckets, seeds })
    }

    /// The index a header describes, or None when the header describes none or cannot be
    /// valid (null or misaligned buckets, no buckets, more bytes than the address space,
    /// an even seed: the builder only makes odd ones).
    ///
    /// Every word of the header feeds the one validity test, computed without
    /// short-circuits: the four loads of the header are issued together, before the one
    /// branch (a GPU would otherwise wait for the first word before loading the others).
    ///
    /// # Safety
    /// If the checks pass, `header.bucket_count` initialized buckets must be readable at
    /// `header.buckets` and stay unchanged for `'a`.
    #[inline(always)]
    pub unsafe fn from_header(header: FptrIndex) -> Option<Self> {
        let max_count = (isize::MAX as usize / core::mem::size_of::<[FptrMapEntry; S]>()) as u64;
        let base = core::ptr::with_exposed_provenance::<[FptrMapEntry; S]>(header.buckets as usize);
        let valid = (header.buckets != 0)
            & base.is_aligned()
            & (header.bucket_count.wrapping_sub(1) < max_count)
            & (header.seeds[0] & header.seeds[1] & 1 == 1);
        if !valid {
            return None;
        }
        // SAFETY: non-null, aligned, 1 <= count <= isize::MAX / size (so the count fits a
        // usize and the bytes the address space); that `count` buckets are readable and
        // unchanged for 'a is the caller's contract.
        let buckets = unsafe { core::slice::from_raw_parts(base, header.bucket_count as usize) };
        Some(IndexView {
            buckets,
            seeds: header.seeds,
        })
    }

    pub fn buckets(&self) -> &'a [[FptrMapEntry; S]] {
        self.buckets
    }

    pub fn seeds(&self) -> [u64; 2] {
        self.seeds
    }

    /// The two candidate buckets of `key` (equal when both hashes agree).
    #[inline(always)]
    pub fn candidates(&self, key: u64) -> [usize; 2] {
        let count = self.buckets.len() as u64;
        [
            bucket_of(key, self.seeds[0], count),
            bucket_of(key, self.seeds[1], count),
        ]
    }

    /// What `__kmpc_target_translate_fptr` returns for `key`: the `tgt_ptr` of the slot
    /// holding `key` in one of its two buckets, else `key` unchanged. Reads the two
    /// buckets and nothing else, each reported to `on_bucket` (tests count them; the
    /// device passes a no-op).
    #[inline(always)]
    pub fn translate_with_probe(&self, key: u64, mut on_bucket: impl FnMut(usize)) -> u64 {
        let [first, second] = self.candidates(key);
        on_bucket(first);
        on_bucket(second);
        // SAFETY: bucket_of returns indices < buckets.len() (>= 1, see `new`). Unchecked so
        // that no panic path reaches device code.
        let (first, second) = unsafe {
            (
                self.buckets.get_unchecked(first),
                self.buckets.get_unchecked(second),
            )
        };
        // A conditional move per slot: no branch for a mix of hits and misses to
        // mispredict. At most one slot can hold `key` (keys are unique, fillers are not
        // keys). Two loops of S steps (not one chained iterator), which the compiler
        // unrolls.
        let pick = |slot: &FptrMapEntry, result: u64| {
            core::hint::select_unpredictable(slot.key() == key, slot.tgt_ptr, result)
        };
        let mut result = key;
        for slot in first {
            result = pick(slot, result);
        }
        for slot in second {
            result = pick(slot, result);
        }
        result
    }

    /// [`Self::translate_with_probe`] without the probe.
    #[inline(always)]
    pub fn translate(&self, key: u64) -> u64 {
        self.translate_with_probe(key, |_| {})
    }
}

/// How hard [`build`] tries before it gives up (then no index is installed and the
/// device searches the sorted table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuildPolicy {
    /// Tables shorter than this get no index. The search of a 1-entry table reads the
    /// table globals and that entry, already two dependent loads, in fewer instructions
    /// (docs/BENCHMARKS.md: 5.8 against 23 per lookup).
    pub min_len: usize,
    /// Buckets for `n` keys: `ceil(n / (S * max_load_percent / 100))`.
    pub max_load_percent: u64,
    /// Seed pairs tried per bucket count.
    pub seed_tries: u32,
    /// Times the bucket count grows (by `growth_percent`) after every seed pair failed.
    pub growth_steps: u32,
    pub growth_percent: u64,
    /// Evictions one insertion may make before the attempt counts as failed.
    pub max_kicks: u32,
}

impl BuildPolicy {
    /// What the plugin uses. 80 % is well below the load at which a cuckoo table with two
    /// 2-slot buckets per key stops being buildable (about 90 % for random hashes), so
    /// the first seed pair almost always works (every table of the tests and benchmarks
    /// was built on the first attempt unless made to collide on purpose).
    pub const DEFAULT: BuildPolicy = BuildPolicy {
        min_len: 2,
        max_load_percent: 80,
        seed_tries: 4,
        growth_steps: 3,
        growth_percent: 25,
        max_kicks: 500,
    };
}

impl Default for BuildPolicy {
    fn default() -> Self {
        BuildPolicy::DEFAULT
    }
}

/// A built index: the buckets (in the storage the caller's allocator gave) and the seeds.
#[derive(Debug)]
pub struct Built<St> {
    pub buckets: St,
    pub seeds: [u64; 2],
    /// Seed pairs tried in all, including the one that worked (1 = first try).
    pub attempts: u32,
}

/// Why there is no index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// No keys: the sorted table is empty and the search answers at once.
    Empty,
    /// Fewer keys than the policy's `min_len`: the search is as short.
    TooSmall { len: usize },
    /// The table is not sorted by unsigned key with unique keys (the table contract).
    NotSorted,
    /// The allocator gave storage of another length than asked for.
    BadStorage,
    /// Every seed pair at every size failed (only on purpose-made collisions, or a
    /// policy that allows too few tries).
    GaveUp { attempts: u32 },
}

/// Build an index of `table` (sorted ascending by unsigned key, unique keys) with `S`
/// pairs per bucket. `storage(n)` returns room for `n` buckets (its contents are
/// overwritten); the host passes a `Vec` allocator. Deterministic: the same table and
/// policy give the same index.
pub fn build<const S: usize, St: AsMut<[[FptrMapEntry; S]]>>(
    table: &[FptrMapEntry],
    policy: &BuildPolicy,
    mut storage: impl FnMut(usize) -> St,
) -> Result<Built<St>, BuildError> {
    if table.is_empty() {
        return Err(BuildError::Empty);
    }
    if table.len() < policy.min_len {
        return Err(BuildError::TooSmall { len: table.len() });
    }
    if !table.windows(2).all(|w| w[0].key() < w[1].key()) {
        return Err(BuildError::NotSorted);
    }
    let filler = filler_for(table);
    let mut attempts = 0u32;
    for growth in 0..=policy.growth_steps {
        let count = bucket_count::<S>(table.len(), policy, growth);
        let mut buckets = storage(count);
        if buckets.as_mut().len() != count {
            return Err(BuildError::BadStorage);
        }
        for _ in 0..policy.seed_tries {
            let seeds = seeds_for(attempts);
            attempts += 1;
            if place_all(buckets.as_mut(), table, seeds, filler, policy.max_kicks) {
                return Ok(Built {
                    buckets,
                    seeds,
                    attempts,
                });
            }
        }
    }
    Err(BuildError::GaveUp { attempts })
}

/// Buckets for `len` keys at the policy's load, grown `growth` times. 64-bit arithmetic
/// only (a 128-bit division would call into compiler-builtins, which device bitcode must
/// not need), saturating: an absurd count fails the allocation instead of wrapping.
pub fn bucket_count<const S: usize>(len: usize, policy: &BuildPolicy, growth: u32) -> usize {
    let slots_per_100 = (S as u64)
        .saturating_mul(policy.max_load_percent.clamp(1, 100))
        .max(1);
    let mut count = (len as u64)
        .saturating_mul(100)
        .div_ceil(slots_per_100)
        .max(1);
    for _ in 0..growth {
        let more = count
            .saturating_mul(policy.growth_percent)
            .div_ceil(100)
            .max(1);
        count = count.saturating_add(more);
    }
    usize::try_from(count).unwrap_or(usize::MAX)
}

/// The seed pair of attempt `attempt`: splitmix64 outputs, made odd (multiplying by an
/// odd number is a bijection, so distinct keys stay distinct before the scaling).
pub fn seeds_for(attempt: u32) -> [u64; 2] {
    let mut state = 0x243f_6a88_85a3_08d3u64 ^ u64::from(attempt).wrapping_mul(0x9e37_79b9);
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) | 1
    };
    [next(), next()]
}

/// The smallest 64-bit value that is not a key of the sorted, unique `table`: the key
/// (and value) of empty slots, so that an empty slot can only "match" a key that is not
/// in the table, and then returns it unchanged.
fn filler_for(table: &[FptrMapEntry]) -> u64 {
    let mut filler = 0u64;
    for entry in table {
        if entry.key() == filler {
            // `table` has at most isize::MAX entries, so this never wraps.
            filler += 1;
        } else {
            break;
        }
    }
    filler
}

/// Insertions ahead of the current one whose buckets [`place_all`] asks the cache for:
/// enough to cover a memory access's latency with the work of the insertions between.
const PREFETCH_DISTANCE: usize = 16;

fn empty_slot(filler: u64) -> FptrMapEntry {
    FptrMapEntry {
        host_ptr: filler,
        tgt_ptr: filler,
    }
}

/// Place every entry in one of its two buckets by random-walk cuckoo insertion: an entry
/// that finds both buckets full evicts a random slot of the bucket it did not just come
/// from, and the evicted entry moves on. False when an insertion exceeds `max_kicks`.
fn place_all<const S: usize>(
    buckets: &mut [[FptrMapEntry; S]],
    table: &[FptrMapEntry],
    seeds: [u64; 2],
    filler: u64,
    max_kicks: u32,
) -> bool {
    buckets.fill([empty_slot(filler); S]);
    let count = buckets.len() as u64;
    let mut rng = seeds[0] ^ seeds[1].rotate_left(17);
    let mut random = || {
        // xorshift64: deterministic, so the same table always gives the same index.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for (i, entry) in table.iter().enumerate() {
        // The buckets of a key some insertions ahead are in no order a hardware
        // prefetcher predicts: asking for them now overlaps their cache misses with this
        // insertion's work (a table of 1M keys has 20 MB of buckets).
        if let Some(ahead) = table.get(i + PREFETCH_DISTANCE) {
            let key = ahead.key();
            prefetch(&buckets[bucket_of(key, seeds[0], count)]);
            prefetch(&buckets[bucket_of(key, seeds[1], count)]);
        }
        let mut carried = *entry;
        // The bucket `carried` was evicted from (none for the entry being inserted).
        let mut came_from: Option<usize> = None;
        let mut placed = false;
        for _ in 0..=max_kicks {
            let key = carried.key();
            let [first, second] = [
                bucket_of(key, seeds[0], count),
                bucket_of(key, seeds[1], count),
            ];
            let free = [first, second]
                .into_iter()
                .find_map(|b| Some((b, free_slot(&buckets[b], filler)?)))
                .or_else(|| move_resident_aside(buckets, [first, second], seeds, filler));
            if let Some((b, slot)) = free {
                buckets[b][slot] = carried;
                placed = true;
                break;
            }
            let victim = match came_from {
                Some(from) if from == first => second,
                Some(_) => first,
                None if random() & 1 == 0 => first,
                None => second,
            };
            let slot = (random() % S as u64) as usize;
            core::mem::swap(&mut buckets[victim][slot], &mut carried);
            came_from = Some(victim);
        }
        if !placed {
            return false;
        }
    }
    true
}

/// The first empty slot of `bucket`.
fn free_slot<const S: usize>(bucket: &[FptrMapEntry; S], filler: u64) -> Option<usize> {
    bucket.iter().position(|slot| slot.key() == filler)
}

/// Empty a slot of one of the full buckets `candidates` by moving one of their residents
/// to its other bucket, when that bucket has room: one breadth-first step before a random
/// eviction. The residents' other buckets are asked for all at once, so their cache
/// misses overlap, where each step of a random walk waits for the one before. Returns
/// the emptied slot.
fn move_resident_aside<const S: usize>(
    buckets: &mut [[FptrMapEntry; S]],
    candidates: [usize; 2],
    seeds: [u64; 2],
    filler: u64,
) -> Option<(usize, usize)> {
    let count = buckets.len() as u64;
    let mut others = [[0usize; S]; 2];
    for (bucket, others) in candidates.into_iter().zip(&mut others) {
        for (resident, other) in buckets[bucket].iter().zip(others.iter_mut()) {
            let key = resident.key();
            let first = bucket_of(key, seeds[0], count);
            *other = if first == bucket {
                bucket_of(key, seeds[1], count)
            } else {
                first
            };
            prefetch(&buckets[*other]);
        }
    }
    for (bucket, others) in candidates.into_iter().zip(others) {
        for (slot, other) in others.into_iter().enumerate() {
            if let Some(free) = free_slot(&buckets[other], filler) {
                // `other` != `bucket`: `bucket` is full, `other` has room.
                buckets[other][free] = buckets[bucket][slot];
                return Some((bucket, slot));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
