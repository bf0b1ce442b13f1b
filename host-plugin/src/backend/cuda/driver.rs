//! The CUDA driver's pieces every part of this vendor shares: its errors as the vendor
//! API's, a primary context, and LLVM 16's NVPTX launch constants.

use crate::backend::BackendError;
use cudarc::driver::{result, sys, DriverError};

/// LLVM 16's NVPTX grid values (OMPGridValues.h): threads per block and blocks without
/// clauses, and the most teams a launch gets (the plugin caps it by the grid limit too).
pub(super) const DEFAULT_THREADS: u32 = 128;
pub(super) const DEFAULT_BLOCKS: u32 = 3200;
pub(super) const MAX_TEAMS: u32 = 1 << 16;
/// The dynamic shared memory a launch gets without opting in: above it, the kernel's
/// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES must be raised first.
pub(super) const SHARED_MEMORY_WITHOUT_OPT_IN: u32 = 48 << 10;

pub(super) fn driver_err(call: &'static str, e: DriverError) -> BackendError {
    let name = e
        .error_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("CUresult {}", e.0 as i32));
    BackendError::Driver {
        call,
        code: e.0 as i32,
        name,
    }
}

/// A primary context. Contexts are driver objects usable from any thread.
#[derive(Clone, Copy)]
pub(super) struct Context(pub(super) sys::CUcontext);
// SAFETY: a CUcontext is an opaque driver handle; the driver API is thread-safe and a
// context may be made current on any thread.
unsafe impl Send for Context {}
// SAFETY: as above; the handle itself is never mutated.
unsafe impl Sync for Context {}

impl Context {
    pub(super) fn make_current(self) -> Result<(), BackendError> {
        // SAFETY: the context was retained and is released only when the backend drops.
        unsafe { result::ctx::set_current(self.0) }.map_err(|e| driver_err("cuCtxSetCurrent", e))
    }
}
