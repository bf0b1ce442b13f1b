//! AMD GPUs through the HIP runtime (`libamdhip64.so`, opened at run time): how many,
//! their names, and their architectures where the kernel's KFD topology gives them
//! (HIP gives an architecture only inside `hipDeviceProp_t`, whose layout changes
//! between ROCm releases, so it is not read from HIP).

use crate::device_rtl;
use crate::dl;
use crate::install::Install;
use crate::report::Report;
use libloading::Library;
use std::ffi::{c_char, c_int, c_void};
use std::io::Write;
use std::path::Path;

const HIP_SUCCESS: c_int = 0;
const HIP_ERROR_NO_DEVICE: c_int = 100;
pub const KFD_NODES: &str = "/sys/class/kfd/kfd/topology/nodes";

/// One HIP device.
#[derive(Clone, Debug)]
pub struct HipDevice {
    pub ordinal: c_int,
    pub name: String,
    /// `gfx90a`, when known.
    pub arch: Option<String>,
}

// HIP's prototypes (hip_runtime_api.h): hipError_t is an int enum, a device an int.
type HipGetDeviceCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type HipDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;

/// `gfx_target_version` of the KFD topology (major * 10000 + minor * 100 + stepping)
/// as a gfx name: 90010 -> gfx90a, 110000 -> gfx1100.
pub fn gfx_name(target_version: u32) -> Option<String> {
    if target_version == 0 {
        return None;
    }
    let (major, minor, stepping) = (
        target_version / 10000,
        (target_version / 100) % 100,
        target_version % 100,
    );
    Some(format!("gfx{major}{minor:x}{stepping:x}"))
}

/// The GPUs of the KFD topology under `nodes`, in node order (the CPU nodes, whose
/// `gfx_target_version` is 0, left out): HIP's device order when all are visible.
pub fn kfd_arches(nodes: &Path) -> Vec<String> {
    let mut numbered: Vec<(u32, String)> = std::fs::read_dir(nodes)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let number: u32 = e.file_name().to_str()?.parse().ok()?;
            let properties = std::fs::read_to_string(e.path().join("properties")).ok()?;
            let version = properties
                .lines()
                .find_map(|l| l.strip_prefix("gfx_target_version "))?
                .trim()
                .parse()
                .ok()?;
            Some((number, gfx_name(version)?))
        })
        .collect();
    numbered.sort();
    numbered.into_iter().map(|(_, gfx)| gfx).collect()
}

/// The HIP lines of `[devices]`; returns the devices that answered.
pub fn check(report: &mut Report<impl Write>, install: &Install) -> Vec<HipDevice> {
    // SAFETY: these are AMD's HIP runtime library under its three names; its
    // initialisers set up its own state only.
    let opened = unsafe {
        dl::open_or_report(
            report,
            &["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"],
            "HIP runtime",
            "reinstall ROCm's HIP runtime (rocminfo should list the GPU)",
        )
    };
    let Some(lib) = opened else {
        return Vec::new();
    };
    match devices(&lib) {
        Ok(mut devices) => {
            let file = dl::file_of(hip_symbol_address(&lib))
                .map_or("libamdhip64.so".into(), |p| p.display().to_string());
            report.ok(format!("HIP runtime {file}: {} device(s)", devices.len()));
            let kfd = kfd_arches(Path::new(KFD_NODES));
            if kfd.len() == devices.len() && std::env::var_os("HIP_VISIBLE_DEVICES").is_none() {
                for (device, gfx) in devices.iter_mut().zip(kfd) {
                    device.arch = Some(gfx);
                }
            }
            for device in &devices {
                report_device(report, install, device);
            }
            devices
        }
        Err((HIP_ERROR_NO_DEVICE, _)) => {
            report.skip("HIP runtime present, no AMD GPU (hipErrorNoDevice)", None);
            Vec::new()
        }
        Err((_, e)) => {
            report.fail(
                format!("HIP: {e}"),
                "check ROCm: rocminfo must list the GPU, and the user must be in the render group",
            );
            Vec::new()
        }
    }
}

