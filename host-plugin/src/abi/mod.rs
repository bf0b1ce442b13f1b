//! The C boundary: the `__tgt_rtl_*` entry points of libomptarget 16, 17 and 18 over one
//! process-wide [`Plugin`]. 17 speaks 16's ABI; where 18's differs ([`loader`]), the shim
//! asks which libomptarget loaded the plugin.
//!
//! Each shim converts its C arguments, calls the safe core inside [`guard`] (which turns
//! errors and panics into a printed message plus OFFLOAD_FAIL), and converts back.

mod binary;
mod entries;
mod interop;
pub mod loader;
mod published;
pub mod types;

use crate::backend::{AllocKind, EventHandle, LaunchRequest, QueueHandle};
use crate::device::{AsyncInfo, Device};
use crate::diag;
use crate::error::PluginError;
use crate::fptr::FptrMapEntry;
use crate::host_entry::{EntryKind, HostEntry};
use crate::plugin::Plugin;
use crate::plugin_kind::PluginKind;
use binary::LoadedBinary;
use entries::LibomptargetEntry;
use loader::loader;
use published::PublishedTable;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
pub use types::*;

/// The implicit first argument (`dyn_ptr`) of a kernel built by clang 18, for a kernel
/// that needs no launch environment (no teams reduction buffer): `(void *)~0`, as LLVM
/// 18's plugins pass it. libomptarget 18 leaves this argument to the plugin.
const NO_LAUNCH_ENVIRONMENT: u64 = u64::MAX;

/// Largest vtable we read from host memory for an indirect vtable entry: far above any
/// real class, low enough that a corrupt size fails instead of reading gigabytes.
const MAX_VTABLE_BYTES: u64 = 1 << 20;

/// Which plugin this library is, from the name libomptarget loaded it by
/// (`libomptarget.rtl.<kind>.so`): one build serves every kind, each copy is its own.
fn own_kind() -> PluginKind {
    let file = crate::own_file::path();
    let base = file
        .as_deref()
        .and_then(|f| f.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    PluginKind::all()
        .into_iter()
        .find(|k| base.starts_with(&format!("libomptarget.rtl.{}.", k.name())))
        .unwrap_or(PluginKind::X86_64)
}

fn plugin() -> &'static Plugin {
    static PLUGIN: OnceLock<Plugin> = OnceLock::new();
    PLUGIN.get_or_init(|| {
        let kind = own_kind();
        diag::set_plugin_name(kind.name());
        let p = Plugin::new(kind);
        diag::debug(|| format!("plugin {} with {} devices", kind.name(), p.device_count()));
        p
    })
}

/// `call` on device `device` of the plugin (NoSuchDevice if there is none).
fn on_device<T>(
    device: i32,
    call: impl FnOnce(&Device) -> Result<T, PluginError>,
) -> Result<T, PluginError> {
    plugin().device(device).and_then(call)
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Run a shim body: an error or a panic is reported and becomes `fail`.
fn guard<R>(what: &'static str, fail: R, body: impl FnOnce() -> Result<R, PluginError>) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            diag::error(&format!("{what}: {e}"));
            fail
        }
        Err(p) => {
            diag::error(&format!(
                "{what}: {}",
                PluginError::Panic(what, panic_message(p))
            ));
            fail
        }
    }
}

fn status(r: Result<(), PluginError>) -> Result<i32, PluginError> {
    r.map(|()| OFFLOAD_SUCCESS)
}

fn invalid(device: i32, what: impl Into<String>) -> PluginError {
    PluginError::Invalid {
        device,
        what: what.into(),
    }
}

/// The bytes of a device image.
///
/// # Safety
/// `image` is null or a `__tgt_device_image` whose start/end bound readable memory.
unsafe fn image_bytes<'a>(image: *const TgtDeviceImage) -> Option<(usize, &'a [u8])> {
    // SAFETY: caller contract: null or a valid image descriptor.
    let img = unsafe { image.as_ref() }?;
    let start = img.image_start as usize;
    let len = (img.image_end as usize).checked_sub(start)?;
    if img.image_start.is_null() || len == 0 || !host_range_mapped(start, len) {
        return None;
    }
    // SAFETY: libomptarget's descriptor bounds the image in memory it keeps alive.
    Some((start, unsafe {
        std::slice::from_raw_parts(img.image_start as *const u8, len)
    }))
}

