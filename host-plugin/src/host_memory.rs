//! What the plugin builds for a device whose memory is this process's own (the host
//! device, [`Backend::memory_is_host`]) is built in a device allocation directly: no
//! second copy is made and written (for an index of a million entries, 20 MB).

use crate::backend::{Backend, BackendError, DeviceAddr};
use crate::fptr::FptrMapEntry;
use crate::fptr_index::{self, Bucket, FptrIndex, BUCKET_BYTES};

/// An index built in device memory: the header for the image's global, the allocation
/// holding the buckets (aligned inside it), and how many seed pairs the build took.
#[derive(Clone, Copy, Debug)]
pub struct PlacedIndex {
    pub header: FptrIndex,
    pub allocation: DeviceAddr,
    pub attempts: u32,
}

/// The index of the sorted, duplicate-free `table`, built in an allocation of `device`,
/// whose memory must be the host's own ([`Backend::memory_is_host`]; else an error).
/// Nothing stays allocated on failure; the error says why, for the log.
pub fn build_index(
    backend: &dyn Backend,
    device: usize,
    table: &[FptrMapEntry],
) -> Result<PlacedIndex, String> {
    if !backend.memory_is_host() {
        return Err("device memory is not host memory".into());
    }
    let mut alloc_error = None;
    let built = fptr_index::build_with(table, |count| {
        HostMemoryBuckets::allocate(backend, device, count).unwrap_or_else(|e| {
            alloc_error = Some(e);
            HostMemoryBuckets::none(backend, device)
        })
    });
    match built {
        Ok(built) => {
            let header = FptrIndex {
                buckets: built.buckets.start as u64,
                bucket_count: built.buckets.len as u64,
                seeds: built.seeds,
            };
            Ok(PlacedIndex {
                header,
                allocation: built.buckets.keep(),
                attempts: built.attempts,
            })
        }
        Err(e) => Err(match alloc_error {
            Some(e) => format!("allocating it on the device failed: {e}"),
            None => fptr_index::describe(e),
        }),
    }
}

/// Buckets of an index in a device allocation of host memory, written in place; freed
/// on drop unless kept.
struct HostMemoryBuckets<'b> {
    backend: &'b dyn Backend,
    device: usize,
    allocation: Option<DeviceAddr>,
    /// The first bucket, 32-byte aligned inside the allocation.
    start: *mut Bucket,
    len: usize,
}

impl<'b> HostMemoryBuckets<'b> {
    /// `count` zeroed buckets.
    fn allocate(
        backend: &'b dyn Backend,
        device: usize,
        count: usize,
    ) -> Result<Self, BackendError> {
        let bytes = count
            .checked_mul(BUCKET_BYTES)
            .and_then(|b| b.checked_add(BUCKET_BYTES - 1))
            .ok_or(BackendError::OutOfMemory(usize::MAX))?;
        let allocation = backend.alloc(device, bytes, crate::backend::AllocKind::Device)?;
        let start = fptr_index::aligned_buckets(allocation) as *mut Bucket;
        // SAFETY: the backend's memory is this process's (memory_is_host), and
        // `start .. start + count` buckets lie inside the fresh allocation of
        // count * 32 + 31 bytes (aligned_buckets moves the start by at most 31).
        // Zeroed, so the slice `as_mut` makes holds initialised integers.
        unsafe { std::ptr::write_bytes(start, 0, count) };
        Ok(HostMemoryBuckets {
            backend,
            device,
            allocation: Some(allocation),
            start,
            len: count,
        })
    }

    /// No buckets (the builder reports it as bad storage).
    fn none(backend: &'b dyn Backend, device: usize) -> Self {
        HostMemoryBuckets {
            backend,
            device,
            allocation: None,
            start: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
        }
    }

    /// Keep the allocation (the image's index from now on): its address.
    fn keep(mut self) -> DeviceAddr {
        self.allocation.take().unwrap_or(0)
    }
}

impl AsMut<[Bucket]> for HostMemoryBuckets<'_> {
    fn as_mut(&mut self) -> &mut [Bucket] {
        // SAFETY: `start` is either dangling with `len` 0, or `len` zero-initialised,
        // aligned buckets of host memory this value alone refers to (see `allocate`).
        unsafe { std::slice::from_raw_parts_mut(self.start, self.len) }
    }
}

impl Drop for HostMemoryBuckets<'_> {
    fn drop(&mut self) {
        if let Some(allocation) = self.allocation.take() {
            // SAFETY: a fresh allocation of this device that nothing else points at
            // (not kept as an image's index).
            let _ = unsafe { self.backend.free(self.device, allocation) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::host::HostBackend;
    use crate::fptr_index::IndexView;

    fn table(n: u64) -> Vec<FptrMapEntry> {
        (0..n)
            .map(|i| FptrMapEntry {
                host_ptr: 0x5555_0000 + 16 * i,
                tgt_ptr: 0x7f00_0000 + 32 * i,
            })
            .collect()
    }

    #[test]
    fn an_index_built_in_host_memory_answers_like_the_table_and_like_one_built_apart() {
        let table = table(5000);
        let backend = HostBackend;
        let placed = build_index(&backend, 0, &table).unwrap();
        assert!(placed.header.buckets.is_multiple_of(BUCKET_BYTES as u64));
        assert!(placed.header.buckets >= placed.allocation);
        assert!(placed.header.buckets - placed.allocation < BUCKET_BYTES as u64);
        // SAFETY: the header describes `bucket_count` initialised buckets inside the
        // allocation just made, which nothing else uses until it is freed below.
        let buckets = unsafe {
            std::slice::from_raw_parts(
                placed.header.buckets as *const Bucket,
                placed.header.bucket_count as usize,
            )
        };
        let view = IndexView::new(buckets, placed.header.seeds).unwrap();
        for r in &table {
            assert_eq!(view.translate(r.host_ptr), r.tgt_ptr);
            assert_eq!(view.translate(r.host_ptr + 8), r.host_ptr + 8);
        }
        // The same build as the one made in a Vec and copied: same buckets, same seeds.
        let apart = fptr_index::build(&table).unwrap();
        assert_eq!(apart.seeds, placed.header.seeds);
        assert_eq!(apart.attempts, placed.attempts);
        assert_eq!(
            bytemuck::cast_slice::<Bucket, u8>(buckets),
            apart.as_bytes()
        );
        // SAFETY: the allocation came from this backend and is dead after this.
        unsafe { backend.free(0, placed.allocation) }.unwrap();
    }

    #[test]
    fn tables_outside_the_contract_get_no_index() {
        let backend = HostBackend;
        let unsorted = [table(2)[1], table(2)[0]];
        let err = build_index(&backend, 0, &unsorted).unwrap_err();
        assert!(err.contains("not sorted"), "{err}");
        let err = build_index(&backend, 0, &[]).unwrap_err();
        assert!(err.contains("empty"), "{err}");
    }
}
