//! Contract tests of the HIP backend against a stand-in HIP library
//! (tests/fixtures/amdgpu/fake_hip.c: host memory as "device" memory, every call logged).
//! No AMD GPU has run this backend; these tests pin down which HIP calls it makes, with
//! which arguments, in which order, and the bytes it writes, driving it through the same
//! plugin core (`Plugin::load_binary`) that libomptarget's `__tgt_rtl_load_binary` uses,
//! on real code objects built from device-rtl.

mod amdgpu_support;

use amdgpu_support::*;
use e2e_tests::plugin::entry;
use host_plugin::backend::hip::HipBackend;
use host_plugin::entries::FLAG_INDIRECT;
use host_plugin::{Backend, OffloadEntry, Plugin, PluginError, PluginKind};

// Host "addresses" are only keys for the device: any distinct values do.
const HOST_ADD_ONE: u64 = 0x5000;
const HOST_NEGATE: u64 = 0x3000;
/// What the stand-in's `ptr_to_negate` holds, as the loader's relocation would leave it.
const NEGATE_ON_DEVICE: u64 = 0x7f00_0000_1b0c;

fn entries() -> Vec<OffloadEntry> {
    vec![
        entry("call_indirect", 0x100, 0, 0),
        entry("counter", 0x200, 4, 0),
        // Seed convention: the entry names the device function itself.
        entry("add_one", HOST_ADD_ONE, 0, FLAG_INDIRECT),
        // clang 18+ convention: a pointer global holding the device function.
        entry("ptr_to_negate", HOST_NEGATE, 8, FLAG_INDIRECT),
    ]
}

/// The hex number after `marker` in `line` (`= 0x...`, `args=[0x..` ...).
fn hex_after(line: &str, marker: &str) -> u64 {
    let at = line
        .find(marker)
        .unwrap_or_else(|| panic!("no `{marker}` in `{line}`"))
        + marker.len();
    let digits: String = line[at..]
        .trim_start_matches("0x")
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    u64::from_str_radix(&digits, 16).unwrap_or_else(|_| panic!("no hex number in `{line}`"))
}

/// Each pattern matches a later line than the one before; returns the matched lines.
fn in_order<'a>(log: &'a [String], patterns: &[&str]) -> Vec<&'a str> {
    let mut from = 0;
    let mut found = Vec::new();
    for p in patterns {
        let at = log[from..]
            .iter()
            .position(|l| l.contains(p))
            .unwrap_or_else(|| {
                panic!(
                    "`{p}` not found after line {from} of the HIP call log:\n{}",
                    log.join("\n")
                )
            });
        found.push(log[from + at].as_str());
        from += at + 1;
    }
    found
}

/// Read `n` native-endian words at a host address the stand-in handed out.
fn words_at(addr: u64, n: usize) -> Vec<u64> {
    // SAFETY: `addr` is a live allocation of the stand-in HIP library (a global's buffer
    // or a hipMalloc'd block) of at least `n` words, in this process.
    unsafe { std::slice::from_raw_parts(addr as *const u64, n) }.to_vec()
}

