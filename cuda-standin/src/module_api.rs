//! The exported module and kernel functions: cuModuleLoadData(Ex), cuModuleUnload,
//! cuModuleGetGlobal, cuModuleGetFunction, cuFuncGetAttribute, cuFuncSetAttribute and
//! cuLaunchKernel. Thin shims over the state (`modules.rs`, `launch.rs`).

use crate::errors::{CuResult, Failure, Outcome};
use crate::state::with_initialized;
use crate::{handle, image, key, launch, out, shim, text};
use std::ffi::{c_char, c_int, c_uint, c_void};

// ---- modules ----

/// Load `image` in the current context, its handle written to `module`.
///
/// # Safety
/// `module` must be null (refused) or writable; `image` a whole cubin, fatbinary or
/// NUL-terminated PTX.
unsafe fn load(module: *mut *mut c_void, image: *const c_void) -> Outcome {
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
}

/// # Safety
/// `module` must be writable; `image` a whole cubin, fatbinary or NUL-terminated PTX.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(
    module: *mut *mut c_void,
    image: *const c_void,
) -> CuResult {
    // SAFETY: the caller's pointers, per the driver API.
    shim("cuModuleLoadData", || unsafe { load(module, image) })
}

/// cuModuleLoadData with JIT options (LLVM 16's cuda plugins load with this one). The
/// options only steer the JIT compiling PTX, which the stand-in refuses; they are
/// checked to be there when `count` says so, and otherwise ignored: no option's value
/// is read or written (a log buffer stays as it was).
///
/// # Safety
/// `module` must be writable; `image` as for cuModuleLoadData; `options` and `values`
/// null or `count` long.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut *mut c_void,
    image: *const c_void,
    count: c_uint,
    options: *mut c_uint,
    values: *mut *mut c_void,
) -> CuResult {
    shim("cuModuleLoadDataEx", || {
        if count > 0 && (options.is_null() || values.is_null()) {
            return Err(Failure::invalid_value(format!(
                "{count} JIT options without their arrays"
            )));
        }
        // SAFETY: the caller's pointers, per the driver API.
        unsafe { load(module, image) }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::*;
    use crate::{cuCtxSetCurrent, cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRetain};
    use crate::{cuInit, state, test_cubin};
    use std::ptr::null_mut;

    /// CU_JIT_INFO_LOG_BUFFER and CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES.
    const JIT_INFO_LOG_BUFFER: c_uint = 3;
    const JIT_INFO_LOG_BUFFER_SIZE_BYTES: c_uint = 4;

    /// A cubin loads as with cuModuleLoadData, with or without JIT options (neither read
    /// nor written); options counted but not given, or no current context, are refused.
    #[test]
    fn load_data_ex_loads_a_cubin_and_leaves_the_jit_options_alone() {
        use cudarc::driver::sys::CUjit_option;
        assert_eq!(
            JIT_INFO_LOG_BUFFER,
            CUjit_option::CU_JIT_INFO_LOG_BUFFER as c_uint
        );
        assert_eq!(
            JIT_INFO_LOG_BUFFER_SIZE_BYTES,
            CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES as c_uint
        );
        let _alone = state::exclusive();
        let image = test_cubin::linked_cubin().as_ptr().cast();
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        let mut module = null_mut();
        // SAFETY: every pointer below is a live local or the cubin's bytes.
        unsafe {
            let no_context = cuModuleLoadDataEx(&mut module, image, 0, null_mut(), null_mut());
            assert_eq!(no_context, CUDA_ERROR_INVALID_CONTEXT);
            let mut context = null_mut();
            assert_eq!(cuDevicePrimaryCtxRetain(&mut context, 0), CUDA_SUCCESS);
            assert_eq!(cuCtxSetCurrent(context), CUDA_SUCCESS);

            let missing = cuModuleLoadDataEx(&mut module, image, 2, null_mut(), null_mut());
            assert_eq!(missing, CUDA_ERROR_INVALID_VALUE);
            assert_eq!(
                cuModuleLoadDataEx(&mut module, image, 0, null_mut(), null_mut()),
                CUDA_SUCCESS
            );
            let mut kern = null_mut();
            let found = cuModuleGetFunction(&mut kern, module, c"kern".as_ptr());
            assert_eq!(found, CUDA_SUCCESS);
            assert_eq!(cuModuleUnload(module), CUDA_SUCCESS);

            let mut log = [0x5au8; 64];
            let mut options = [JIT_INFO_LOG_BUFFER, JIT_INFO_LOG_BUFFER_SIZE_BYTES];
            let mut values = [log.as_mut_ptr().cast::<c_void>(), 64 as *mut c_void];
            let with_options = cuModuleLoadDataEx(
                &mut module,
                image,
                2,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            );
            assert_eq!(with_options, CUDA_SUCCESS);
            assert_eq!(log, [0x5a; 64], "the log buffer is untouched");
            assert_eq!(values[1], 64 as *mut c_void, "the size is not written back");
            assert_eq!(cuModuleUnload(module), CUDA_SUCCESS);
            assert_eq!(
                cuModuleLoadDataEx(null_mut(), image, 0, null_mut(), null_mut()),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
            assert_eq!(cuCtxSetCurrent(null_mut()), CUDA_SUCCESS);
        }
    }
}
