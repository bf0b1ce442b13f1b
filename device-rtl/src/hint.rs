//! A hint to the CPU that memory will be read soon, for host code walking tables in an
//! order no hardware prefetcher predicts: the index builder here, the plugin's batched
//! symbol lookups. Defined once in this crate, the lowest the plugin depends on. On
//! targets other than x86_64 (the GPU builds) it does nothing.

/// Ask for the cache line holding `*item`. Never faults, changes nothing a program can
/// observe but time.
#[inline(always)]
pub fn prefetch_read<T>(item: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 of an address from a live reference: a prefetch never faults and
    // writes nothing.
    unsafe {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((item as *const T).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = item;
}