/// The image's host entries, read in place: each has a name and each vtable a plausible
/// size, else the load fails here.
///
/// # Safety
/// `image`'s entry range is an array of valid entries with NUL-terminated names that
/// outlive `'a`, and each indirect vtable entry's host address points at `size` readable
/// bytes that stay unchanged during `'a`.
unsafe fn host_entries<'a>(
    device: i32,
    image: &TgtDeviceImage,
) -> Result<&'a [LibomptargetEntry], PluginError> {
    let (begin, end) = (image.entries_begin, image.entries_end);
    if begin.is_null() || end.is_null() || begin == end {
        return Ok(&[]);
    }
    let bytes = (end as usize)
        .checked_sub(begin as usize)
        .unwrap_or(usize::MAX);
    if !bytes.is_multiple_of(std::mem::size_of::<TgtOffloadEntry>()) || bytes == usize::MAX {
        return Err(invalid(
            device,
            "the image's entry range is not an array of entries",
        ));
    }
    let count = bytes / std::mem::size_of::<TgtOffloadEntry>();
    // SAFETY: caller contract: begin..end is an array of `count` entries, alive for 'a;
    // LibomptargetEntry is a transparent wrapper of TgtOffloadEntry.
    let entries = unsafe { std::slice::from_raw_parts(begin.cast::<LibomptargetEntry>(), count) };
    for (i, e) in entries.iter().enumerate() {
        if e.0.name.is_null() {
            return Err(invalid(device, format!("offload entry {i} has no name")));
        }
        if e.is_vtable() && e.0.size as u64 > MAX_VTABLE_BYTES {
            return Err(invalid(
                device,
                format!(
                    "entry `{}`: vtable size {} is implausible",
                    e.name_lossy(),
                    e.0.size
                ),
            ));
        }
    }
    Ok(entries)
}

// ---------------------------------------------------------------------------------------
// Plugin lifetime

#[no_mangle]
pub extern "C" fn __tgt_rtl_init_plugin() -> i32 {
    guard("init_plugin", OFFLOAD_FAIL, || {
        loader();
        plugin();
        diag::write_load_marker();
        Ok(OFFLOAD_SUCCESS)
    })
}

/// libomptarget 16 calls this from every `__tgt_unregister_lib` (each dlclose of an
/// offloading library), not only at exit, while other libraries' images stay in use and
/// it keeps pointers into their tables. So only images whose host copy is gone (their
/// library was unmapped since) are unloaded here; the rest stay until the process ends.
#[no_mangle]
pub extern "C" fn __tgt_rtl_deinit_plugin() -> i32 {
    guard("deinit_plugin", OFFLOAD_FAIL, || {
        unload_images_of_unmapped_libraries()?;
        Ok(OFFLOAD_SUCCESS)
    })
}

/// Unload the images whose host copy is gone (their library was unmapped).
/// libomptarget 18 never says when a library goes (no `deinit_plugin`, no
/// `unregister_lib`), so under 18 each load does this first.
fn unload_images_of_unmapped_libraries() -> Result<(), PluginError> {
    let gone = plugin()
        .loaded_image_keys()
        .into_iter()
        .filter(|&(_, key)| !host_range_mapped(key, 1));
    for (device, key) in gone {
        plugin().device(device)?.unload(key)?;
    }
    Ok(())
}

