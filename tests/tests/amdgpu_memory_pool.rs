//! The memory pool on the HIP backend, by contract against the stand-in HIP library
//! (tests/fixtures/amdgpu/fake_hip.c, every call logged): the pool lives in the plugin's
//! core, so an AMD GPU gets what an NVIDIA one does. No AMD GPU has run this.

mod amdgpu_support;

use amdgpu_support::*;
use host_plugin::backend::hip::HipBackend;
use host_plugin::backend::AllocKind;
use host_plugin::{Plugin, PluginKind};

fn calls(fake: &FakeHip, name: &str) -> usize {
    fake.log().iter().filter(|l| l.starts_with(name)).count()
}

/// 100 allocations and frees of 4 KiB and of 1 MiB, as libomptarget makes them for a
/// loop of regions: hipMalloc once per size, no hipFree until the plugin unloads, when
/// both blocks go back.
#[test]
fn a_loop_of_allocations_asks_hip_once_per_size_and_gives_back_at_unload() {
    let fake = FakeHip::new("pool-loop", "gfx90a:sramecc+:xnack-");
    let backend = HipBackend::from_library(fake.path_str()).expect("load the stand-in");
    let plugin = Plugin::with_backend(PluginKind::Amdgpu, Box::new(backend));
    let device = plugin.device(0).unwrap();
    device.init_device().unwrap();
    fake.clear_log();
    for _ in 0..100 {
        for size in [4096, 1 << 20] {
            let addr = device.alloc(size, AllocKind::Default).unwrap().into_raw();
            // SAFETY: from `alloc` on this device, used by nothing.
            unsafe { device.free(addr) }.unwrap();
        }
    }
    assert_eq!(calls(&fake, "hipMalloc("), 2, "{:#?}", fake.log());
    assert_eq!(calls(&fake, "hipFree("), 0, "{:#?}", fake.log());
    plugin.unload_all().unwrap();
    assert_eq!(calls(&fake, "hipFree("), 2, "{:#?}", fake.log());
}

/// With `LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=0` (LLVM's meaning: no pool) every
/// allocation and free reaches HIP.
#[test]
fn threshold_zero_turns_the_pool_off() {
    let fake = FakeHip::new("pool-off", "gfx90a:sramecc+:xnack-");
    let backend = HipBackend::from_library(fake.path_str()).expect("load the stand-in");
    let plugin = Plugin::with_backend(PluginKind::Amdgpu, Box::new(backend));
    let device = plugin.device(0).unwrap();
    let mut settings = host_plugin::generic::device_settings::DeviceSettings::default();
    settings.pool.threshold = 0;
    device.configure(settings).unwrap();
    device.init_device().unwrap();
    fake.clear_log();
    for _ in 0..10 {
        let addr = device.alloc(4096, AllocKind::Default).unwrap().into_raw();
        // SAFETY: from `alloc` on this device, used by nothing.
        unsafe { device.free(addr) }.unwrap();
    }
    assert_eq!(calls(&fake, "hipMalloc("), 10, "{:#?}", fake.log());
    assert_eq!(calls(&fake, "hipFree("), 10, "{:#?}", fake.log());
}
