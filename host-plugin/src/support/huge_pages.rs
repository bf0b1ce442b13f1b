//! Transparent huge pages for the load's large buffers (a million entries: the resolved
//! addresses, the table's rows and its sort scratch, the table and index on the host
//! device, the table returned to libomptarget; about 110 MB in all).
//!
//! Each first touch of a 4 KiB page is a page fault. Where the kernel gives huge pages
//! only on request (`transparent_hugepage/enabled` = `madvise`, the common default),
//! asking for them before the first write makes one fault per 2 MiB instead of 512.
//! Measured on the benchmark machine (KVM, docs/BENCHMARKS.md 1d): 0.52 ms per MB
//! written to fresh memory with 4 KiB pages, 0.12 to 0.16 ms with huge pages. Buffers
//! too small to hold a whole aligned huge page are left alone; where the kernel has no
//! huge pages the request fails and nothing changes.

use bytemuck::Zeroable;

/// The size of a transparent huge page on x86_64 (`hpage_pmd_size`).
const HUGE_PAGE: usize = 2 << 20;
/// Below this a buffer holds at most one aligned huge page: not worth a system call.
pub const MIN_BYTES: usize = 2 * HUGE_PAGE;

/// Ask for huge pages for the whole aligned 2 MiB blocks inside `[start, start + bytes)`,
/// memory of this process not yet written (pages written before stay as they are).
pub fn advise(start: *const u8, bytes: usize) {
    if bytes < MIN_BYTES {
        return;
    }
    let first = (start as usize).next_multiple_of(HUGE_PAGE);
    let end = (start as usize).saturating_add(bytes) & !(HUGE_PAGE - 1);
    if end <= first {
        return;
    }
    // SAFETY: `first .. end` lies inside the caller's allocation and is page aligned.
    // MADV_HUGEPAGE changes how the kernel backs the range, never its contents or its
    // mapping: it cannot invalidate any reference. A failure (no THP in this kernel)
    // leaves the range as it was, which is fine.
    let _ = unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
}

/// An empty vector with room for `capacity` items, huge pages requested for its buffer.
pub fn vec_with_capacity<T>(capacity: usize) -> Vec<T> {
    let v = Vec::<T>::with_capacity(capacity);
    advise(v.as_ptr().cast(), v.capacity() * std::mem::size_of::<T>());
    v
}

/// `len` zeroed items, their buffer on huge pages where it is large enough. Zeroed by
/// the allocator (calloc): a large buffer comes straight from fresh, already zero pages
/// that no write has touched yet, so the advice still applies and nothing is written
/// twice.
pub fn zeroed_vec<T: Zeroable>(len: usize) -> Vec<T> {
    let v: Vec<T> = bytemuck::zeroed_vec(len);
    advise(v.as_ptr().cast(), v.capacity() * std::mem::size_of::<T>());
    v
}

/// The items of `items`, in order, in a boxed slice on huge pages where it is large
/// enough (an exact-size collect would write the buffer before it could be advised).
pub fn boxed_from_iter<T>(items: impl ExactSizeIterator<Item = T>) -> Box<[T]> {
    let mut v = vec_with_capacity(items.len());
    v.extend(items);
    v.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_hold_what_was_asked_at_any_size() {
        for len in [0, 1, 1000, MIN_BYTES / 8 + 3] {
            let v: Vec<u64> = zeroed_vec(len);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x == 0));
            let b = boxed_from_iter((0..len).map(|i| i as u64 * 3));
            assert_eq!(b.len(), len);
            assert!(b.iter().enumerate().all(|(i, &x)| x == i as u64 * 3));
        }
    }

    #[test]
    fn advice_on_unaligned_and_tiny_ranges_is_harmless() {
        let mut v: Vec<u8> = vec_with_capacity(MIN_BYTES + 12345);
        advise(v.as_ptr().wrapping_add(1), MIN_BYTES + 1);
        advise(v.as_ptr(), 1);
        v.resize(MIN_BYTES + 12345, 7);
        assert!(v.iter().all(|&x| x == 7));
    }
}
