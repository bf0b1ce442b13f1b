//! How the HIP backend finds its runtime: `OMPTARGET_RS_HIP_LIBRARY`, else the installed
//! `libamdhip64.so`; without one it has 0 devices. One test in its own binary, because
//! it sets an environment variable (nothing else in this process reads it meanwhile).

mod amdgpu_support;

use amdgpu_support::*;
use host_plugin::backend::hip::{HipBackend, HIP_LIBRARY_ENV};
use host_plugin::{Backend, Plugin, PluginKind};
use std::process::Command;

/// Set in a child run of this test binary: it only creates a backend and reports.
const PROBE: &str = "AMDGPU_HIP_ENV_PROBE";
const TEST_NAME: &str = "the_runtime_comes_from_the_variable_or_the_system_or_nowhere";

/// Create a backend with no HIP runtime in a child process: (stdout, stderr).
fn probe(debug: bool) -> (String, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(PROBE, "1")
        .env(HIP_LIBRARY_ENV, "/nonexistent/libamdhip64.so")
        .env_remove("OMPTARGET_RS_DEBUG")
        .env_remove("LIBOMPTARGET_INFO");
    if debug {
        cmd.env("OMPTARGET_RS_DEBUG", "1");
    }
    let out = cmd.output().expect("run this test binary again");
    assert!(out.status.success(), "{out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_runtime_comes_from_the_variable_or_the_system_or_nowhere() {
    if std::env::var_os(PROBE).is_some() {
        println!("devices={}", HipBackend::new().device_count());
        return;
    }

    // Without a runtime the backend is silent (libomptarget just sees 0 devices); the
    // reason is there with the plugin's debug output on.
    let (stdout, stderr) = probe(false);
    assert!(stdout.contains("devices=0"), "{stdout}");
    assert_eq!(stderr, "", "no noise without a HIP runtime");
    let (_, stderr) = probe(true);
    assert!(
        stderr.contains("no HIP runtime, 0 AMDGPU devices") && stderr.contains("/nonexistent"),
        "{stderr}"
    );

    // Nothing at that path: no devices, no error.
    std::env::set_var(HIP_LIBRARY_ENV, "/nonexistent/libamdhip64.so");
    assert_eq!(HipBackend::new().device_count(), 0);
    let plugin = Plugin::with_backend(PluginKind::Amdgpu, Box::new(HipBackend::new()));
    assert_eq!(plugin.device_count(), 0);

    // A library that is not HIP (lacks the entry points): no devices either.
    std::env::set_var(HIP_LIBRARY_ENV, "libc.so.6");
    assert_eq!(HipBackend::new().device_count(), 0);

    // The stand-in named by the variable: its devices.
    let fake = FakeHip::new(
        "env",
        "gfx942:sramecc+:xnack-,gfx942:sramecc+:xnack-,gfx1100",
    );
    std::env::set_var(HIP_LIBRARY_ENV, &fake.path);
    let backend = HipBackend::new();
    assert_eq!(backend.device_count(), 3);
    assert_eq!(
        backend.devices()[2].arch_name.as_deref(),
        Ok("gfx1100"),
        "gcnArchName read from hipDeviceProp_tR0600"
    );

    // Unset: the system's libamdhip64, which this machine may not have.
    std::env::remove_var(HIP_LIBRARY_ENV);
    // SAFETY: only probing whether the dynamic loader finds the library.
    let installed = unsafe { libloading::Library::new("libamdhip64.so") }.is_ok()
        // SAFETY: as above.
        || unsafe { libloading::Library::new("libamdhip64.so.6") }.is_ok();
    if !installed {
        assert_eq!(HipBackend::new().device_count(), 0);
    }
}
