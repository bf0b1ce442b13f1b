//! The built plugin library through its C ABI, as libomptarget 16 calls it: load a
//! clang-16 device image, translate, launch, install a table, bad inputs, unload.

mod plugin_support;

use e2e_tests::plugin::{
    device_image, tgt_entry, DataAlloc, DataDelete, DataMove, Launch, LoadBinary,
};
use host_plugin::abi::{
    KernelArgs, TgtBinDesc, TgtDeviceImage, TgtOffloadEntry, OFFLOAD_FAIL, OFFLOAD_SUCCESS,
};
use host_plugin::generic::host_entry::{FLAG_INDIRECT, FLAG_INDIRECT_VTABLE};
use host_plugin::FptrMapEntry;
use plugin_support::{host_image, plugin_dir};
use std::ffi::{c_void, CString};
use std::ptr::null_mut;

type SetMap = unsafe extern "C" fn(i32, u64, *mut FptrMapEntry);
type Unregister = unsafe extern "C" fn(*mut TgtBinDesc) -> i32;

struct Abi {
    _lib: libloading::Library,
    load_binary: LoadBinary,
    data_alloc: DataAlloc,
    data_submit: DataMove,
    data_retrieve: DataMove,
    data_delete: DataDelete,
    launch: Launch,
    set_map: SetMap,
    unregister: Unregister,
}

fn open_plugin() -> Abi {
    let lib = e2e_tests::plugin::open(&plugin_dir().join("libomptarget.rtl.x86_64.so"));
    // SAFETY: the symbols below have the signatures of LLVM 16's plugin ABI, which the
    // plugin exports.
    unsafe {
        Abi {
            load_binary: *lib.get(b"__tgt_rtl_load_binary").unwrap(),
            data_alloc: *lib.get(b"__tgt_rtl_data_alloc").unwrap(),
            data_submit: *lib.get(b"__tgt_rtl_data_submit").unwrap(),
            data_retrieve: *lib.get(b"__tgt_rtl_data_retrieve").unwrap(),
            data_delete: *lib.get(b"__tgt_rtl_data_delete").unwrap(),
            launch: *lib.get(b"__tgt_rtl_launch_kernel").unwrap(),
            set_map: *lib.get(b"__tgt_rtl_set_function_ptr_map").unwrap(),
            unregister: *lib.get(b"__tgt_rtl_unregister_lib").unwrap(),
            _lib: lib,
        }
    }
}

/// One team of one thread, as the fixtures' kernels are launched.
fn kernel_args(n: u32) -> KernelArgs {
    e2e_tests::plugin::kernel_args(1, n, 1, 1)
}

/// Run `kernel_call` through the ABI: (io[0] after the call, translated pointer).
fn call_through(abi: &Abi, kernel: *mut c_void, host_fp: u64, arg: i64) -> (i64, u64) {
    // SAFETY: the buffers are allocated by the plugin with the sizes used; kernel_call
    // takes exactly those two pointers.
    unsafe {
        let fp = (abi.data_alloc)(0, 8, null_mut(), 0);
        let io = (abi.data_alloc)(0, 16, null_mut(), 0);
        assert!(!fp.is_null() && !io.is_null());
        let mut host_fp = host_fp;
        let mut io_host = [arg, 0];
        assert_eq!(
            (abi.data_submit)(0, fp, &mut host_fp as *mut u64 as *mut c_void, 8),
            0
        );
        assert_eq!(
            (abi.data_submit)(0, io, io_host.as_mut_ptr() as *mut c_void, 16),
            0
        );
        // Base pointers plus offsets, as libomptarget passes them.
        let mut args = [(fp as *mut u8).wrapping_sub(4) as *mut c_void, io];
        let mut offsets = [4isize, 0];
        let ka = kernel_args(2);
        let rc = (abi.launch)(
            0,
            kernel,
            args.as_mut_ptr(),
            offsets.as_mut_ptr(),
            &ka,
            null_mut(),
        );
        assert_eq!(rc, OFFLOAD_SUCCESS);
        assert_eq!(
            (abi.data_retrieve)(0, io_host.as_mut_ptr() as *mut c_void, io, 16),
            0
        );
        assert_eq!((abi.data_delete)(0, fp, 0), 0);
        assert_eq!((abi.data_delete)(0, io, 0), 0);
        (io_host[0], io_host[1] as u64)
    }
}

