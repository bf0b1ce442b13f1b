//! Tests of what the exported functions record and refuse for the GPU data path's
//! tests: each device's memory limit and the copy told to fail.

use crate::errors::*;
use crate::state::{self, with_state};
use crate::*;
use std::ptr::null_mut;
use std::sync::MutexGuard;

/// Device 0's primary context, current on this thread, with the other tests that use
/// the exports kept out; released when dropped.
struct Device0 {
    _alone: MutexGuard<'static, ()>,
}

fn device0() -> Device0 {
    let alone = state::exclusive();
    let mut context = null_mut();
    assert_eq!(cuInit(0), CUDA_SUCCESS);
    // SAFETY: a live local.
    let retained = unsafe { cuDevicePrimaryCtxRetain(&mut context, 0) };
    assert_eq!(retained, CUDA_SUCCESS);
    assert_eq!(cuCtxSetCurrent(context), CUDA_SUCCESS);
    Device0 { _alone: alone }
}

impl Drop for Device0 {
    fn drop(&mut self) {
        cuDevicePrimaryCtxRelease_v2(0);
        cuCtxSetCurrent(null_mut());
    }
}

/// Sets device memory to `limit` bytes while it lives; puts the default back after.
struct MemoryLimit;

fn set_memory(limit: usize) {
    with_state(|s| {
        s.config.memory = limit;
        Ok(())
    })
    .unwrap();
}

impl MemoryLimit {
    fn set(limit: usize) -> MemoryLimit {
        set_memory(limit);
        MemoryLimit
    }
}

impl Drop for MemoryLimit {
    fn drop(&mut self) {
        set_memory(device::TOTAL_MEMORY);
    }
}

/// cuMemGetInfo_v2's (free, total).
fn memory_info() -> (usize, usize) {
    let (mut free, mut total) = (0, 0);
    // SAFETY: live locals.
    let result = unsafe { cuMemGetInfo_v2(&mut free, &mut total) };
    assert_eq!(result, CUDA_SUCCESS);
    (free, total)
}

#[test]
fn allocations_past_the_devices_memory_fail_until_some_is_freed() {
    let _device = device0();
    let (free, total) = memory_info();
    assert_eq!(total, device::TOTAL_MEMORY);
    let in_use = total - free;
    let limit = in_use + 4096;
    let _limit = MemoryLimit::set(limit);
    assert_eq!(memory_info(), (4096, limit));
    let (mut a, mut b, mut pinned) = (0u64, 0u64, null_mut());
    let mut reported = 0;
    // SAFETY: live locals.
    unsafe {
        assert_eq!(cuDeviceTotalMem_v2(&mut reported, 0), CUDA_SUCCESS);
        assert_eq!(reported, limit);
        assert_eq!(cuMemAlloc_v2(&mut a, 3000), CUDA_SUCCESS);
        assert_eq!(memory_info(), (1096, limit));
        assert_eq!(cuMemAlloc_v2(&mut b, 2000), CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(cuMemAllocManaged(&mut b, 2000, 1), CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(
            memory_info(),
            (1096, limit),
            "nothing taken by the failures"
        );
        assert_eq!(
            cuMemAllocHost_v2(&mut pinned, 8192),
            CUDA_SUCCESS,
            "host memory"
        );
        assert_eq!(
            cuMemAllocManaged(&mut b, 1096, 1),
            CUDA_SUCCESS,
            "to the byte"
        );
        assert_eq!(memory_info(), (0, limit));
        assert_eq!(cuMemFree_v2(a), CUDA_SUCCESS);
        assert_eq!(cuMemAlloc_v2(&mut a, 2000), CUDA_SUCCESS, "after a free");
        assert_eq!(memory_info(), (1000, limit));
        assert_eq!(cuMemFree_v2(a), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(b), CUDA_SUCCESS);
        assert_eq!(cuMemFreeHost(pinned), CUDA_SUCCESS);
    }
    assert_eq!(memory_info(), (4096, limit));
}

#[test]
fn the_copy_told_to_fail_fails_without_touching_memory_and_the_next_works() {
    let _device = device0();
    let mut p = 0u64;
    let ones = [1u8; 16];
    let nines = [9u8; 16];
    let mut back = [0xaau8; 16];
    // SAFETY: live locals; `p` has 16 bytes, as have the host buffers.
    unsafe {
        assert_eq!(cuMemAlloc_v2(&mut p, 16), CUDA_SUCCESS);
        faults::set_fail_copy(faults::copies_so_far() + 2);
        assert_eq!(
            cuMemcpyHtoD_v2(p, ones.as_ptr().cast(), 16),
            CUDA_SUCCESS,
            "the copy before"
        );
        assert_eq!(
            cuMemcpyHtoD_v2(p, nines.as_ptr().cast(), 16),
            CUDA_ERROR_ILLEGAL_ADDRESS
        );
        let h = back.as_mut_ptr().cast::<c_void>();
        assert_eq!(cuMemcpyDtoH_v2(h, p, 16), CUDA_SUCCESS, "the copy after");
        assert_eq!(back, ones, "the failed copy left the device memory alone");

        // Any kind of copy, before its arguments are checked; the host side untouched.
        back = [0xaa; 16];
        let h = back.as_mut_ptr().cast::<c_void>();
        faults::set_fail_copy(faults::copies_so_far() + 1);
        assert_eq!(cuMemcpyDtoH_v2(h, p, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_eq!(back, [0xaa; 16]);
        faults::set_fail_copy(faults::copies_so_far() + 1);
        assert_eq!(
            cuMemcpyPeer(8, null_mut(), p, null_mut(), 16),
            CUDA_ERROR_ILLEGAL_ADDRESS
        );
        assert_eq!(cuMemcpyDtoH_v2(h, p, 16), CUDA_SUCCESS);
        assert_eq!(back, ones);
        faults::set_fail_copy(0);
        assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
    }
}
