//! Contract tests of the HIP backend against a stand-in HIP library
//! (tests/fixtures/amdgpu/fake_hip.c: host memory as "device" memory, every call logged).
//! No AMD GPU has run this backend; these tests pin down which HIP calls it makes, with
//! which arguments, in which order, and the bytes it writes, driving it through the same
//! plugin core (`Device::load_binary`) that libomptarget's `__tgt_rtl_load_binary` uses,
//! on real code objects built from device-rtl.

mod amdgpu_support;

use amdgpu_support::*;
use e2e_tests::plugin::entry;
use host_plugin::backend::hip::grid::DeviceLimits;
use host_plugin::backend::hip::HipBackend;
use host_plugin::backend::AllocKind;
use host_plugin::backend::LaunchRequest;
use host_plugin::generic::host_entry::FLAG_INDIRECT;
use host_plugin::generic::table::fptr_index::{FptrIndex, IndexView, SLOTS};
use host_plugin::{Backend, HostOffloadEntry, Plugin, PluginError, PluginKind};

fn entries() -> Vec<HostOffloadEntry<'static>> {
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
    plugin.device(0).and_then(|on| on.init_device()).unwrap();

    fake.clear_log();
    let key = 0xA11;
    let entries = entries();
    let dev = plugin
        .device(0)
        .and_then(|on| on.load_binary(key, &co, &entries))
        .unwrap();
    let log = fake.log();
    eprintln!("HIP calls of load_binary:\n{}", log.join("\n"));

    // The calls, in order: load, resolve each entry and the device runtime's globals
    // (every lookup before any allocation), then allocate and copy the table and point
    // the globals at it, then the same for the table's index (its buckets, then its
    // header into the index global).
    let lines = in_order(
        &log,
        &[
            &format!(
                "hipModuleLoadData(device=0, e_flags={:#x}) = module",
                e_flags(&co)
            ),
            "hipModuleGetFunction(module1, call_indirect)",
            // The kernel's own work-group limit and static LDS, for launch_teams
            // (call_indirect has no `_exec_mode` global, so nothing is read for its
            // mode).
            "hipFuncGetAttribute(call_indirect, MAX_THREADS_PER_BLOCK) = 1024",
            "hipFuncGetAttribute(call_indirect, SHARED_SIZE_BYTES) = 0",
            "hipModuleGetGlobal(module1, counter)",
            // add_one is a device function: located from a variable's address.
            "hipModuleGetGlobal(module1, __omp_offloading_fptr_map_p)",
            "hipModuleGetGlobal(module1, ptr_to_negate)",
            "hipMemcpy(device=0, dst=",
            "hipModuleGetGlobal(module1, __omp_offloading_fptr_map_p)",
            "hipModuleGetGlobal(module1, __omp_offloading_fptr_map_size)",
            "hipModuleGetGlobal(module1, __omptarget_rs_fptr_index)",
            "hipModuleGetGlobal(module1, __omptarget_rs_fptr_head)",
            "hipMalloc(device=0, size=32)",
            "hipMemcpy(device=0, dst=",
            "hipMemcpy(device=0, dst=",
            "hipMemcpy(device=0, dst=",
            // Two buckets (two entries at 80 % load) plus room to align them to 32 bytes.
            "hipMalloc(device=0, size=95)",
            "hipMemcpy(device=0, dst=",
            "hipMemcpy(device=0, dst=",
            // The head: the two rows themselves (96 bytes).
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
    assert_eq!(hex_after(lines[5], ") = "), map_p);
    // Reading the pointer global: 8 bytes device-to-host from it.
    assert!(lines[7].ends_with("size=8, kind=2)"), "{}", lines[7]);
    assert_eq!(hex_after(lines[7], "src="), ptr_to_negate);
    let table = hex_after(lines[12], ") = ");
    // The table (32 bytes) host-to-device into the allocation, then its address into
    // __omp_offloading_fptr_map_p and its length into __omp_offloading_fptr_map_size.
    for (line, dst, size) in [
        (lines[13], table, 32),
        (lines[14], map_p, 8),
        (lines[15], map_size, 8),
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
    // The index: 64 bytes of buckets at the first 32-byte boundary of the allocation,
    // then its 32-byte header into __omptarget_rs_fptr_index.
    let index_global = fake.global_address("__omptarget_rs_fptr_index").unwrap();
    assert_eq!(hex_after(lines[10], ") = "), index_global);
    let index_alloc = hex_after(lines[16], ") = ");
    let buckets = index_alloc.next_multiple_of(32);
    for (line, dst, size) in [(lines[17], buckets, 64), (lines[18], index_global, 32)] {
        assert_eq!(hex_after(line, "dst="), dst, "{line}");
        assert!(line.ends_with(&format!("size={size}, kind=1)")), "{line}");
    }
    let header = words_at(index_global, 4);
    assert_eq!(header[..2], [buckets, 2]);
    assert_eq!(
        plugin
            .device(0)
            .ok()
            .and_then(|on| on.fptr_index(key))
            .unwrap()
            .header,
        FptrIndex {
            buckets,
            bucket_count: 2,
            seeds: [header[2], header[3]]
        }
    );
    // Then the head: the table's two rows, into __omptarget_rs_fptr_head.
    let head_global = fake.global_address("__omptarget_rs_fptr_head").unwrap();
    assert_eq!(hex_after(lines[11], ") = "), head_global);
    assert_eq!(hex_after(lines[19], "dst="), head_global, "{}", lines[19]);
    assert!(lines[19].ends_with("size=96, kind=1)"), "{}", lines[19]);
    let head = words_at(head_global, 4 + 2 * host_plugin::fptr_head::HEAD_ROWS);
    assert_eq!(head[..3], [HOST_NEGATE, !(HOST_ADD_ONE - HOST_NEGATE), 2]);
    assert_eq!(
        head[4..8],
        [
            HOST_NEGATE,
            NEGATE_ON_DEVICE,
            HOST_ADD_ONE,
            add_one_on_device
        ]
    );

    // The bytes written are an index of the table: device-rtl's own lookup agrees.
    let written = FptrIndex {
        buckets,
        bucket_count: 2,
        seeds: [header[2], header[3]],
    };
    // SAFETY: the stand-in's allocation holds the two buckets just checked, alive while
    // the image is loaded.
    let index = unsafe { IndexView::<SLOTS>::from_header(written) }.expect("a valid header");
    assert_eq!(index.translate(HOST_NEGATE), NEGATE_ON_DEVICE);
    assert_eq!(index.translate(HOST_ADD_ONE), add_one_on_device);
    assert_eq!(index.translate(HOST_ADD_ONE + 16), HOST_ADD_ONE + 16);

    let rows = plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_table(key))
        .unwrap();
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

    // A launch of this plain kernel (no `_exec_mode`): the kernel's hipFunction_t, one
    // work-item, the pointer arguments packed in one buffer, then a synchronize (the
    // backend contract is "run to completion").
    let a_buffer = plugin
        .device(0)
        .and_then(|on| on.alloc(8, AllocKind::Device))
        .unwrap();
    let a = a_buffer.addr();
    let b_buffer = plugin
        .device(0)
        .and_then(|on| on.alloc(4, AllocKind::Device))
        .unwrap();
    let b = b_buffer.addr();
    fake.clear_log();
    // SAFETY: the stand-in runs nothing; the arguments are live allocations.
    unsafe {
        plugin
            .device(0)
            .and_then(|on| on.launch(dev[0].addr, &[a, b]))
    }
    .unwrap();
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
    assert!(unsafe { plugin.device(0).and_then(|on| on.launch(counter, &[a])) }.is_err());
    assert!(fake.log().is_empty(), "{:?}", fake.log());
    // Transfers go through hipMemcpy with the right kinds.
    // SAFETY: `a` is an 8-byte allocation.
    unsafe {
        plugin
            .device(0)
            .and_then(|on| on.write(a, &0x1234u64.to_ne_bytes()))
    }
    .unwrap();
    let mut back = [0u8; 8];
    // SAFETY: as above.
    unsafe { plugin.device(0).and_then(|on| on.read(a, &mut back)) }.unwrap();
    assert_eq!(u64::from_ne_bytes(back), 0x1234);
    assert_eq!(words_at(a, 1), [0x1234]);
    let kinds: Vec<String> = fake.log();
    assert!(kinds[0].ends_with("size=8, kind=1)") && kinds[1].ends_with("size=8, kind=2)"));

    // Unloading frees the table and unloads the module.
    fake.clear_log();
    plugin.device(0).and_then(|on| on.unload(key)).unwrap();
    in_order(
        &fake.log(),
        &[
            &format!("hipFree(device=0, {table:#x})"),
            "hipModuleUnload(module1)",
        ],
    );
    assert!(plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_table(key))
        .is_none());
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
    // the device (the xnack- build on device 0, the gfx1100 one on device 1): each
    // device chooses its code object, then loads it, as the plugin core asks.
    let bundled = bundle(&["gfx90a:xnack+", "gfx90a:xnack-", "gfx1100"]);
    fake.clear_log();
    let load_on = |index: usize| {
        let device = backend.device(index);
        let code = device.device_code(&bundled).unwrap();
        let symbols = backend.inspect_image(code.bytes()).unwrap();
        device
            .load_image(code.bytes(), symbols.as_ref(), None)
            .unwrap()
    };
    let (m0, m1) = (load_on(0), load_on(1));
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
        .device(0)
        .and_then(|on| on.load_binary(1, &gfx90a_xnack_on, &entries()))
        .expect_err("xnack+ code on an xnack- device");
    let msg = err.to_string();
    assert!(matches!(err, PluginError::Load { .. }), "{msg}");
    assert!(
        msg.contains("gfx90a:sramecc+:xnack-") && msg.contains("gfx90a:xnack+"),
        "{msg}"
    );
    let err = plugin
        .device(1)
        .and_then(|on| on.load_binary(1, &gfx90a_xnack_off, &entries()))
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
    plugin
        .device(1)
        .and_then(|on| on.load_binary(2, &gfx1100, &entries()))
        .unwrap();
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
        plugin.device(0).and_then(|on| on.init_device()),
        Err(PluginError::NoSuchDevice { .. })
    ));
    // It asked how many devices there are, and nothing else.
    assert_eq!(fake.log(), ["hipGetDeviceCount() = 0"]);
}

