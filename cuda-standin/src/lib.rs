//! A CUDA driver stand-in: a `libcuda.so` for machines without a GPU, so that the cuda
//! plugin's whole load path (cudarc with dynamic loading, `cuModuleLoadData` on real
//! sm_90 cubins, globals, kernels, limits, streams, the table it installs) runs and is
//! checked on a CPU. It never runs a kernel.
//!
//! Built as `libcuda_standin.so` with the soname `libcuda.so`; `cargo xtask
//! build-plugin` installs it as `target/cuda-standin/libcuda.so` (and `libcuda.so.1`).
//! Give it to a program with `LD_LIBRARY_PATH=target/cuda-standin:...`, or dlopen it by
//! its full path before cudarc opens `libcuda.so` (same soname: glibc hands back the
//! loaded one). It is a test tool: nothing installs or ships it.
//!
//! LLVM 16's own cuda plugins (Debian's `libomptarget.rtl.cuda.so` and `.nextgen.so`)
//! run on it too, with only its folder on `LD_LIBRARY_PATH`: their loader dlsyms a
//! fixed list of driver functions and reports 0 devices when one is missing, so the
//! stand-in also exports what they ask for beyond cudarc's: cuModuleLoadDataEx,
//! cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxSetFlags(_v2), cuCtxEnablePeerAccess,
//! and the unversioned cuDeviceTotalMem, cuMemAllocHost and cuEventDestroy (for which
//! their loader does not try the `_v2` first).
//!
//! # Environment
//! - `OMPTARGET_RS_CUDA_STANDIN_DEVICES` (default 1) devices, all
//!   `OMPTARGET_RS_CUDA_STANDIN_SM` (default 90), with an H100's attributes.
//! - `OMPTARGET_RS_CUDA_STANDIN_LAUNCH=skip`: launches succeed without running
//!   (default: CUDA_ERROR_NOT_SUPPORTED after the launch is checked and reported).
//! - `OMPTARGET_RS_CUDA_STANDIN_LOG=<file>`: the report (below).
//! - `OMPTARGET_RS_CUDA_STANDIN_MAX_ROWS` (default 4096): table rows per launch event.
//! - `OMPTARGET_RS_CUDA_STANDIN_MEMORY=<bytes>` (default 80 GiB): each device's memory.
//!   A device or managed allocation that would take the current context's device past
//!   it fails with CUDA_ERROR_OUT_OF_MEMORY; cuMemGetInfo reports it as the total (free:
//!   it minus that device's allocations), as does cuDeviceTotalMem.
//! - `OMPTARGET_RS_CUDA_STANDIN_FAIL_COPY=<n>`: the n-th copy call of the process
//!   (1-based, every cuMemcpy* counted together) returns CUDA_ERROR_ILLEGAL_ADDRESS
//!   before it checks or touches anything; the copies before and after behave as usual.
//!
//! # The report
//! One JSON object per line, appended (O_APPEND, one write per line), each with
//! `"event"` and `"pid"`:
//! - `init` (first cuInit): `exe`, `load_base` (start of the executable's first mapping
//!   in /proc/self/maps: a host address minus it is an offset into the executable's
//!   image, plus its lowest PT_LOAD address a symbol value), `devices`, `sm`;
//! - `error`: every call that returns an error: `call` (the exported symbol, e.g.
//!   `cuModuleGetGlobal_v2`), `error` (`CUDA_ERROR_NOT_FOUND`), `code`, `detail` (for a
//!   missing global `name <name>: ...`; for the copy told to fail `told to fail copy
//!   <n> ...`), `nth` (errors of that call so far);
//! - `module_load`: `module`, `context`, `sm`, `bytes`, `from` (cubin/fatbinary),
//!   `symbols`, `kernels`; `module_unload`: `module`, `why`;
//! - `global` (cuModuleGetGlobal found it): `module`, `name`, `address`, `size`;
//! - `set_limit`: `context`, `limit`, `name`, `value`; `set_attribute`: `function`,
//!   `module`, `attribute`, `value`; `stream_create`: `stream`, `flags`, `context`;
//! - `context_retain` (cuDevicePrimaryCtxRetain): `device`, `context` (the device's
//!   primary context), `retains` (its count after this one);
//! - `launch`: `kernel`, `module`, `entry`, `grid`, `block`, `shared_bytes`, `stream`,
//!   `context`, `stack_size`, `heap_size`, `device_environment` (`name`, `address`,
//!   `bytes` in hex; null without one), `table` (null without the table globals; else
//!   `map_p`, `map_size`, `truncated`, `rows`: `[{host, tgt, tgt_name}]` with
//!   `tgt_name` `symbol+offset` in the module or `unknown`, or `error` when the rows
//!   are not in device memory; the launch then fails with CUDA_ERROR_INVALID_VALUE);
//! - `calls` (at exit, in a process that called cuInit): `calls`, every exported
//!   function called with its `count`, the copy functions also with `bytes` (asked for,
//!   failed copies included): `{"cuMemAlloc_v2": {"count": 2}, "cuMemcpyHtoD_v2":
//!   {"count": 3, "bytes": 4096}, ...}`. An exit handler writes it; calls made after that
//!   (by later exit handlers or destructors) get a second, complete one from the
//!   library's destructor: the report's last `calls` event is the whole tally.
//!
//! # Layout
//! `lib.rs` the shims' common part (catch panics, log errors) and the exported
//! initialisation, device and context functions; `memory_api.rs`, `module_api.rs` and
//! `stream_api.rs` the other exported functions (memory; modules and kernels; streams
//! and events); `context_api.rs` the primary context's state and flags and peer access,
//! `legacy_api.rs` the unversioned names (both for LLVM 16's plugins); `state.rs` the driver state, `device.rs` the devices, `memory.rs`
//! allocations and the ranges a copy may touch, `image.rs` what cuModuleLoadData was
//! handed, `module.rs` a cubin laid out in memory, `modules.rs` modules in the state,
//! `launch.rs` kernels and launches, `log.rs` the report, `calls.rs` the `calls` event,
//! `faults.rs` the copy told to fail, `errors.rs` CUresult values.
//!
//! Every function takes the signature cudarc 0.19 binds for its symbol; those only
//! LLVM 16's plugins call, the real driver's (for an unversioned name, its old ABI).

