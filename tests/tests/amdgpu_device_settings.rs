//! libomptarget's device settings on the HIP backend, against the stand-in HIP library
//! (tests/fixtures/amdgpu/fake_hip.c): `LIBOMPTARGET_STACK_SIZE` / `_HEAP_SIZE` become
//! hipDeviceSetLimit calls once, at the device's initialisation, before any launch;
//! `LIBOMPTARGET_SHARED_MEMORY_SIZE` and a launch's `ompx_dyn_cgroup_mem` become the
//! launch's dynamic LDS, refused above what the work-group can have; interop gets the
//! device's handles. The settings are given through `Device::configure`, the Rust
//! API's way of saying what libomptarget reads from the environment.

mod amdgpu_support;

use amdgpu_support::*;
use e2e_tests::plugin::entry;
use host_plugin::backend::hip::HipBackend;
use host_plugin::backend::{AllocKind, InteropHandles, LaunchRequest};
use host_plugin::generic::device_settings::DeviceSettings;
use host_plugin::generic::host_entry::FLAG_INDIRECT;
use host_plugin::{HostOffloadEntry, Plugin, PluginKind};

fn plugin_on(fake: &FakeHip) -> Plugin {
    let backend = HipBackend::from_library(fake.path_str()).expect("load the stand-in");
    Plugin::with_backend(PluginKind::Amdgpu, Box::new(backend))
}

#[test]
fn stack_and_heap_limits_are_set_once_at_initialisation_before_any_launch() {
    let fake = FakeHip::new("limits", "gfx90a:sramecc+:xnack-,gfx90a:sramecc+:xnack-");
    let plugin = plugin_on(&fake);
    let on = plugin.device(1).unwrap();
    on.configure(DeviceSettings {
        stack_size: Some(2048),
        heap_size: Some(16 << 20),
        dynamic_shared_memory: 0,
        ..DeviceSettings::default()
    })
    .unwrap();
    fake.clear_log();
    on.init_device().unwrap();
    let limits: Vec<String> = fake
        .log()
        .into_iter()
        .filter(|l| l.starts_with("hipDeviceSetLimit"))
        .collect();
    assert_eq!(
        limits,
        [
            "hipDeviceSetLimit(device=1, limit=0, value=2048)",
            "hipDeviceSetLimit(device=1, limit=2, value=16777216)",
        ],
        "hipLimitStackSize (0) and hipLimitMallocHeapSize (2) on device 1"
    );
    // A second initialisation sets nothing again; device 0, without settings, nothing.
    fake.clear_log();
    on.init_device().unwrap();
    plugin.device(0).and_then(|d| d.init_device()).unwrap();
    assert!(
        !fake
            .log()
            .iter()
            .any(|l| l.starts_with("hipDeviceSetLimit")),
        "{:?}",
        fake.log()
    );
    // Settings are fixed once read.
    assert!(on.configure(DeviceSettings::default()).is_err());
}

fn kernel_entries() -> Vec<HostOffloadEntry<'static>> {
    vec![
        entry("call_indirect", 0x100, 0, 0),
        entry("counter", 0x200, 4, 0),
        entry("add_one", HOST_ADD_ONE, 0, FLAG_INDIRECT),
        entry("ptr_to_negate", HOST_NEGATE, 8, FLAG_INDIRECT),
        entry("generic_region", 0x110, 0, 0),
    ]
}

/// The `shared=` bytes of the one hipModuleLaunchKernel in `log`.
fn launch_shared_bytes(log: &[String]) -> u32 {
    let launch = log
        .iter()
        .find(|l| l.starts_with("hipModuleLaunchKernel("))
        .unwrap_or_else(|| panic!("no launch:\n{}", log.join("\n")));
    let at = launch.find("shared=").unwrap() + "shared=".len();
    launch[at..].split(',').next().unwrap().parse().unwrap()
}

#[test]
fn a_launch_gets_the_larger_dynamic_shared_memory_up_to_the_work_groups_lds() {
    let co = code_object("gfx90a");
    let fake = FakeHip::new("dyn-shared", "gfx90a:sramecc+:xnack-");
    fake.seed_global("ptr_to_negate", NEGATE_ON_DEVICE);
    let mode = symbol_bytes(&co, "generic_region_exec_mode");
    fake.seed_global("generic_region_exec_mode", u64::from(mode[0]));
    let plugin = plugin_on(&fake);
    let on = plugin.device(0).unwrap();
    on.configure(DeviceSettings {
        dynamic_shared_memory: 256,
        ..DeviceSettings::default()
    })
    .unwrap();
    let dev = on.load_binary(1, &co, &kernel_entries()).unwrap();
    let generic = dev[4].addr;
    let out = on.alloc(4, AllocKind::Device).unwrap();
    let launch = |clause: u32| {
        fake.clear_log();
        let request = LaunchRequest {
            dynamic_shared_memory: clause,
            ..LaunchRequest::default()
        };
        // SAFETY: the stand-in runs nothing; `out` is a live allocation.
        unsafe { on.launch_teams(generic, &[out.addr()], request) }.map(|()| fake.log())
    };
    assert_eq!(launch_shared_bytes(&launch(0).unwrap()), 256);
    assert_eq!(launch_shared_bytes(&launch(16).unwrap()), 256);
    assert_eq!(launch_shared_bytes(&launch(4096).unwrap()), 4096);
    assert_eq!(launch_shared_bytes(&launch(65536).unwrap()), 65536);
    // One byte more than a work-group's 64 KiB of LDS: refused before HIP sees it.
    let err = launch(65537).unwrap_err().to_string();
    assert!(
        err.contains("generic_region")
            && err.contains("65537 bytes of dynamic shared memory")
            && err.contains("LIBOMPTARGET_SHARED_MEMORY_SIZE, 256")
            && err.contains("more than the 65536 bytes"),
        "{err}"
    );
    assert!(!fake
        .log()
        .iter()
        .any(|l| l.starts_with("hipModuleLaunchKernel")));
}

#[test]
fn interop_gets_the_hip_device_and_no_queue() {
    let fake = FakeHip::new("interop", "gfx90a:sramecc+:xnack-,gfx1100");
    let plugin = plugin_on(&fake);
    let on = plugin.device(1).unwrap();
    on.init_device().unwrap();
    assert_eq!(
        on.interop_handles().unwrap(),
        InteropHandles {
            context: 0,
            device: 1
        }
    );
    // This backend completes everything before it returns: no queue to synchronize on.
    assert_eq!(on.interop_queue().unwrap(), None);
}
