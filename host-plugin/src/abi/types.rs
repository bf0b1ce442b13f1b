//! The plugin ABI structures of LLVM 16 (`openmp/libomptarget/include/omptarget.h`; 17's
//! are the same) and LLVM 18's one addition, as the C side lays them out.

use std::ffi::{c_char, c_void};

pub const OFFLOAD_SUCCESS: i32 = 0;
pub const OFFLOAD_FAIL: i32 = !0;

/// `__tgt_offload_entry` (LLVM <= 19): 32 bytes, defined with its flags and section in
/// offload-formats.
pub use offload_formats::entries::TgtOffloadEntry;

/// `__tgt_device_image`.
#[repr(C)]
pub struct TgtDeviceImage {
    pub image_start: *mut c_void,
    pub image_end: *mut c_void,
    pub entries_begin: *mut TgtOffloadEntry,
    pub entries_end: *mut TgtOffloadEntry,
}

/// `__tgt_bin_desc`.
#[repr(C)]
pub struct TgtBinDesc {
    pub num_device_images: i32,
    pub device_images: *mut TgtDeviceImage,
    pub host_entries_begin: *mut TgtOffloadEntry,
    pub host_entries_end: *mut TgtOffloadEntry,
}

/// `__tgt_target_table`.
#[repr(C)]
pub struct TgtTargetTable {
    pub entries_begin: *mut TgtOffloadEntry,
    pub entries_end: *mut TgtOffloadEntry,
}

/// `__tgt_device_binary` (LLVM 18): the handle `load_binary` stores for libomptarget
/// and `get_global`/`get_function` get back, by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TgtDeviceBinary {
    pub handle: usize,
}

/// `__tgt_async_info`: `queue` is the backend's queue (a CUDA stream); it stays null
/// where the backend completes everything synchronously (the host device, HIP).
#[repr(C)]
pub struct TgtAsyncInfo {
    pub queue: *mut c_void,
}

/// `__tgt_image_info`.
#[repr(C)]
pub struct TgtImageInfo {
    pub arch: *const c_char,
}

/// `__tgt_device_info`.
#[repr(C)]
pub struct TgtDeviceInfo {
    pub context: *mut c_void,
    pub device: *mut c_void,
}

/// `KernelArgsTy` (LLVM 16, version 1/2 share this layout).
#[repr(C)]
pub struct KernelArgs {
    pub version: u32,
    pub num_args: u32,
    pub arg_base_ptrs: *mut *mut c_void,
    pub arg_ptrs: *mut *mut c_void,
    pub arg_sizes: *mut i64,
    pub arg_types: *mut i64,
    pub arg_names: *mut *mut c_void,
    pub arg_mappers: *mut *mut c_void,
    pub tripcount: u64,
    pub flags: u64,
    pub num_teams: [u32; 3],
    pub thread_limit: [u32; 3],
    pub dyn_cgroup_mem: u32,
}

// The size LLVM 16's static_assert fixes (the entry's is asserted where it is defined).
const _: () = assert!(std::mem::size_of::<KernelArgs>() == 8 * 4 + 3 * 8 + 4 * 8 + 2 * 8);
