//! The unversioned names LLVM 16's own cuda plugins dlsym where the driver also has a
//! `_v2` (their loader tries `_v2` first for only some names: for these it asks for the
//! old symbol itself). Each keeps the ABI the real driver's unversioned symbol has,
//! which for some is the 32-bit one of before CUDA 3.2:
//! - cuDeviceTotalMem: `unsigned int *bytes` (4 bytes written, the total capped at
//!   4 GiB - 1, where cuDeviceTotalMem_v2 writes a `size_t`);
//! - cuMemAllocHost: `unsigned int bytesize`;
//! - cuEventDestroy: as cuEventDestroy_v2.

use crate::errors::CuResult;
use crate::memory::RegionKind;
use crate::memory_api::allocate;
use crate::state::with_initialized;
use crate::{handle, key, out, shim};
use std::ffi::{c_int, c_uint, c_void};

/// The real driver's cuDeviceTotalMem (v1): the total in 32 bits.
///
/// # Safety
/// `bytes` must be writable for 4 bytes.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem(bytes: *mut c_uint, device: c_int) -> CuResult {
    shim("cuDeviceTotalMem", || {
        let total = with_initialized(|s| s.config.check(device).map(|_| s.config.memory))?;
        let capped = c_uint::try_from(total).unwrap_or(c_uint::MAX);
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(bytes, capped, "bytes") }
    })
}

/// The real driver's cuMemAllocHost (v1): a 32-bit size.
///
/// # Safety
/// `host` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost(host: *mut *mut c_void, size: c_uint) -> CuResult {
    shim("cuMemAllocHost", || {
        let p = allocate(size as usize, RegionKind::Pinned)?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(host, handle(p), "pp") }
    })
}

#[no_mangle]
pub extern "C" fn cuEventDestroy(event: *mut c_void) -> CuResult {
    shim("cuEventDestroy", || {
        with_initialized(|s| s.destroy_event(key(event)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::*;
    use crate::state;
    use crate::{
        calls, cuCtxSetCurrent, cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRetain,
        cuDeviceTotalMem_v2, cuEventCreate, cuInit, cuMemFreeHost,
    };
    use std::ptr::null_mut;

    /// The old ABI: 4 bytes written (the rest of a `size_t` left as it was), the total
    /// capped at 4 GiB - 1; a bad device refused as by the `_v2`.
    #[test]
    fn the_old_total_memory_is_32_bits() {
        let _alone = state::exclusive();
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        let mut total = 0usize;
        // SAFETY: a live local.
        assert_eq!(unsafe { cuDeviceTotalMem_v2(&mut total, 0) }, CUDA_SUCCESS);
        let mut word = u64::MAX;
        // SAFETY: a live u64, whose first 4 bytes are the u32 written.
        let r = unsafe { cuDeviceTotalMem((&raw mut word).cast::<c_uint>(), 0) };
        assert_eq!(r, CUDA_SUCCESS);
        let capped = total.min(u32::MAX as usize) as u64;
        assert_eq!(
            word,
            0xffff_ffff_0000_0000 | capped,
            "{word:#x}, total {total}"
        );
        let mut small = 0;
        // SAFETY: a live local.
        let bad = unsafe { cuDeviceTotalMem(&mut small, 7) };
        assert_eq!(bad, CUDA_ERROR_INVALID_DEVICE);
    }

    /// cuMemAllocHost and cuEventDestroy work as their `_v2`s do and are counted under
    /// their own names.
    #[test]
    fn the_old_names_are_counted_as_themselves() {
        let _alone = state::exclusive();
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        let mut context = null_mut();
        // SAFETY: a live local.
        let retained = unsafe { cuDevicePrimaryCtxRetain(&mut context, 0) };
        assert_eq!(retained, CUDA_SUCCESS);
        assert_eq!(cuCtxSetCurrent(context), CUDA_SUCCESS);
        let before = calls::tallies();
        let mut host = null_mut();
        // SAFETY: a live local.
        assert_eq!(unsafe { cuMemAllocHost(&mut host, 4096) }, CUDA_SUCCESS);
        assert!(!host.is_null());
        // SAFETY: pinned memory of 4096 bytes, just allocated.
        unsafe { host.cast::<u8>().write_bytes(7, 4096) };
        assert_eq!(cuMemFreeHost(host), CUDA_SUCCESS);
        let mut event = null_mut();
        // SAFETY: a live local.
        assert_eq!(unsafe { cuEventCreate(&mut event, 0) }, CUDA_SUCCESS);
        assert_eq!(cuEventDestroy(event), CUDA_SUCCESS);
        assert_eq!(cuEventDestroy(event), CUDA_ERROR_INVALID_HANDLE);
        let after = calls::tallies();
        let grew = |name| after[name].count - before.get(name).map_or(0, |t| t.count);
        assert_eq!(grew("cuMemAllocHost"), 1);
        assert_eq!(grew("cuEventDestroy"), 2);
        for v2 in ["cuMemAllocHost_v2", "cuEventDestroy_v2"] {
            assert_eq!(after.get(v2), before.get(v2), "{v2} was not called");
        }
        assert_eq!(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
        assert_eq!(cuCtxSetCurrent(null_mut()), CUDA_SUCCESS);
    }
}