#[test]
fn load_binary_installs_the_table_through_hip() {
    let co = code_object("gfx90a:xnack+");
    let fake = FakeHip::new("install", "gfx90a:sramecc+:xnack+,gfx1100");
    fake.seed_global("ptr_to_negate", NEGATE_ON_DEVICE);
    let backend = HipBackend::from_library(fake.path_str()).expect("load the stand-in");
    let ids: Vec<String> = backend
        .devices()
        .iter()
        .map(|d| d.target_id.as_ref().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["gfx90a:sramecc+:xnack+", "gfx1100"]);
    assert!(backend.accepts_image(&co));
    let plugin = Plugin::with_backend(PluginKind::Amdgpu, Box::new(backend));
    assert_eq!(plugin.device_count(), 2);
    assert!(plugin.is_valid_binary(&co));
    plugin.init_device(0).unwrap();

    fake.clear_log();
    let key = 0xA11;
    let entries = entries();
    let dev = plugin.load_binary(0, key, &co, &entries).unwrap();
    let log = fake.log();
    eprintln!("HIP calls of load_binary:\n{}", log.join("\n"));

    // The calls, in order: load, resolve each entry, then allocate and copy the table
    // and point the device runtime's globals at it.
    let lines = in_order(
        &log,
        &[
            &format!(
                "hipModuleLoadData(device=0, e_flags={:#x}) = module",
                e_flags(&co)
            ),
            "hipModuleGetFunction(module1, call_indirect)",
            "hipModuleGetGlobal(module1, counter)",
            // add_one is a device function: located from a variable's address.
            "hipModuleGetGlobal(module1, __omp_offloading_fptr_map_p)",
            "hipModuleGetGlobal(module1, ptr_to_negate)",
            "hipMemcpy(device=0, dst=",
            "hipModuleGetGlobal(module1, __omp_offloading_fptr_map_p)",
            "hipModuleGetGlobal(module1, __omp_offloading_fptr_map_size)",
            "hipMalloc(device=0, size=32)",
            "hipMemcpy(device=0, dst=",
            "hipMemcpy(device=0, dst=",
            "hipMemcpy(device=0, dst=",
        ],
    );
    assert_eq!(
        lines.len(),
        log.len(),
        "no other HIP calls:\n{}",
        log.join("\n")
    );
    let kernel_handle = hex_after(lines[1], ") = ");
    let map_p = fake.global_address("__omp_offloading_fptr_map_p").unwrap();
    let map_size = fake
        .global_address("__omp_offloading_fptr_map_size")
        .unwrap();
    let counter = fake.global_address("counter").unwrap();
    let ptr_to_negate = fake.global_address("ptr_to_negate").unwrap();
    assert_eq!(hex_after(lines[3], ") = "), map_p);
    // Reading the pointer global: 8 bytes device-to-host from it.
    assert!(lines[5].ends_with("size=8, kind=2)"), "{}", lines[5]);
    assert_eq!(hex_after(lines[5], "src="), ptr_to_negate);
    let table = hex_after(lines[8], ") = ");
    // The table (32 bytes) host-to-device into the allocation, then its address into
    // __omp_offloading_fptr_map_p and its length into __omp_offloading_fptr_map_size.
    for (line, dst, size) in [
        (lines[9], table, 32),
        (lines[10], map_p, 8),
        (lines[11], map_size, 8),
    ] {
        assert_eq!(hex_after(line, "dst="), dst, "{line}");
        assert!(line.ends_with(&format!("size={size}, kind=1)")), "{line}");
    }

    // The bytes, read straight from the stand-in's memory.
    assert_eq!(words_at(map_p, 1), [table]);
    assert_eq!(words_at(map_size, 1), [2]);
    // add_one's device address: where the code object was loaded (a variable's device
    // address minus its ELF address) plus add_one's ELF address.
    let add_one_on_device =
        map_p - symbol_value(&co, "__omp_offloading_fptr_map_p") + symbol_value(&co, "add_one");
    assert_eq!(
        words_at(table, 4),
        [
            HOST_NEGATE,
            NEGATE_ON_DEVICE,
            HOST_ADD_ONE,
            add_one_on_device
        ],
        "sorted by host address"
    );
    let rows = plugin.fptr_table(0, key).unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| (r.host_ptr, r.tgt_ptr))
            .collect::<Vec<_>>(),
        [
            (HOST_NEGATE, NEGATE_ON_DEVICE),
            (HOST_ADD_ONE, add_one_on_device)
        ]
    );

    // One device entry per host entry, in order.
    let addrs: Vec<u64> = dev.iter().map(|d| d.addr).collect();
    assert_eq!(
        addrs,
        [kernel_handle, counter, add_one_on_device, NEGATE_ON_DEVICE]
    );

    // A launch: the kernel's hipFunction_t, one work-item, the pointer arguments packed
    // in one buffer, then a synchronize (the backend contract is "run to completion").
    let a = plugin.alloc(0, 8).unwrap();
    let b = plugin.alloc(0, 4).unwrap();
    fake.clear_log();
    // SAFETY: the stand-in runs nothing; the arguments are live allocations.
    unsafe { plugin.launch(0, dev[0].addr, &[a, b]) }.unwrap();
    assert_eq!(
        fake.log(),
        [
            format!(
                "hipModuleLaunchKernel(device=0, call_indirect, grid=1x1x1, block=1x1x1, \
                 shared=0, stream=(nil), args=[{a:#x},{b:#x}])"
            ),
            "hipDeviceSynchronize(device=0)".to_string(),
        ]
    );
    // An address that is no kernel never reaches HIP.
    fake.clear_log();
    // SAFETY: rejected before any call.
    assert!(unsafe { plugin.launch(0, counter, &[a]) }.is_err());
    assert!(fake.log().is_empty(), "{:?}", fake.log());
    // Transfers go through hipMemcpy with the right kinds.
    // SAFETY: `a` is an 8-byte allocation.
    unsafe { plugin.submit(0, a, &0x1234u64.to_ne_bytes()) }.unwrap();
    let mut back = [0u8; 8];
    // SAFETY: as above.
    unsafe { plugin.retrieve(0, &mut back, a) }.unwrap();
    assert_eq!(u64::from_ne_bytes(back), 0x1234);
    assert_eq!(words_at(a, 1), [0x1234]);
    let kinds: Vec<String> = fake.log();
    assert!(kinds[0].ends_with("size=8, kind=1)") && kinds[1].ends_with("size=8, kind=2)"));

    // Unloading frees the table and unloads the module.
    fake.clear_log();
    plugin.unload(0, key).unwrap();
    in_order(
        &fake.log(),
        &[
            &format!("hipFree(device=0, {table:#x})"),
            "hipModuleUnload(module1)",
        ],
    );
    assert!(plugin.fptr_table(0, key).is_none());
}

