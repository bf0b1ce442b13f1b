//! A hint to the CPU that memory will be read soon. Used where the plugin walks tables
//! of millions of entries in an order no hardware prefetcher predicts (hash lookups,
//! pointer globals scattered over an image): asking a few dozen lookups ahead makes
//! their cache misses overlap instead of waiting for each in turn.

/// Ask for the cache line holding `*item` (device-rtl's hint, which its index builder
/// uses too).
pub use device_rtl::hint::prefetch_read as read;

/// Ask for the cache line at `addr`, an address of this process that may be anywhere
/// (a prefetch of an unmapped address is dropped by the CPU, never a fault).
#[inline]
pub fn read_address(addr: u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 never faults, whatever the address, and writes nothing.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(addr as usize as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}
