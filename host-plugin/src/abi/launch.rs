//! Kernel launches: libomptarget's kernel arguments turned into the argument values and
//! the launch request the device runs, on the async info's queue when there is one.

use super::loader::loader;
use super::queues::with_async_info;
use super::{guard, invalid, plugin, status, KernelArgs, TgtAsyncInfo, OFFLOAD_FAIL};
use crate::backend::LaunchRequest;
use std::ffi::c_void;

/// The implicit first argument (`dyn_ptr`) of a kernel built by clang 18, for a kernel
/// that needs no launch environment (no teams reduction buffer): `(void *)~0`, as LLVM
/// 18's plugins pass it. libomptarget 18 leaves this argument to the plugin.
const NO_LAUNCH_ENVIRONMENT: u64 = u64::MAX;

/// # Safety
/// `entry` is a kernel address from a table this plugin returned; `args`/`offsets` hold
/// `kernel_args.num_args` values; the arguments are valid device addresses.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_launch_kernel(
    device: i32,
    entry: *mut c_void,
    args: *mut *mut c_void,
    offsets: *mut isize,
    kernel_args: *const KernelArgs,
    async_info: *mut TgtAsyncInfo,
) -> i32 {
    guard("launch_kernel", OFFLOAD_FAIL, || {
        // SAFETY: caller contract: null or libomptarget's KernelArgsTy.
        let ka = unsafe { kernel_args.as_ref() }
            .ok_or_else(|| invalid(device, "no kernel arguments"))?;
        let n = ka.num_args as usize;
        let mut pointers = Vec::with_capacity(n + 1);
        if loader().kernels_take_launch_environment() {
            pointers.push(NO_LAUNCH_ENVIRONMENT);
        }
        if n != 0 {
            if args.is_null() || offsets.is_null() {
                return Err(invalid(device, format!("{n} kernel arguments at null")));
            }
            // SAFETY: caller contract: `n` argument pointers and offsets.
            let (a, o) = unsafe {
                (
                    std::slice::from_raw_parts(args, n),
                    std::slice::from_raw_parts(offsets, n),
                )
            };
            // The kernel gets base pointer + offset, as in LLVM's host plugin.
            pointers.extend(
                a.iter()
                    .zip(o)
                    .map(|(&p, &off)| (p as u64).wrapping_add(off as u64)),
            );
        }
        // Only the first dimension: LLVM 16 launches one-dimensional grids.
        let request = LaunchRequest {
            num_teams: ka.num_teams[0],
            thread_limit: ka.thread_limit[0],
            tripcount: ka.tripcount,
            dynamic_shared_memory: ka.dyn_cgroup_mem,
        };
        let on = plugin().device(device)?;
        // SAFETY: forwarded caller contract (null or a valid async info; the arguments
        // stay valid until it is synchronized); the core checks `entry` is a loaded
        // kernel; the argument values are copied before the launch returns.
        status(unsafe {
            with_async_info(async_info, |info| match info {
                Some(info) => on.launch_async(entry as u64, &pointers, request, info),
                None => on.launch_teams(entry as u64, &pointers, request),
            })
        })
    })
}
