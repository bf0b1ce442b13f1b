//! The index the plugin builds beside every sorted table it installs: device-rtl's
//! cuckoo index (`device_rtl::index`, where the layout, the hash and the builder are
//! defined once, so the plugin and the device cannot disagree), in host memory, ready to
//! copy to the device, plus the header the device global `__omptarget_rs_fptr_index`
//! gets, and the index once placed on a device ([`DeviceIndex`], owning its buffer).
//!
//! `OMPTARGET_RS_FPTR_INDEX=0` turns it off (the device then searches the sorted table),
//! for comparisons and as a way out should an index ever misbehave.

use crate::generic::device_buffer::DeviceBuffer;
use crate::generic::table::fptr::FptrMapEntry;
use device_rtl::index::{self, BuildPolicy};
use std::sync::OnceLock;

pub use device_rtl::index::{Bucket, BuildError, FptrIndex, IndexView, BUCKET_BYTES, SLOTS};

/// Its size: images whose global has another size get no index.
pub const HEADER_BYTES: u64 = std::mem::size_of::<FptrIndex>() as u64;

/// An index built on the host: its buckets and seeds, and how many seed pairs it took.
#[derive(Debug)]
pub struct HostIndex {
    pub buckets: Vec<Bucket>,
    pub seeds: [u64; 2],
    pub attempts: u32,
}

impl HostIndex {
    /// The buckets as the bytes the device reads.
    pub fn as_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.buckets)
    }

    /// The header for buckets copied to device address `buckets`.
    pub fn header(&self, buckets: u64) -> FptrIndex {
        FptrIndex {
            buckets,
            bucket_count: self.buckets.len() as u64,
            seeds: self.seeds,
        }
    }
}

/// Build the index of a sorted, duplicate-free table (what [`crate::generic::table::fptr::build`]
/// returns).
pub fn build(table: &[FptrMapEntry]) -> Result<HostIndex, BuildError> {
    let built = build_with(table, |n| vec![Bucket::default(); n])?;
    Ok(HostIndex {
        buckets: built.buckets,
        seeds: built.seeds,
        attempts: built.attempts,
    })
}

/// Build the index of a sorted, duplicate-free table into the buckets `storage(n)`
/// provides (room for `n` buckets; their contents are overwritten).
pub fn build_with<St: AsMut<[Bucket]>>(
    table: &[FptrMapEntry],
    storage: impl FnMut(usize) -> St,
) -> Result<index::Built<St>, BuildError> {
    index::build::<SLOTS, _>(table, &BuildPolicy::DEFAULT, storage)
}

/// Why an index was not built, for the log.
pub fn describe(error: BuildError) -> String {
    match error {
        BuildError::Empty => "the table is empty".into(),
        BuildError::TooSmall { len } => {
            format!("{len} entry: the search reads it in as many loads")
        }
        BuildError::NotSorted => "the table is not sorted with unique keys".into(),
        BuildError::BadStorage => "internal error: wrong bucket storage".into(),
        BuildError::GaveUp { attempts } => {
            format!("no seed pair placed every key ({attempts} tried)")
        }
    }
}

/// An index on the device: the header written into the image's global, and the buffer
/// holding its buckets (aligned inside it).
#[derive(Debug)]
pub struct DeviceIndex {
    pub header: FptrIndex,
    pub buckets: DeviceBuffer,
}

/// An index placed on the device, and how many seed pairs its build took.
pub struct PlacedIndex {
    pub index: DeviceIndex,
    pub attempts: u32,
}

/// False when `OMPTARGET_RS_FPTR_INDEX` is `0` (read once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("OMPTARGET_RS_FPTR_INDEX").map_or(true, |v| v.trim() != "0"))
}

/// The bucket address inside an allocation of `bucket_bytes + BUCKET_BYTES - 1` bytes at
/// `allocation`: the first 32-byte boundary, so no bucket straddles a 32-byte sector or a
/// cache line (GPU allocators align far more; the host backend's malloc only to 16).
pub fn aligned_buckets(allocation: u64) -> u64 {
    allocation.next_multiple_of(BUCKET_BYTES as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(h: u64, t: u64) -> FptrMapEntry {
        FptrMapEntry {
            host_ptr: h,
            tgt_ptr: t,
        }
    }

    #[test]
    fn the_index_answers_like_the_table() {
        let table: Vec<FptrMapEntry> = (0..1000u64)
            .map(|i| row(0x5555_0000 + 16 * i, 0x7f00_0000 + 32 * i))
            .collect();
        let built = build(&table).unwrap();
        assert_eq!(built.attempts, 1);
        let view = index::IndexView::new(&built.buckets, built.seeds).unwrap();
        for r in &table {
            assert_eq!(view.translate(r.host_ptr), r.tgt_ptr);
            assert_eq!(view.translate(r.host_ptr + 8), r.host_ptr + 8);
        }
        let header = built.header(0x1000);
        assert_eq!(header.bucket_count, built.buckets.len() as u64);
        assert_eq!(built.as_bytes().len(), built.buckets.len() * BUCKET_BYTES);
    }

    #[test]
    fn tables_outside_the_contract_get_no_index() {
        assert_eq!(build(&[]).unwrap_err(), BuildError::Empty);
        let unsorted = [row(2, 1), row(1, 1)];
        assert_eq!(build(&unsorted).unwrap_err(), BuildError::NotSorted);
        assert!(describe(BuildError::GaveUp { attempts: 16 }).contains("16 tried"));
    }

    #[test]
    fn buckets_start_on_a_32_byte_boundary_inside_the_allocation() {
        assert_eq!(aligned_buckets(0x1000), 0x1000);
        assert_eq!(aligned_buckets(0x1010), 0x1020);
        assert_eq!(aligned_buckets(0x101f), 0x1020);
        for a in 0x1000..0x1040u64 {
            let b = aligned_buckets(a);
            assert!(b >= a && b - a < BUCKET_BYTES as u64 && b.is_multiple_of(32));
        }
    }
}
