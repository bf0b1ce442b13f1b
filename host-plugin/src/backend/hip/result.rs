//! One thin function per HIP call: arguments in, `Result` out, the error naming the call
//! and HIP's own message. Grouped by noun, like cudarc's `result` layer.

use super::sys::{self, HipApi, HipDeviceptr, HipFunction, HipModule};
use crate::backend::BackendError;
use std::ffi::{c_int, c_void, CStr};
use thiserror::Error;

#[derive(Debug, Error)]
#[error("{call} failed: HIP error {code} ({message})")]
pub struct HipCallError {
    pub call: &'static str,
    pub code: sys::HipError,
    pub message: String,
}

pub type HipResult<T> = Result<T, HipCallError>;

/// A failed HIP call as the typed driver error.
pub(super) fn driver_failed(e: HipCallError) -> BackendError {
    BackendError::Driver {
        call: e.call,
        code: e.code,
        name: e.message,
    }
}

fn check(api: &HipApi, call: &'static str, code: sys::HipError) -> HipResult<()> {
    if code == sys::HIP_SUCCESS {
        return Ok(());
    }
    // SAFETY: hipGetErrorString takes any error value and returns null or a static
    // NUL-terminated string owned by the runtime.
    let text = unsafe { (api.get_error_string)(code) };
    let message = if text.is_null() {
        "no message".to_string()
    } else {
        // SAFETY: non-null, NUL-terminated, static (see above).
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    };
    Err(HipCallError {
        call,
        code,
        message,
    })
}

fn device_index(device: usize) -> c_int {
    // Device indices come from hipGetDeviceCount, itself a c_int.
    c_int::try_from(device).unwrap_or(c_int::MAX)
}

pub mod device {
    use super::*;

    /// Number of devices; a machine without AMD GPUs (hipErrorNoDevice) has 0.
    pub fn count(api: &HipApi) -> HipResult<usize> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer for the call's duration.
        let code = unsafe { (api.get_device_count)(&mut n) };
        if code == sys::HIP_ERROR_NO_DEVICE {
            return Ok(0);
        }
        check(api, "hipGetDeviceCount", code)?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Make `device` current on this thread (HIP's current device is per thread).
    pub fn set(api: &HipApi, device: usize) -> HipResult<()> {
        // SAFETY: plain value argument; HIP validates the index.
        check(api, "hipSetDevice", unsafe {
            (api.set_device)(device_index(device))
        })
    }

    /// The device's `gcnArchName`, e.g. `gfx90a:sramecc+:xnack-` (see `sys` for why it
    /// comes from the pinned R0600 properties struct).
    pub fn gcn_arch_name(api: &HipApi, device: usize) -> HipResult<String> {
        let mut props = vec![0u8; sys::DEVICE_PROP_BUFFER];
        // SAFETY: `props` is a zeroed, writable buffer larger than hipDeviceProp_tR0600
        // (1472 bytes), which is all the call writes.
        let code = unsafe {
            (api.get_device_properties_r0600)(
                props.as_mut_ptr().cast::<c_void>(),
                device_index(device),
            )
        };
        check(api, "hipGetDevicePropertiesR0600", code)?;
        let field = &props[sys::DEVICE_PROP_R0600_GCN_ARCH_NAME
            ..sys::DEVICE_PROP_R0600_GCN_ARCH_NAME + sys::DEVICE_PROP_GCN_ARCH_NAME_LEN];
        let name = CStr::from_bytes_until_nul(field).map_err(|_| HipCallError {
            call: "hipGetDevicePropertiesR0600",
            code: sys::HIP_SUCCESS,
            message: "gcnArchName is not NUL-terminated".into(),
        })?;
        Ok(name.to_string_lossy().into_owned())
    }

    /// An integer attribute (`hipDeviceAttribute_t`) of `device`; Ok(None) where the
    /// runtime has no hipDeviceGetAttribute.
    pub fn attribute(api: &HipApi, device: usize, attribute: c_int) -> HipResult<Option<c_int>> {
        let Some(get) = api.device_get_attribute else {
            return Ok(None);
        };
        let mut value: c_int = 0;
        // SAFETY: `value` is a valid out-pointer; HIP validates the attribute and device.
        check(api, "hipDeviceGetAttribute", unsafe {
            get(&mut value, attribute, device_index(device))
        })?;
        Ok(Some(value))
    }

    /// hipDeviceSetLimit on the current device; Ok(false) where the runtime lacks it.
    pub fn set_limit(api: &HipApi, limit: c_int, bytes: usize) -> HipResult<bool> {
        let Some(set) = api.device_set_limit else {
            return Ok(false);
        };
        // SAFETY: plain value arguments; HIP validates the limit.
        check(api, "hipDeviceSetLimit", unsafe { set(limit, bytes) })?;
        Ok(true)
    }

    pub fn synchronize(api: &HipApi) -> HipResult<()> {
        // SAFETY: no arguments.
        check(api, "hipDeviceSynchronize", unsafe {
            (api.device_synchronize)()
        })
    }
}

pub mod memory {
    use super::*;