#[test]
fn libomptarget_call_sequence_through_the_c_abi() {
    let abi = open_plugin();
    let mut image = host_image("device_image", true);
    let names: Vec<CString> = ["kernel_call", "add_one", "ptr_to_negate", "counter"]
        .iter()
        .map(|n| CString::new(*n).unwrap())
        .collect();
    // Host addresses: real host objects would do; distinct keys are enough.
    let host = [0x100usize, 0x5000, 0x3000, 0x200];
    let sizes = [0usize, 0, 8, 4];
    let flags = [0, FLAG_INDIRECT, FLAG_INDIRECT, 0];
    let mut entries: Vec<TgtOffloadEntry> = (0..4)
        .map(|i| tgt_entry(&names[i], host[i], sizes[i], flags[i]))
        .collect();
    let mut device_image = device_image(&mut image, &mut entries);

    // SAFETY: the descriptor points at live image bytes and entries with C names.
    let table = unsafe { (abi.load_binary)(0, &mut device_image) };
    assert!(!table.is_null(), "load_binary failed");
    // SAFETY: a non-null table from load_binary stays valid until the image is unloaded.
    let dev: &[TgtOffloadEntry] = unsafe {
        let t = &*table;
        let n = t.entries_end.offset_from(t.entries_begin) as usize;
        std::slice::from_raw_parts(t.entries_begin, n)
    };
    assert_eq!(dev.len(), 4, "one device entry per host entry");
    for (d, h) in dev.iter().zip(&entries) {
        assert_eq!((d.size, d.flags), (h.size, h.flags));
        assert!(!d.addr.is_null());
    }
    let kernel = dev[0].addr;
    assert_eq!(
        call_through(&abi, kernel, 0x5000, 41),
        (42, dev[1].addr as u64)
    );
    assert_eq!(
        call_through(&abi, kernel, 0x3000, 9),
        (-9, dev[2].addr as u64)
    );
    assert_eq!(call_through(&abi, kernel, 0x4242, 9), (9, 0x4242));

    // The seed's entry point: a whole table from the host runtime, given unsorted.
    let mut rows = [
        FptrMapEntry {
            host_ptr: 0x8000,
            tgt_ptr: dev[1].addr as u64,
        },
        FptrMapEntry {
            host_ptr: 0x7000,
            tgt_ptr: dev[2].addr as u64,
        },
    ];
    // SAFETY: `rows` holds the two entries announced.
    unsafe { (abi.set_map)(0, 2, rows.as_mut_ptr()) };
    assert_eq!(call_through(&abi, kernel, 0x8000, 1).0, 2);
    assert_eq!(call_through(&abi, kernel, 0x7000, 1).0, -1);
    // Malformed calls are refused without touching anything.
    // SAFETY: null with a non-zero size is exactly the malformed input under test.
    unsafe { (abi.set_map)(0, 5, null_mut()) };
    // SAFETY: as above; device 99 does not exist.
    unsafe { (abi.set_map)(99, 0, null_mut()) };
    assert_eq!(call_through(&abi, kernel, 0x8000, 1).0, 2);

    // Unregistering the library unloads its image: the kernel is gone.
    let mut desc = TgtBinDesc {
        num_device_images: 1,
        host_entries_begin: device_image.entries_begin,
        host_entries_end: device_image.entries_end,
        device_images: &mut device_image,
    };
    // SAFETY: the descriptor is valid; the launch afterwards must be refused.
    unsafe {
        assert_eq!((abi.unregister)(&mut desc), OFFLOAD_SUCCESS);
        let ka = kernel_args(0);
        let rc = (abi.launch)(0, kernel, null_mut(), null_mut(), &ka, null_mut());
        assert_eq!(rc, OFFLOAD_FAIL);
    }
}

