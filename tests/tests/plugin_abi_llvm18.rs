//! The built plugin library through the C ABI as libomptarget 18 calls it (its own
//! process: the plugin finds its loader once): `init_requires` answers with a status,
//! `load_binary` stores a binary handle, `get_function`/`get_global` answer per entry
//! (for clang 18's size-8 indirect entry, the holder global, which libomptarget reads),
//! and kernels get clang 18's implicit first argument. The real libomptarget 18 runs its
//! lit suite through the plugin in `cargo xtask lit --llvm 18`.

mod plugin_support;

use e2e_tests::plugin::{device_image, tgt_entry, DataAlloc, DataDelete, DataMove, Launch};
use host_plugin::abi::loader::ABI_OVERRIDE_VAR;
use host_plugin::abi::{TgtDeviceBinary, TgtDeviceImage, TgtOffloadEntry, OFFLOAD_FAIL};
use host_plugin::generic::host_entry::FLAG_INDIRECT;
use plugin_support::{host_image, plugin_dir};
use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;

type LoadBinary18 = unsafe extern "C" fn(i32, *mut TgtDeviceImage, *mut TgtDeviceBinary) -> i32;
type GetGlobal = unsafe extern "C" fn(TgtDeviceBinary, u64, *const c_char, *mut *mut c_void) -> i32;
type GetFunction = unsafe extern "C" fn(TgtDeviceBinary, *const c_char, *mut *mut c_void) -> i32;
type InitRequires = unsafe extern "C" fn(i64) -> i64;
type InitPlugin = unsafe extern "C" fn() -> i32;
type RecordReplay = unsafe extern "C" fn(i32, i64, *mut c_void, bool, bool, *mut u64) -> i32;

struct Abi18 {
    _lib: libloading::Library,
    init_plugin: InitPlugin,
    init_requires: InitRequires,
    load_binary: LoadBinary18,
    get_global: GetGlobal,
    get_function: GetFunction,
    data_alloc: DataAlloc,
    data_submit: DataMove,
    data_retrieve: DataMove,
    data_delete: DataDelete,
    launch: Launch,
    record_replay: RecordReplay,
}

fn open_as_libomptarget_18() -> Abi18 {
    // Before the plugin is opened, and the only test of this process: no other thread
    // reads the environment meanwhile.
    std::env::set_var(ABI_OVERRIDE_VAR, "18");
    let lib = e2e_tests::plugin::open(&plugin_dir().join("libomptarget.rtl.x86_64.so"));
    // SAFETY: the symbols below have the signatures of LLVM 18's plugin ABI
    // (include/Shared/PluginAPI.h), which the plugin speaks under libomptarget 18.
    unsafe {
        Abi18 {
            init_plugin: *lib.get(b"__tgt_rtl_init_plugin").unwrap(),
            init_requires: *lib.get(b"__tgt_rtl_init_requires").unwrap(),
            load_binary: *lib.get(b"__tgt_rtl_load_binary").unwrap(),
            get_global: *lib.get(b"__tgt_rtl_get_global").unwrap(),
            get_function: *lib.get(b"__tgt_rtl_get_function").unwrap(),
            data_alloc: *lib.get(b"__tgt_rtl_data_alloc").unwrap(),
            data_submit: *lib.get(b"__tgt_rtl_data_submit").unwrap(),
            data_retrieve: *lib.get(b"__tgt_rtl_data_retrieve").unwrap(),
            data_delete: *lib.get(b"__tgt_rtl_data_delete").unwrap(),
            launch: *lib.get(b"__tgt_rtl_launch_kernel").unwrap(),
            record_replay: *lib.get(b"__tgt_rtl_initialize_record_replay").unwrap(),
            _lib: lib,
        }
    }
}

impl Abi18 {
    fn function(&self, bin: TgtDeviceBinary, name: &CStr) -> Result<u64, i32> {
        let mut out = null_mut();
        // SAFETY: a NUL-terminated name and a writable out-pointer.
        let rc = unsafe { (self.get_function)(bin, name.as_ptr(), &mut out) };
        if rc == 0 {
            Ok(out as u64)
        } else {
            Err(rc)
        }
    }

    fn global(&self, bin: TgtDeviceBinary, size: u64, name: &CStr) -> Result<u64, i32> {
        let mut out = null_mut();
        // SAFETY: a NUL-terminated name and a writable out-pointer.
        let rc = unsafe { (self.get_global)(bin, size, name.as_ptr(), &mut out) };
        if rc == 0 {
            Ok(out as u64)
        } else {
            Err(rc)
        }
    }

