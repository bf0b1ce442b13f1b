//! Opening a vendor library at run time and naming the file that was opened.

use crate::report::Report;
use std::ffi::{c_void, CStr};
use std::io::Write;
use std::path::PathBuf;

/// How opening one library by name went.
pub enum Opened {
    Library(libloading::Library),
    /// None of the names is on the loader's path.
    NotFound,
    /// Found, but the loader refused it (its message).
    Failed(String),
}

/// The first of `names` the loader opens.
///
/// # Safety
/// Opening runs the library's initialisers: each name must be a library whose
/// initialisers are sound to run in this process (a vendor's driver or runtime).
pub unsafe fn open_first(names: &[&str]) -> Opened {
    let mut failure = None;
    for name in names {
        // SAFETY: the caller vouches for the library's initialisers.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => return Opened::Library(lib),
            Err(e) => {
                let text = e.to_string();
                if !text.contains("No such file or directory") {
                    failure.get_or_insert(text);
                }
            }
        }
    }
    failure.map_or(Opened::NotFound, Opened::Failed)
}

/// The first of `names` the loader opens, as [`open_first`]; otherwise None, after a
/// `skip` line when none is there (`no <what> (<names[0]> not found)`) or a `fail` line
/// with `fix` when one is there but does not load.
///
/// # Safety
/// As [`open_first`].
pub unsafe fn open_or_report(
    report: &mut Report<impl Write>,
    names: &[&str],
    what: &str,
    fix: &str,
) -> Option<libloading::Library> {
    // SAFETY: the caller vouches for the library's initialisers.
    match unsafe { open_first(names) } {
        Opened::Library(lib) => Some(lib),
        Opened::NotFound => {
            report.skip(format!("no {what} ({} not found)", names[0]), None);
            None
        }
        Opened::Failed(e) => {
            report.fail(format!("{} does not load: {e}", names[0]), fix);
            None
        }
    }
}

/// The file the loaded symbol at `address` lives in (dladdr).
pub fn file_of(address: *const c_void) -> Option<PathBuf> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the loader's tables for `address` and writes `info`,
    // which lives on this stack frame; it returns 0 when the address is in no object.
    let found = unsafe { libc::dladdr(address, &mut info) } != 0;
    if !found || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string the loader keeps while the object is
    // loaded; it is copied here, while the caller holds the library open.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(name.to_string_lossy().into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_not_found() {
        // SAFETY: nothing by that name exists, so nothing is opened.
        let opened = unsafe { open_first(&["libomptarget-indirect-doctor-no-such-library.so.1"]) };
        assert!(matches!(opened, Opened::NotFound));
    }

    #[test]
    fn the_c_librarys_file_is_named() {
        // SAFETY: the C library is already loaded in every Rust process on Linux;
        // opening it again runs no initialiser.
        let Opened::Library(lib) = (unsafe { open_first(&["libc.so.6"]) }) else {
            panic!("libc.so.6 did not open");
        };
        // SAFETY: getpid's C type is `pid_t getpid(void)`.
        let getpid = unsafe { lib.get::<unsafe extern "C" fn() -> i32>(b"getpid\0") }.unwrap();
        let file = file_of(*getpid as *const c_void).unwrap();
        assert!(
            file.to_string_lossy().contains("libc.so"),
            "{}",
            file.display()
        );
    }
}
