//! The exported primary-context state and peer-access functions LLVM 16's own cuda
//! plugins (`libomptarget.rtl.cuda.so` and `.nextgen.so`) resolve, besides those cudarc
//! binds: cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxSetFlags (`_v2`, and the
//! unversioned one of before CUDA 11, which refuses an active context) and
//! cuCtxEnablePeerAccess. Thin shims over the contexts in the state (`state.rs`).

use crate::errors::{
    CuResult, Failure, Outcome, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
};
use crate::state::{with_initialized, State};
use crate::{key, out, shim};
use std::ffi::{c_int, c_uint, c_void};

/// CU_CTX_FLAGS_MASK (CUDA 12.8): the scheduling flags (CU_CTX_SCHED_MASK, 7),
/// CU_CTX_MAP_HOST, CU_CTX_LMEM_RESIZE_TO_MAX, the coredump flags, CU_CTX_SYNC_MEMOPS.
pub const CTX_FLAGS_MASK: u32 = 0xff;
const CTX_SCHED_MASK: u32 = 0x7;
/// CU_CTX_SCHED_AUTO, _SPIN, _YIELD, _BLOCKING_SYNC: at most one of them.
const CTX_SCHED_VALUES: [u32; 4] = [0, 1, 2, 4];

fn check_flags(flags: u32) -> Outcome {
    if flags & !CTX_FLAGS_MASK != 0 || !CTX_SCHED_VALUES.contains(&(flags & CTX_SCHED_MASK)) {
        return Err(Failure::invalid_value(format!("context flags {flags:#x}")));
    }
    Ok(())
}

impl State {
    /// cuDevicePrimaryCtxGetState: the primary context's flags, and whether it is
    /// active (retained).
    pub fn primary_state(&self, device: i32) -> Outcome<(u32, bool)> {
        let context = &self.contexts[self.config.check(device)?];
        Ok((context.flags, context.retains > 0))
    }

    /// cuDevicePrimaryCtxSetFlags: `while_active` is the `_v2` rule (CUDA 11 and
    /// later); the unversioned function refuses a primary context that is active.
    pub fn set_primary_flags(&mut self, device: i32, flags: u32, while_active: bool) -> Outcome {
        let device = self.config.check(device)?;
        check_flags(flags)?;
        let context = &mut self.contexts[device];
        if !while_active && context.retains > 0 {
            return Err(Failure::new(
                CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
                format!("device {device}'s primary context is active"),
            ));
        }
        context.flags = flags;
        Ok(())
    }

    /// cuCtxEnablePeerAccess: the current context may access `peer` from now on (until
    /// either is released to 0).
    pub fn enable_peer_access(&mut self, peer: u64, flags: u32) -> Outcome {
        if flags != 0 {
            return Err(Failure::invalid_value(format!("flags {flags}")));
        }
        let current = self.current()?;
        let (from, from_device) = (current.handle, current.device);
        let to_device = self.context(peer)?.device;
        if peer == from {
            return Err(Failure::invalid_context(format!(
                "{peer:#x} is the current context"
            )));
        }
        if from_device == to_device {
            return Err(Failure::new(
                CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
                format!("both contexts are on device {from_device}"),
            ));
        }
        let context = self
            .contexts
            .iter_mut()
            .find(|c| c.handle == from)
            .expect("the current context is live");
        if !context.peers.insert(peer) {
            return Err(Failure::new(
                CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
                format!("context {from:#x} already accesses {peer:#x}"),
            ));
        }
        Ok(())
    }
}

/// # Safety
/// `flags` and `active` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    device: c_int,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CuResult {
    shim("cuDevicePrimaryCtxGetState", || {
        if flags.is_null() || active.is_null() {
            return Err(Failure::invalid_value("flags or active is null"));
        }
        let (f, on) = with_initialized(|s| s.primary_state(device))?;
        // SAFETY: the caller's pointers, per the driver API.
        unsafe {
            out(flags, f, "flags")?;
            out(active, on as c_int, "active")
        }
    })
}

/// The CUDA 11 function: the flags may be set while the primary context is active.
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxSetFlags_v2(device: c_int, flags: c_uint) -> CuResult {
    shim("cuDevicePrimaryCtxSetFlags_v2", || {
        with_initialized(|s| s.set_primary_flags(device, flags, true))
    })
}

/// The function of before CUDA 11: CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE while the primary
/// context is retained.
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxSetFlags(device: c_int, flags: c_uint) -> CuResult {
    shim("cuDevicePrimaryCtxSetFlags", || {
        with_initialized(|s| s.set_primary_flags(device, flags, false))
    })
}