#[test]
fn each_device_gets_only_code_it_can_run() {
    let gfx90a_xnack_on = code_object("gfx90a:xnack+");
    let gfx90a_xnack_off = code_object("gfx90a:xnack-");
    let gfx1100 = code_object("gfx1100");
    let fake = FakeHip::new("select", "gfx90a:sramecc+:xnack-,gfx1100");
    // The size-8 entry's global holds a device function, as a linked image's would (the
    // plugin refuses a null one).
    fake.seed_global("ptr_to_negate", NEGATE_ON_DEVICE);
    let backend = HipBackend::from_library(fake.path_str()).unwrap();
    // No device has xnack on: that build is of no use here.
    assert!(!backend.accepts_image(&gfx90a_xnack_on));
    assert!(backend.accepts_image(&gfx90a_xnack_off));
    assert!(backend.accepts_image(&gfx1100));

    // Several code objects in one clang offload bundle: the backend loads the one for
    // the device (the xnack- build on device 0, the gfx1100 one on device 1).
    let bundled = bundle(&["gfx90a:xnack+", "gfx90a:xnack-", "gfx1100"]);
    fake.clear_log();
    let m0 = backend.load_image(0, &bundled).unwrap();
    let m1 = backend.load_image(1, &bundled).unwrap();
    in_order(
        &fake.log(),
        &[
            &format!(
                "hipModuleLoadData(device=0, e_flags={:#x})",
                e_flags(&gfx90a_xnack_off)
            ),
            &format!(
                "hipModuleLoadData(device=1, e_flags={:#x})",
                e_flags(&gfx1100)
            ),
        ],
    );
    // Kernels resolve to hipFunction_t handles; a device function is no kernel.
    assert!(m0.function(c"call_indirect").is_ok());
    assert!(m0.function(c"add_one").is_err());
    assert!(m0.function(c"no_such_kernel").is_err());
    assert!(
        m0.indirect_function(c"counter").is_err(),
        "a variable is no function"
    );
    assert_eq!(m0.global_size(c"counter"), Some(4));
    assert_eq!(m0.global_size(c"__omp_offloading_fptr_map_p"), Some(8));
    drop((m0, m1));

    // Through the plugin core: a wrong build fails with a message naming both target
    // IDs, and never reaches hipModuleLoadData.
    let plugin = Plugin::with_backend(PluginKind::Amdgpu, Box::new(backend));
    fake.clear_log();
    let err = plugin
        .load_binary(0, 1, &gfx90a_xnack_on, &entries())
        .expect_err("xnack+ code on an xnack- device");
    let msg = err.to_string();
    assert!(matches!(err, PluginError::Load { .. }), "{msg}");
    assert!(
        msg.contains("gfx90a:sramecc+:xnack-") && msg.contains("gfx90a:xnack+"),
        "{msg}"
    );
    let err = plugin
        .load_binary(1, 1, &gfx90a_xnack_off, &entries())
        .unwrap_err();
    assert!(err.to_string().contains("gfx1100"), "{err}");
    assert!(
        !fake
            .log()
            .iter()
            .any(|l| l.starts_with("hipModuleLoadData")),
        "{:?}",
        fake.log()
    );
    // The right builds load.
    plugin.load_binary(1, 2, &gfx1100, &entries()).unwrap();
    assert!(fake
        .log()
        .iter()
        .any(|l| l.starts_with("hipModuleLoadData(device=1")));
}

#[test]
fn a_runtime_without_devices_gives_a_plugin_without_devices() {
    let fake = FakeHip::new("none", "");
    let backend = HipBackend::from_library(fake.path_str()).unwrap();
    assert_eq!(backend.device_count(), 0);
    let plugin = Plugin::with_backend(PluginKind::Amdgpu, Box::new(backend));
    assert_eq!(plugin.device_count(), 0);
    assert!(matches!(
        plugin.init_device(0),
        Err(PluginError::NoSuchDevice { .. })
    ));
    // It asked how many devices there are, and nothing else.
    assert_eq!(fake.log(), ["hipGetDeviceCount() = 0"]);
}
