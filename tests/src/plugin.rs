//! The host plugin as the tests drive it: offload entries, the built plugin files, and
//! the signatures of the LLVM 16 plugin entry points they call through `dlopen`.

use crate::paths::{require_file, target_dir};
use host_plugin::abi::{KernelArgs, TgtDeviceImage, TgtOffloadEntry, TgtTargetTable};
use host_plugin::HostOffloadEntry;
use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};
use std::ptr::null_mut;

pub type LoadBinary = unsafe extern "C" fn(i32, *mut TgtDeviceImage) -> *mut TgtTargetTable;
pub type DataAlloc = unsafe extern "C" fn(i32, i64, *mut c_void, i32) -> *mut c_void;
/// `__tgt_rtl_data_submit` and `__tgt_rtl_data_retrieve`.
pub type DataMove = unsafe extern "C" fn(i32, *mut c_void, *mut c_void, i64) -> i32;
pub type DataDelete = unsafe extern "C" fn(i32, *mut c_void, i32) -> i32;
pub type Launch = unsafe extern "C" fn(
    i32,
    *mut c_void,
    *mut *mut c_void,
    *mut isize,
    *const KernelArgs,
    *mut c_void,
) -> i32;

/// An offload entry without a host vtable.
pub fn entry(name: &str, host: u64, size: u64, flags: i32) -> HostOffloadEntry<'static> {
    HostOffloadEntry::named(name, host, size, flags).expect("an entry name without NUL")
}

/// A libomptarget host entry (`__tgt_offload_entry`) named `name`, which must outlive
/// it.
pub fn tgt_entry(name: &CStr, host: usize, size: usize, flags: i32) -> TgtOffloadEntry {
    TgtOffloadEntry {
        addr: host as *mut c_void,
        name: name.as_ptr() as *mut _,
        size,
        flags,
        reserved: 0,
    }
}

/// 64-bit words as the bytes the device reads (native byte order).
pub fn words(w: &[u64]) -> Vec<u8> {
    bytemuck::cast_slice(w).to_vec()
}

/// The descriptor `__tgt_rtl_load_binary` takes for `image` and its `entries`; it
/// points into both, which must outlive its use.
pub fn device_image(image: &mut [u8], entries: &mut [TgtOffloadEntry]) -> TgtDeviceImage {
    let image = image.as_mut_ptr_range();
    let entries = entries.as_mut_ptr_range();
    TgtDeviceImage {
        image_start: image.start.cast(),
        image_end: image.end.cast(),
        entries_begin: entries.start,
        entries_end: entries.end,
    }
}

/// Launch arguments as libomptarget 16 passes them: `num_args` arguments (pointers
/// and offsets passed separately), one dimension of `teams` x `thread_limit`.
pub fn kernel_args(version: u32, num_args: u32, teams: u32, thread_limit: u32) -> KernelArgs {
    KernelArgs {
        version,
        num_args,
        arg_base_ptrs: null_mut(),
        arg_ptrs: null_mut(),
        arg_sizes: null_mut(),
        arg_types: null_mut(),
        arg_names: null_mut(),
        arg_mappers: null_mut(),
        tripcount: 0,
        flags: 0,
        num_teams: [teams, 0, 0],
        thread_limit: [thread_limit, 0, 0],
        dyn_cgroup_mem: 0,
    }
}

/// Where the GPU kit's run.sh points the tests at its copies of the plugin files (it has
/// no build tree).
pub const PLUGIN_DIR_ENV: &str = "OMPTARGET_RS_PLUGIN_DIR";

/// The plugin files: `$OMPTARGET_RS_PLUGIN_DIR` where set (the GPU kit), else
/// target/plugin/, where `cargo xtask build-plugin` writes them.
pub fn built_plugin_dir() -> PathBuf {
    std::env::var_os(PLUGIN_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("plugin"))
}

/// One built plugin file (`libomptarget.rtl.<kind>.so`), which must exist.
pub fn built_plugin(kind: &str) -> PathBuf {
    require_file(
        built_plugin_dir().join(format!("libomptarget.rtl.{kind}.so")),
        "`cargo xtask build-plugin`",
    )
}

/// dlopen a plugin file.
pub fn open(path: &Path) -> libloading::Library {
    // SAFETY: our plugin files' initialisers only set up Rust statics; nothing runs that
    // could observe this process in an inconsistent state.
    unsafe { libloading::Library::new(path) }.expect("dlopen the plugin")
}
