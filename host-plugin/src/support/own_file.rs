//! The file this library was loaded from: its name says which plugin a copy is
//! ([`crate::abi`]), and the isolated device's executable is found beside it.

use std::path::PathBuf;

/// This library's file (the program's, when the code is linked into an executable),
/// None where the dynamic loader cannot tell.
pub(crate) fn path() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the address (one of our own functions) and fills `info`.
    let found = unsafe { libc::dladdr(path as *const libc::c_void, &mut info) } != 0;
    if !found || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path owned by the dynamic loader.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes()));
    // The main program has an empty name here (dladdr on an executable).
    if path.as_os_str().is_empty() {
        std::env::current_exe().ok()
    } else {
        Some(path)
    }
}
