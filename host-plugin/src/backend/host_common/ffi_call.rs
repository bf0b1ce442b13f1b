//! Calling an outlined OpenMP region through libffi: `kernel(args...)`, one pointer-sized
//! value per mapped variable. The host backend calls kernels so in this process, the
//! isolated device process in its own.

use crate::backend::{BackendError, DeviceAddr};
use libffi::low::{self, ffi_abi_FFI_DEFAULT_ABI, ffi_cif, ffi_type, CodePtr};
use std::ffi::c_void;
use std::sync::OnceLock;

/// Kernels with up to this many arguments are called without heap allocation, through
/// a call description prepared once per argument count.
pub(crate) const INLINE_ARGS: usize = 16;

/// libffi's description of a call taking some pointers and returning nothing (what every
/// outlined OpenMP region is), with the argument type array it points into.
struct PointerCall {
    cif: ffi_cif,
    /// What `cif.arg_types` points at: boxed, so it never moves while `cif` lives.
    _types: Box<[*mut ffi_type]>,
}

// SAFETY: after `PointerCall::new` nothing writes to the cif or its type array again
// (launches call through a stack copy of the cif, and libffi only reads the types it
// points at, which are `_types` and libffi's own static descriptors), so sharing one
// between threads shares only immutable data.
unsafe impl Send for PointerCall {}
// SAFETY: as for Send: immutable after construction.
unsafe impl Sync for PointerCall {}

impl PointerCall {
    fn new(n: usize) -> Result<Self, BackendError> {
        if u32::try_from(n).is_err() {
            return Err(BackendError::Launch(format!(
                "{n} kernel arguments are too many"
            )));
        }
        // `addr_of_mut!` of libffi's type descriptors: no Rust reference to the C statics
        // is made; libffi only reads a scalar type's descriptor.
        let mut types: Box<[*mut ffi_type]> =
            vec![std::ptr::addr_of_mut!(low::types::pointer); n].into_boxed_slice();
        let mut cif = ffi_cif::default();
        // SAFETY: `cif` is ours to fill; `types` holds `n` valid type descriptors and is
        // kept (unmoved, on the heap) as long as the cif, which points into it.
        unsafe {
            low::prep_cif(
                &mut cif,
                ffi_abi_FFI_DEFAULT_ABI,
                n,
                std::ptr::addr_of_mut!(low::types::void),
                types.as_mut_ptr(),
            )
        }
        .map_err(|e| BackendError::Launch(format!("libffi could not describe the call: {e:?}")))?;
        Ok(PointerCall { cif, _types: types })
    }

    /// The description for `n <= INLINE_ARGS` pointers, prepared on first use: preparing
    /// it on every launch was a visible part of a launch's cost.
    fn cached(n: usize) -> Result<&'static PointerCall, BackendError> {
        static CALLS: [OnceLock<Option<PointerCall>>; INLINE_ARGS + 1] =
            [const { OnceLock::new() }; INLINE_ARGS + 1];
        CALLS
            .get(n)
            .ok_or_else(|| BackendError::Launch(format!("no cached call for {n} arguments")))?
            .get_or_init(|| PointerCall::new(n).ok())
            .as_ref()
            .ok_or_else(|| BackendError::Launch(format!("libffi cannot call {n} pointers")))
    }

    /// Call `kernel(args...)`. `values` and `slots` are scratch space of `args.len()`
    /// entries each.
    ///
    /// # Safety
    /// `kernel` is a function taking `args.len()` pointers and returning nothing, the
    /// arguments are what it expects, and this description is for `args.len()` pointers.
    unsafe fn call(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        values: &mut [*mut c_void],
        slots: &mut [*mut c_void],
    ) -> Result<(), BackendError> {
        let n = args.len();
        if self.cif.nargs as usize != n || values.len() != n || slots.len() != n {
            return Err(BackendError::Launch(
                "call description or scratch of the wrong size".into(),
            ));
        }
        for (value, &a) in values.iter_mut().zip(args) {
            *value = a as *mut c_void;
        }
        // libffi reads each argument through a pointer to it.
        let base = values.as_mut_ptr();
        for (i, slot) in slots.iter_mut().enumerate() {
            // SAFETY: `i < n == values.len()`.
            *slot = unsafe { base.add(i) }.cast();
        }
        // libffi's call takes the description by `*mut`: give it a copy of our own (the
        // shared one is never written).
        let mut cif = self.cif;
        // SAFETY: the caller promises `kernel` takes `n` pointers and returns nothing;
        // `cif` describes exactly that (its type array lives in `self`); `slots` points
        // at the `n` values, all alive for the call.
        unsafe { low::call::<()>(&mut cif, CodePtr(kernel as *mut c_void), slots.as_mut_ptr()) };
        Ok(())
    }
}

/// Run `kernel(args...)` to completion.
///
/// # Safety
/// `kernel` is a function taking `args.len()` pointer-sized values and returning
/// nothing, and the arguments are what it expects.
#[inline]
pub(crate) unsafe fn call_kernel(
    kernel: DeviceAddr,
    args: &[DeviceAddr],
) -> Result<(), BackendError> {
    // Up to INLINE_ARGS arguments: a cached call description and stack scratch. This
    // runs on every launch; libffi's `middle::Cif` (three heap allocations and a
    // fresh description per call) was a visible part of a launch's cost.
    let n = args.len();
    if n <= INLINE_ARGS {
        let call = PointerCall::cached(n)?;
        let mut values = [std::ptr::null_mut(); INLINE_ARGS];
        let mut slots = [std::ptr::null_mut(); INLINE_ARGS];
        // SAFETY: forwarded caller contract; `call` is for `n` pointers and both
        // arrays hold `n` slots.
        unsafe { call.call(kernel, args, &mut values[..n], &mut slots[..n]) }
    } else {
        let call = PointerCall::new(n)?;
        let mut values = vec![std::ptr::null_mut(); n];
        let mut slots = vec![std::ptr::null_mut(); n];
        // SAFETY: as above, with `n` slots on the heap.
        unsafe { call.call(kernel, args, &mut values, &mut slots) }
    }
}
