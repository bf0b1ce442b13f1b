//! The plugin is built against one LLVM's C++ API (16, 17 or 18: the crate's feature):
//! loaded by any other clang, its pass builder would be another version's and calling
//! into it undefined. This asks the
//! process which LLVM it runs (the first `LLVMGetVersion` in the global symbol scope is
//! the executable's own LLVM, loaded before this library).

/// The LLVM version this library is built for (build.rs allows exactly one feature).
#[cfg(feature = "llvm16")]
pub const BUILT_FOR_MAJOR: u32 = 16;
#[cfg(feature = "llvm17")]
pub const BUILT_FOR_MAJOR: u32 = 17;
#[cfg(feature = "llvm18")]
pub const BUILT_FOR_MAJOR: u32 = 18;

/// `(major, minor, patch)` of the LLVM the process runs, when it exports the C API.
pub fn process_llvm_version() -> Option<(u32, u32, u32)> {
    type GetVersion = unsafe extern "C" fn(*mut u32, *mut u32, *mut u32);
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only searches the
    // loaded objects.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"LLVMGetVersion".as_ptr()) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: LLVMGetVersion has had this signature since it was added (LLVM 16).
    let get: GetVersion = unsafe { std::mem::transmute::<*mut libc::c_void, GetVersion>(sym) };
    let (mut major, mut minor, mut patch) = (0, 0, 0);
    // SAFETY: the three out-pointers are valid for writes.
    unsafe { get(&mut major, &mut minor, &mut patch) };
    Some((major, minor, patch))
}

/// Ok when the process runs the LLVM this library is built for, else the message for
/// the user.
pub fn check(version: Option<(u32, u32, u32)>) -> Result<(), String> {
    match version {
        Some((major, _, _)) if major == BUILT_FOR_MAJOR => Ok(()),
        Some((major, minor, patch)) => Err(format!(
            "the omptarget-indirect compiler plugin is built for clang {BUILT_FOR_MAJOR} \
             (LLVM {BUILT_FOR_MAJOR}) but was loaded by a compiler running LLVM \
             {major}.{minor}.{patch}: compile with clang-{BUILT_FOR_MAJOR} (the config files in \
             share/omptarget-indirect/ are for clang-{BUILT_FOR_MAJOR})"
        )),
        None => Err(format!(
            "the omptarget-indirect compiler plugin is built for clang {BUILT_FOR_MAJOR} \
             (LLVM {BUILT_FOR_MAJOR}) but cannot tell which LLVM the compiler that loaded it \
             runs (it exports no LLVMGetVersion): compile with Debian's clang-{BUILT_FOR_MAJOR}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_llvm_it_is_built_for_is_accepted() {
        assert_eq!(check(Some((BUILT_FOR_MAJOR, 0, 6))), Ok(()));
    }

    #[test]
    fn another_llvm_is_refused_by_name() {
        let err = check(Some((22, 1, 8))).unwrap_err();
        assert!(err.contains("running LLVM 22.1.8"), "{err}");
        assert!(err.contains(&format!("clang-{BUILT_FOR_MAJOR}")), "{err}");
    }

    #[test]
    fn an_unknown_llvm_is_refused() {
        assert!(check(None).unwrap_err().contains("cannot tell"));
    }
}