fn hip_symbol_address(lib: &Library) -> *const c_void {
    // SAFETY: only the symbol's address is taken, never called through this type.
    unsafe { lib.get::<*const c_void>(b"hipGetDeviceCount\0") }.map_or(std::ptr::null(), |s| *s)
}

/// Every device's name through hipGetDeviceCount / hipDeviceGetName; the error is
/// (hipError_t, text).
fn devices(lib: &Library) -> Result<Vec<HipDevice>, (c_int, String)> {
    let missing = |name: &str, e: libloading::Error| (-1, format!("{name}: {e}"));
    // SAFETY: the types are HIP's prototypes; the symbols are used while `lib` is open.
    let get_count = unsafe { lib.get::<HipGetDeviceCount>(b"hipGetDeviceCount\0") }
        .map_err(|e| missing("hipGetDeviceCount", e))?;
    // SAFETY: as above.
    let get_name = unsafe { lib.get::<HipDeviceGetName>(b"hipDeviceGetName\0") }
        .map_err(|e| missing("hipDeviceGetName", e))?;
    let mut count: c_int = 0;
    // SAFETY: hipGetDeviceCount writes one int through a pointer to a live local.
    match unsafe { get_count(&mut count) } {
        HIP_SUCCESS => {}
        code => return Err((code, format!("hipGetDeviceCount: hipError_t {code}"))),
    }
    (0..count)
        .map(|ordinal| {
            let mut buffer = [0 as c_char; 256];
            // SAFETY: HIP writes at most `len` bytes, NUL included, into the buffer,
            // which is that long; the ordinal is below the count HIP gave.
            let code = unsafe { get_name(buffer.as_mut_ptr(), buffer.len() as c_int, ordinal) };
            if code != HIP_SUCCESS {
                return Err((
                    code,
                    format!("hipDeviceGetName({ordinal}): hipError_t {code}"),
                ));
            }
            let bytes: Vec<u8> = buffer
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            Ok(HipDevice {
                ordinal,
                name: String::from_utf8_lossy(&bytes).into_owned(),
                arch: None,
            })
        })
        .collect()
}

fn report_device(report: &mut Report<impl Write>, install: &Install, device: &HipDevice) {
    let text = format!("AMD GPU {}: {}", device.ordinal, device.name);
    let Some(gfx) = &device.arch else {
        report.warn(format!("{text}, architecture unknown (HIP gives it only in a struct whose layout varies; the KFD topology did not match)"), None);
        return;
    };
    let installed: Vec<String> = device_rtl::installed_arches(&install.devicertl_archive())
        .unwrap_or_default()
        .into_iter()
        .filter(|(t, _)| t == "amdgcn")
        .map(|(_, a)| a)
        .collect();
    if installed.contains(gfx) {
        report.ok(format!(
            "{text}, {gfx} (KFD topology); our device RTL is installed for {gfx}"
        ));
    } else {
        report.fail(
            format!(
                "{text}, {gfx} (KFD topology); our device RTL is installed for {} only",
                installed.join(", ")
            ),
            format!("reinstall with {gfx} among the architectures (xtask's device::AMDGPU_ARCHES)"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kfd_target_versions_are_gfx_names() {
        assert_eq!(gfx_name(90010).as_deref(), Some("gfx90a"));
        assert_eq!(gfx_name(90402).as_deref(), Some("gfx942"));
        assert_eq!(gfx_name(110000).as_deref(), Some("gfx1100"));
        assert_eq!(gfx_name(0), None);
    }

    #[test]
    fn kfd_topology_in_node_order_without_cpus() {
        let nodes = std::env::temp_dir().join(format!("doctor-kfd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&nodes);
        for (node, version) in [(0, 0), (2, 110000), (1, 90010), (10, 90402)] {
            let dir = nodes.join(node.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("properties"),
                format!("cpu_cores_count 0\ngfx_target_version {version}\n"),
            )
            .unwrap();
        }
        assert_eq!(kfd_arches(&nodes), ["gfx90a", "gfx1100", "gfx942"]);
        std::fs::remove_dir_all(nodes).unwrap();
    }
}
