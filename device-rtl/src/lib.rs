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
pub mod head;
pub mod hint;
pub mod index;
pub mod symbols;
pub mod table;
#[cfg(all(target_arch = "nvptx64", device_rtl_warp_cooperative))]
mod warp;

pub use head::FptrHead;
pub use index::FptrIndex;
pub use table::FptrMapEntry;

use core::ffi::c_void;
use core::ptr;

// The globals the plugin writes and device code only reads. Weak, as in the design, so
// that other objects (a front end may emit the same definition per translation unit) link
// with them into one variable, and so that the compiler never takes the initializer it
// sees for the value the plugin writes at run time; `#[used]` keeps them external
// through `-mlink-builtin-bitcode`'s internalization, so the plugin can still find them
// by name. Device code reads them with plain loads (never volatile). In the GPU bitcode
// `cargo xtask build-device` then marks them `constant` (device-build's
// `read_only_globals::mark`): device code never writes them, so the compiler may load them
// once and hoist the loads out of a kernel's loops, even over indirect calls (NVPTX reads
// them through the read-only cache, `ld.global.nc`); the driver still writes them before a
// kernel runs, as any `.global`. In Rust they stay `static mut`: an immutable static's
// reads are folded to its initializer by rustc itself, and the host "device" writes them
// in the same address space.

/// Address of the device copy of the sorted translation table; null until the plugin
/// writes it.
#[cfg_attr(device_rtl_artifact, no_mangle, linkage = "weak")]
#[used]
#[allow(non_upper_case_globals)]
pub static mut __omp_offloading_fptr_map_p: *const FptrMapEntry = ptr::null();

/// Number of entries at `__omp_offloading_fptr_map_p`; 0 until the plugin writes it.
#[cfg_attr(device_rtl_artifact, no_mangle, linkage = "weak")]
#[used]
#[allow(non_upper_case_globals)]
pub static mut __omp_offloading_fptr_map_size: u64 = 0;

/// The header of the optional index of the table ([`index`]): where its buckets are, how
/// many, and the hash seeds. All zero (no index) until a plugin that builds one writes it;
/// then the lookup reads this header and two buckets instead of searching the table. A
/// plugin that does not know it never writes it, and the device keeps searching the
/// sorted table.
#[cfg_attr(device_rtl_artifact, no_mangle, linkage = "weak")]
#[used]
#[allow(non_upper_case_globals)]
pub static mut __omptarget_rs_fptr_index: FptrIndex = FptrIndex::NONE;

/// The table's head ([`head`]): a small table's rows, or a larger one's key range, read
/// before anything else. All zero (no head) until a plugin that knows it writes it; the
/// lookup then goes straight to the index or the search.
#[cfg_attr(device_rtl_artifact, no_mangle, linkage = "weak")]
#[used]
#[allow(non_upper_case_globals)]
pub static mut __omptarget_rs_fptr_head: FptrHead = FptrHead::NONE;

/// What the head the plugin installed says of `key`.
///
/// # Safety
/// The head, if any, describes the table installed beside it (the plugin's contract).
#[inline(always)]
unsafe fn head_answer(key: u64) -> head::Answer {
    let global = ptr::addr_of!(__omptarget_rs_fptr_head);
    // SAFETY: aligned reads of an initialized global through raw pointers (no reference
    // to a `static mut` is formed), written by the plugin before any kernel runs and
    // never during one (no data race). Plain loads: the global is weak, so the compiler
    // never assumes its initializer (and an all-zero head only sends the lookup on to the
    // index or the search).
    let (first, span_complement, rows_here) = unsafe {
        (
            ptr::read(ptr::addr_of!((*global).first_key)),
            ptr::read(ptr::addr_of!((*global).span_complement)),
            ptr::read(ptr::addr_of!((*global).rows_here)),
        )
    };
    // SAFETY: as above; read only when the head holds the table's rows.
    let rows = || unsafe { ptr::read(ptr::addr_of!((*global).rows)) };
    head::FptrHead::answer(first, span_complement, rows_here, rows, key)
}