#![allow(non_snake_case)]

#[cfg(test)]
mod api_tests;
mod calls;
mod context_api;
mod device;
mod errors;
mod faults;
mod image;
mod launch;
mod legacy_api;
mod log;
mod memory;
mod memory_api;
mod module;
mod module_api;
mod modules;
mod state;
mod stream_api;
#[cfg(test)]
mod test_cubin;

pub use context_api::*;
use errors::{CuResult, Failure, Outcome, CUDA_ERROR_NO_DEVICE, CUDA_ERROR_UNKNOWN, CUDA_SUCCESS};
pub use legacy_api::*;
pub use memory_api::*;
pub use module_api::*;
use state::{current_handle, set_current_handle, with_initialized, with_state};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
pub use stream_api::*;

/// What cuDriverGetVersion reports (CUDA 13.0, the H200's driver).
const DRIVER_VERSION: c_int = 13000;

/// Run a call's body: the call is counted (the `calls` event), its error reported and
/// returned; a panic is reported and returns CUDA_ERROR_UNKNOWN (no panic crosses the
/// C ABI).
fn shim(call: &'static str, body: impl FnOnce() -> Outcome) -> CuResult {
    let run = std::panic::AssertUnwindSafe(|| {
        calls::count(call);
        match body() {
            Ok(()) => CUDA_SUCCESS,
            Err(f) => {
                log::error(call, f.code, &f.detail);
                f.code
            }
        }
    });
    std::panic::catch_unwind(run).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        let _ = std::panic::catch_unwind(|| {
            log::error(call, CUDA_ERROR_UNKNOWN, &format!("panic: {what}"))
        });
        CUDA_ERROR_UNKNOWN
    })
}

/// Write a call's result through its out-pointer.
///
/// # Safety
/// `ptr` must be null (refused) or valid for writing a `T`.
unsafe fn out<T>(ptr: *mut T, value: T, what: &str) -> Outcome {
    if ptr.is_null() {
        return Err(Failure::invalid_value(format!("{what} is null")));
    }
    // SAFETY: not null, and the caller promises it is writable.
    unsafe { ptr.write(value) };
    Ok(())
}

/// A C string argument.
///
/// # Safety
/// `name` must be null (refused) or a NUL-terminated string.
unsafe fn text(name: *const c_char) -> Outcome<String> {
    if name.is_null() {
        return Err(Failure::invalid_value("a null name"));
    }
    // SAFETY: the caller promises a NUL-terminated string.
    Ok(unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned())
}

/// A handle as the state keys it.
fn key(handle: *mut c_void) -> u64 {
    handle as u64
}

fn handle(key: u64) -> *mut c_void {
    key as *mut c_void
}

// ---- initialisation, versions, errors ----

