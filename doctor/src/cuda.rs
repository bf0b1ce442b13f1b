//! NVIDIA GPUs through the CUDA driver (`libcuda.so.1`, opened at run time): the
//! driver's version, each device's name and compute capability, and whether our
//! device RTL is installed for its architecture.

use crate::device_rtl;
use crate::dl;
use crate::install::Install;
use crate::report::Report;
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::io::Write;

/// CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR.
const COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const COMPUTE_CAPABILITY_MINOR: c_int = 76;
const CUDA_SUCCESS: c_int = 0;
const CUDA_ERROR_NO_DEVICE: c_int = 100;

/// One CUDA device.
#[derive(Clone, Debug)]
pub struct CudaDevice {
    pub ordinal: c_int,
    pub name: String,
    /// Compute capability (major, minor).
    pub cc: (c_int, c_int),
}

impl CudaDevice {
    pub fn sm(&self) -> String {
        format!("sm_{}{}", self.cc.0, self.cc.1)
    }
}

// The driver API's prototypes (cuda.h): CUresult is an int enum, CUdevice an int.
type CuInit = unsafe extern "C" fn(c_uint) -> c_int;
type CuIntOut = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type CuDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type CuGetErrorName = unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int;

/// The driver's entry points; each stays valid while `_lib` is open.
struct Driver {
    init: CuInit,
    driver_get_version: CuIntOut,
    device_get_count: CuIntOut,
    device_get: CuDeviceGet,
    device_get_name: CuDeviceGetName,
    device_get_attribute: CuDeviceGetAttribute,
    get_error_name: Option<CuGetErrorName>,
    _lib: Library,
}

impl Driver {
    fn load(lib: Library) -> Result<Driver, String> {
        /// A function of the driver as a plain pointer of type `T`.
        ///
        /// # Safety
        /// `T` must be the symbol's C prototype; the pointer must not outlive `lib`.
        unsafe fn symbol<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
            let c_name = format!("{name}\0");
            // SAFETY: the caller gives the symbol's prototype as T.
            let f = unsafe { lib.get::<T>(c_name.as_bytes()) };
            f.map(|f| *f).map_err(|e| format!("{name}: {e}"))
        }
        // SAFETY: each type above is that symbol's prototype in the driver API; the
        // pointers live in the Driver beside the library, which stays open as long.
        unsafe {
            Ok(Driver {
                init: symbol(&lib, "cuInit")?,
                driver_get_version: symbol(&lib, "cuDriverGetVersion")?,
                device_get_count: symbol(&lib, "cuDeviceGetCount")?,
                device_get: symbol(&lib, "cuDeviceGet")?,
                device_get_name: symbol(&lib, "cuDeviceGetName")?,
                device_get_attribute: symbol(&lib, "cuDeviceGetAttribute")?,
                get_error_name: symbol(&lib, "cuGetErrorName").ok(),
                _lib: lib,
            })
        }
    }

    /// `call: CUDA_ERROR_X (n)`.
    fn error(&self, call: &str, code: c_int) -> String {
        let mut name: *const c_char = std::ptr::null();
        let known = self.get_error_name.is_some_and(|get| {
            // SAFETY: cuGetErrorName writes a pointer to a static string through the
            // pointer to `name`, a live local.
            unsafe { get(code, &mut name) == CUDA_SUCCESS }
        });
        let text = if known && !name.is_null() {
            // SAFETY: a NUL-terminated static string of the driver's.
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        } else {
            "CUresult".into()
        };
        format!("{call}: {text} ({code})")
    }

    /// An int the driver writes through `f`.
    fn int_out(&self, call: &str, f: impl FnOnce(*mut c_int) -> c_int) -> Result<c_int, String> {
        let mut value: c_int = 0;
        match f(&mut value) {
            CUDA_SUCCESS => Ok(value),
            code => Err(self.error(call, code)),
        }
    }

    fn version(&self) -> Result<c_int, String> {
        // SAFETY: cuDriverGetVersion writes one int through a pointer to a live local.
        self.int_out("cuDriverGetVersion", |v| unsafe {
            (self.driver_get_version)(v)
        })
    }

    fn count(&self) -> Result<c_int, String> {
        // SAFETY: cuDeviceGetCount writes one int through a pointer to a live local.
        self.int_out("cuDeviceGetCount", |v| unsafe {
            (self.device_get_count)(v)
        })
    }

    /// Device `ordinal` (below the count): its handle is the one cuDeviceGet gave.
    fn device(&self, ordinal: c_int) -> Result<CudaDevice, String> {
        // SAFETY: cuDeviceGet writes one CUdevice (int) through a pointer to a live
        // local; an ordinal out of range is an error code, not undefined behaviour.
        let handle = self.int_out("cuDeviceGet", |d| unsafe { (self.device_get)(d, ordinal) })?;
        let mut buffer = [0 as c_char; 256];
        // SAFETY: the driver writes at most `len` bytes, NUL included, into the buffer,
        // which is that long; the handle came from cuDeviceGet.
        let code =
            unsafe { (self.device_get_name)(buffer.as_mut_ptr(), buffer.len() as c_int, handle) };
        if code != CUDA_SUCCESS {
            return Err(self.error("cuDeviceGetName", code));
        }
        let bytes: Vec<u8> = buffer
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        let attribute = |attr: c_int| {
            // SAFETY: cuDeviceGetAttribute writes one int through a pointer to a live
            // local; the handle came from cuDeviceGet.
            self.int_out("cuDeviceGetAttribute", |v| unsafe {
                (self.device_get_attribute)(v, attr, handle)
            })
        };
        Ok(CudaDevice {
            ordinal,
            name: String::from_utf8_lossy(&bytes).into_owned(),
            cc: (
                attribute(COMPUTE_CAPABILITY_MAJOR)?,
                attribute(COMPUTE_CAPABILITY_MINOR)?,
            ),
        })
    }
}

