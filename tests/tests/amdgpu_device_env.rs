//! AMDGPU images get LLVM 16's device environment, as CUDA images do: the plugin core
//! writes it for every GPU kind after the load (host_plugin::generic::device_env). A code object
//! with the 16-byte `omptarget_device_environment` global that LLVM 16's AMDGPU device
//! runtime defines, loaded through the plugin core on the stand-in HIP library.

mod amdgpu_support;

use amdgpu_support::*;
use e2e_tests::process::run_ok;
use e2e_tests::tools::llvm22;
use host_plugin::backend::hip::HipBackend;
use host_plugin::generic::device_settings::DeviceSettings;
use host_plugin::{HostOffloadEntry, Plugin, PluginKind};
use std::process::Command;

/// A gfx90a code object whose only symbol is the device environment (protected, as
/// LLVM 16's device runtime declares it, so HIP can find it).
fn code_object_with_environment() -> Vec<u8> {
    let dir = scratch("device-env");
    let source = dir.join("env.c");
    std::fs::write(
        &source,
        "struct env { unsigned debug_kind, num_devices, device_num, dynamic_memory; };\n\
         __attribute__((visibility(\"protected\"), used))\n\
         struct env omptarget_device_environment;\n",
    )
    .unwrap();
    let (obj, hsaco) = (dir.join("env.o"), dir.join("env.hsaco"));
    run_ok(
        Command::new(llvm22("clang"))
            .args([
                "--target=amdgcn-amd-amdhsa",
                "-mcpu=gfx90a",
                "-nogpulib",
                "-c",
            ])
            .arg(&source)
            .arg("-o")
            .arg(&obj),
    );
    link_code_object(&obj, &hsaco)
}

#[test]
fn the_amdgpu_device_environment_is_written_per_device() {
    let co = code_object_with_environment();
    let fake = FakeHip::new(
        "device-env",
        "gfx90a:sramecc+:xnack-,gfx90a:sramecc+:xnack-",
    );
    let backend = HipBackend::from_library(fake.path_str()).expect("load the stand-in");
    let plugin = Plugin::with_backend(PluginKind::Amdgpu, Box::new(backend));
    let none: [HostOffloadEntry; 0] = [];
    for device in [0usize, 1] {
        fake.clear_log();
        plugin
            .device(device as i32)
            .and_then(|on| on.load_binary(10 + device, &co, &none))
            .unwrap();
        let log = fake.log();
        assert!(
            log.iter().any(|l| l.starts_with("hipModuleGetGlobal")
                && l.contains("omptarget_device_environment")),
            "{log:?}"
        );
        let at = fake
            .global_address("omptarget_device_environment")
            .expect("the stand-in's buffer for the global");
        // SAFETY: the stand-in keeps 128 bytes per global alive as long as its module.
        let words = unsafe { std::slice::from_raw_parts(at as *const u32, 4) }.to_vec();
        // DebugKind 0, NumDevices 2, DeviceNum, DynamicMemSize 0.
        assert_eq!(words, [0, 2, device as u32, 0], "device {device}");
    }
}

/// `DynamicMemSize` is the dynamic shared memory every launch gets
/// (`LIBOMPTARGET_SHARED_MEMORY_SIZE`), which LLVM's device runtime hands out.
#[test]
fn the_device_environment_carries_the_devices_dynamic_shared_memory() {
    let co = code_object_with_environment();
    let fake = FakeHip::new("device-env-shared", "gfx90a:sramecc+:xnack-");
    let backend = HipBackend::from_library(fake.path_str()).expect("load the stand-in");
    let plugin = Plugin::with_backend(PluginKind::Amdgpu, Box::new(backend));
    let on = plugin.device(0).unwrap();
    on.configure(DeviceSettings {
        dynamic_shared_memory: 256,
        ..DeviceSettings::default()
    })
    .unwrap();
    let none: [HostOffloadEntry; 0] = [];
    on.load_binary(1, &co, &none).unwrap();
    let at = fake
        .global_address("omptarget_device_environment")
        .expect("the stand-in's buffer for the global");
    // SAFETY: the stand-in keeps 128 bytes per global alive as long as its module.
    let words = unsafe { std::slice::from_raw_parts(at as *const u32, 4) }.to_vec();
    assert_eq!(words, [0, 1, 0, 256]);
}