#[no_mangle]
pub extern "C" fn cuInit(flags: c_uint) -> CuResult {
    shim("cuInit", || {
        calls::write_at_exit();
        with_state(|s| {
            if flags != 0 {
                return Err(Failure::invalid_value(format!("flags {flags}")));
            }
            log::init(s.config.devices, s.config.sm);
            if s.config.devices == 0 {
                return Err(Failure::new(CUDA_ERROR_NO_DEVICE, "0 devices configured"));
            }
            s.initialized = true;
            Ok(())
        })
    })
}

/// # Safety
/// `version` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CuResult {
    // SAFETY: the caller's pointer, per the driver API.
    shim("cuDriverGetVersion", || unsafe {
        out(version, DRIVER_VERSION, "version")
    })
}

/// # Safety
/// `name` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: CuResult, name: *mut *const c_char) -> CuResult {
    shim("cuGetErrorName", || {
        let found = errors::name_with_nul(error);
        // SAFETY: the caller's pointer, per the driver API; the strings are static.
        unsafe {
            out(
                name,
                found.map_or(std::ptr::null(), |n| n.as_ptr().cast()),
                "name",
            )?
        };
        found
            .map(drop)
            .ok_or_else(|| Failure::invalid_value(format!("CUresult {error}")))
    })
}

/// # Safety
/// `text` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: CuResult, text: *mut *const c_char) -> CuResult {
    shim("cuGetErrorString", || {
        let found = errors::description_with_nul(error);
        // SAFETY: the caller's pointer, per the driver API; the strings are static.
        unsafe {
            out(
                text,
                found.map_or(std::ptr::null(), |n| n.as_ptr().cast()),
                "text",
            )?
        };
        found
            .map(drop)
            .ok_or_else(|| Failure::invalid_value(format!("CUresult {error}")))
    })
}

// ---- devices ----

/// # Safety
/// `device` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut c_int, ordinal: c_int) -> CuResult {
    shim("cuDeviceGet", || {
        let d = with_initialized(|s| s.config.check(ordinal))?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(device, d as c_int, "device") }
    })
}

/// # Safety
/// `count` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CuResult {
    shim("cuDeviceGetCount", || {
        let n = with_initialized(|s| Ok(s.config.devices as c_int))?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(count, n, "count") }
    })
}

/// # Safety
/// `name` must be writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, device: c_int) -> CuResult {
    shim("cuDeviceGetName", || {
        let text = with_initialized(|s| s.config.check(device).map(|_| s.config.name()))?;
        let len = usize::try_from(len).unwrap_or(0);
        if name.is_null() || len == 0 {
            return Err(Failure::invalid_value("no room for the name"));
        }
        let n = text.len().min(len - 1);
        // SAFETY: the caller promises `len` writable bytes; n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), name.cast::<u8>(), n);
            name.add(n).write(0);
        }
        Ok(())
    })
}

/// # Safety
/// `value` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_uint,
    device: c_int,
) -> CuResult {
    shim("cuDeviceGetAttribute", || {
        let v = with_initialized(|s| {
            s.config.check(device)?;
            device::attribute_value(&s.config, attribute)
        })?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(value, v, "value") }
    })
}

/// # Safety
/// `bytes` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, device: c_int) -> CuResult {
    shim("cuDeviceTotalMem_v2", || {
        let total = with_initialized(|s| s.config.check(device).map(|_| s.config.memory))?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(bytes, total, "bytes") }
    })
}

/// # Safety
/// `can` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(
    can: *mut c_int,
    device: c_int,
    peer: c_int,
) -> CuResult {
    shim("cuDeviceCanAccessPeer", || {
        let yes = with_initialized(|s| Ok(s.config.check(device)? != s.config.check(peer)?))?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(can, yes as c_int, "can") }
    })
}

// ---- contexts ----

/// # Safety
/// `context` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(
    context: *mut *mut c_void,
    device: c_int,
) -> CuResult {
    shim("cuDevicePrimaryCtxRetain", || {
        if context.is_null() {
            return Err(Failure::invalid_value("context is null"));
        }
        let c = with_initialized(|s| s.retain(device))?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(context, handle(c), "context") }
    })
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(device: c_int) -> CuResult {
    shim("cuDevicePrimaryCtxRelease_v2", || {
        with_initialized(|s| s.release(device))
    })
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(context: *mut c_void) -> CuResult {
    shim("cuCtxSetCurrent", || {
        with_initialized(|s| {
            if !context.is_null() {
                s.context(key(context))?;
            }
            set_current_handle(key(context));
            Ok(())
        })
    })
}

/// # Safety
/// `context` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(context: *mut *mut c_void) -> CuResult {
    shim("cuCtxGetCurrent", || {
        with_initialized(|_| Ok(()))?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(context, handle(current_handle()), "context") }
    })
}

