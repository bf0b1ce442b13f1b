//! Device runtime for OpenMP `declare target indirect`.
//!
//! Device code that calls through a pointer holding the HOST address of a function first
//! passes it through [`__kmpc_target_translate_fptr`], which looks it up in a table the
//! offload plugin installs when it loads the image: it allocates the sorted
//! `{host_ptr, tgt_ptr}` array in device memory and writes its address and length into
//! the two weak globals below.
//!
//! Built for nvptx64 and amdgcn as LLVM bitcode (linked into kernels with clang's
//! `-mlink-builtin-bitcode`) and for x86_64 as a static library (the host "device" of
//! libomptarget), all by `cargo xtask build-device`, which passes
//! `--cfg device_rtl_artifact`. Without that cfg (plain `cargo test`, or a host crate
//! that depends on this one for [`FptrMapEntry`]) the crate builds on stable and exports
//! no C symbols, so it cannot interpose on a device image's globals.
//!
//! A second nvptx64 build, the `warp-cooperative` variant (`--cfg
//! device_rtl_warp_cooperative`), adds a warp-uniform fast path: lanes that translate the
//! same pointer search for it together ([`cooperative`]). It is opt-in until measured on
//! a GPU (docs/BENCHMARKS.md, 1b).
#![no_std]
#![cfg_attr(device_rtl_artifact, feature(linkage, core_intrinsics))]
#![cfg_attr(device_rtl_artifact, allow(internal_features))]
// The warp-cooperative variant calls LLVM's NVPTX warp intrinsics by name.
#![cfg_attr(
    all(target_arch = "nvptx64", device_rtl_warp_cooperative),
    feature(link_llvm_intrinsics)
)]

pub mod cooperative;
pub mod table;
#[cfg(all(target_arch = "nvptx64", device_rtl_warp_cooperative))]
mod warp;

pub use table::FptrMapEntry;

use core::ffi::c_void;
use core::ptr;

/// Address of the device copy of the sorted translation table; null until the plugin
/// writes it. Weak, as in the design, so that other objects (a front end may emit the
/// same definition per translation unit) link with it into one variable; `#[used]` keeps
/// it external through `-mlink-builtin-bitcode`'s internalization, so the plugin can
/// still find it by name and the lookup cannot be folded to the null initializer.
#[cfg_attr(device_rtl_artifact, no_mangle, linkage = "weak")]
#[used]
#[allow(non_upper_case_globals)]
pub static mut __omp_offloading_fptr_map_p: *const FptrMapEntry = ptr::null();

/// Number of entries at `__omp_offloading_fptr_map_p`; 0 until the plugin writes it.
#[cfg_attr(device_rtl_artifact, no_mangle, linkage = "weak")]
#[used]
#[allow(non_upper_case_globals)]
pub static mut __omp_offloading_fptr_map_size: u64 = 0;

/// The table the plugin installed, or an empty one when there is none (null pointer,
/// size 0) or the globals cannot describe a table (misaligned pointer, size too large
/// for the address space).
///
/// # Safety
/// If the pointer is non-null, aligned and the size fits, the globals must describe
/// `size` readable, initialized entries that stay unchanged for `'a`.
#[inline(always)]
unsafe fn installed_table<'a>() -> &'a [FptrMapEntry] {
    // SAFETY: an aligned read of an initialized global through a raw pointer (no
    // reference to the `static mut` is formed); the plugin writes it before any kernel
    // runs, never during one, so there is no data race. Volatile so the compiler never
    // replaces the value written at run time with the initializer it sees now.
    let base = unsafe { ptr::read_volatile(ptr::addr_of!(__omp_offloading_fptr_map_p)) };
    // SAFETY: as above.
    let size = unsafe { ptr::read_volatile(ptr::addr_of!(__omp_offloading_fptr_map_size)) };
    let max_len = isize::MAX as usize / core::mem::size_of::<FptrMapEntry>();
    match usize::try_from(size) {
        Ok(len) if len > 0 && len <= max_len && !base.is_null() && base.is_aligned() => {
            // SAFETY: non-null, aligned, len * 16 <= isize::MAX; that `len` entries are
            // readable and unchanged for 'a is the caller's contract.
            unsafe { core::slice::from_raw_parts(base, len) }
        }
        _ => &[],
    }
}

