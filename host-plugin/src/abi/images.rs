//! Device images: whether this plugin takes one, loading one (a table for 16/17, a
//! binary handle for 18), unloading those of a library that is gone, and installing a
//! whole host-built table.

use super::binary::LoadedBinary;
use super::entries::LibomptargetEntry;
use super::loader::loader;
use super::published::PublishedTable;
use super::{
    guard, invalid, plugin, TgtBinDesc, TgtDeviceBinary, TgtDeviceImage, TgtImageInfo,
    TgtOffloadEntry, TgtTargetTable, OFFLOAD_FAIL, OFFLOAD_SUCCESS,
};
use crate::generic::error::PluginError;
use crate::generic::host_entry::HostEntry;
use crate::generic::table::fptr::FptrMapEntry;
use crate::support::diag;
use std::ffi::c_void;

/// Largest vtable we read from host memory for an indirect vtable entry: far above any
/// real class, low enough that a corrupt size fails instead of reading gigabytes.
const MAX_VTABLE_BYTES: u64 = 1 << 20;

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

/// Unload the images whose host copy is gone (their library was unmapped).
/// libomptarget 18 never says when a library goes (no `deinit_plugin`, no
/// `unregister_lib`), so under 18 each load does this first.
pub(super) fn unload_images_of_unmapped_libraries() -> Result<(), PluginError> {
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
