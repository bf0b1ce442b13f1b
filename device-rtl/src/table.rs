//! The host-to-device function pointer table and its search.
//!
//! Contract of a table (the plugin that fills `__omp_offloading_fptr_map_p` guarantees it):
//! - entries are sorted by `host_ptr` compared as UNSIGNED 64-bit addresses
//!   (`u64`), ascending;
//! - keys are unique (no two entries share a `host_ptr`).
//!
//! On a table that breaks the contract the search still ends after the same number of
//! probes and still returns either an entry whose key equals the argument or nothing; it
//! may then miss a key that is present.

use bytemuck::{Pod, Zeroable};

/// One `{ int64_t host_ptr; int64_t tgt_ptr; }` pair, the layout of
/// `__omp_offloading_fptr_map_ty` in the declare-target-indirect design. The fields are
/// addresses and the table orders them unsigned, so Rust holds them as `u64` (the same
/// bits as C's `int64_t`). The one definition: the plugin builds its tables from it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FptrMapEntry {
    /// Address of the host version of the function: the search key.
    pub host_ptr: u64,
    /// Address of the device version of the same function.
    pub tgt_ptr: u64,
}

// The plugin copies arrays of these byte for byte to the device: the layout is fixed.
const _: () = assert!(core::mem::size_of::<FptrMapEntry>() == 16);
const _: () = assert!(core::mem::align_of::<FptrMapEntry>() == 8);
const _: () = assert!(core::mem::offset_of!(FptrMapEntry, host_ptr) == 0);
const _: () = assert!(core::mem::offset_of!(FptrMapEntry, tgt_ptr) == 8);

// SAFETY: two u64 fields, repr(C), size 16 == 8 + 8 (asserted above), so no padding;
// the all-zero bit pattern is a valid value.
unsafe impl Zeroable for FptrMapEntry {}
// SAFETY: repr(C), no padding (asserted above), every field is Pod, Copy and 'static.
unsafe impl Pod for FptrMapEntry {}

impl FptrMapEntry {
    /// The key as the table orders it: an unsigned 64-bit address.
    #[inline(always)]
    pub fn key(&self) -> u64 {
        self.host_ptr
    }
}

/// The most probes [`find_index_by`] makes for a table of `len` entries:
/// `ceil(log2 len) + 1` (0 for an empty table).
pub const fn max_probes(len: usize) -> u32 {
    match len {
        0 => 0,
        1 => 1,
        n => usize::BITS - (n - 1).leading_zeros() + 1,
    }
}

/// Branchless lower-bound search over `len` keys read through `key_at`.
///
/// Returns the index `i < len` with `key_at(i) == key`, if the keys are sorted ascending
/// and unique and such an index exists; `None` otherwise. `key_at` is called only with
/// indices `< len`, exactly `max_probes(len)` times: the loop runs `ceil(log2 len)`
/// times whatever the keys are (no data-dependent exit, so it cannot loop forever), and
/// each step is a compare plus a select kept as a conditional move.
#[inline(always)]
pub fn find_index_by(len: usize, key: u64, key_at: impl FnMut(usize) -> u64) -> Option<usize> {
    search::<1>(len, key, key_at)
}

/// The search behind [`find_index_by`]; see [`narrow`].
#[inline(always)]
fn search<const UNIT: usize>(
    len: usize,
    key: u64,
    mut key_at: impl FnMut(usize) -> u64,
) -> Option<usize> {
    if len == 0 {
        return None;
    }
    let candidate = narrow::<UNIT>(len, key, &mut key_at, 0, |_| {});
    (key_at(candidate) == key).then_some(candidate)
}

/// The search steps without the final equality probe: for `len >= 1`, the position of
/// the only entry that can equal `key` (`ceil(log2 len)` probes).
///
/// Positions are `origin + index * UNIT`: the slice search passes the table's address
/// and `UNIT` = the entry size, so positions are addresses and no step multiplies an
/// index by 16 (x86 addressing scales by 8 at most) or adds the table's base.
/// `key_at` and `prefetch` get positions of indices `< len`.
///
/// The window is made a power of two by the first probe (at `len - step`, where `step`
/// is the largest power of two below `len`), so every later step just halves it: that
/// is `ceil(log2 len)` compare-and-select steps, as a plain halving would take, but each
/// one cheaper (no odd sizes to carry) and the same for every key.
///
/// Each step first tells `prefetch` (a hint, not a probe) the two positions the next step
/// may read: a conditional move makes each step wait for the previous load, so on a
/// table larger than the cache the misses would otherwise be paid one after the other.
#[inline(always)]
fn narrow<const UNIT: usize>(
    len: usize,
    key: u64,
    mut key_at: impl FnMut(usize) -> u64,
    origin: usize,
    mut prefetch: impl FnMut(usize),
) -> usize {
    // Invariant after each step, in indices: base + step <= len, and if `key` is present
    // its index lies in [base, base + step). `base` below holds origin + base * UNIT,
    // `step` step * UNIT. No overflow: for a slice, origin + len * UNIT is one past its
    // end; for find_index_by, origin is 0 and UNIT 1.
    let mut base = origin;
    if len > 1 {
        // len/2 <= step < len.
        let step_entries = largest_power_of_two_below(len);
        let step = step_entries * UNIT;
        // [0, step) and [first, len) are both `step` long and cover [0, len) since
        // first = len - step <= step.
        let first = origin + (len - step_entries) * UNIT;
        // `select_unpredictable` keeps every select a conditional move: x86 backends
        // otherwise turn a select fed by a load into a branch, which random keys
        // mispredict half the time.
        base = core::hint::select_unpredictable(key_at(first) <= key, first, origin);
        // The window [base, base + 2 * half) halves until it holds one entry. `half` is
        // a power of two times UNIT, or below UNIT once the window holds one entry.
        let mut half = step / 2;
        while half >= UNIT {
            // mid < base + 2 * half <= len.
            let mid = base + half;
            // The next probe is (base or mid) + half / 2, both below base + 2 * half
            // (in the last step half / 2 is under one entry: positions inside entries
            // base and mid, harmless to prefetch).
            let quarter = half / 2;
            prefetch(base + quarter);
            prefetch(mid + quarter);
            base = core::hint::select_unpredictable(key_at(mid) <= key, mid, base);
            half = quarter;
        }
    }
    base
}

