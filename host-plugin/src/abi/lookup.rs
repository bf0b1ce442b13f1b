//! libomptarget 18's lookups in a loaded binary: a global's or a function's device
//! address by name, from the [`LoadedBinary`] that `load_binary` kept with the image.

use super::binary::{self, LoadedBinary};
use super::{guard, invalid, plugin, TgtDeviceBinary, OFFLOAD_FAIL, OFFLOAD_SUCCESS};
use crate::generic::error::PluginError;
use crate::generic::host_entry::EntryKind;
use std::ffi::{c_char, c_void, CStr};

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