/// hipDeviceAttribute_t values (ROCm 6) the stand-in lets a test change.
const HIP_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: i32 = 29;
const HIP_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: i32 = 63;

/// The OpenMP-style kernels of the fixture and the plain one, as kernel entries.
fn kernel_entries() -> Vec<HostOffloadEntry<'static>> {
    let mut all = entries();
    all.push(entry("generic_region", 0x110, 0, 0));
    all.push(entry("spmd_region", 0x120, 0, 0));
    all
}

/// Seed the stand-in's `<kernel>_exec_mode` globals with the values the code object
/// itself holds (the stand-in does not read the image; the loader would).
fn seed_exec_modes(fake: &FakeHip, co: &[u8]) {
    for global in ["generic_region_exec_mode", "spmd_region_exec_mode"] {
        let bytes = symbol_bytes(co, global);
        assert_eq!(bytes.len(), 1, "{global} is an i8");
        fake.seed_global(global, u64::from(bytes[0]));
    }
}

/// The stand-in's wave64 gfx90a device as the backend must see it: 1024 work-items per
/// group at most (grid limit u32::MAX work-items), 256 by default, `default_blocks` teams.
fn gfx90a_limits(default_blocks: u32) -> DeviceLimits {
    DeviceLimits {
        warp_size: 64,
        max_threads: 1024,
        block_limit: u32::MAX / 1024,
        default_threads: 256,
        default_blocks,
    }
}