/// Succeeds once per (current context, live context of another device); the stand-in's
/// devices can all access each other (cuDeviceCanAccessPeer).
#[no_mangle]
pub extern "C" fn cuCtxEnablePeerAccess(peer: *mut c_void, flags: c_uint) -> CuResult {
    shim("cuCtxEnablePeerAccess", || {
        with_initialized(|s| s.enable_peer_access(key(peer), flags))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Config;
    use crate::errors::*;
    use crate::state::{self, set_current_handle};
    use crate::{cuCtxSetCurrent, cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRetain, cuInit};
    use std::ptr::null_mut;

    fn state_of(device: c_int) -> (CuResult, u32, c_int) {
        let (mut flags, mut active) = (99, 99);
        // SAFETY: live locals.
        let r = unsafe { cuDevicePrimaryCtxGetState(device, &mut flags, &mut active) };
        (r, flags, active)
    }

    fn retain(device: c_int) -> *mut c_void {
        let mut context = null_mut();
        // SAFETY: a live local.
        let retained = unsafe { cuDevicePrimaryCtxRetain(&mut context, device) };
        assert_eq!(retained, CUDA_SUCCESS);
        context
    }

    #[test]
    fn the_flags_values_are_the_driver_apis() {
        use cudarc::driver::sys::CUctx_flags;
        assert_eq!(CTX_FLAGS_MASK, CUctx_flags::CU_CTX_FLAGS_MASK as u32);
        assert_eq!(CTX_SCHED_MASK, CUctx_flags::CU_CTX_SCHED_MASK as u32);
        let sched = [
            CUctx_flags::CU_CTX_SCHED_AUTO,
            CUctx_flags::CU_CTX_SCHED_SPIN,
            CUctx_flags::CU_CTX_SCHED_YIELD,
            CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC,
        ];
        assert_eq!(CTX_SCHED_VALUES, sched.map(|f| f as u32));
    }

    /// What LLVM 16's plugins do: read the state, set the flags while the context is
    /// inactive, retain it; the state follows; the old SetFlags refuses an active one.
    #[test]
    fn the_primary_context_state_reports_its_flags_and_whether_it_is_retained() {
        let _alone = state::exclusive();
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        assert_eq!(state_of(0), (CUDA_SUCCESS, 0, 0));
        assert_eq!(state_of(1).0, CUDA_ERROR_INVALID_DEVICE);
        let blocking = 4;
        assert_eq!(cuDevicePrimaryCtxSetFlags_v2(0, blocking), CUDA_SUCCESS);
        assert_eq!(state_of(0), (CUDA_SUCCESS, blocking, 0));
        assert_eq!(
            cuDevicePrimaryCtxSetFlags_v2(0, 1 | 2),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            cuDevicePrimaryCtxSetFlags_v2(0, 0x100),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            cuDevicePrimaryCtxSetFlags_v2(1, 0),
            CUDA_ERROR_INVALID_DEVICE
        );
        // SAFETY: null pointers, refused.
        let null = unsafe { cuDevicePrimaryCtxGetState(0, null_mut(), null_mut()) };
        assert_eq!(null, CUDA_ERROR_INVALID_VALUE);

        let _context = retain(0);
        assert_eq!(state_of(0), (CUDA_SUCCESS, blocking, 1));
        assert_eq!(
            cuDevicePrimaryCtxSetFlags(0, 1),
            CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE
        );
        assert_eq!(cuDevicePrimaryCtxSetFlags_v2(0, 1), CUDA_SUCCESS);
        assert_eq!(state_of(0), (CUDA_SUCCESS, 1, 1));
        assert_eq!(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
        assert_eq!(
            state_of(0),
            (CUDA_SUCCESS, 1, 0),
            "flags outlive the context"
        );
        assert_eq!(cuDevicePrimaryCtxSetFlags(0, 0), CUDA_SUCCESS);
        assert_eq!(state_of(0), (CUDA_SUCCESS, 0, 0));
    }

    /// Peer access from the current context to another device's: once each way; not
    /// to itself, a released or unknown context, with flags, or without a current
    /// context; a context released to 0 loses it both ways.
    #[test]
    fn peer_access_is_enabled_once_between_live_contexts_of_two_devices() {
        let mut s = State::new(Config {
            devices: 2,
            ..Config::from_vars(|_| None)
        });
        let (c0, c1) = (s.retain(0).unwrap(), s.retain(1).unwrap());
        let code = |r: Outcome| r.map_or_else(|f| f.code, |()| CUDA_SUCCESS);
        set_current_handle(0);
        assert_eq!(
            code(s.enable_peer_access(c1, 0)),
            CUDA_ERROR_INVALID_CONTEXT
        );
        set_current_handle(c0);
        assert_eq!(code(s.enable_peer_access(c1, 1)), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(
            code(s.enable_peer_access(c0, 0)),
            CUDA_ERROR_INVALID_CONTEXT
        );
        let unknown = code(s.enable_peer_access(0xdead_0000, 0));
        assert_eq!(unknown, CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(code(s.enable_peer_access(c1, 0)), CUDA_SUCCESS);
        let again = code(s.enable_peer_access(c1, 0));
        assert_eq!(again, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
        set_current_handle(c1);
        assert_eq!(code(s.enable_peer_access(c0, 0)), CUDA_SUCCESS, "each way");
        s.release(1).unwrap();
        assert!(
            s.contexts.iter().all(|c| c.peers.is_empty()),
            "gone both ways"
        );
        set_current_handle(c0);
        assert_eq!(
            code(s.enable_peer_access(c1, 0)),
            CUDA_ERROR_INVALID_CONTEXT
        );
        assert_eq!(s.retain(1).unwrap(), c1);
        assert_eq!(code(s.enable_peer_access(c1, 0)), CUDA_SUCCESS, "afresh");
        set_current_handle(0);
    }

    /// Through the exports, with the process's one device: no current context, flags,
    /// the current context itself.
    #[test]
    fn peer_access_to_the_current_context_or_without_one_is_refused() {
        let _alone = state::exclusive();
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        let c0 = retain(0);
        assert_eq!(cuCtxSetCurrent(null_mut()), CUDA_SUCCESS);
        assert_eq!(cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(cuCtxSetCurrent(c0), CUDA_SUCCESS);
        assert_eq!(cuCtxEnablePeerAccess(c0, 1), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
        assert_eq!(cuCtxSetCurrent(null_mut()), CUDA_SUCCESS);
    }
}