/// `2^(ceil(log2 len) - 1)`, the largest power of two below `len`, for `len >= 2`.
#[inline(always)]
fn largest_power_of_two_below(len: usize) -> usize {
    // PTX's `clz` returns a 32-bit count; smearing keeps the whole lookup in 64-bit
    // registers there (tests/tests/device_link.rs checks that the PTX lookup has no
    // 32-bit operation, so that no size or index can be truncated). Elsewhere a
    // count-leading-zeros instruction is cheaper.
    if cfg!(target_arch = "nvptx64") {
        power_of_two_below_by_smearing(len)
    } else {
        power_of_two_below_by_clz(len)
    }
}

#[inline(always)]
fn power_of_two_below_by_clz(len: usize) -> usize {
    1 << (usize::BITS - 1 - (len - 1).leading_zeros())
}

#[inline(always)]
fn power_of_two_below_by_smearing(len: usize) -> usize {
    // Copy the highest set bit of len - 1 into every lower bit: 2^k - 1 where 2^(k-1) is
    // the highest power of two <= len - 1, i.e. the highest below len.
    let mut x = len - 1;
    let mut shift = 1;
    while shift < usize::BITS {
        x |= x >> shift;
        shift *= 2;
    }
    (x >> 1) + 1
}

/// Tables at least this long (4 MiB) get prefetches. Measured on x86_64 (docs/BENCHMARKS.md):
/// at 16K entries the prefetches cost ~15%, at 64K they break even, at 256K they save
/// ~10% and at 1M ~30%.
pub const PREFETCH_MIN_LEN: usize = 1 << 18;

/// Hint that the memory at `address` is read soon. Only x86_64 has one here (the host
/// "device" of libomptarget); the GPU builds compile it to nothing.
#[inline(always)]
fn prefetch_address(address: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let at = core::ptr::with_exposed_provenance::<i8>(address);
        // SAFETY: a prefetch is a hint that never faults and changes no memory, whatever
        // the address (the search only passes addresses inside the table anyway).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// The only entry of a non-empty `table` that can have the key `key`, and its index,
/// found with `ceil(log2 len)` probes, each reported to `on_probe`; `None` for an empty
/// table.
#[inline(always)]
fn candidate(
    table: &[FptrMapEntry],
    key: u64,
    mut on_probe: impl FnMut(usize),
) -> Option<(usize, &FptrMapEntry)> {
    const ENTRY: usize = core::mem::size_of::<FptrMapEntry>();
    if table.is_empty() {
        return None;
    }
    // Loop-invariant: the compiler makes one loop with prefetches and one without.
    let wants_prefetch = table.len() >= PREFETCH_MIN_LEN;
    // The search works on addresses (one add fewer per prefetch); exposing the table's
    // provenance lets them become pointers into it again.
    let origin = table.as_ptr().expose_provenance();
    let entry_at = |address: usize| {
        debug_assert!((address - origin) / ENTRY < table.len());
        // SAFETY: `narrow` passes and returns only addresses `origin + i * ENTRY` with
        // `i < table.len()` (see its loop invariant): aligned entries of `table`, whose
        // provenance is exposed above and which is borrowed for the result's lifetime.
        // Unchecked so no panic path reaches the device code.
        unsafe { &*core::ptr::with_exposed_provenance::<FptrMapEntry>(address) }
    };
    let address = narrow::<ENTRY>(
        table.len(),
        key,
        |address| {
            on_probe((address - origin) / ENTRY);
            entry_at(address).key()
        },
        origin,
        |address| {
            debug_assert!((address - origin) / ENTRY < table.len());
            if wants_prefetch {
                prefetch_address(address);
            }
        },
    );
    Some(((address - origin) / ENTRY, entry_at(address)))
}

/// Search `table` for `key`, calling `on_probe` once per entry read (tests count probes
/// with it; the device passes a no-op that compiles away).
#[inline(always)]
pub fn find_with_probe(
    table: &[FptrMapEntry],
    key: u64,
    mut on_probe: impl FnMut(usize),
) -> Option<&FptrMapEntry> {
    let (index, entry) = candidate(table, key, &mut on_probe)?;
    // The final equality probe.
    on_probe(index);
    (entry.key() == key).then_some(entry)
}

/// The entry of `table` whose `host_ptr` equals `key` (as unsigned addresses).
#[inline(always)]
pub fn find(table: &[FptrMapEntry], key: u64) -> Option<&FptrMapEntry> {
    find_with_probe(table, key, |_| {})
}

/// What `__kmpc_target_translate_fptr` returns for `fn_ptr`: the device address of an
/// exact match, else `fn_ptr` unchanged (null, below the first key, above the last key,
/// between two keys, empty table). Branchless after the search too: a mix of hits and
/// misses would otherwise mispredict on the final comparison.
#[inline(always)]
pub fn translate(table: &[FptrMapEntry], fn_ptr: u64) -> u64 {
    match candidate(table, fn_ptr, |_| {}) {
        Some((_, entry)) => {
            core::hint::select_unpredictable(entry.key() == fn_ptr, entry.tgt_ptr, fn_ptr)
        }
        None => fn_ptr,
    }
}

#[cfg(test)]
pub(crate) mod tests;