/// Launch `kernel` with `request` through `launch_teams` on the stand-in, which must end
/// the launch with a device synchronization; returns the (grid, block) it got.
fn teams_geometry(
    fake: &FakeHip,
    plugin: &Plugin,
    device: i32,
    kernel: u64,
    out: u64,
    request: LaunchRequest,
) -> (u32, u32) {
    fake.clear_log();
    // SAFETY: the stand-in runs nothing; `out` is a live allocation.
    unsafe {
        plugin
            .device(device)
            .and_then(|on| on.launch_teams(kernel, &[out], request))
    }
    .unwrap();
    let log = fake.log();
    assert_eq!(
        log.last().unwrap(),
        &format!("hipDeviceSynchronize(device={device})")
    );
    launch_geometry(&log)
}

fn request(num_teams: u32, thread_limit: u32, tripcount: u64) -> LaunchRequest {
    LaunchRequest {
        num_teams,
        thread_limit,
        tripcount,
        dynamic_shared_memory: 0,
    }
}

#[test]
fn launch_teams_uses_llvm_16s_geometry_per_execution_mode() {
    let gfx90a = code_object("gfx90a");
    let gfx1100 = code_object("gfx1100");
    // The fixture's modes are LLVM 16's: generic 1, SPMD 2.
    assert_eq!(symbol_bytes(&gfx90a, "generic_region_exec_mode"), [1]);
    assert_eq!(symbol_bytes(&gfx90a, "spmd_region_exec_mode"), [2]);
    let fake = FakeHip::new("geometry", "gfx90a:sramecc+:xnack-,gfx1100");
    fake.seed_global("ptr_to_negate", NEGATE_ON_DEVICE);
    seed_exec_modes(&fake, &gfx90a);
    // 60 compute units: LLVM 16's default is 4 teams per CU, so 240 teams.
    fake.set_device_attribute(HIP_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 60);
    // generic_region's own work-group limit (its amdgpu-flat-work-group-size).
    fake.set_kernel_max_threads("generic_region", 256);
    let backend = HipBackend::from_library(fake.path_str()).unwrap();
    let limits: Vec<DeviceLimits> = backend.devices().iter().map(|d| d.limits).collect();
    assert_eq!(limits[0], gfx90a_limits(240));
    assert_eq!(limits[1].warp_size, 32, "gfx1100 is wave32");
    let plugin = Plugin::with_backend(PluginKind::Amdgpu, Box::new(backend));

    fake.clear_log();
    let dev0 = plugin
        .device(0)
        .and_then(|on| on.load_binary(1, &gfx90a, &kernel_entries()))
        .unwrap();
    // Each OpenMP kernel's mode is read through HIP once, when it is resolved: the
    // global's address, then its one byte device-to-host.
    let log = fake.log();
    let reads = in_order(
        &log,
        &[
            "hipModuleGetFunction(module1, generic_region)",
            "hipModuleGetGlobal(module1, generic_region_exec_mode)",
            "hipMemcpy(device=0, dst=",
            "hipFuncGetAttribute(generic_region, MAX_THREADS_PER_BLOCK) = 256",
            "hipModuleGetFunction(module1, spmd_region)",
            "hipModuleGetGlobal(module1, spmd_region_exec_mode)",
            "hipMemcpy(device=0, dst=",
            "hipFuncGetAttribute(spmd_region, MAX_THREADS_PER_BLOCK) = 1024",
        ],
    );
    for (global, copy) in [(reads[1], reads[2]), (reads[5], reads[6])] {
        assert_eq!(hex_after(copy, "src="), hex_after(global, ") = "), "{copy}");
        assert!(copy.ends_with("size=1, kind=2)"), "{copy}");
    }
    assert!(
        !log.iter().any(|l| l.contains("call_indirect_exec_mode")),
        "a plain kernel's mode is not looked up:\n{}",
        log.join("\n")
    );

    let (plain, generic, spmd) = (dev0[0].addr, dev0[4].addr, dev0[5].addr);
    let out_buffer = plugin
        .device(0)
        .and_then(|on| on.alloc(4, AllocKind::Device))
        .unwrap();
    let out = out_buffer.addr();
    let run = |device: i32, kernel: u64, num_teams: u32, thread_limit: u32, tripcount: u64| {
        teams_geometry(
            &fake,
            &plugin,
            device,
            kernel,
            out,
            request(num_teams, thread_limit, tripcount),
        )
    };
    // wave64 gfx90a, 240 default teams, 256 default work-group:
    // no clauses: the defaults, in every mode (LLVM 16 adds no warp to the default).
    assert_eq!(run(0, generic, 0, 0, 0), (240, 256));
    assert_eq!(run(0, spmd, 0, 0, 0), (240, 256));
    // thread_limit(128): generic mode adds a wavefront for the main thread.
    assert_eq!(run(0, generic, 0, 128, 0), (240, 128 + 64));
    assert_eq!(run(0, spmd, 0, 128, 0), (240, 128));
    // thread_limit(256) in generic mode wants 320, capped by the kernel's 256.
    assert_eq!(run(0, generic, 0, 256, 0), (240, 256));
    // SPMD loop of 10000 iterations: one per work-item, 10000 / 256 rounded up = 40.
    assert_eq!(run(0, spmd, 0, 0, 10_000), (40, 256));
    // Generic `teams distribute` of 100 iterations: one per team.
    assert_eq!(run(0, generic, 0, 0, 100), (100, 256));
    // A long loop is held to the default number of teams.
    assert_eq!(run(0, spmd, 0, 0, 1 << 40), (240, 256));
    // num_teams(7) thread_limit(64).
    assert_eq!(run(0, spmd, 7, 64, 0), (7, 64));
    // A kernel without `_exec_mode` gets SPMD's rules from launch_teams...
    assert_eq!(run(0, plain, 0, 0, 1000), (4, 256));
    // ...and one work-item from launch, while an OpenMP kernel launched that way gets
    // the default geometry (its generic main thread needs the full work-group).
    for (kernel, expected) in [(plain, (1, 1)), (generic, (240, 256))] {
        fake.clear_log();
        // SAFETY: as above.
        unsafe { plugin.device(0).and_then(|on| on.launch(kernel, &[out])) }.unwrap();
        assert_eq!(launch_geometry(&fake.log()), expected);
    }

    // wave32 gfx1100: the main thread's extra warp is 32 work-items.
    let dev1 = plugin
        .device(1)
        .and_then(|on| on.load_binary(2, &gfx1100, &kernel_entries()))
        .unwrap();
    let out1_buffer = plugin
        .device(1)
        .and_then(|on| on.alloc(4, AllocKind::Device))
        .unwrap();
    let out1 = out1_buffer.addr();
    assert_eq!(
        teams_geometry(&fake, &plugin, 1, dev1[4].addr, out1, request(0, 128, 0)),
        (240, 128 + 32)
    );

    // Unloading forgets the kernels: a stale handle is refused before reaching HIP.
    plugin.device(0).and_then(|on| on.unload(1)).unwrap();
    fake.clear_log();
    // SAFETY: refused before any launch.
    assert!(unsafe {
        plugin
            .device(0)
            .and_then(|on| on.launch_teams(generic, &[out], LaunchRequest::default()))
    }
    .is_err());
    assert!(!fake
        .log()
        .iter()
        .any(|l| l.starts_with("hipModuleLaunchKernel")));
}