/// Translate the host address of a `declare target indirect` function into the address
/// of its device version; any other pointer is returned unchanged.
///
/// # Safety
/// When `__omp_offloading_fptr_map_p` is non-null it must point to
/// `__omp_offloading_fptr_map_size` readable entries, sorted by `host_ptr` as unsigned
/// addresses with unique keys (the plugin installs it so before any kernel runs).
#[cfg_attr(device_rtl_artifact, no_mangle)]
pub unsafe extern "C" fn __kmpc_target_translate_fptr(fn_ptr: *mut c_void) -> *mut c_void {
    // SAFETY: the installed table's validity is this function's own safety contract.
    let table = unsafe { installed_table() };
    let key = fn_ptr as u64;
    #[cfg(all(target_arch = "nvptx64", device_rtl_warp_cooperative))]
    let translated = warp::translate(table, key);
    #[cfg(not(all(target_arch = "nvptx64", device_rtl_warp_cooperative)))]
    let translated = table::translate(table, key);
    if translated == key {
        // Keep the argument itself (and its provenance) when nothing matched.
        fn_ptr
    } else {
        translated as *mut c_void
    }
}

/// The device artifacts are `no_std` outputs that need a panic handler. No panic is
/// reachable from the exported function (the search has no checked indexing or
/// arithmetic that can fail); this only satisfies the language.
#[cfg(all(device_rtl_artifact, not(test)))]
#[panic_handler]
fn on_panic(_: &core::panic::PanicInfo) -> ! {
    core::intrinsics::abort()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The only test that touches the globals (tests run in parallel).
    #[test]
    fn exported_lookup_reads_the_globals() {
        let table = [
            FptrMapEntry {
                host_ptr: 0x1000,
                tgt_ptr: 0xa000,
            },
            FptrMapEntry {
                host_ptr: 0x2000,
                tgt_ptr: 0xb000,
            },
            FptrMapEntry {
                host_ptr: -16,
                tgt_ptr: 0xc000,
            },
        ];
        let call = |p: u64| {
            // SAFETY: the globals are null/0 or describe `table`, alive for this test.
            unsafe { __kmpc_target_translate_fptr(p as *mut c_void) as u64 }
        };
        // Defaults: null table, size 0.
        assert_eq!(call(0x1000), 0x1000);
        // SAFETY: no other test touches the globals.
        unsafe {
            __omp_offloading_fptr_map_p = table.as_ptr();
            __omp_offloading_fptr_map_size = table.len() as u64;
        }
        assert_eq!(call(0x1000), 0xa000);
        assert_eq!(call(0x2000), 0xb000);
        assert_eq!(call(-16i64 as u64), 0xc000);
        for miss in [0, 0xfff, 0x1001, 0x2001, u64::MAX] {
            assert_eq!(call(miss), miss);
        }
        // A size with a null pointer, or a misaligned pointer, is treated as no table.
        // SAFETY: as above.
        unsafe {
            __omp_offloading_fptr_map_p = ptr::null();
        }
        assert_eq!(call(0x1000), 0x1000);
        // SAFETY: as above; the pointer is never dereferenced because it is misaligned.
        unsafe {
            __omp_offloading_fptr_map_p = table.as_ptr().cast::<u8>().wrapping_add(1).cast();
        }
        assert_eq!(call(0x1000), 0x1000);
        // SAFETY: as above.
        unsafe {
            __omp_offloading_fptr_map_p = ptr::null();
            __omp_offloading_fptr_map_size = 0;
        }
    }
}