/// `13000` -> `13.0`.
pub fn version_text(version: c_int) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

/// The CUDA lines of `[devices]`; returns the devices that answered.
pub fn check(report: &mut Report<impl Write>, install: &Install) -> Vec<CudaDevice> {
    // SAFETY: libcuda.so.1 is NVIDIA's driver library (or a stand-in for it); its
    // initialisers set up its own state only.
    let opened = unsafe {
        dl::open_or_report(
            report,
            &["libcuda.so.1"],
            "CUDA driver",
            "reinstall the NVIDIA driver's libcuda1 (nvidia-smi should work)",
        )
    };
    let Some(lib) = opened else {
        return Vec::new();
    };
    let driver = match Driver::load(lib) {
        Ok(d) => d,
        Err(e) => {
            report.fail(
                format!("libcuda.so.1 lacks a driver API function: {e}"),
                "install a CUDA driver of version 11 or later",
            );
            return Vec::new();
        }
    };
    let file = dl::file_of(driver.init as *const c_void)
        .map_or("libcuda.so.1".into(), |p| p.display().to_string());
    let version = driver.version().map_or_else(
        |e| format!("version unknown ({e})"),
        |v| format!("CUDA {}", version_text(v)),
    );
    // SAFETY: cuInit(0) takes no pointer; 0 is its only valid flag.
    match unsafe { (driver.init)(0) } {
        CUDA_SUCCESS => {}
        CUDA_ERROR_NO_DEVICE => {
            report.skip(
                format!(
                    "CUDA driver {file} ({version}): no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)"
                ),
                None,
            );
            return Vec::new();
        }
        code => {
            report.fail(
                format!("CUDA driver {file} ({version}): {}", driver.error("cuInit", code)),
                "check the NVIDIA driver: nvidia-smi must list the GPU (a driver/library version mismatch needs a reboot)",
            );
            return Vec::new();
        }
    }
    let count = match driver.count() {
        Ok(n) => n,
        Err(e) => {
            report.fail(
                format!("CUDA driver {file} ({version}): {e}"),
                "check the NVIDIA driver: nvidia-smi must list the GPU",
            );
            return Vec::new();
        }
    };
    report.ok(format!("CUDA driver {file} ({version}): {count} device(s)"));
    let installed = nvptx_arches(report, install);
    (0..count)
        .filter_map(|ordinal| match driver.device(ordinal) {
            Ok(device) => {
                report_device(report, install, &device, installed.as_deref());
                Some(device)
            }
            Err(e) => {
                report.fail(
                    format!("CUDA device {ordinal}: {e}"),
                    "check the NVIDIA driver: nvidia-smi must list the GPU",
                );
                None
            }
        })
        .collect()
}

/// The sm_XY our device RTL is installed for (None: the archive does not read).
fn nvptx_arches(report: &mut Report<impl Write>, install: &Install) -> Option<Vec<String>> {
    match device_rtl::installed_arches(&install.devicertl_archive()) {
        Ok(all) => Some(
            all.into_iter()
                .filter(|(t, _)| t == "nvptx64")
                .map(|(_, a)| a)
                .collect(),
        ),
        Err(e) => {
            report.fail(
                format!("{e:#}"),
                format!(
                    "reinstall: `cargo xtask install --prefix {}`",
                    install.prefix.display()
                ),
            );
            None
        }
    }
}

fn report_device(
    report: &mut Report<impl Write>,
    install: &Install,
    device: &CudaDevice,
    installed: Option<&[String]>,
) {
    let sm = device.sm();
    let text = format!("CUDA device {}: {}, {sm}", device.ordinal, device.name);
    let Some(installed) = installed else {
        report.warn(
            format!("{text}; whether our device RTL has {sm} is unknown (above)"),
            None,
        );
        return;
    };
    match device_rtl::nvptx_arch_for(installed, device.cc.0, device.cc.1) {
        Some(arch) if arch == sm => report.ok(format!("{text}; our device RTL is installed for {sm}")),
        Some(arch) => report.warn(
            format!("{text}; our device RTL has no {sm} member, but {arch}'s runs on it"),
            Some(&format!("build programs for it with --offload-arch={arch}")),
        ),
        None => report.fail(
            format!("{text}; our device RTL is installed for {} only, none of which runs on {sm}", installed.join(", ")),
            format!(
                "no program of clang-{} through our config runs on {sm}: reinstall with {sm} among the architectures (xtask's NVPTX_INSTALL_ARCHES) and a clang that targets it",
                install.major
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_versions() {
        assert_eq!(version_text(13000), "13.0");
        assert_eq!(version_text(12040), "12.4");
    }
}