/// An indirect vtable entry as libomptarget hands it over: the host vtable is read in
/// place from host memory, slot by slot paired with the device vtable's.
#[test]
fn indirect_vtable_entry_through_the_c_abi() {
    let abi = open_plugin();
    let mut image = host_image("device_image", true);
    // Slot 0 (an offset-to-top of zero) carries no function; slots 1 and 2 are the host
    // "functions" 0xA000 and 0xA008 (device_image.c: add_one and twice).
    let host_vtable: [u64; 3] = [0, 0xA000, 0xA008];
    let names = [c"kernel_call", c"vtable_ptr"];
    let vtable_entry = |size: usize| TgtOffloadEntry {
        addr: host_vtable.as_ptr() as *mut c_void,
        name: names[1].as_ptr() as *mut _,
        size,
        flags: FLAG_INDIRECT | FLAG_INDIRECT_VTABLE,
        reserved: 0,
    };
    let kernel_entry = TgtOffloadEntry {
        addr: 0x100 as *mut c_void,
        name: names[0].as_ptr() as *mut _,
        size: 0,
        flags: 0,
        reserved: 0,
    };
    let mut entries = [kernel_entry, vtable_entry(24)];
    let mut desc = device_image(&mut image, &mut entries);
    // SAFETY: the descriptor points at live image bytes, entries with C names and a
    // 24-byte host vtable.
    let table = unsafe { (abi.load_binary)(0, &mut desc) };
    assert!(!table.is_null(), "load_binary failed");
    // SAFETY: a non-null table from load_binary stays valid until the image is unloaded.
    let kernel = unsafe { (*(*table).entries_begin).addr };
    assert_eq!(call_through(&abi, kernel, 0xA000, 10).0, 11);
    assert_eq!(call_through(&abi, kernel, 0xA008, 10).0, 20);
    assert_eq!(call_through(&abi, kernel, 0, 10), (10, 0));

    // A vtable size no class has is refused before anything is read.
    let mut image2 = host_image("device_image", true);
    let mut huge = [kernel_entry, vtable_entry(2 << 20)];
    let mut desc = device_image(&mut image2, &mut huge);
    // SAFETY: the plugin must refuse the size without reading the (24-byte) vtable.
    assert!(unsafe { (abi.load_binary)(0, &mut desc) }.is_null());
}

#[test]
fn malformed_calls_fail_cleanly() {
    let abi = open_plugin();
    // SAFETY: each call passes inputs the plugin must reject without dereferencing
    // anything invalid (null pointers, unknown devices, a non-ELF image).
    unsafe {
        assert!((abi.load_binary)(0, null_mut()).is_null());
        let mut junk = *b"this is not an ELF image at all";
        let r = junk.as_mut_ptr_range();
        let mut img = TgtDeviceImage {
            image_start: r.start as *mut c_void,
            image_end: r.end as *mut c_void,
            entries_begin: null_mut(),
            entries_end: null_mut(),
        };
        assert!((abi.load_binary)(0, &mut img).is_null());
        assert!((abi.load_binary)(17, &mut img).is_null());
        assert!(
            (abi.data_alloc)(0, 16, null_mut(), 42).is_null(),
            "bad kind"
        );
        assert!(
            (abi.data_alloc)(0, -1, null_mut(), 0).is_null(),
            "negative size"
        );
        assert!(
            (abi.data_alloc)(-3, 16, null_mut(), 0).is_null(),
            "bad device"
        );
        let ka = kernel_args(0);
        let rc = (abi.launch)(
            0,
            0x1234 as *mut c_void,
            null_mut(),
            null_mut(),
            &ka,
            null_mut(),
        );
        assert_eq!(rc, OFFLOAD_FAIL, "made-up kernel address");
        let rc = (abi.launch)(
            0,
            null_mut(),
            null_mut(),
            null_mut(),
            std::ptr::null(),
            null_mut(),
        );
        assert_eq!(rc, OFFLOAD_FAIL, "no kernel arguments");
        assert_eq!(
            (abi.data_submit)(0, null_mut(), null_mut(), 8),
            OFFLOAD_FAIL
        );
        assert_eq!(
            (abi.data_retrieve)(0, null_mut(), null_mut(), -8),
            OFFLOAD_FAIL
        );
    }
}
