//! The table's head: what the lookup reads first, held in the device global
//! `__omptarget_rs_fptr_head` itself, so that a kernel that translates pointers in a loop
//! loads it once (on a GPU the global is read-only to device code, and the compiler
//! hoists its loads out of the loop; docs/BENCHMARKS.md 1b).
//!
//! What it holds:
//! - the table's key range (`first_key` and the span to the last key): a key outside it
//!   is in no row, and the lookup returns it unchanged after the head (a device object's
//!   vptr, a device function's address, null);
//! - for a table of at most [`HEAD_ROWS`] rows, the rows themselves: the lookup compares
//!   the key with them and is done, with no load beyond the head.
//!
//! Otherwise the lookup goes on to the index or the search. The all-zero head (what the
//! global holds until a plugin that knows it writes it) spans every key and holds no
//! rows: the lookup then goes on for every key, as without a head. That is why the span
//! is stored complemented.
//!
//! What the device trusts: that a head the plugin wrote describes the table it installed
//! beside it (the plugin writes [`FptrHead::NONE`] before it changes the table and the
//! new head after).

use crate::table::FptrMapEntry;
use bytemuck::{Pod, Zeroable};

/// Rows a head holds: a table of up to this many rows is answered from the head alone.
/// Four pairs are 16 registers of a kernel that hoists them out of its loop, and four
/// compare-and-selects per lookup.
pub const HEAD_ROWS: usize = 4;

/// The head, as the device global holds it (96 bytes; the plugin writes it byte for
/// byte).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FptrHead {
    /// The table's smallest key (unsigned order).
    pub first_key: u64,
    /// `!(largest key - first_key)`, complemented so that the all-zero head spans every
    /// key.
    pub span_complement: u64,
    /// How many of `rows` hold the table (all of it): 0 when it is longer than
    /// [`HEAD_ROWS`] (the lookup then asks the index or the search).
    pub rows_here: u64,
    /// Zero: the rows start 32 bytes in (a GPU memory sector).
    pub reserved: u64,
    /// The table's rows when it is that short, the last one repeated to fill the array
    /// (a repeated row gives the same answer, so every slot may be compared).
    pub rows: [FptrMapEntry; HEAD_ROWS],
}

const _: () = assert!(core::mem::size_of::<FptrHead>() == 32 + 16 * HEAD_ROWS);
const _: () = assert!(core::mem::align_of::<FptrHead>() == 8);
const _: () = assert!(core::mem::offset_of!(FptrHead, rows) == 32);

/// Bytes of the head global: the size the plugin checks before writing it.
pub const HEAD_BYTES: usize = core::mem::size_of::<FptrHead>();

// SAFETY: repr(C), u64 words and FptrMapEntry (Pod, 16 bytes) only, size 96 == 4 * 8 +
// 4 * 16 (asserted above): no padding; the all-zero bit pattern is a valid value.
unsafe impl Zeroable for FptrHead {}
// SAFETY: repr(C), no padding (asserted above), every field is Pod, Copy and 'static.
unsafe impl Pod for FptrHead {}

/// What the head says of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The lookup's result (a row's device address, or the key itself when no row
    /// holds it).
    Done(u64),
    /// The key may be in the table: ask the index or search it.
    AskTable,
}

impl FptrHead {
    /// No head: what the device global holds until the plugin writes one.
    pub const NONE: FptrHead = FptrHead {
        first_key: 0,
        span_complement: 0,
        rows_here: 0,
        reserved: 0,
        rows: [FptrMapEntry {
            host_ptr: 0,
            tgt_ptr: 0,
        }; HEAD_ROWS],
    };

    /// The head of `table` (sorted by unsigned key, keys unique): its key range, and its
    /// rows when it has at most [`HEAD_ROWS`]; none for an empty table.
    pub fn of(table: &[FptrMapEntry]) -> FptrHead {
        let (Some(first), Some(last)) = (table.first(), table.last()) else {
            return FptrHead::NONE;
        };
        let mut head = FptrHead {
            first_key: first.key(),
            span_complement: !last.key().wrapping_sub(first.key()),
            ..FptrHead::NONE
        };
        if table.len() <= HEAD_ROWS {
            head.rows = [*last; HEAD_ROWS];
            head.rows[..table.len()].copy_from_slice(table);
            head.rows_here = table.len() as u64;
        }
        head
    }

