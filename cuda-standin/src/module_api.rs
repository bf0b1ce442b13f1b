//! The exported module and kernel functions: cuModuleLoadData, cuModuleUnload,
//! cuModuleGetGlobal, cuModuleGetFunction, cuFuncGetAttribute, cuFuncSetAttribute and
//! cuLaunchKernel. Thin shims over the state (`modules.rs`, `launch.rs`).

use crate::errors::{CuResult, Failure};
use crate::state::with_initialized;
use crate::{handle, image, key, launch, out, shim, text};
use std::ffi::{c_char, c_int, c_uint, c_void};

// ---- modules ----

/// # Safety
/// `module` must be writable; `image` a whole cubin, fatbinary or NUL-terminated PTX.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(
    module: *mut *mut c_void,
    image: *const c_void,
) -> CuResult {
    shim("cuModuleLoadData", || {
        if module.is_null() {
            return Err(Failure::invalid_value("module is null"));
        }
        let id = with_initialized(|s| {
            s.current()?;
            // SAFETY: the caller promises a whole image (the driver API's contract).
            let image = unsafe { image::from_raw(image.cast()) }?;
            s.load_module(&image)
        })?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(module, handle(id), "module") }
    })
}

#[no_mangle]
pub extern "C" fn cuModuleUnload(module: *mut c_void) -> CuResult {
    shim("cuModuleUnload", || {
        with_initialized(|s| s.unload_module(key(module)))
    })
}

/// # Safety
/// `dptr` and `bytes` must each be null or writable; `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(
    dptr: *mut u64,
    bytes: *mut usize,
    module: *mut c_void,
    name: *const c_char,
) -> CuResult {
    shim("cuModuleGetGlobal_v2", || {
        // SAFETY: the caller's string, per the driver API.
        let name = unsafe { text(name) }?;
        let (addr, size) = with_initialized(|s| s.module_global(key(module), &name))?;
        // SAFETY: the caller's pointers, each optional per the driver API.
        unsafe {
            if !dptr.is_null() {
                out(dptr, addr, "dptr")?;
            }
            if !bytes.is_null() {
                out(bytes, size as usize, "bytes")?;
            }
        }
        Ok(())
    })
}

/// # Safety
/// `function` must be writable; `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    function: *mut *mut c_void,
    module: *mut c_void,
    name: *const c_char,
) -> CuResult {
    shim("cuModuleGetFunction", || {
        // SAFETY: the caller's string, per the driver API.
        let name = unsafe { text(name) }?;
        if function.is_null() {
            return Err(Failure::invalid_value("function is null"));
        }
        let f = with_initialized(|s| s.module_function(key(module), &name))?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(function, handle(f), "function") }
    })
}

// ---- kernels ----

/// # Safety
/// `value` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(
    value: *mut c_int,
    attribute: c_uint,
    function: *mut c_void,
) -> CuResult {
    shim("cuFuncGetAttribute", || {
        let v = with_initialized(|s| s.function_attribute(key(function), attribute))?;
        // SAFETY: the caller's pointer, per the driver API.
        unsafe { out(value, v, "value") }
    })
}

#[no_mangle]
pub extern "C" fn cuFuncSetAttribute(
    function: *mut c_void,
    attribute: c_uint,
    value: c_int,
) -> CuResult {
    shim("cuFuncSetAttribute", || {
        with_initialized(|s| s.set_function_attribute(key(function), attribute, value))
    })
}

/// The kernel parameters are not read (the stand-in does not run the kernel).
#[no_mangle]
pub extern "C" fn cuLaunchKernel(
    function: *mut c_void,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared: c_uint,
    stream: *mut c_void,
    _params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> CuResult {
    shim("cuLaunchKernel", || {
        let request = launch::Launch {
            kernel: key(function),
            grid: [grid_x, grid_y, grid_z],
            block: [block_x, block_y, block_z],
            shared,
            stream: key(stream),
        };
        with_initialized(|s| {
            s.current()?;
            s.launch(&request)
        })
    })
}
