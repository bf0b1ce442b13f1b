//! Raw HIP: the few types and entry points of `libamdhip64.so` this backend calls, as
//! function pointers looked up at run time. Nothing here links against ROCm, so the
//! plugin loads on any machine and simply has no AMD devices where HIP is missing.
//!
//! Signatures follow ROCm 6's `hip_runtime_api.h` (C ABI, x86-64).

use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void};

/// `hipError_t` (an `enum` in C: 32 bits).
pub type HipError = c_int;
pub const HIP_SUCCESS: HipError = 0;
/// `hipErrorNoDevice`: returned by hipGetDeviceCount on a machine without AMD GPUs.
pub const HIP_ERROR_NO_DEVICE: HipError = 100;

pub type HipModule = *mut c_void;
pub type HipFunction = *mut c_void;
pub type HipStream = *mut c_void;
pub type HipDeviceptr = *mut c_void;

/// `hipMemcpyKind`.
pub const HIP_MEMCPY_HOST_TO_DEVICE: c_int = 1;
pub const HIP_MEMCPY_DEVICE_TO_HOST: c_int = 2;
pub const HIP_MEMCPY_DEVICE_TO_DEVICE: c_int = 3;

/// `extra` markers of hipModuleLaunchKernel for a packed argument buffer.
pub const HIP_LAUNCH_PARAM_BUFFER_POINTER: *mut c_void = std::ptr::without_provenance_mut(1);
pub const HIP_LAUNCH_PARAM_BUFFER_SIZE: *mut c_void = std::ptr::without_provenance_mut(2);
pub const HIP_LAUNCH_PARAM_END: *mut c_void = std::ptr::without_provenance_mut(3);

/// Where the processor's target ID lives in `hipDeviceProp_tR0600`.
///
/// Why this struct and not hipDeviceGetAttribute: no integer attribute carries the
/// target ID with its xnack/sramecc settings (`gfx90a:sramecc+:xnack-`), which is what
/// code object selection needs. The struct's layout is versioned; we call the
/// explicitly versioned `hipGetDevicePropertiesR0600` (ROCm 6.0+), whose layout is
/// frozen: `gcnArchName` is `char[256]` at byte 1160 of a 1472-byte struct. We hand it a
/// larger zeroed buffer and read only that field, requiring a NUL inside it.
pub const DEVICE_PROP_R0600_SIZE: usize = 1472;
pub const DEVICE_PROP_R0600_GCN_ARCH_NAME: usize = 1160;
pub const DEVICE_PROP_GCN_ARCH_NAME_LEN: usize = 256;
/// The buffer handed to hipGetDevicePropertiesR0600: the struct plus slack.
pub const DEVICE_PROP_BUFFER: usize = 4096;

pub type HipGetDeviceCount = unsafe extern "C" fn(count: *mut c_int) -> HipError;
pub type HipGetDevicePropertiesR0600 =
    unsafe extern "C" fn(prop: *mut c_void, device: c_int) -> HipError;
pub type HipSetDevice = unsafe extern "C" fn(device: c_int) -> HipError;
pub type HipGetErrorString = unsafe extern "C" fn(error: HipError) -> *const c_char;
pub type HipMalloc = unsafe extern "C" fn(ptr: *mut *mut c_void, size: usize) -> HipError;
pub type HipFree = unsafe extern "C" fn(ptr: *mut c_void) -> HipError;
pub type HipMemcpy = unsafe extern "C" fn(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: c_int,
) -> HipError;
pub type HipMemcpyPeer = unsafe extern "C" fn(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    size: usize,
) -> HipError;
pub type HipModuleLoadData =
    unsafe extern "C" fn(module: *mut HipModule, image: *const c_void) -> HipError;