    pub fn malloc(api: &HipApi, size: usize) -> HipResult<u64> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer.
        check(api, "hipMalloc", unsafe { (api.malloc)(&mut ptr, size) })?;
        Ok(ptr as u64)
    }

    /// # Safety
    /// `ptr` came from hipMalloc and is not used afterwards.
    pub unsafe fn free(api: &HipApi, ptr: u64) -> HipResult<()> {
        // SAFETY: caller contract.
        check(api, "hipFree", unsafe { (api.free)(ptr as *mut c_void) })
    }

    /// # Safety
    /// `dst .. dst + src.len()` is device memory of the current device.
    pub unsafe fn copy_to_device(api: &HipApi, dst: u64, src: &[u8]) -> HipResult<()> {
        // SAFETY: `src` is a live slice; the destination range is the caller's contract.
        check(api, "hipMemcpy(HostToDevice)", unsafe {
            (api.memcpy)(
                dst as *mut c_void,
                src.as_ptr().cast(),
                src.len(),
                sys::HIP_MEMCPY_HOST_TO_DEVICE,
            )
        })
    }

    /// # Safety
    /// `src .. src + dst.len()` is device memory of the current device.
    pub unsafe fn copy_to_host(api: &HipApi, dst: &mut [u8], src: u64) -> HipResult<()> {
        // SAFETY: `dst` is a live, writable slice; the source range is the caller's contract.
        check(api, "hipMemcpy(DeviceToHost)", unsafe {
            (api.memcpy)(
                dst.as_mut_ptr().cast(),
                src as *const c_void,
                dst.len(),
                sys::HIP_MEMCPY_DEVICE_TO_HOST,
            )
        })
    }

    /// # Safety
    /// Both ranges of `len` bytes are device memory of the current device.
    pub unsafe fn copy_on_device(api: &HipApi, dst: u64, src: u64, len: usize) -> HipResult<()> {
        // SAFETY: caller contract.
        check(api, "hipMemcpy(DeviceToDevice)", unsafe {
            (api.memcpy)(
                dst as *mut c_void,
                src as *const c_void,
                len,
                sys::HIP_MEMCPY_DEVICE_TO_DEVICE,
            )
        })
    }

    /// # Safety
    /// `src` is `len` bytes of `src_device`'s memory, `dst` `len` bytes of `dst_device`'s.
    pub unsafe fn copy_peer(
        api: &HipApi,
        dst: u64,
        dst_device: usize,
        src: u64,
        src_device: usize,
        len: usize,
    ) -> HipResult<()> {
        // SAFETY: caller contract.
        check(api, "hipMemcpyPeer", unsafe {
            (api.memcpy_peer)(
                dst as *mut c_void,
                device_index(dst_device),
                src as *const c_void,
                device_index(src_device),
                len,
            )
        })
    }
}

pub mod module {
    use super::*;