    /// `size` bytes of device memory at `addr`, as libomptarget reads them.
    fn read(&self, addr: u64, size: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; size];
        // SAFETY: `bytes` holds `size` bytes; `addr` is a device address of at least
        // `size` bytes (the plugin refuses others).
        let rc = unsafe {
            (self.data_retrieve)(
                0,
                bytes.as_mut_ptr().cast(),
                addr as *mut c_void,
                size as i64,
            )
        };
        assert_eq!(rc, 0, "data_retrieve of {size} bytes at {addr:#x}");
        bytes
    }

    /// Launch `kernel_call_18` with the two arguments libomptarget passes (the host
    /// pointer to translate, and io): io after the launch.
    fn call(&self, kernel: u64, host_fp: u64, arg: i64) -> [i64; 3] {
        // SAFETY: the buffers are the plugin's, of the sizes used; the kernel takes the
        // implicit argument, which the plugin adds, and these two.
        unsafe {
            let fp = (self.data_alloc)(0, 8, null_mut(), 0);
            let io = (self.data_alloc)(0, 24, null_mut(), 0);
            assert!(!fp.is_null() && !io.is_null());
            let (mut host_fp, mut io_host) = (host_fp, [arg, 0, 0]);
            assert_eq!(
                (self.data_submit)(0, fp, (&mut host_fp as *mut u64).cast(), 8),
                0
            );
            assert_eq!(
                (self.data_submit)(0, io, io_host.as_mut_ptr().cast(), 24),
                0
            );
            let mut args = [fp, io];
            let mut offsets = [0isize, 0];
            let ka = e2e_tests::plugin::kernel_args(2, 2, 1, 1);
            let rc = (self.launch)(
                0,
                kernel as *mut c_void,
                args.as_mut_ptr(),
                offsets.as_mut_ptr(),
                &ka,
                null_mut(),
            );
            assert_eq!(rc, 0, "launch");
            assert_eq!(
                (self.data_retrieve)(0, io_host.as_mut_ptr().cast(), io, 24),
                0
            );
            assert_eq!((self.data_delete)(0, fp, 0), 0);
            assert_eq!((self.data_delete)(0, io, 0), 0);
            io_host
        }
    }
}

#[test]
fn libomptarget_18_call_sequence_through_the_c_abi() {
    let abi = open_as_libomptarget_18();
    // SAFETY: no arguments; 18 calls it first.
    assert_eq!(unsafe { (abi.init_plugin)() }, 0);
    // 18 drops the device unless init_requires says OFFLOAD_SUCCESS (16's answer, the
    // flags, would be 1 here: OMP_REQ_NONE).
    // SAFETY: plain integers.
    assert_eq!(unsafe { (abi.init_requires)(1) }, 0);

    let mut image = host_image("device_image", true);
    let names = [c"kernel_call_18", c"add_one", c"ptr_to_negate", c"counter"];
    // Host "functions" 0x5000 (add_one: our compiler plugin's size-0 entry) and 0x3000
    // (negate: clang 18's size-8 entry naming the holder global).
    let host = [0x100usize, 0x5000, 0x3000, 0x200];
    let sizes = [0usize, 0, 8, 4];
    let flags = [0, FLAG_INDIRECT, FLAG_INDIRECT, 0];
    let mut entries: Vec<TgtOffloadEntry> = (0..4)
        .map(|i| tgt_entry(names[i], host[i], sizes[i], flags[i]))
        .collect();
    let mut device_image = device_image(&mut image, &mut entries);

    let mut bin = TgtDeviceBinary { handle: 0 };
    // SAFETY: a live image descriptor and a writable binary.
    let rc = unsafe { (abi.load_binary)(0, &mut device_image, &mut bin) };
    assert_eq!(rc, 0);
    assert_ne!(bin.handle, 0, "load_binary stored no binary handle");

    // What libomptarget 18's initLibrary asks, entry by entry (size 0: get_function).
    let kernel = abi.function(bin, names[0]).expect("the kernel");
    let add_one = abi
        .function(bin, names[1])
        .expect("the size-0 indirect function");
    let holder = abi.global(bin, 8, names[2]).expect("the holder global");
    let counter = abi.global(bin, 4, names[3]).expect("the global");
    assert_eq!(
        abi.read(counter, 4),
        5i32.to_ne_bytes(),
        "counter's initial value"
    );
    // libomptarget 18 reads the holder's 8 bytes to map the host function to the device
    // one: they must be the device `negate`.
    let negate = u64::from_ne_bytes(abi.read(holder, 8).try_into().unwrap());
    assert!(negate != 0 && negate != holder);

    // The kernel gets the implicit argument (no launch environment: ~0) before
    // libomptarget's, and translates both kinds of indirect entry.
    assert_eq!(abi.call(kernel, 0x5000, 41), [42, add_one as i64, -1]);
    assert_eq!(abi.call(kernel, 0x3000, 9), [-9, negate as i64, -1]);
    assert_eq!(abi.call(kernel, 0x4242, 9), [9, 0x4242, -1]);

    // Clear failures: a handle the plugin never gave out, a name that is no entry, no
    // place for the handle, record and replay.
    let stale = TgtDeviceBinary {
        handle: bin.handle ^ 0x10,
    };
    assert_eq!(abi.function(stale, names[0]), Err(OFFLOAD_FAIL));
    assert_eq!(abi.global(stale, 4, names[3]), Err(OFFLOAD_FAIL));
    assert_eq!(abi.function(bin, c"no_such_kernel"), Err(OFFLOAD_FAIL));
    assert_eq!(abi.global(bin, 4, c"no_such_global"), Err(OFFLOAD_FAIL));
    // SAFETY: a live image descriptor; the null binary is the malformed input.
    let rc = unsafe { (abi.load_binary)(0, &mut device_image, null_mut()) };
    assert_eq!(rc, OFFLOAD_FAIL);
    let mut offset = 0u64;
    // SAFETY: plain values and a writable offset.
    let rc = unsafe { (abi.record_replay)(0, 1 << 20, null_mut(), true, false, &mut offset) };
    assert_eq!(rc, OFFLOAD_FAIL);
}