/// Whether every page of `start..start+len` is mapped in this process. libomptarget 16
/// keeps every image it ever registered and offers them all again to `is_valid_binary`
/// on each later registration, also those of libraries dlclosed since: their bounds
/// point into unmapped memory that must not be read.
fn host_range_mapped(start: usize, len: usize) -> bool {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .unwrap_or(4096)
        .max(1);
    let first = start - start % page;
    let Some(end) = start.checked_add(len.max(1)) else {
        return false;
    };
    let pages = (end - first).div_ceil(page);
    let mut residency = vec![0u8; pages];
    // SAFETY: mincore only inspects the page tables for the range and writes one byte per
    // page into `residency`, which holds `pages` bytes; an unmapped page gives ENOMEM.
    unsafe { libc::mincore(first as *mut c_void, end - first, residency.as_mut_ptr()) == 0 }
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_number_of_devices() -> i32 {
    guard("number_of_devices", 0, || {
        diag::write_load_marker();
        Ok(plugin().device_count() as i32)
    })
}

/// 16 and 17 ignore the result (their plugins return the flags, as this one does for
/// them); 18 drops the device unless it is OFFLOAD_SUCCESS.
#[no_mangle]
pub extern "C" fn __tgt_rtl_init_requires(flags: i64) -> i64 {
    let (accepted, failed) = if loader().checks_init_requires_status() {
        (i64::from(OFFLOAD_SUCCESS), i64::from(OFFLOAD_FAIL))
    } else {
        (flags, flags)
    };
    guard("init_requires", failed, || {
        diag::debug(|| format!("requires flags {flags:#x}"));
        REQUIRES_FLAGS.store(flags, std::sync::atomic::Ordering::Relaxed);
        Ok(accepted)
    })
}

/// The program's `requires` flags, as libomptarget passed them before initialising a
/// device (0 until then).
static REQUIRES_FLAGS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

#[no_mangle]
pub extern "C" fn __tgt_rtl_supports_empty_images() -> i32 {
    0
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_set_info_flag(flags: u32) {
    guard("set_info_flag", (), || {
        diag::set_info_flags(flags);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_print_device_info(device: i32) {
    guard("print_device_info", (), || {
        let lines = plugin().device(device)?.info_lines();
        println!("    omptarget-rs {} plugin:", plugin().kind().name());
        for line in lines {
            println!("        {line}");
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Images

/// # Safety
/// `image` is null or a valid `__tgt_device_image`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_is_valid_binary(image: *mut TgtDeviceImage) -> i32 {
    // SAFETY: forwarded caller contract.
    unsafe { is_valid_binary(image) }
}

/// # Safety
/// `image` is null or a valid `__tgt_device_image`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_is_valid_binary_info(
    image: *mut TgtDeviceImage,
    _info: *mut TgtImageInfo,
) -> i32 {
    // SAFETY: forwarded caller contract.
    unsafe { is_valid_binary(image) }
}

/// Both entry points' body. Entry points never call one another: every plugin file
/// exports the same names, and a call through them could reach another copy's
/// (the library is linked -Bsymbolic as well, build.rs).
///
/// # Safety
/// `image` is null or a valid `__tgt_device_image`.
unsafe fn is_valid_binary(image: *mut TgtDeviceImage) -> i32 {
    guard("is_valid_binary", 0, || {
        diag::write_load_marker();
        // SAFETY: forwarded caller contract.
        let bytes = unsafe { image_bytes(image) };
        Ok(bytes.is_some_and(|(_, b)| plugin().is_valid_binary(b)) as i32)
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_init_device(device: i32) -> i32 {
    guard("init_device", OFFLOAD_FAIL, || {
        let requires = REQUIRES_FLAGS.load(std::sync::atomic::Ordering::Relaxed);
        status(on_device(device, |on| {
            on.check_requirements(requires)?;
            on.init_device()
        }))
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_deinit_device(device: i32) -> i32 {
    guard("deinit_device", OFFLOAD_FAIL, || {
        plugin().device(device)?.synchronize()?;
        Ok(OFFLOAD_SUCCESS)
    })
}

/// Two ABIs under one name. 16/17: `__tgt_target_table *(int32_t, __tgt_device_image *)`,
/// the table of the image's device entries. 18: `int32_t (int32_t, __tgt_device_image *,
/// __tgt_device_binary *)`, a status, with a handle to the loaded image stored in the
/// third argument (which 16/17 do not pass: it is read under 18 only). The table pointer
/// and the status come back in the same register: OFFLOAD_FAIL's bits for 18, and null
/// for a failed 16/17 load.
///
/// # Safety
/// `image` is null or a valid `__tgt_device_image` whose entries are valid host entries;
/// under libomptarget 18, `binary` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_load_binary(
    device: i32,
    image: *mut TgtDeviceImage,
    binary: *mut TgtDeviceBinary,
) -> *mut c_void {
    if loader().builds_its_own_table() {
        let status = guard("load_binary", OFFLOAD_FAIL, || {
            // SAFETY: forwarded caller contract.
            let handle = unsafe { load_for_handle(device, image) }?;
            // SAFETY: caller contract: null or writable.
            let out = unsafe { binary.as_mut() }
                .ok_or_else(|| invalid(device, "load_binary got no place for the binary"))?;
            *out = TgtDeviceBinary { handle };
            Ok(OFFLOAD_SUCCESS)
        });
        // Sign-extended, as a C `int` return is read from the low bits.
        return status as isize as *mut c_void;
    }
    guard("load_binary", std::ptr::null_mut(), || {
        // SAFETY: forwarded caller contract.
        unsafe { load_for_table(device, image) }.map(|t| t.cast())
    })
}

/// The image and its entries from libomptarget's descriptor: its key (where the image
/// lies), its bytes, its host entries.
///
/// # Safety
/// As [`__tgt_rtl_load_binary`]'s `image`, whose entries outlive `'a`.
unsafe fn image_and_entries<'a>(
    device: i32,
    image: *mut TgtDeviceImage,
) -> Result<(usize, &'a [u8], &'a [LibomptargetEntry]), PluginError> {
    // SAFETY: forwarded caller contract.
    let (key, bytes) =
        unsafe { image_bytes(image) }.ok_or_else(|| invalid(device, "load_binary got no image"))?;
    // SAFETY: image_bytes checked `image` is non-null; the entries are libomptarget's,
    // alive while the image is registered, longer than this call.
    let entries = unsafe { host_entries(device, &*image) }?;
    Ok((key, bytes, entries))
}

/// 16/17: load, and return the table of device entries, kept with the image.
///
/// # Safety
/// As [`__tgt_rtl_load_binary`]'s `image`.
unsafe fn load_for_table(
    device: i32,
    image: *mut TgtDeviceImage,
) -> Result<*mut TgtTargetTable, PluginError> {
    // SAFETY: forwarded caller contract.
    let (key, bytes, entries) = unsafe { image_and_entries(device, image) }?;
    let on = plugin().device(device)?;
    let mut published = on.load_entries(key, bytes, entries, |addrs| {
        PublishedTable::new(entries, addrs)
    })?;
    let table_ptr = published.table_ptr();
    on.keep_with_image(key, Box::new(published))?;
    diag::debug(|| format!("device {device}: loaded image {key:#x}"));
    Ok(table_ptr)
}

/// 18: load, and return the handle of the [`LoadedBinary`] kept with the image.
///
/// # Safety
/// As [`__tgt_rtl_load_binary`]'s `image`.
unsafe fn load_for_handle(device: i32, image: *mut TgtDeviceImage) -> Result<usize, PluginError> {
    unload_images_of_unmapped_libraries()?;
    // SAFETY: forwarded caller contract.
    let (key, bytes, entries) = unsafe { image_and_entries(device, image) }?;
    let on = plugin().device(device)?;
    let binary = Box::new(on.load_entries(key, bytes, entries, |addrs| {
        LoadedBinary::new(entries, addrs)
    })?);
    let handle = binary.handle();
    on.keep_with_image(key, binary)?;
    diag::debug(|| format!("device {device}: loaded image {key:#x} as binary {handle:#x}"));
    Ok(handle)
}

/// libomptarget 18: the device address of global `name` of a loaded binary. For an
/// indirect function's entry (`0x08`, size 8: clang 18's holder global) that is the
/// holder, whose 8 bytes libomptarget reads to map the host function to the device one.
///
/// # Safety
/// `name` is null or NUL-terminated; `addr` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_get_global(
    binary: TgtDeviceBinary,
    _size: u64,
    name: *const c_char,
    addr: *mut *mut c_void,
) -> i32 {
    guard("get_global", OFFLOAD_FAIL, || {
        // SAFETY: forwarded caller contract.
        let name = unsafe { c_name(name) }?;
        let (device, key, entry) = find_binary(binary, name)?;
        let on = plugin().device(device)?;
        let found = match entry {
            Some(e) if e.kind != Some(EntryKind::IndirectThroughGlobal) => e.addr,
            // The holder, or a global that is no entry of the image.
            _ => on.image_global(key, name)?,
        };
        // SAFETY: caller contract: null or writable.
        unsafe { write_out(addr, found) }
    })
}

/// libomptarget 18: what launches (a kernel's entry) or calls (an indirect function's)
/// the function `name` of a loaded binary; libomptarget passes it back to
/// `launch_kernel`, or maps the host function to it.
///
/// # Safety
/// `name` is null or NUL-terminated; `kernel` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_get_function(
    binary: TgtDeviceBinary,
    name: *const c_char,
    kernel: *mut *mut c_void,
) -> i32 {
    guard("get_function", OFFLOAD_FAIL, || {
        // SAFETY: forwarded caller contract.
        let name = unsafe { c_name(name) }?;
        let (device, _, entry) = find_binary(binary, name)?;
        let entry = entry.ok_or_else(|| {
            invalid(
                device,
                format!(
                    "get_function: `{}` is no offload entry of the binary",
                    name.to_string_lossy()
                ),
            )
        })?;
        // SAFETY: caller contract: null or writable.
        unsafe { write_out(kernel, entry.addr) }
    })
}

/// The device and key of the image behind `binary`, and its entry named `name`; a handle
/// this plugin did not give out, or whose image is gone, is an error.
fn find_binary(
    binary: TgtDeviceBinary,
    name: &CStr,
) -> Result<(i32, usize, Option<binary::EntryAnswer>), PluginError> {
    let p = plugin();
    (0..p.device_count() as i32)
        .find_map(|device| {
            let on = p.device(device).ok()?;
            on.find_kept(|key, b: &LoadedBinary| {
                (b.handle() == binary.handle).then(|| (device, key, b.entry(name)))
            })
        })
        .ok_or_else(|| {
            invalid(
                -1,
                format!("binary {:#x} is not loaded by this plugin", binary.handle),
            )
        })
}

/// # Safety
/// `name` is null or a NUL-terminated string that outlives `'a`.
unsafe fn c_name<'a>(name: *const c_char) -> Result<&'a CStr, PluginError> {
    if name.is_null() {
        return Err(invalid(-1, "no name given"));
    }
    // SAFETY: caller contract: NUL-terminated.
    Ok(unsafe { CStr::from_ptr(name) })
}

/// # Safety
/// `out` is null or writable.
unsafe fn write_out(
    out: *mut *mut c_void,
    addr: crate::backend::DeviceAddr,
) -> Result<i32, PluginError> {
    // SAFETY: caller contract.
    let out = unsafe { out.as_mut() }.ok_or_else(|| invalid(-1, "no place for the address"))?;
    *out = addr as *mut c_void;
    Ok(OFFLOAD_SUCCESS)
}

/// libomptarget 18 calls this (without checking that it exists) when `LIBOMPTARGET_RECORD`
/// or `LIBOMPTARGET_REPLAY` asks for kernel record and replay, which this plugin does not
/// do: it says so, and the device is not used.
#[no_mangle]
pub extern "C" fn __tgt_rtl_initialize_record_replay(
    device: i32,
    _memory_size: i64,
    _vaddr: *mut c_void,
    _is_record: bool,
    _save_output: bool,
    _request_ptr_arg_offset: *mut u64,
) -> i32 {
    guard("initialize_record_replay", OFFLOAD_FAIL, || {
        Err(invalid(
            device,
            "kernel record and replay (LIBOMPTARGET_RECORD, LIBOMPTARGET_REPLAY) is not \
             supported by omptarget-rs",
        ))
    })
}

/// # Safety
/// `desc` is null or a valid `__tgt_bin_desc`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_register_lib(_desc: *mut TgtBinDesc) -> i32 {
    OFFLOAD_SUCCESS
}

/// Unload the descriptor's images from every device they were loaded on.
///
/// # Safety
/// `desc` is null or a valid `__tgt_bin_desc`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_unregister_lib(desc: *mut TgtBinDesc) -> i32 {
    guard("unregister_lib", OFFLOAD_FAIL, || {
        // SAFETY: forwarded caller contract.
        let Some(desc) = (unsafe { desc.as_ref() }) else {
            return Ok(OFFLOAD_SUCCESS);
        };
        let n = usize::try_from(desc.num_device_images).unwrap_or(0);
        if desc.device_images.is_null() || n == 0 {
            return Ok(OFFLOAD_SUCCESS);
        }
        // SAFETY: the descriptor holds `n` device images.
        let images = unsafe { std::slice::from_raw_parts(desc.device_images, n) };
        let p = plugin();
        for img in images {
            let key = img.image_start as usize;
            for device in 0..p.device_count() as i32 {
                p.device(device)?.unload(key)?;
            }
        }
        Ok(OFFLOAD_SUCCESS)
    })
}

/// The seed design's optional entry point: install a whole host-built table on a device.
///
/// # Safety
/// `table` is null (with `table_size` 0) or points at `table_size` entries.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_set_function_ptr_map(
    device: i32,
    table_size: u64,
    table: *mut FptrMapEntry,
) {
    guard("set_function_ptr_map", (), || {
        let rows: &[FptrMapEntry] = if table_size == 0 {
            &[]
        } else if table.is_null() {
            return Err(invalid(
                device,
                format!("table of {table_size} entries at null"),
            ));
        } else {
            let n = usize::try_from(table_size)
                .ok()
                .filter(|n| n.checked_mul(16).is_some_and(|b| b <= isize::MAX as usize))
                .ok_or_else(|| invalid(device, format!("table size {table_size} is too large")))?;
            // SAFETY: caller contract: `table` points at `n` entries.
            unsafe { std::slice::from_raw_parts(table, n) }
        };
        let patched = plugin().device(device)?.set_function_ptr_map(rows)?;
        diag::debug(|| {
            format!(
                "device {device}: fptr map of {} rows installed in {patched} images",
                rows.len()
            )
        });
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Memory

#[no_mangle]
pub extern "C" fn __tgt_rtl_data_alloc(
    device: i32,
    size: i64,
    _host_ptr: *mut c_void,
    kind: i32,
) -> *mut c_void {
    guard("data_alloc", std::ptr::null_mut(), || {
        // TARGET_ALLOC_DEFAULT, HOST, SHARED, DEVICE: the backend maps each to its memory
        // (all ordinary memory on the host).
        let kind = AllocKind::from_raw(kind)
            .ok_or_else(|| invalid(device, format!("unknown allocation kind {kind}")))?;
        let size = usize::try_from(size)
            .map_err(|_| invalid(device, format!("allocation size {size}")))?;
        // libomptarget owns the memory from here: it frees it with __tgt_rtl_data_delete.
        let buffer = plugin().device(device)?.alloc(size, kind)?;
        Ok(buffer.into_raw() as *mut c_void)
    })
}

/// # Safety
/// `ptr` is null or came from `__tgt_rtl_data_alloc` on this device.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_delete(device: i32, ptr: *mut c_void, _kind: i32) -> i32 {
    guard("data_delete", OFFLOAD_FAIL, || {
        if ptr.is_null() {
            return Ok(OFFLOAD_SUCCESS);
        }
        // SAFETY: forwarded caller contract.
        status(unsafe { on_device(device, |on| on.free(ptr as u64)) })
    })
}

fn length(device: i32, size: i64) -> Result<usize, PluginError> {
    usize::try_from(size).map_err(|_| invalid(device, format!("transfer size {size}")))
}

/// A copy's byte count, None when there is nothing to copy; a non-empty copy with a
/// null pointer is refused with `null_refusal`.
fn copy_length(
    device: i32,
    size: i64,
    pointers: [*mut c_void; 2],
    null_refusal: &str,
) -> Result<Option<usize>, PluginError> {
    let n = length(device, size)?;
    if n == 0 {
        return Ok(None);
    }
    if pointers.iter().any(|p| p.is_null()) {
        return Err(invalid(device, null_refusal));
    }
    Ok(Some(n))
}

/// The one body of `data_submit` and `data_submit_async`: on the async info's queue
/// when there is one, else synchronously.
///
/// # Safety
/// `hst` is `size` readable host bytes (untouched until the queue is synchronized when
/// there is an async info, libomptarget's rule for asynchronous copies), `tgt` `size`
/// bytes of device memory; `async_info` is null or a valid `__tgt_async_info`.
unsafe fn write(
    device: i32,
    tgt: *mut c_void,
    hst: *mut c_void,
    size: i64,
    async_info: *mut TgtAsyncInfo,
) -> Result<i32, PluginError> {
    let refusal = "copy to the device with a null pointer";
    let Some(n) = copy_length(device, size, [hst, tgt], refusal)? else {
        return Ok(OFFLOAD_SUCCESS);
    };
    let on = plugin().device(device)?;
    // SAFETY: caller contract: null or a valid async info.
    status(unsafe {
        with_async_info(async_info, |info| match info {
            // SAFETY: caller contract: `hst` holds `n` bytes untouched until the queue is
            // synchronized; `tgt` is `n` bytes of device memory.
            Some(info) => on.write_async(tgt as u64, hst as *const u8, n, info),
            // SAFETY: as above, and the copy completes before it returns.
            None => on.write(tgt as u64, std::slice::from_raw_parts(hst as *const u8, n)),
        })
    })
}

/// The one body of `data_retrieve` and `data_retrieve_async`.
///
/// # Safety
/// `hst` is `size` writable host bytes nothing else touches until the copy completes
/// (until the queue is synchronized when there is an async info), `tgt` `size` bytes of
/// device memory; `async_info` is null or a valid `__tgt_async_info`.
unsafe fn read(
    device: i32,
    hst: *mut c_void,
    tgt: *mut c_void,
    size: i64,
    async_info: *mut TgtAsyncInfo,
) -> Result<i32, PluginError> {
    let refusal = "copy from the device with a null pointer";
    let Some(n) = copy_length(device, size, [hst, tgt], refusal)? else {
        return Ok(OFFLOAD_SUCCESS);
    };
    let on = plugin().device(device)?;
    // SAFETY: caller contract: null or a valid async info.
    status(unsafe {
        with_async_info(async_info, |info| match info {
            // SAFETY: caller contract: `hst` holds `n` writable bytes nothing else touches
            // until the queue is synchronized; `tgt` is `n` bytes of device memory.
            Some(info) => on.read_async(tgt as u64, hst as *mut u8, n, info),
            // SAFETY: as above, and the copy completes before it returns.
            None => on.read(
                tgt as u64,
                std::slice::from_raw_parts_mut(hst as *mut u8, n),
            ),
        })
    })
}

/// The async info as the device sees it ([`AsyncInfo`]), for `body`; what the device
/// left in it (a queue created on first use, or none once synchronized) is stored back,
/// on failure too, so a queue is never lost. None for a null async info.
///
/// # Safety
/// `info` is null or a valid `__tgt_async_info`.
unsafe fn with_async_info<T>(
    info: *mut TgtAsyncInfo,
    body: impl FnOnce(Option<&mut AsyncInfo>) -> Result<T, PluginError>,
) -> Result<T, PluginError> {
    // SAFETY: caller contract.
    let Some(raw) = (unsafe { info.as_mut() }) else {
        return body(None);
    };
    let mut info = AsyncInfo {
        queue: (!raw.queue.is_null()).then_some(raw.queue as QueueHandle),
    };
    let result = body(Some(&mut info));
    raw.queue = info
        .queue
        .map_or(std::ptr::null_mut(), |q| q as *mut c_void);
    result
}

/// # Safety
/// `tgt` is device memory and `hst` host memory, each `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_submit(
    device: i32,
    tgt: *mut c_void,
    hst: *mut c_void,
    size: i64,
) -> i32 {
    // SAFETY: forwarded caller contract.
    guard("data_submit", OFFLOAD_FAIL, || unsafe {
        write(device, tgt, hst, size, std::ptr::null_mut())
    })
}

/// # Safety
/// As `__tgt_rtl_data_submit`; `async_info` is null or a valid `__tgt_async_info`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_submit_async(
    device: i32,
    tgt: *mut c_void,
    hst: *mut c_void,
    size: i64,
    async_info: *mut TgtAsyncInfo,
) -> i32 {
    guard("data_submit_async", OFFLOAD_FAIL, || {
        // SAFETY: forwarded caller contract.
        unsafe { write(device, tgt, hst, size, async_info) }
    })
}

/// # Safety
/// `hst` is host memory and `tgt` device memory, each `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_retrieve(
    device: i32,
    hst: *mut c_void,
    tgt: *mut c_void,
    size: i64,
) -> i32 {
    // SAFETY: forwarded caller contract.
    guard("data_retrieve", OFFLOAD_FAIL, || unsafe {
        read(device, hst, tgt, size, std::ptr::null_mut())
    })
}

/// # Safety
/// As `__tgt_rtl_data_retrieve`; `async_info` is null or a valid `__tgt_async_info`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_retrieve_async(
    device: i32,
    hst: *mut c_void,
    tgt: *mut c_void,
    size: i64,
    async_info: *mut TgtAsyncInfo,
) -> i32 {
    guard("data_retrieve_async", OFFLOAD_FAIL, || {
        // SAFETY: forwarded caller contract.
        unsafe { read(device, hst, tgt, size, async_info) }
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_is_data_exchangable(src_device: i32, dst_device: i32) -> i32 {
    guard("is_data_exchangable", 0, || {
        let n = plugin().device_count() as i32;
        Ok(((0..n).contains(&src_device) && (0..n).contains(&dst_device)) as i32)
    })
}

/// # Safety
/// `src` is `size` bytes of device memory on `src_device`, `dst` on `dst_device`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_exchange(
    src_device: i32,
    src: *mut c_void,
    dst_device: i32,
    dst: *mut c_void,
    size: i64,
) -> i32 {
    guard("data_exchange", OFFLOAD_FAIL, || {
        // SAFETY: forwarded caller contract; no async info: to completion.
        unsafe { exchange(src_device, src, dst_device, dst, size, std::ptr::null_mut()) }
    })
}

/// # Safety
/// As `__tgt_rtl_data_exchange`; `async_info` is null or a valid `__tgt_async_info` of
/// the source device (LLVM 16 passes the source's).
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_exchange_async(
    src_device: i32,
    src: *mut c_void,
    dst_device: i32,
    dst: *mut c_void,
    size: i64,
    async_info: *mut TgtAsyncInfo,
) -> i32 {
    guard("data_exchange_async", OFFLOAD_FAIL, || {
        // SAFETY: forwarded caller contract.
        unsafe { exchange(src_device, src, dst_device, dst, size, async_info) }
    })
}

/// The one body of `data_exchange` and `data_exchange_async`.
///
/// # Safety
/// As `__tgt_rtl_data_exchange_async`; both ranges stay allocated until the copy
/// completes (until the queue is synchronized when there is an async info).
unsafe fn exchange(
    src_device: i32,
    src: *mut c_void,
    dst_device: i32,
    dst: *mut c_void,
    size: i64,
    async_info: *mut TgtAsyncInfo,
) -> Result<i32, PluginError> {
    let refusal = "device-to-device copy with a null pointer";
    let Some(n) = copy_length(dst_device, size, [src, dst], refusal)? else {
        return Ok(OFFLOAD_SUCCESS);
    };
    let (from, to) = (plugin().device(src_device)?, plugin().device(dst_device)?);
    // SAFETY: caller contract: null or a valid async info.
    status(unsafe {
        with_async_info(async_info, |info| {
            // SAFETY: caller contract: both ranges are device memory of their devices,
            // allocated until the copy completes.
            from.copy_to(src as u64, to, dst as u64, n, info)
        })
    })
}

/// Page-lock host memory (CUDA: cuMemHostRegister); `locked` gets the address the
/// device reaches it at. Where device memory needs no locking (the host devices) it is
/// the host address itself.
///
/// # Safety
/// `ptr` is `size` bytes of host memory allocated until unlocked; `locked` is null or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_lock(
    device: i32,
    ptr: *mut c_void,
    size: i64,
    locked: *mut *mut c_void,
) -> i32 {
    guard("data_lock", OFFLOAD_FAIL, || {
        // SAFETY: caller contract: null or a writable pointer slot.
        let slot = unsafe { locked.as_mut() }
            .ok_or_else(|| invalid(device, "data_lock without an output"))?;
        let n = length(device, size)?;
        // SAFETY: caller contract: `ptr` is `n` host bytes allocated until unlocked.
        let pinned = unsafe { plugin().device(device)?.lock_host(ptr.cast(), n) }?;
        *slot = pinned.cast();
        Ok(OFFLOAD_SUCCESS)
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_data_unlock(device: i32, ptr: *mut c_void) -> i32 {
    guard("data_unlock", OFFLOAD_FAIL, || {
        status(on_device(device, |on| on.unlock_host(ptr.cast())))
    })
}

// ---------------------------------------------------------------------------------------
// Kernels and synchronisation

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

/// Wait for the async info's queue and let it go (the queue is null afterwards), or for
/// the whole device.
///
/// # Safety
/// `async_info` is null or a valid `__tgt_async_info`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_synchronize(device: i32, async_info: *mut TgtAsyncInfo) -> i32 {
    guard("synchronize", OFFLOAD_FAIL, || {
        let on = plugin().device(device)?;
        // SAFETY: caller contract: null or valid.
        status(unsafe {
            with_async_info(async_info, |info| match info {
                Some(info) => on.synchronize_queue(info),
                None => on.synchronize(),
            })
        })
    })
}

/// A finished queue is let go and cleared (libomptarget reads a null queue as
/// "complete"); an unfinished one stays.
///
/// # Safety
/// `async_info` is null or a valid `__tgt_async_info`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_query_async(device: i32, async_info: *mut TgtAsyncInfo) -> i32 {
    guard("query_async", OFFLOAD_FAIL, || {
        let on = plugin().device(device)?;
        // SAFETY: caller contract: null or valid.
        status(unsafe { with_async_info(async_info, |info| on.query_queue(info)) })
    })
}

// ---------------------------------------------------------------------------------------
// Events: the device's (a token where its backend has none, [`crate::device::token_event`]).

/// # Safety
/// `event` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_create_event(device: i32, event: *mut *mut c_void) -> i32 {
    guard("create_event", OFFLOAD_FAIL, || {
        // SAFETY: caller contract: null or a writable handle slot.
        let slot = unsafe { event.as_mut() }
            .ok_or_else(|| invalid(device, "create_event without an output"))?;
        *slot = plugin().device(device)?.event_create()? as *mut c_void;
        Ok(OFFLOAD_SUCCESS)
    })
}

/// # Safety
/// `async_info` is null or a valid `__tgt_async_info`; `event` came from create_event.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_record_event(
    device: i32,
    event: *mut c_void,
    async_info: *mut TgtAsyncInfo,
) -> i32 {
    guard("record_event", OFFLOAD_FAIL, || {
        let on = plugin().device(device)?;
        // SAFETY: caller contract: null or valid.
        status(unsafe {
            with_async_info(async_info, |info| {
                on.event_record(event as EventHandle, info)
            })
        })
    })
}

/// # Safety
/// `async_info` is null or a valid `__tgt_async_info`; `event` came from create_event.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_wait_event(
    device: i32,
    event: *mut c_void,
    async_info: *mut TgtAsyncInfo,
) -> i32 {
    guard("wait_event", OFFLOAD_FAIL, || {
        let on = plugin().device(device)?;
        // SAFETY: caller contract: null or valid.
        status(unsafe {
            with_async_info(async_info, |info| on.event_wait(event as EventHandle, info))
        })
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_sync_event(device: i32, event: *mut c_void) -> i32 {
    guard("sync_event", OFFLOAD_FAIL, || {
        status(on_device(device, |on| on.event_sync(event as EventHandle)))
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_destroy_event(device: i32, event: *mut c_void) -> i32 {
    guard("destroy_event", OFFLOAD_FAIL, || {
        status(on_device(device, |on| {
            on.event_destroy(event as EventHandle)
        }))
    })
}