    /// Load a code object on the current device. HIP reads the image during the call
    /// (it finds the ELF's extent from its headers).
    pub fn load_data(api: &HipApi, image: &[u8]) -> HipResult<HipModule> {
        let mut module: HipModule = std::ptr::null_mut();
        // SAFETY: `module` is a valid out-pointer; `image` is a live buffer holding a
        // whole code object that the plugin core validated as an ELF file.
        check(api, "hipModuleLoadData", unsafe {
            (api.module_load_data)(&mut module, image.as_ptr().cast())
        })?;
        Ok(module)
    }

    /// # Safety
    /// `module` came from `load_data` and nothing of it is used afterwards.
    pub unsafe fn unload(api: &HipApi, module: HipModule) -> HipResult<()> {
        // SAFETY: caller contract.
        check(api, "hipModuleUnload", unsafe {
            (api.module_unload)(module)
        })
    }

    /// A global variable's device address and size.
    ///
    /// # Safety
    /// `module` is a live module.
    pub unsafe fn get_global(
        api: &HipApi,
        module: HipModule,
        name: &CStr,
    ) -> HipResult<(u64, usize)> {
        let mut ptr: HipDeviceptr = std::ptr::null_mut();
        let mut size = 0usize;
        // SAFETY: out-pointers are valid; `name` is NUL-terminated; the module is live.
        check(api, "hipModuleGetGlobal", unsafe {
            (api.module_get_global)(&mut ptr, &mut size, module, name.as_ptr())
        })?;
        Ok((ptr as u64, size))
    }

    /// # Safety
    /// `module` is a live module.
    pub unsafe fn get_function(
        api: &HipApi,
        module: HipModule,
        name: &CStr,
    ) -> HipResult<HipFunction> {
        let mut function: HipFunction = std::ptr::null_mut();
        // SAFETY: as for get_global.
        check(api, "hipModuleGetFunction", unsafe {
            (api.module_get_function)(&mut function, module, name.as_ptr())
        })?;
        Ok(function)
    }
}

pub mod function {
    use super::*;

    /// An integer attribute (`hipFunction_attribute`) of a kernel; Ok(None) where the
    /// runtime has no hipFuncGetAttribute.
    ///
    /// # Safety
    /// `function` came from hipModuleGetFunction on a live module.
    pub unsafe fn attribute(
        api: &HipApi,
        function: HipFunction,
        attribute: c_int,
    ) -> HipResult<Option<c_int>> {
        let Some(get) = api.func_get_attribute else {
            return Ok(None);
        };
        let mut value: c_int = 0;
        // SAFETY: `value` is a valid out-pointer; the function handle is the caller's
        // contract.
        check(api, "hipFuncGetAttribute", unsafe {
            get(&mut value, attribute, function)
        })?;
        Ok(Some(value))
    }
}

pub mod launch {
    use super::*;

    /// Launch `function` on the null stream with its arguments packed in one buffer
    /// (`HIP_LAUNCH_PARAM_BUFFER_POINTER`, as LLVM's AMDGPU plugin passes them).
    ///
    /// # Safety
    /// `function` is a kernel of a live module whose parameters are laid out as `args`.
    pub unsafe fn module_launch_kernel(
        api: &HipApi,
        function: HipFunction,
        grid: [u32; 3],
        block: [u32; 3],
        shared_memory: u32,
        args: &mut [u8],
    ) -> HipResult<()> {
        let mut size = args.len();
        let mut extra: [*mut c_void; 5] = [
            sys::HIP_LAUNCH_PARAM_BUFFER_POINTER,
            args.as_mut_ptr().cast(),
            sys::HIP_LAUNCH_PARAM_BUFFER_SIZE,
            (&mut size as *mut usize).cast(),
            sys::HIP_LAUNCH_PARAM_END,
        ];
        // SAFETY: `extra` and everything it points to (args, size) live across the call,
        // which copies the arguments before returning; the kernel contract is the caller's.
        check(api, "hipModuleLaunchKernel", unsafe {
            (api.module_launch_kernel)(
                function,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_memory,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                extra.as_mut_ptr(),
            )
        })
    }
}