    /// The table's largest key (unsigned order): the end of the span.
    pub fn last_key(&self) -> u64 {
        self.first_key.wrapping_add(!self.span_complement)
    }

    /// What the head says of `key`, from its first three words (the rows are read only
    /// when the head holds them): one subtraction and compare for the range, one test for
    /// the rows.
    #[inline(always)]
    pub fn answer(
        first_key: u64,
        span_complement: u64,
        rows_here: u64,
        rows: impl FnOnce() -> [FptrMapEntry; HEAD_ROWS],
        key: u64,
    ) -> Answer {
        if key.wrapping_sub(first_key) > !span_complement {
            return Answer::Done(key);
        }
        if rows_here == 0 {
            return Answer::AskTable;
        }
        // A conditional move per row: no branch on data.
        let mut result = key;
        for row in rows() {
            result = core::hint::select_unpredictable(row.key() == key, row.tgt_ptr, result);
        }
        Answer::Done(result)
    }

    /// [`FptrHead::answer`] for a head in hand.
    #[inline(always)]
    pub fn answer_for(&self, key: u64) -> Answer {
        FptrHead::answer(
            self.first_key,
            self.span_complement,
            self.rows_here,
            || self.rows,
            key,
        )
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    fn row(h: u64, t: u64) -> FptrMapEntry {
        FptrMapEntry {
            host_ptr: h,
            tgt_ptr: t,
        }
    }

    #[test]
    fn small_tables_live_in_the_head_and_larger_ones_give_their_range() {
        assert_eq!(FptrHead::of(&[]), FptrHead::NONE);
        let one = FptrHead::of(&[row(0x10, 0xa0)]);
        assert_eq!(
            (one.rows_here, one.first_key, one.last_key()),
            (1, 0x10, 0x10)
        );
        assert_eq!(one.rows, [row(0x10, 0xa0); HEAD_ROWS]);
        let four: Vec<FptrMapEntry> = (1..=4).map(|i| row(i * 16, i * 256)).collect();
        assert_eq!(FptrHead::of(&four).rows[..], four[..]);
        assert_eq!(FptrHead::of(&four).rows_here, 4);
        let five: Vec<FptrMapEntry> = (1..=5).map(|i| row(i * 16, i * 256)).collect();
        let head = FptrHead::of(&five);
        assert_eq!(
            (head.rows_here, head.first_key, head.last_key()),
            (0, 16, 80)
        );
        assert_eq!(head.rows, FptrHead::NONE.rows);
        // A table over the whole key space spans every key.
        let wide = [
            row(0, 1),
            row(8, 2),
            row(16, 3),
            row(32, 4),
            row(u64::MAX, 5),
        ];
        let wide = FptrHead::of(&wide);
        assert_eq!((wide.first_key, wide.last_key()), (0, u64::MAX));
        assert_eq!(wide.answer_for(12), Answer::AskTable);
        assert_eq!(bytemuck::bytes_of(&FptrHead::NONE), &[0u8; HEAD_BYTES][..]);
    }

    #[test]
    fn a_range_answers_only_outside_it() {
        let head = FptrHead::of(&(1..=9).map(|i| row(i * 16, i)).collect::<Vec<_>>());
        assert_eq!(head.answer_for(15), Answer::Done(15));
        assert_eq!(head.answer_for(145), Answer::Done(145));
        assert_eq!(head.answer_for(0), Answer::Done(0));
        assert_eq!(head.answer_for(u64::MAX), Answer::Done(u64::MAX));
        for inside in [16, 17, 100, 144] {
            assert_eq!(head.answer_for(inside), Answer::AskTable);
        }
        // No head: the table answers every key.
        for key in [0, 16, u64::MAX] {
            assert_eq!(FptrHead::NONE.answer_for(key), Answer::AskTable);
        }
    }

    proptest! {
        // A head of rows answers every key as the table's search does.
        #[test]
        fn rows_in_the_head_answer_as_the_table_does(
            keys in proptest::collection::btree_set(any::<u64>(), 1..=HEAD_ROWS),
            probes in proptest::collection::vec(any::<u64>(), 0..16),
        ) {
            let table: Vec<FptrMapEntry> =
                keys.iter().map(|&k| row(k, k.rotate_left(7) ^ 0x55)).collect();
            let head = FptrHead::of(&table);
            for key in keys.iter().copied().chain(probes) {
                let want = crate::table::translate(&table, key);
                prop_assert_eq!(head.answer_for(key), Answer::Done(want));
            }
        }
    }
}