/// # Safety
/// `device` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut c_int) -> CuResult {
    shim("cuCtxGetDevice", || {
        let d = with_initialized(|s| Ok(s.current()?.device))?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(device, d as c_int, "device") }
    })
}

#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> CuResult {
    shim("cuCtxSynchronize", || {
        with_initialized(|s| s.current().map(drop))
    })
}

#[no_mangle]
pub extern "C" fn cuCtxSetLimit(limit: c_uint, value: usize) -> CuResult {
    shim("cuCtxSetLimit", || {
        with_initialized(|s| s.set_limit(limit, value))
    })
}

/// # Safety
/// `value` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetLimit(value: *mut usize, limit: c_uint) -> CuResult {
    shim("cuCtxGetLimit", || {
        let v = with_initialized(|s| s.get_limit(limit))?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(value, v, "value") }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use errors::*;
    use std::ptr::null_mut;

    /// The calls the plugin makes, in its order, over the test cubin; and what the driver
    /// refuses.
    #[test]
    fn the_exports_drive_a_real_cubin() {
        let _alone = state::exclusive();
        let cubin = test_cubin::linked_cubin().to_vec();
        // SAFETY: every pointer below is a live local or the cubin's bytes.
        unsafe {
            assert_eq!(cuInit(0), CUDA_SUCCESS);
            let (mut count, mut device, mut context) = (0, -1, null_mut());
            assert_eq!(cuDeviceGetCount(&mut count), CUDA_SUCCESS);
            assert_eq!(count, 1);
            assert_eq!(cuDeviceGet(&mut device, 0), CUDA_SUCCESS);
            assert_eq!(cuDeviceGet(&mut device, 1), CUDA_ERROR_INVALID_DEVICE);
            let mut name = [0 as c_char; 64];
            assert_eq!(cuDeviceGetName(name.as_mut_ptr(), 64, 0), CUDA_SUCCESS);
            let name = CStr::from_ptr(name.as_ptr()).to_string_lossy();
            assert_eq!(name, "CUDA driver stand-in (sm_90)");
            assert_eq!(cuMemAlloc_v2(&mut 0, 8), CUDA_ERROR_INVALID_CONTEXT);
            assert_eq!(cuDevicePrimaryCtxRetain(&mut context, 0), CUDA_SUCCESS);
            assert_eq!(cuCtxSetCurrent(context), CUDA_SUCCESS);

            let mut module = null_mut();
            let image = cubin.as_ptr().cast();
            assert_eq!(cuModuleLoadData(&mut module, image), CUDA_SUCCESS);
            let (mut addr, mut size) = (0u64, 0usize);
            let holder = c"holder".as_ptr();
            assert_eq!(
                cuModuleGetGlobal_v2(&mut addr, &mut size, module, holder),
                CUDA_SUCCESS
            );
            assert_eq!(size, 8);
            let nope = c"nope".as_ptr();
            assert_eq!(
                cuModuleGetGlobal_v2(&mut addr, &mut size, module, nope),
                CUDA_ERROR_NOT_FOUND
            );
            let mut kern = null_mut();
            assert_eq!(
                cuModuleGetFunction(&mut kern, module, c"kern".as_ptr()),
                CUDA_SUCCESS
            );
            let mut again = null_mut();
            assert_eq!(
                cuModuleGetFunction(&mut again, module, c"kern".as_ptr()),
                CUDA_SUCCESS
            );
            assert_eq!(kern, again, "one handle per function");
            assert_eq!(
                cuModuleGetFunction(&mut again, module, c"holder".as_ptr()),
                CUDA_ERROR_NOT_FOUND
            );

            // Globals are device memory: a copy round trip, and one past the end refused.
            let mut word = [0u8; 8];
            assert_eq!(
                cuMemcpyDtoH_v2(word.as_mut_ptr().cast(), addr, 8),
                CUDA_SUCCESS
            );
            assert_ne!(word, [0; 8], "the holder holds f1's address");
            assert_eq!(
                cuMemcpyDtoH_v2(word.as_mut_ptr().cast(), addr + 4, 8),
                CUDA_SUCCESS,
                "inside .nv.global.init"
            );
            let mut big = vec![0u8; 1 << 16];
            assert_eq!(
                cuMemcpyDtoH_v2(big.as_mut_ptr().cast(), addr, big.len()),
                CUDA_ERROR_INVALID_VALUE
            );

            // Shared memory: the static size, the opt-in limit, the launch check.
            let mut shared = 0;
            let attr = launch::attribute::SHARED_SIZE_BYTES;
            assert_eq!(cuFuncGetAttribute(&mut shared, attr, kern), CUDA_SUCCESS);
            assert!(shared >= 256, "{shared}");
            let dynamic = launch::attribute::MAX_DYNAMIC_SHARED_SIZE_BYTES;
            let mut most = 0;
            assert_eq!(cuFuncGetAttribute(&mut most, dynamic, kern), CUDA_SUCCESS);
            assert_eq!(most, 49152 - shared);
            let stream = null_mut();
            let over = (49152 - shared + 1) as c_uint;
            let launch = |shared| {
                cuLaunchKernel(
                    kern,
                    1,
                    1,
                    1,
                    128,
                    1,
                    1,
                    shared,
                    stream,
                    null_mut(),
                    null_mut(),
                )
            };
            assert_eq!(launch(over), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(
                cuFuncSetAttribute(kern, dynamic, 232448),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(cuFuncSetAttribute(kern, dynamic, 100_000), CUDA_SUCCESS);
            assert_eq!(
                launch(over),
                CUDA_ERROR_NOT_SUPPORTED,
                "checked, reported, not run"
            );
            assert_eq!(
                cuLaunchKernel(kern, 1, 1, 1, 2048, 1, 1, 0, stream, null_mut(), null_mut()),
                CUDA_ERROR_INVALID_VALUE
            );

            // Allocations: round trip, double free, unknown handles.
            let mut p = 0u64;
            assert_eq!(cuMemAlloc_v2(&mut p, 64), CUDA_SUCCESS);
            assert_eq!(p % 256, 0);
            let data = [7u8; 64];
            assert_eq!(cuMemcpyHtoD_v2(p, data.as_ptr().cast(), 64), CUDA_SUCCESS);
            assert_eq!(cuMemsetD32_v2(p, 0x0101_0101, 8), CUDA_SUCCESS);
            let mut back = [0u8; 64];
            assert_eq!(
                cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), p, 64),
                CUDA_SUCCESS
            );
            assert_eq!(back[..32], [1u8; 32]);
            assert_eq!(back[32..], [7u8; 32]);
            assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
            assert_eq!(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(
                cuMemcpyHtoD_v2(p, data.as_ptr().cast(), 64),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuStreamSynchronize(0xdead_0000 as *mut c_void),
                CUDA_ERROR_INVALID_HANDLE
            );
            let mut s = null_mut();
            assert_eq!(cuStreamCreate(&mut s, 0), CUDA_SUCCESS);
            assert_eq!(cuStreamQuery(s), CUDA_SUCCESS);
            assert_eq!(cuStreamDestroy_v2(s), CUDA_SUCCESS);
            assert_eq!(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);

            // Limits, per context.
            let mut stack = 0usize;
            assert_eq!(
                cuCtxGetLimit(&mut stack, state::LIMIT_STACK_SIZE),
                CUDA_SUCCESS
            );
            assert_eq!(stack, 1024);
            assert_eq!(cuCtxSetLimit(state::LIMIT_STACK_SIZE, 8192), CUDA_SUCCESS);
            assert_eq!(
                cuCtxGetLimit(&mut stack, state::LIMIT_STACK_SIZE),
                CUDA_SUCCESS
            );
            assert_eq!(stack, 8192);

            let mut error_name = std::ptr::null();
            assert_eq!(
                cuGetErrorName(CUDA_ERROR_NOT_FOUND, &mut error_name),
                CUDA_SUCCESS
            );
            assert_eq!(
                CStr::from_ptr(error_name).to_str(),
                Ok("CUDA_ERROR_NOT_FOUND")
            );

            assert_eq!(cuModuleUnload(module), CUDA_SUCCESS);
            assert_eq!(
                cuMemcpyDtoH_v2(word.as_mut_ptr().cast(), addr, 8),
                CUDA_ERROR_INVALID_VALUE,
                "the global went with its module"
            );
            assert_eq!(cuModuleUnload(module), CUDA_ERROR_INVALID_HANDLE);
            assert_eq!(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
            assert_eq!(
                cuMemAlloc_v2(&mut p, 8),
                CUDA_ERROR_INVALID_CONTEXT,
                "released"
            );
        }
    }
}
