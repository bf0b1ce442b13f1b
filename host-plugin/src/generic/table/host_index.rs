//! The fptr index built in place where device memory is this process's own (the host
//! device, [`BackendDevice::host_memory`]): in a device allocation directly, so no second
//! copy is made and written (for an index of a million entries, 20 MB). Elsewhere the
//! index is built apart and copied ([`crate::generic::table::device_table`]).
//!
//! [`BackendDevice::host_memory`]: crate::backend::BackendDevice::host_memory

use crate::backend::{AllocKind, BackendError};
use crate::generic::device_buffer::{DeviceBuffer, DeviceMemory};
use crate::generic::table::fptr::FptrMapEntry;
use crate::generic::table::fptr_index::{
    self, Bucket, DeviceIndex, FptrIndex, PlacedIndex, BUCKET_BYTES,
};

/// The index of the sorted, duplicate-free `table`, built in a buffer of `memory`,
/// which must be this process's own ([`BackendDevice::host_memory`]; else an error). Nothing
/// stays allocated on failure; the error says why, for the log.
///
/// [`BackendDevice::host_memory`]: crate::backend::BackendDevice::host_memory
pub fn build(memory: &DeviceMemory, table: &[FptrMapEntry]) -> Result<PlacedIndex, String> {
    if memory.vendor().host_memory().is_none() {
        return Err("device memory is not host memory".into());
    }
    let mut alloc_error = None;
    let built = fptr_index::build_with(table, |count| {
        HostMemoryBuckets::allocate(memory, count).unwrap_or_else(|e| {
            alloc_error = Some(e);
            HostMemoryBuckets::none()
        })
    });
    match built {
        Ok(built) => {
            let header = FptrIndex {
                buckets: built.buckets.start as u64,
                bucket_count: built.buckets.len as u64,
                seeds: built.seeds,
            };
            let buckets = built
                .buckets
                .buffer
                .ok_or("internal error: no bucket buffer")?;
            Ok(PlacedIndex {
                index: DeviceIndex { header, buckets },
                attempts: built.attempts,
            })
        }
        Err(e) => Err(match alloc_error {
            Some(e) => format!("allocating it on the device failed: {e}"),
            None => fptr_index::describe(e),
        }),
    }
}

/// Buckets of an index in a device buffer of host memory, written in place.
struct HostMemoryBuckets {
    buffer: Option<DeviceBuffer>,
    /// The first bucket, 32-byte aligned inside the buffer.
    start: *mut Bucket,
    len: usize,
}

impl HostMemoryBuckets {
    /// `count` zeroed buckets.
    fn allocate(memory: &DeviceMemory, count: usize) -> Result<Self, BackendError> {
        let bytes = count
            .checked_mul(BUCKET_BYTES)
            .and_then(|b| b.checked_add(BUCKET_BYTES - 1))
            .ok_or(BackendError::OutOfMemory(usize::MAX))?;
        let buffer = memory.alloc(bytes, AllocKind::Device)?;
        let start = fptr_index::aligned_buckets(buffer.addr()) as *mut Bucket;
        // SAFETY: the backend's memory is this process's (checked by `build`), and
        // `start .. start + count` buckets lie inside the fresh buffer of
        // count * 32 + 31 bytes (aligned_buckets moves the start by at most 31).
        // Zeroed, so the slice `as_mut` makes holds initialised integers.
        unsafe { std::ptr::write_bytes(start, 0, count) };
        Ok(HostMemoryBuckets {
            buffer: Some(buffer),
            start,
            len: count,
        })
    }

    /// No buckets (the builder reports it as bad storage).
    fn none() -> Self {
        HostMemoryBuckets {
            buffer: None,
            start: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
        }
    }
}

impl AsMut<[Bucket]> for HostMemoryBuckets {
    fn as_mut(&mut self) -> &mut [Bucket] {
        // SAFETY: `start` is either dangling with `len` 0, or `len` zero-initialised,
        // aligned buckets of host memory inside the buffer this value alone refers to
        // (see `allocate`).
        unsafe { std::slice::from_raw_parts_mut(self.start, self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::host::HostBackend;
    use crate::backend::Backend;
    use crate::generic::table::fptr_index::IndexView;

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
        let memory = DeviceMemory::new(HostBackend.device(0));
        let placed = build(&memory, &table).unwrap();
        let (header, allocation) = (placed.index.header, placed.index.buckets.addr());
        assert!(header.buckets.is_multiple_of(BUCKET_BYTES as u64));
        assert!(header.buckets >= allocation);
        assert!(header.buckets - allocation < BUCKET_BYTES as u64);
        // SAFETY: the header describes `bucket_count` initialised buckets inside the
        // buffer just made, which lives (in `placed`) until the end of the test.
        let buckets = unsafe {
            std::slice::from_raw_parts(
                header.buckets as *const Bucket,
                header.bucket_count as usize,
            )
        };
        let view = IndexView::new(buckets, header.seeds).unwrap();
        for r in &table {
            assert_eq!(view.translate(r.host_ptr), r.tgt_ptr);
            assert_eq!(view.translate(r.host_ptr + 8), r.host_ptr + 8);
        }
        // The same build as the one made in a Vec and copied: same buckets, same seeds.
        let apart = fptr_index::build(&table).unwrap();
        assert_eq!(apart.seeds, header.seeds);
        assert_eq!(apart.attempts, placed.attempts);
        assert_eq!(
            bytemuck::cast_slice::<Bucket, u8>(buckets),
            apart.as_bytes()
        );
        placed.index.buckets.free().unwrap();
    }

    #[test]
    fn tables_outside_the_contract_get_no_index() {
        let memory = DeviceMemory::new(HostBackend.device(0));
        let unsorted = [table(2)[1], table(2)[0]];
        let err = build(&memory, &unsorted).err().unwrap();
        assert!(err.contains("not sorted"), "{err}");
        let err = build(&memory, &[]).err().unwrap();
        assert!(err.contains("empty"), "{err}");
    }
}
