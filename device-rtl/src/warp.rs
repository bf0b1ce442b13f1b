//! The warp-uniform fast path on NVIDIA GPUs (built only into the `warp-cooperative`
//! variant of the nvptx64 bitcode: `--cfg device_rtl_warp_cooperative`).
//!
//! The lanes that call the lookup together (`activemask`) first check that they all hold
//! the same pointer (the leader's, shuffled to all, then `vote.all`); if so they run
//! [`crate::cooperative`]'s search together, one probe per lane per round and one ballot
//! per round; if not (divergent pointers) or the table is small, each lane runs the
//! scalar search. Every decision that chooses a path is the same on all lanes of the mask
//! (table size from the globals, a vote result), so every `*.sync` operation is reached
//! by all the lanes its mask names.
//!
//! The intrinsics are LLVM's own (`llvm.nvvm.*`), declared here rather than written as
//! inline assembly because LLVM marks them `convergent`: no optimization may move them
//! under a condition some lanes do not share, also after this bitcode is linked into a
//! kernel and inlined.

use crate::cooperative;
use crate::table::{self, FptrMapEntry};

/// Tables shorter than this use the scalar search: it takes at most 6 probes there, and
/// the cooperative path's uniformity check (two shuffles and a vote) would cost about as
/// much. A starting point until the GPU benchmark (docs/BENCHMARKS.md, 1b) has measured
/// the break-even point.
pub const COOPERATIVE_MIN_LEN: usize = 33;

/// Shuffle clamp operand for a full warp (`c` of `shfl.sync.idx`: lanes 0..31).
const WHOLE_WARP_CLAMP: u32 = 0x1f;

#[allow(improper_ctypes)]
unsafe extern "C" {
    #[link_name = "llvm.nvvm.activemask"]
    fn activemask() -> u32;
    #[link_name = "llvm.nvvm.read.ptx.sreg.lanemask.lt"]
    fn lanemask_lt() -> u32;
    #[link_name = "llvm.nvvm.shfl.sync.idx.i32"]
    fn shfl_sync_idx(mask: u32, value: u32, source_lane: u32, clamp: u32) -> u32;
    #[link_name = "llvm.nvvm.vote.all.sync"]
    fn vote_all_sync(mask: u32, predicate: bool) -> bool;
    #[link_name = "llvm.nvvm.vote.ballot.sync"]
    fn vote_ballot_sync(mask: u32, predicate: bool) -> u32;
}

/// `table::translate`, with the lanes of a warp that translate the same pointer
/// searching for it together.
#[inline(always)]
pub fn translate(table: &[FptrMapEntry], fn_ptr: u64) -> u64 {
    if table.len() < COOPERATIVE_MIN_LEN {
        return table::translate(table, fn_ptr);
    }
    // SAFETY: reads a special register; no memory is touched. The lanes it names are the
    // ones executing this instruction together, so they are valid members for the
    // `.sync` operations below, which every one of them reaches (see the module comment).
    let mask = unsafe { activemask() };
    // The lowest active lane; `mask` is never 0 since this lane is in it.
    let leader = mask.trailing_zeros();
    // SAFETY: register-only shuffles among the lanes of `mask`, all of which execute them
    // (same control flow so far: the branch above depends only on the shared table size).
    let leader_ptr = unsafe {
        let low = shfl_sync_idx(mask, fn_ptr as u32, leader, WHOLE_WARP_CLAMP);
        let high = shfl_sync_idx(mask, (fn_ptr >> 32) as u32, leader, WHOLE_WARP_CLAMP);
        (u64::from(high) << 32) | u64::from(low)
    };
    // SAFETY: a register-only vote among the lanes of `mask`, all of which execute it.
    let uniform = unsafe { vote_all_sync(mask, leader_ptr == fn_ptr) };
    if !uniform {
        return table::translate(table, fn_ptr);
    }
    let lanes = mask.count_ones();
    // SAFETY: reads a special register.
    let rank = (mask & unsafe { lanemask_lt() }).count_ones();
    let found = cooperative::find_index_by(
        table.len(),
        fn_ptr,
        lanes,
        rank,
        |index| {
            // SAFETY: find_index_by passes only indices < table.len(). Unchecked so that no
            // panic path reaches device code.
            unsafe { table.get_unchecked(index) }.key()
        },
        // SAFETY: a register-only ballot among the lanes of `mask`: all of them take this
        // path (`uniform` is the same on every lane) and run the same number of rounds.
        |at_or_below| unsafe { vote_ballot_sync(mask, at_or_below) }.count_ones(),
    );
    match found {
        // SAFETY: find_index_by returns only indices < table.len().
        Some(index) => unsafe { table.get_unchecked(index) }.tgt_ptr,
        None => fn_ptr,
    }
}