#[test]
fn the_grid_limit_from_hip_caps_num_teams() {
    let co = code_object("gfx90a");
    let fake = FakeHip::new("grid-limit", "gfx90a:sramecc+:xnack-");
    fake.seed_global("ptr_to_negate", NEGATE_ON_DEVICE);
    seed_exec_modes(&fake, &co);
    fake.set_device_attribute(HIP_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 1000);
    let plugin = Plugin::with_backend(
        PluginKind::Amdgpu,
        Box::new(HipBackend::from_library(fake.path_str()).unwrap()),
    );
    let dev = plugin
        .device(0)
        .and_then(|on| on.load_binary(1, &co, &kernel_entries()))
        .unwrap();
    let out_buffer = plugin
        .device(0)
        .and_then(|on| on.alloc(4, AllocKind::Device))
        .unwrap();
    let out = out_buffer.addr();
    assert_eq!(
        teams_geometry(&fake, &plugin, 0, dev[5].addr, out, request(5000, 0, 0)),
        (1000, 256)
    );
}

#[test]
fn a_hip_without_attribute_queries_still_loads_and_uses_llvm_16s_grid_values() {
    let gfx90a = code_object("gfx90a");
    let fake = FakeHip::without_attributes("old-hip", "gfx90a:sramecc+:xnack-,gfx1100");
    fake.seed_global("ptr_to_negate", NEGATE_ON_DEVICE);
    seed_exec_modes(&fake, &gfx90a);
    let backend = HipBackend::from_library(fake.path_str()).expect("optional symbols");
    // Wave size from the processor, 440 default teams (GV_Default_Num_Teams), max
    // work-group 1024 (GV_Max_WG_Size).
    let limits: Vec<DeviceLimits> = backend.devices().iter().map(|d| d.limits).collect();
    assert_eq!(limits[0], gfx90a_limits(440));
    assert_eq!(limits[1].warp_size, 32);
    let plugin = Plugin::with_backend(PluginKind::Amdgpu, Box::new(backend));
    let dev = plugin
        .device(0)
        .and_then(|on| on.load_binary(1, &gfx90a, &kernel_entries()))
        .unwrap();
    let out_buffer = plugin
        .device(0)
        .and_then(|on| on.alloc(4, AllocKind::Device))
        .unwrap();
    let out = out_buffer.addr();
    assert_eq!(
        teams_geometry(&fake, &plugin, 0, dev[4].addr, out, request(0, 128, 0)),
        (440, 128 + 64)
    );
}

#[test]
fn an_exec_mode_llvm_16_does_not_define_fails_the_load() {
    let co = code_object("gfx90a");
    let fake = FakeHip::new("bad-mode", "gfx90a:sramecc+:xnack-");
    fake.seed_global("ptr_to_negate", NEGATE_ON_DEVICE);
    fake.seed_global("generic_region_exec_mode", 7);
    let plugin = Plugin::with_backend(
        PluginKind::Amdgpu,
        Box::new(HipBackend::from_library(fake.path_str()).unwrap()),
    );
    let err = plugin
        .device(0)
        .and_then(|on| on.load_binary(1, &co, &kernel_entries()))
        .expect_err("mode 7");
    let msg = err.to_string();
    assert!(
        msg.contains("generic_region_exec_mode") && msg.contains("holds 7"),
        "{msg}"
    );
}