pub type HipModuleUnload = unsafe extern "C" fn(module: HipModule) -> HipError;
pub type HipModuleGetGlobal = unsafe extern "C" fn(
    dptr: *mut HipDeviceptr,
    bytes: *mut usize,
    module: HipModule,
    name: *const c_char,
) -> HipError;
pub type HipModuleGetFunction = unsafe extern "C" fn(
    function: *mut HipFunction,
    module: HipModule,
    name: *const c_char,
) -> HipError;
#[allow(clippy::type_complexity)]
pub type HipModuleLaunchKernel = unsafe extern "C" fn(
    function: HipFunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_mem_bytes: c_uint,
    stream: HipStream,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> HipError;
pub type HipDeviceSynchronize = unsafe extern "C" fn() -> HipError;
pub type HipDeviceGetAttribute =
    unsafe extern "C" fn(value: *mut c_int, attribute: c_int, device: c_int) -> HipError;
pub type HipFuncGetAttribute =
    unsafe extern "C" fn(value: *mut c_int, attribute: c_int, function: HipFunction) -> HipError;

/// `hipDeviceAttribute_t` values (ROCm 6 `hip_runtime_api.h`: the CUDA-compatible block,
/// numbered from 0 in declaration order and only appended to since ROCm 5).
pub const HIP_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: c_int = 26;
pub const HIP_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: c_int = 29;
pub const HIP_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 63;
pub const HIP_DEVICE_ATTRIBUTE_WARP_SIZE: c_int = 87;
/// `hipFunction_attribute` (ROCm 6 `driver_types.h`): the kernel's largest work-group,
/// and its static shared memory (LDS) in bytes.
pub const HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: c_int = 0;
pub const HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: c_int = 1;
/// `hipLimit_t` (ROCm 6 `hip_runtime_api.h`).
pub const HIP_LIMIT_STACK_SIZE: c_int = 0;
pub const HIP_LIMIT_MALLOC_HEAP_SIZE: c_int = 2;
pub type HipDeviceSetLimit = unsafe extern "C" fn(limit: c_int, value: usize) -> HipError;

/// The HIP entry points, resolved once from one loaded library, which the table keeps
/// open for as long as the pointers exist.
pub struct HipApi {
    pub get_device_count: HipGetDeviceCount,
    pub get_device_properties_r0600: HipGetDevicePropertiesR0600,
    pub set_device: HipSetDevice,
    pub get_error_string: HipGetErrorString,
    pub malloc: HipMalloc,
    pub free: HipFree,
    pub memcpy: HipMemcpy,
    pub memcpy_peer: HipMemcpyPeer,
    pub module_load_data: HipModuleLoadData,
    pub module_unload: HipModuleUnload,
    pub module_get_global: HipModuleGetGlobal,
    pub module_get_function: HipModuleGetFunction,
    pub module_launch_kernel: HipModuleLaunchKernel,
    pub device_synchronize: HipDeviceSynchronize,
    /// Optional: the launch geometry falls back to LLVM 16's grid values without them.
    pub device_get_attribute: Option<HipDeviceGetAttribute>,
    pub func_get_attribute: Option<HipFuncGetAttribute>,
    /// Optional: without it, `LIBOMPTARGET_STACK_SIZE` / `_HEAP_SIZE` are refused.
    pub device_set_limit: Option<HipDeviceSetLimit>,
    _library: Library,
}

/// Resolve one symbol as a function pointer of type `T`, copied out of the library.
///
/// # Safety
/// `T` must be the function pointer type of the C function named `name`.
unsafe fn symbol<T: Copy>(library: &Library, name: &str) -> Result<T, String> {
    // SAFETY: the caller promises `T` matches the symbol's C signature.
    unsafe { library.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("{name}: {e}"))
}

impl HipApi {
    /// Open the HIP runtime at `path` (a file path or a bare soname for the dynamic
    /// loader's search) and resolve every entry point. Fails, with the reason, if the
    /// library cannot be opened or lacks one of the required ones.
    pub fn load(path: &str) -> Result<HipApi, String> {
        // SAFETY: opening the HIP runtime runs its ELF constructors, as any program that
        // links libamdhip64 does; the library is the vendor runtime (or a stand-in for it).
        let library = unsafe { Library::new(path) }.map_err(|e| e.to_string())?;
        // SAFETY: each type alias above transcribes the C prototype of the symbol named.
        unsafe {
            Ok(HipApi {
                get_device_count: symbol(&library, "hipGetDeviceCount")?,
                get_device_properties_r0600: symbol(&library, "hipGetDevicePropertiesR0600")?,
                set_device: symbol(&library, "hipSetDevice")?,
                get_error_string: symbol(&library, "hipGetErrorString")?,
                malloc: symbol(&library, "hipMalloc")?,
                free: symbol(&library, "hipFree")?,
                memcpy: symbol(&library, "hipMemcpy")?,
                memcpy_peer: symbol(&library, "hipMemcpyPeer")?,
                module_load_data: symbol(&library, "hipModuleLoadData")?,
                module_unload: symbol(&library, "hipModuleUnload")?,
                module_get_global: symbol(&library, "hipModuleGetGlobal")?,
                module_get_function: symbol(&library, "hipModuleGetFunction")?,
                module_launch_kernel: symbol(&library, "hipModuleLaunchKernel")?,
                device_synchronize: symbol(&library, "hipDeviceSynchronize")?,
                device_get_attribute: symbol(&library, "hipDeviceGetAttribute").ok(),
                func_get_attribute: symbol(&library, "hipFuncGetAttribute").ok(),
                device_set_limit: symbol(&library, "hipDeviceSetLimit").ok(),
                _library: library,
            })
        }
    }
}