/// The index the plugin installed, or None (no index, or a header that cannot be valid:
/// the device then searches the sorted table).
///
/// # Safety
/// If the header passes [`index::IndexView::from_header`]'s checks, the buckets it names
/// must be readable and unchanged for `'a`.
#[inline(always)]
unsafe fn installed_index<'a>() -> Option<index::IndexView<'a>> {
    // SAFETY: an aligned read of an initialized global through a raw pointer, written by
    // the plugin before any kernel runs and never during one (no data race). A plain
    // load (see the globals): should it ever be folded to the all-zero initializer, the
    // lookup falls back to the search, never to a wrong answer.
    let header = unsafe { ptr::read(ptr::addr_of!(__omptarget_rs_fptr_index)) };
    // SAFETY: the buckets' validity is this function's own safety contract.
    unsafe { index::IndexView::from_header(header) }
}

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
    // reference to a `static mut` is formed); the plugin writes it before any kernel
    // runs, never during one, so there is no data race. A plain load, which a kernel may
    // hoist out of its loop: the global is weak, so the compiler never replaces the
    // value written at run time with the initializer it sees now.
    let base = unsafe { ptr::read(ptr::addr_of!(__omp_offloading_fptr_map_p)) };
    // SAFETY: as above.
    let size = unsafe { ptr::read(ptr::addr_of!(__omp_offloading_fptr_map_size)) };
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
/// The head (`__omptarget_rs_fptr_head`) answers first: a table of up to
/// [`head::HEAD_ROWS`] rows from its rows alone, a key outside a larger table's key range
/// with no further load. Otherwise, with an index installed (`__omptarget_rs_fptr_index`),
/// the answer comes from its two candidate buckets (read at once after the header);
/// without one, from the search of the sorted table. A kernel that translates in a loop
/// loads the head and the index header once, before the loop (on a GPU).
///
/// # Safety
/// When `__omp_offloading_fptr_map_p` is non-null it must point to
/// `__omp_offloading_fptr_map_size` readable entries, sorted by `host_ptr` as unsigned
/// addresses with unique keys (the plugin installs it so before any kernel runs). When
/// `__omptarget_rs_fptr_index` names buckets, they must be readable and hold an index of
/// that table (built by [`index::build`]). A head in `__omptarget_rs_fptr_head` must be
/// that table's ([`FptrHead::of`]).
#[cfg_attr(device_rtl_artifact, no_mangle)]
pub unsafe extern "C" fn __kmpc_target_translate_fptr(fn_ptr: *mut c_void) -> *mut c_void {
    let key = fn_ptr as u64;
    // SAFETY: the head describes the installed table: this function's own contract.
    let translated = match unsafe { head_answer(key) } {
        head::Answer::Done(result) => result,
        head::Answer::AskTable => {
            // SAFETY: the installed index's validity is this function's own contract.
            match unsafe { installed_index() } {
                Some(index) => index.translate(key),
                // SAFETY: the installed table's validity is this function's own contract.
                None => search_installed_table(unsafe { installed_table() }, key),
            }
        }
    };
    if translated == key {
        // Keep the argument itself (and its provenance) when nothing matched.
        fn_ptr
    } else {
        translated as *mut c_void
    }
}

/// The search of the sorted table, when there is no index.
#[inline(always)]
fn search_installed_table(table: &[FptrMapEntry], key: u64) -> u64 {
    #[cfg(all(target_arch = "nvptx64", device_rtl_warp_cooperative))]
    let translated = warp::translate(table, key);
    #[cfg(not(all(target_arch = "nvptx64", device_rtl_warp_cooperative)))]
    let translated = table::translate(table, key);
    translated
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
    extern crate std;
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
                host_ptr: -16i64 as u64,
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
        // With an index of the same table, the same answers.
        let built = index::build::<{ index::SLOTS }, _>(
            &table,
            &index::BuildPolicy::DEFAULT,
            |n| std::vec![index::Bucket::default(); n],
        )
        .unwrap();
        let mut buckets = built.buckets;
        let header = FptrIndex {
            buckets: buckets.as_ptr().expose_provenance() as u64,
            bucket_count: buckets.len() as u64,
            seeds: built.seeds,
        };
        // SAFETY: as above; `buckets` outlives every call below.
        unsafe { __omptarget_rs_fptr_index = header };
        assert_eq!(call(0x1000), 0xa000);
        assert_eq!(call(-16i64 as u64), 0xc000);
        for miss in [0, 0xfff, 0x1001, 0x2001, u64::MAX] {
            assert_eq!(call(miss), miss);
        }
        // The index is what answers: emptied, it finds nothing, though the table is there.
        let filler = FptrMapEntry::default(); // 0 is no key of `table`: the filler
        for bucket in buckets.iter_mut() {
            for slot in bucket.iter_mut() {
                if slot.host_ptr != 0 {
                    *slot = filler;
                }
            }
        }
        // SAFETY: as above (the same buckets, their address exposed again after the writes).
        unsafe {
            __omptarget_rs_fptr_index = FptrIndex {
                buckets: buckets.as_ptr().expose_provenance() as u64,
                ..header
            }
        };
        assert_eq!(call(0x1000), 0x1000);
        // A header that cannot be valid (misaligned buckets) is ignored: the search again.
        // SAFETY: as above; the header is rejected before any bucket is read.
        unsafe {
            __omptarget_rs_fptr_index = FptrIndex {
                buckets: header.buckets + 4,
                ..header
            }
        };
        assert_eq!(call(0x1000), 0xa000);
        // SAFETY: as above.
        unsafe { __omptarget_rs_fptr_index = FptrIndex::NONE };

        // The head answers first: a head of rows alone (here of another table, to show
        // that it is what answers), a range without reading the table for keys outside.
        let small = [FptrMapEntry {
            host_ptr: 0x1000,
            tgt_ptr: 0xd000,
        }];
        // SAFETY: as above.
        unsafe { __omptarget_rs_fptr_head = FptrHead::of(&small) };
        assert_eq!(call(0x1000), 0xd000);
        assert_eq!(call(0x2000), 0x2000);
        // SAFETY: as above.
        unsafe { __omptarget_rs_fptr_head = FptrHead::of(&table) };
        assert_eq!(call(0x1000), 0xa000);
        assert_eq!(call(-16i64 as u64), 0xc000);
        // A range that excludes a key answers it unchanged, though the table has it.
        // SAFETY: as above.
        unsafe {
            __omptarget_rs_fptr_head = FptrHead {
                first_key: 0x1000,
                span_complement: !0x1000,
                ..FptrHead::NONE
            }
        };
        assert_eq!(call(0x1000), 0xa000);
        assert_eq!(call(-16i64 as u64), -16i64 as u64);
        // SAFETY: as above.
        unsafe { __omptarget_rs_fptr_head = FptrHead::NONE };

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
