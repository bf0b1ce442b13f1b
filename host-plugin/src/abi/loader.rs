//! Which libomptarget loaded this plugin: 16, 17 or 18 (docs/LLVM_VERSIONS.md §5).
//!
//! The plugin file and its symbol names are the same for all three, but two entry points
//! mean different things: `__tgt_rtl_load_binary` returns a table (16/17) or a status and
//! a binary handle (18), and `__tgt_rtl_init_requires` returns the flags (16/17, which
//! ignore it) or a status (18, which drops the device unless it is OFFLOAD_SUCCESS).
//! Neither call's arguments say which caller it is, so the loader is identified once, at
//! the first call (`__tgt_rtl_init_plugin`, first in every version), by the symbols only
//! its libomptarget exports.

use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

/// The libomptarget whose plugin ABI the shims speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LoaderAbi {
    Llvm16,
    /// 16's C ABI; adds optional entry points this plugin does not need.
    Llvm17,
    /// `load_binary` with an out-handle, `get_global`/`get_function`, `init_requires`
    /// returning a status, and kernels built by clang 18 take an implicit first argument.
    Llvm18,
}

/// Set to 16, 17 or 18 to choose the ABI without asking the loader: for tests that
/// dlopen the plugin themselves, with no libomptarget in the process.
pub const ABI_OVERRIDE_VAR: &str = "OMPTARGET_RS_LIBOMPTARGET_ABI";

/// Exported by libomptarget 18 only (`src/exports` of 16, 17 and 18; `nm -D` of Debian's
/// libomptarget.so.17 and .so.18.1).
const LLVM18_MARKERS: [&CStr; 2] = [c"__tgt_activate_record_replay", c"omp_target_memset"];
/// Exported from libomptarget 17 on.
const LLVM17_MARKERS: [&CStr; 2] = [c"omp_target_memcpy_async", c"ompt_libomptarget_connect"];

impl LoaderAbi {
    pub fn major(self) -> u32 {
        match self {
            LoaderAbi::Llvm16 => 16,
            LoaderAbi::Llvm17 => 17,
            LoaderAbi::Llvm18 => 18,
        }
    }

    fn from_major(major: &str) -> Option<Self> {
        match major.trim() {
            "16" => Some(LoaderAbi::Llvm16),
            "17" => Some(LoaderAbi::Llvm17),
            "18" => Some(LoaderAbi::Llvm18),
            _ => None,
        }
    }

    /// 18 builds the table itself from `get_global`/`get_function` and checks
    /// `init_requires`' status.
    pub fn builds_its_own_table(self) -> bool {
        self == LoaderAbi::Llvm18
    }

    /// 18 drops a device whose `init_requires` does not return OFFLOAD_SUCCESS; 16 and
    /// 17 ignore the result.
    pub fn checks_init_requires_status(self) -> bool {
        self == LoaderAbi::Llvm18
    }

    /// Kernels of the images this loader runs (clang 18's) take the implicit `dyn_ptr`
    /// first argument, which libomptarget leaves to the plugin to pass.
    pub fn kernels_take_launch_environment(self) -> bool {
        self == LoaderAbi::Llvm18
    }
}

/// The loader of this process, found once.
pub fn loader() -> LoaderAbi {
    static LOADER: OnceLock<LoaderAbi> = OnceLock::new();
    *LOADER.get_or_init(|| {
        let (abi, how) = detect();
        crate::support::diag::debug(|| format!("libomptarget {} ({how})", abi.major()));
        abi
    })
}

/// The loader and how it was told.
fn detect() -> (LoaderAbi, &'static str) {
    if let Some(abi) = std::env::var(ABI_OVERRIDE_VAR)
        .ok()
        .and_then(|v| LoaderAbi::from_major(&v))
    {
        return (abi, "set by OMPTARGET_RS_LIBOMPTARGET_ABI");
    }
    let exports = |markers: &[&CStr]| markers.iter().any(|m| globally_defined(m));
    if exports(&LLVM18_MARKERS) {
        (LoaderAbi::Llvm18, "its exports")
    } else if exports(&LLVM17_MARKERS) {
        (LoaderAbi::Llvm17, "its exports")
    } else {
        // 16, or no libomptarget at all (a program that dlopens the plugin itself
        // speaks 16's ABI, as this plugin always has).
        (LoaderAbi::Llvm16, "no 17 or 18 export")
    }
}

/// Whether `name` is defined in the process's global scope: libomptarget is, as every
/// offloading program links it (and libomptarget dlopens plugins with RTLD_GLOBAL).
fn globally_defined(name: &CStr) -> bool {
    // SAFETY: dlsym with RTLD_DEFAULT only searches the loaded objects for a
    // NUL-terminated name; the address is compared with null, never used.
    let addr: *mut c_void = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    !addr.is_null()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_three_majors_are_read() {
        assert_eq!(LoaderAbi::from_major("18"), Some(LoaderAbi::Llvm18));
        assert_eq!(LoaderAbi::from_major(" 17\n"), Some(LoaderAbi::Llvm17));
        assert_eq!(LoaderAbi::from_major("19"), None);
        assert_eq!(LoaderAbi::from_major(""), None);
    }

    #[test]
    fn a_process_without_libomptarget_exports_no_marker() {
        // The unit tests link no libomptarget: nothing may pass for 17's or 18's.
        assert!(!LLVM18_MARKERS.iter().any(|m| globally_defined(m)));
        assert!(!LLVM17_MARKERS.iter().any(|m| globally_defined(m)));
        assert!(globally_defined(c"malloc"));
    }
}
