//! The plugin's and its devices' lifetime: the plugin's start and end, the device count,
//! the program's `requires` flags, each device's start and end, and what libomptarget
//! asks about the plugin before it loads anything.

use super::images::unload_images_of_unmapped_libraries;
use super::loader::loader;
use super::{guard, invalid, on_device, plugin, status, OFFLOAD_FAIL, OFFLOAD_SUCCESS};
use crate::support::diag;
use std::ffi::c_void;

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
/// The memory pools give their free blocks back (nothing in use is touched), so the
/// driver holds no memory the program no longer has.
#[no_mangle]
pub extern "C" fn __tgt_rtl_deinit_plugin() -> i32 {
    guard("deinit_plugin", OFFLOAD_FAIL, || {
        unload_images_of_unmapped_libraries()?;
        plugin().trim_pools()?;
        Ok(OFFLOAD_SUCCESS)
    })
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
