//! A search that the lanes of a GPU warp run together for one key: the warp-uniform fast
//! path of `__kmpc_target_translate_fptr`.
//!
//! When every active lane of a warp translates the same pointer (a virtual call in a
//! kernel: the same object, or the same function pointer, for the whole warp), the lanes
//! need not each walk the same `ceil(log2 n)` dependent loads. Instead each of up to
//! `2^s - 1` lanes probes one boundary of `2^s` equal pieces of the window, a warp vote
//! counts the probed keys `<= key`, and the window shrinks to the piece that count names:
//! `ceil(log2 n / s)` rounds of one load each instead of `ceil(log2 n)` (4 instead of 20
//! for a million entries with a full warp, `s = 5`).
//!
//! This module holds the pure arithmetic of a round, shared by the device and by host
//! tests that play every lane of a warp in turn; `crate::warp` (nvptx64 only) has the
//! lane intrinsics. Positions at or past the table's end read as "greater than any key",
//! so the window is always a power of two and pieces are shifts, not divisions.

/// The state of a cooperative search: the only index that can hold the key lies in
/// `[base, base + 2^width_log2)` (indices `>= len` hold nothing). The same on every lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    base: usize,
    width_log2: u32,
}

/// Pieces per round for `lanes` lanes: `2^s` with `2^s - 1 <= lanes` probes, at most 2^5
/// (a warp of 32 lanes probes with 31 of them).
#[inline(always)]
pub fn piece_count_log2(lanes: u32) -> u32 {
    debug_assert!(lanes >= 1);
    // floor(log2(lanes + 1)), never 0 for lanes >= 1.
    u32::BITS - 1 - (lanes + 1).leading_zeros()
}

impl Window {
    /// The whole table of `len >= 1` entries: width `2^ceil(log2 len)`.
    #[inline(always)]
    pub fn new(len: usize) -> Window {
        debug_assert!(len >= 1);
        let width_log2 = match len {
            0 | 1 => 0,
            n => usize::BITS - (n - 1).leading_zeros(),
        };
        Window {
            base: 0,
            width_log2,
        }
    }

    /// One index left: the only candidate.
    #[inline(always)]
    pub fn is_narrowed(&self) -> bool {
        self.width_log2 == 0
    }

    /// The candidate index once [`Window::is_narrowed`]; always `< len`.
    #[inline(always)]
    pub fn base(&self) -> usize {
        self.base
    }

    /// log2 of this round's piece count: `pieces_log2` (from [`piece_count_log2`]) or
    /// fewer when the window is narrower than that many pieces.
    #[inline(always)]
    fn round_log2(&self, pieces_log2: u32) -> u32 {
        pieces_log2.min(self.width_log2)
    }

    /// The index lane `rank` (0-based among the cooperating lanes) probes this round, or
    /// `None` when it has no boundary to probe or the boundary lies past the table's end
    /// (it then votes "not <= key").
    #[inline(always)]
    pub fn probe(&self, pieces_log2: u32, rank: u32, len: usize) -> Option<usize> {
        let round_log2 = self.round_log2(pieces_log2);
        let boundary = rank as usize + 1;
        if boundary >= 1 << round_log2 {
            return None;
        }
        // base + boundary * piece < base + 2^width_log2 <= 2 * len: no overflow.
        let index = self.base + (boundary << (self.width_log2 - round_log2));
        (index < len).then_some(index)
    }

    /// Narrow to the piece after the first `at_or_below` boundaries: the number of lanes
    /// whose probed key was `<= key`. With sorted keys those are exactly the lanes of
    /// lowest rank, so the key (if present) lies in that piece; with unsorted keys the
    /// window still shrinks by the same factor, so the search still ends.
    #[inline(always)]
    pub fn narrow(&mut self, pieces_log2: u32, at_or_below: u32) {
        let round_log2 = self.round_log2(pieces_log2);
        let piece_log2 = self.width_log2 - round_log2;
        // A vote never counts more than the 2^round_log2 - 1 lanes that probed; clamp so a
        // miscount could not move the window past what the table has.
        let last = (1u32 << round_log2) - 1;
        let steps = at_or_below.min(last);
        self.base += (steps as usize) << piece_log2;
        self.width_log2 = piece_log2;
    }
}

/// The index of `key` among `len` keys read through `key_at`, found by `lanes` lanes that
/// all run this with the same `len` and `key` and ranks `0..lanes` (this lane's is
/// `rank`). `count_at_or_below` is the warp vote: given this lane's answer, it returns how
/// many of the lanes answered true, and every lane must call it the same number of times
/// (they do: the loop's trip count depends only on `len` and the votes, which all lanes
/// share). `key_at` is called only with indices `< len`.
#[inline(always)]
pub fn find_index_by(
    len: usize,
    key: u64,
    lanes: u32,
    rank: u32,
    mut key_at: impl FnMut(usize) -> u64,
    mut count_at_or_below: impl FnMut(bool) -> u32,
) -> Option<usize> {
    if len == 0 {
        return None;
    }
    let pieces_log2 = piece_count_log2(lanes);
    let mut window = Window::new(len);
    while !window.is_narrowed() {
        let at_or_below = match window.probe(pieces_log2, rank, len) {
            Some(index) => key_at(index) <= key,
            None => false,
        };
        let count = count_at_or_below(at_or_below);
        window.narrow(pieces_log2, count);
    }
    let candidate = window.base();
    (key_at(candidate) == key).then_some(candidate)
}

/// The rounds a search of `len` entries takes with `lanes` lanes: `ceil(ceil(log2 len) /
/// s)`, `s` from [`piece_count_log2`].
pub fn rounds(len: usize, lanes: u32) -> u32 {
    let width_log2 = Window::new(len.max(1)).width_log2;
    width_log2.div_ceil(piece_count_log2(lanes))
}

#[cfg(test)]
mod tests;
