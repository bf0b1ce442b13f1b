//! The host-to-device function pointer table and its search.
//!
//! Contract of a table (the plugin that fills `__omp_offloading_fptr_map_p` guarantees it):
//! - entries are sorted by `host_ptr` compared as UNSIGNED 64-bit addresses
//!   (`host_ptr as u64`), ascending;
//! - keys are unique (no two entries share a `host_ptr`).
//!
//! On a table that breaks the contract the search still ends after the same number of
//! probes and still returns either an entry whose key equals the argument or nothing; it
//! may then miss a key that is present.

use bytemuck::{Pod, Zeroable};

/// One `{ int64_t host_ptr; int64_t tgt_ptr; }` pair, the layout of
/// `__omp_offloading_fptr_map_ty` in the declare-target-indirect design.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FptrMapEntry {
    /// Address of the host version of the function: the search key.
    pub host_ptr: i64,
    /// Address of the device version of the same function.
    pub tgt_ptr: i64,
}

// The plugin copies arrays of these byte for byte to the device: the layout is fixed.
const _: () = assert!(core::mem::size_of::<FptrMapEntry>() == 16);
const _: () = assert!(core::mem::align_of::<FptrMapEntry>() == 8);
const _: () = assert!(core::mem::offset_of!(FptrMapEntry, host_ptr) == 0);
const _: () = assert!(core::mem::offset_of!(FptrMapEntry, tgt_ptr) == 8);

// SAFETY: two i64 fields, repr(C), size 16 == 8 + 8 (asserted above), so no padding;
// the all-zero bit pattern is a valid value.
unsafe impl Zeroable for FptrMapEntry {}
// SAFETY: repr(C), no padding (asserted above), every field is Pod, Copy and 'static.
unsafe impl Pod for FptrMapEntry {}

impl FptrMapEntry {
    /// The key as the table orders it: an unsigned 64-bit address.
    #[inline(always)]
    pub fn key(&self) -> u64 {
        self.host_ptr as u64
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
/// each step is a compare plus a select the compiler turns into a conditional move.
#[inline(always)]
pub fn find_index_by(len: usize, key: u64, mut key_at: impl FnMut(usize) -> u64) -> Option<usize> {
    if len == 0 {
        return None;
    }
    // Invariant: size >= 1, base + size <= len, and if `key` is present its index lies
    // in [base, base + size).
    let mut base = 0usize;
    let mut size = len;
    while size > 1 {
        let half = size / 2;
        // mid < base + size <= len.
        let mid = base + half;
        // Keys at or below `key` move the window up; `size - half >= half` keeps the
        // index of `key` inside it either way.
        base = if key_at(mid) <= key { mid } else { base };
        size -= half;
    }
    (key_at(base) == key).then_some(base)
}

/// Search `table` for `key`, calling `on_probe` once per entry read (tests count probes
/// with it; the device passes a no-op that compiles away).
#[inline(always)]
pub fn find_with_probe(
    table: &[FptrMapEntry],
    key: u64,
    mut on_probe: impl FnMut(usize),
) -> Option<&FptrMapEntry> {
    let index = find_index_by(table.len(), key, |i| {
        on_probe(i);
        // SAFETY: find_index_by only passes indices below its `len` argument, which is
        // `table.len()` (see its loop invariant). Unchecked so no panic path reaches the
        // device code.
        unsafe { table.get_unchecked(i) }.key()
    })?;
    table.get(index)
}

/// The entry of `table` whose `host_ptr` equals `key` (as unsigned addresses).
#[inline(always)]
pub fn find(table: &[FptrMapEntry], key: u64) -> Option<&FptrMapEntry> {
    find_with_probe(table, key, |_| {})
}

/// What `__kmpc_target_translate_fptr` returns for `fn_ptr`: the device address of an
/// exact match, else `fn_ptr` unchanged (null, below the first key, above the last key,
/// between two keys, empty table).
#[inline(always)]
pub fn translate(table: &[FptrMapEntry], fn_ptr: u64) -> u64 {
    match find(table, fn_ptr) {
        Some(entry) => entry.tgt_ptr as u64,
        None => fn_ptr,
    }
}

#[cfg(test)]
mod tests;
