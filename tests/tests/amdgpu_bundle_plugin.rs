//! A clang offload bundle of several AMDGPU code objects, reached the way libomptarget
//! reaches it: through the plugin core behind `__tgt_rtl_is_valid_binary` and
//! `__tgt_rtl_load_binary` (`Plugin::is_valid_binary`, `Device::load_binary`), against
//! the stand-in HIP library (tests/fixtures/amdgpu/fake_hip.c). Each device gets the code
//! object built for it, and the table is resolved from that code object's symbols.

mod amdgpu_support;

use amdgpu_support::*;
use e2e_tests::plugin::entry;
use host_plugin::backend::hip::HipBackend;
use host_plugin::generic::host_entry::FLAG_INDIRECT;
use host_plugin::{HostOffloadEntry, Plugin, PluginKind};

fn entries() -> Vec<HostOffloadEntry<'static>> {
    vec![
        entry("call_indirect", 0x100, 0, 0),
        entry("add_one", HOST_ADD_ONE, 0, FLAG_INDIRECT),
        entry("ptr_to_negate", HOST_NEGATE, 8, FLAG_INDIRECT),
    ]
}

#[test]
fn a_bundle_loads_each_device_its_own_code_object() {
    let fake = FakeHip::new("bundle-plugin", "gfx90a:sramecc+:xnack-,gfx1100");
    fake.seed_global("ptr_to_negate", NEGATE_ON_DEVICE);
    let backend = HipBackend::from_library(fake.path_str()).expect("load the stand-in");
    let plugin = Plugin::with_backend(PluginKind::Amdgpu, Box::new(backend));

    let bundled = bundle(&["gfx90a:xnack+", "gfx90a:xnack-", "gfx1100"]);
    assert!(
        plugin.is_valid_binary(&bundled),
        "a bundle with a build per device"
    );
    assert!(
        !plugin.is_valid_binary(&bundle(&["gfx90a:xnack+", "gfx942"])),
        "a bundle with nothing these devices run"
    );

    fake.clear_log();
    let on0 = plugin
        .device(0)
        .and_then(|on| on.load_binary(1, &bundled, &entries()))
        .unwrap();
    let on1 = plugin
        .device(1)
        .and_then(|on| on.load_binary(2, &bundled, &entries()))
        .unwrap();
    let loads: Vec<String> = fake
        .log()
        .into_iter()
        .filter(|l| l.starts_with("hipModuleLoadData"))
        .collect();
    assert_eq!(loads.len(), 2, "{loads:?}");
    let xnack_off = e_flags(&code_object("gfx90a:xnack-"));
    let gfx1100 = e_flags(&code_object("gfx1100"));
    assert!(
        loads[0].contains(&format!("device=0, e_flags={xnack_off:#x}")),
        "{loads:?}"
    );
    assert!(
        loads[1].contains(&format!("device=1, e_flags={gfx1100:#x}")),
        "{loads:?}"
    );

    // The kernel resolved on each device, and each table maps both host functions.
    for (device, key, out) in [(0, 1, &on0), (1, 2, &on1)] {
        assert_ne!(out[0].addr, 0, "kernel on device {device}");
        let table = plugin
            .device(device)
            .ok()
            .and_then(|on| on.fptr_table(key))
            .expect("a table");
        let keys: Vec<u64> = table.iter().map(|r| r.host_ptr).collect();
        assert_eq!(keys, [HOST_NEGATE, HOST_ADD_ONE], "device {device}");
        assert_eq!(table[0].tgt_ptr, NEGATE_ON_DEVICE, "device {device}");
        assert_ne!(table[1].tgt_ptr, 0, "device {device}");
    }
}
