//! The host CPU as an offload device, as LLVM's generic-elf-64bit plugin does it: images
//! are x86-64 shared objects loaded with dlopen, memory is malloc'd process memory,
//! kernels are called through libffi with one pointer argument per mapped variable.

use super::{Backend, BackendError, DeviceAddr, LoadedModule, StagedImage};
use libffi::low::{self, ffi_abi_FFI_DEFAULT_ABI, ffi_cif, ffi_type, CodePtr};
use libloading::os::unix::{Library, RTLD_LAZY, RTLD_LOCAL};
use std::ffi::{c_void, CStr};
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// LLVM's host plugin offers four devices; tests in LLVM's suite use more than one.
pub const HOST_DEVICE_COUNT: usize = 4;

/// Kernels with up to this many arguments are called without heap allocation, through
/// a call description prepared once per argument count.
const INLINE_ARGS: usize = 16;

#[derive(Default)]
pub struct HostBackend;

/// libffi's description of a call taking some pointers and returning nothing (what every
/// outlined OpenMP region is), with the argument type array it points into.
struct PointerCall {
    cif: ffi_cif,
    /// What `cif.arg_types` points at: boxed, so it never moves while `cif` lives.
    _types: Box<[*mut ffi_type]>,
}

// SAFETY: after `PointerCall::new` nothing writes to the cif or its type array again
// (launches call through a stack copy of the cif, and libffi only reads the types it
// points at, which are `_types` and libffi's own static descriptors), so sharing one
// between threads shares only immutable data.
unsafe impl Send for PointerCall {}
// SAFETY: as for Send: immutable after construction.
unsafe impl Sync for PointerCall {}

impl PointerCall {
    fn new(n: usize) -> Result<Self, BackendError> {
        if u32::try_from(n).is_err() {
            return Err(BackendError::Launch(format!(
                "{n} kernel arguments are too many"
            )));
        }
        // `addr_of_mut!` of libffi's type descriptors: no Rust reference to the C statics
        // is made; libffi only reads a scalar type's descriptor.
        let mut types: Box<[*mut ffi_type]> =
            vec![std::ptr::addr_of_mut!(low::types::pointer); n].into_boxed_slice();
        let mut cif = ffi_cif::default();
        // SAFETY: `cif` is ours to fill; `types` holds `n` valid type descriptors and is
        // kept (unmoved, on the heap) as long as the cif, which points into it.
        unsafe {
            low::prep_cif(
                &mut cif,
                ffi_abi_FFI_DEFAULT_ABI,
                n,
                std::ptr::addr_of_mut!(low::types::void),
                types.as_mut_ptr(),
            )
        }
        .map_err(|e| BackendError::Launch(format!("libffi could not describe the call: {e:?}")))?;
        Ok(PointerCall { cif, _types: types })
    }

    /// The description for `n <= INLINE_ARGS` pointers, prepared on first use: preparing
    /// it on every launch was a visible part of a launch's cost.
    fn cached(n: usize) -> Result<&'static PointerCall, BackendError> {
        static CALLS: [OnceLock<Option<PointerCall>>; INLINE_ARGS + 1] =
            [const { OnceLock::new() }; INLINE_ARGS + 1];
        CALLS
            .get(n)
            .ok_or_else(|| BackendError::Launch(format!("no cached call for {n} arguments")))?
            .get_or_init(|| PointerCall::new(n).ok())
            .as_ref()
            .ok_or_else(|| BackendError::Launch(format!("libffi cannot call {n} pointers")))
    }

    /// Call `kernel(args...)`. `values` and `slots` are scratch space of `args.len()`
    /// entries each.
    ///
    /// # Safety
    /// `kernel` is a function taking `args.len()` pointers and returning nothing, the
    /// arguments are what it expects, and this description is for `args.len()` pointers.
    unsafe fn call(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        values: &mut [*mut c_void],
        slots: &mut [*mut c_void],
    ) -> Result<(), BackendError> {
        let n = args.len();
        if self.cif.nargs as usize != n || values.len() != n || slots.len() != n {
            return Err(BackendError::Launch(
                "call description or scratch of the wrong size".into(),
            ));
        }
        for (value, &a) in values.iter_mut().zip(args) {
            *value = a as *mut c_void;
        }
        // libffi reads each argument through a pointer to it.
        let base = values.as_mut_ptr();
        for (i, slot) in slots.iter_mut().enumerate() {
            // SAFETY: `i < n == values.len()`.
            *slot = unsafe { base.add(i) }.cast();
        }
        // libffi's call takes the description by `*mut`: give it a copy of our own (the
        // shared one is never written).
        let mut cif = self.cif;
        // SAFETY: the caller promises `kernel` takes `n` pointers and returns nothing;
        // `cif` describes exactly that (its type array lives in `self`); `slots` points
        // at the `n` values, all alive for the call.
        unsafe { low::call::<()>(&mut cif, CodePtr(kernel as *mut c_void), slots.as_mut_ptr()) };
        Ok(())
    }
}

struct HostModule {
    library: Library,
    /// `l_addr` of the image's link map: image address + this = process address.
    load_bias: u64,
    /// The image file dlopen mapped, until [`LoadedModule::release_load_files`].
    file: Mutex<Option<ImageFile>>,
}

/// An image where dlopen can open it, released on drop: the mapping dlopen made stays
/// valid after the name and the file are gone, so nothing is left in the temporary
/// directory once a load ends, failed or not (LLVM 16's plugin never removes its files).
enum ImageFile {
    /// The image in an anonymous memory file (memfd), opened through a uniquely named
    /// symbolic link to `/proc/self/fd/N`: a big image is written there about three
    /// times faster than to a disk file (108 MiB: 53 against 155 ms on ext4) and never
    /// goes to disk. The link is there because glibc's dlopen hands back an already
    /// loaded library whose name equals the requested path, and descriptor numbers are
    /// reused.
    Memory { link: PathBuf, _fd: OwnedFd },
    /// A temp file, where there is no memfd_create or no /proc.
    Disk(PathBuf),
}

impl ImageFile {
    /// What dlopen opens.
    fn path(&self) -> &Path {
        match self {
            ImageFile::Memory { link, .. } => link,
            ImageFile::Disk(path) => path,
        }
    }
}

impl Drop for ImageFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.path());
    }
}

/// The public head of glibc's `struct link_map` (<link.h>); the loader's private fields
/// follow it and are never touched.
#[repr(C)]
struct LinkMapHead {
    l_addr: usize,
}

/// The load bias of a library dlopen'd by us.
fn load_bias_of(library: Library) -> Result<(Library, u64), BackendError> {
    let handle = library.into_raw();
    let mut map: *const LinkMapHead = std::ptr::null();
    // SAFETY: `handle` is a live dlopen handle (ours, reopened as a Library right after);
    // RTLD_DI_LINKMAP stores a `struct link_map *` into `map`, which has that type.
    let rc = unsafe {
        libc::dlinfo(
            handle,
            libc::RTLD_DI_LINKMAP,
            std::ptr::addr_of_mut!(map).cast(),
        )
    };
    // SAFETY: `handle` came from `into_raw` above and is taken back exactly once.
    let library = unsafe { Library::from_raw(handle) };
    if rc != 0 || map.is_null() {
        return Err(BackendError::Load(
            "dlinfo(RTLD_DI_LINKMAP) failed for the loaded image".into(),
        ));
    }
    // SAFETY: a link map the loader keeps while the library is open; `l_addr` is its
    // first, public field.
    let bias = unsafe { (*map).l_addr } as u64;
    Ok((library, bias))
}

impl HostModule {
    fn symbol(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        let missing = || BackendError::MissingSymbol(name.to_string_lossy().into_owned());
        // SAFETY: we only take the symbol's address (a `*mut c_void` read out of dlsym's
        // answer); nothing is called or dereferenced here.
        let sym = unsafe { self.library.get::<*mut c_void>(name.to_bytes_with_nul()) }
            .map_err(|_| missing())?;
        let addr = *sym as DeviceAddr;
        if addr == 0 {
            return Err(missing());
        }
        Ok(addr)
    }
}

impl LoadedModule for HostModule {
    fn release_load_files(&self) {
        let file = self.file.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(file);
    }

    fn global(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        self.symbol(name)
    }
    fn function(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        self.symbol(name)
    }
    fn load_bias(&self) -> Option<u64> {
        Some(self.load_bias)
    }
}

/// A unique name for an image's file (or link): dlopen needs a path, and the same image
/// may be loaded on several devices at once.
fn unique_image_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("omptarget-rs-image-{}-{}.so", std::process::id(), n)
}

/// Images from this size on go to a memory file; smaller ones to a temp file. Written
/// and kept open like loaded images, on ext4 (Linux 6.18, 2 CPUs): 1 MiB took 0.36 ms
/// on disk and 0.66 in memory, 4 MiB 1.2 and 2.0, 16 MiB 18 and 9.4, 64 MiB 106 and
/// 35 (large writes to disk meet writeback; small ones gain from the page cache's large
/// folios, which memory files do not get).
const MEMORY_FILE_MIN_BYTES: usize = 8 << 20;

/// `image` where dlopen can open it: a big one in memory where the system allows, else
/// in a temp file.
fn write_image_file(image: &[u8]) -> Result<ImageFile, BackendError> {
    let name = unique_image_name();
    if image.len() >= MEMORY_FILE_MIN_BYTES {
        if let Some(file) = write_image_memory(&name, image)? {
            return Ok(file);
        }
    }
    write_image_disk(&name, image)
}

/// `image` in a memory file named `name` (/proc/self/maps shows it), behind a link of
/// that name in the temporary directory. None where memfd_create or /proc/self/fd is
/// missing; a failed write leaves no link.
fn write_image_memory(name: &str, image: &[u8]) -> Result<Option<ImageFile>, BackendError> {
    let c_name = std::ffi::CString::new(name).map_err(|e| BackendError::Load(e.to_string()))?;
    // SAFETY: memfd_create reads the NUL-terminated name and returns a new descriptor
    // (or -1), which is owned right below and by nothing else.
    let raw = unsafe { libc::memfd_create(c_name.as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Ok(None);
    }
    // SAFETY: `raw` is a fresh descriptor that only this value owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let target = PathBuf::from(format!("/proc/self/fd/{raw}"));
    if std::fs::symlink_metadata(&target).is_err() {
        return Ok(None);
    }
    let mut file = std::fs::File::from(fd);
    file.write_all(image)?;
    let link = std::env::temp_dir().join(name);
    std::os::unix::fs::symlink(&target, &link)?;
    Ok(Some(ImageFile::Memory {
        link,
        _fd: file.into(),
    }))
}

/// `image` in a fresh temp file named `name`; a failed write leaves no file.
fn write_image_disk(name: &str, image: &[u8]) -> Result<ImageFile, BackendError> {
    let file = ImageFile::Disk(std::env::temp_dir().join(name));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(file.path())
        .and_then(|mut f| f.write_all(image))?;
    Ok(file)
}

impl Backend for HostBackend {
    fn elf_machine(&self) -> u16 {
        object::elf::EM_X86_64
    }

    fn device_count(&self) -> usize {
        HOST_DEVICE_COUNT
    }

    fn init_device(&self, _device: usize) -> Result<(), BackendError> {
        Ok(())
    }

    fn load_image(
        &self,
        device: usize,
        image: &[u8],
    ) -> Result<Box<dyn LoadedModule>, BackendError> {
        self.load_staged(device, image, None)
    }

    fn stage_image(
        &self,
        _device: usize,
        image: &[u8],
    ) -> Result<Option<StagedImage>, BackendError> {
        Ok(Some(Box::new(write_image_file(image)?)))
    }

    fn load_staged(
        &self,
        _device: usize,
        image: &[u8],
        staged: Option<StagedImage>,
    ) -> Result<Box<dyn LoadedModule>, BackendError> {
        let file = match staged.map(|s| s.downcast::<ImageFile>()) {
            Some(Ok(file)) => *file,
            // Not staged (or staged by something else): write it now.
            _ => write_image_file(image)?,
        };
        // Local binding, like separate GPU modules: two images never interpose each
        // other's globals (each has its own `__omp_offloading_fptr_map_p`).
        // SAFETY: loading runs the image's ELF constructors; the image is a device image
        // libomptarget handed us to run, exactly what this device exists to execute.
        let opened = unsafe { Library::open(Some(file.path()), RTLD_LAZY | RTLD_LOCAL) };
        let library = opened.map_err(|e| BackendError::Load(e.to_string()))?;
        let (library, load_bias) = load_bias_of(library)?;
        Ok(Box::new(HostModule {
            library,
            load_bias,
            file: Mutex::new(Some(file)),
        }))
    }

    fn alloc(&self, _device: usize, size: usize) -> Result<DeviceAddr, BackendError> {
        // SAFETY: malloc has no preconditions; a zero-size request asks for one byte so a
        // successful allocation is never null.
        let ptr = unsafe { libc::malloc(size.max(1)) };
        if ptr.is_null() {
            return Err(BackendError::OutOfMemory(size));
        }
        // The table and the index of a large image: written right after this.
        crate::huge_pages::advise(ptr.cast(), size);
        Ok(ptr as DeviceAddr)
    }

    fn memory_is_host(&self) -> bool {
        true
    }

    unsafe fn free(&self, _device: usize, addr: DeviceAddr) -> Result<(), BackendError> {
        // SAFETY: the caller promises `addr` came from `alloc` (malloc) and is dead.
        unsafe { libc::free(addr as *mut c_void) };
        Ok(())
    }

    unsafe fn write(&self, _: usize, dst: DeviceAddr, src: &[u8]) -> Result<(), BackendError> {
        // SAFETY: the caller promises dst..dst+len is device (= process) memory; `src` is a
        // live slice; `copy` tolerates overlap.
        unsafe { std::ptr::copy(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    unsafe fn read(&self, _: usize, src: DeviceAddr, dst: &mut [u8]) -> Result<(), BackendError> {
        // SAFETY: the caller promises src..src+len is device (= process) memory.
        unsafe { std::ptr::copy(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    unsafe fn copy(
        &self,
        _: usize,
        src: DeviceAddr,
        _: usize,
        dst: DeviceAddr,
        len: usize,
    ) -> Result<(), BackendError> {
        // SAFETY: the caller promises both ranges are device (= process) memory.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
        Ok(())
    }

    unsafe fn launch(
        &self,
        _device: usize,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
    ) -> Result<(), BackendError> {
        // Up to INLINE_ARGS arguments: a cached call description and stack scratch. This
        // runs on every launch; libffi's `middle::Cif` (three heap allocations and a
        // fresh description per call) was a visible part of a launch's cost.
        let n = args.len();
        if n <= INLINE_ARGS {
            let call = PointerCall::cached(n)?;
            let mut values = [std::ptr::null_mut(); INLINE_ARGS];
            let mut slots = [std::ptr::null_mut(); INLINE_ARGS];
            // SAFETY: forwarded caller contract; `call` is for `n` pointers and both
            // arrays hold `n` slots.
            unsafe { call.call(kernel, args, &mut values[..n], &mut slots[..n]) }
        } else {
            let call = PointerCall::new(n)?;
            let mut values = vec![std::ptr::null_mut(); n];
            let mut slots = vec![std::ptr::null_mut(); n];
            // SAFETY: as above, with `n` slots on the heap.
            unsafe { call.call(kernel, args, &mut values, &mut slots) }
        }
    }

    fn synchronize(&self, _device: usize) -> Result<(), BackendError> {
        // Every operation on the host device completes before it returns.
        Ok(())
    }

    fn prefetch(&self, _device: usize, addr: DeviceAddr) {
        crate::prefetch::read_address(addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn no_args() {
        CALLED.store(true, Ordering::SeqCst);
    }
    static CALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    extern "C" fn store_difference(out: *mut u64, a: *const u64, b: *const u64) {
        // SAFETY: the test passes three live u64 cells.
        unsafe { *out = *a - *b };
    }

    /// 1 + 19 arguments: more than INLINE_ARGS, so the uncached, heap path.
    #[allow(clippy::too_many_arguments)]
    extern "C" fn weighted_sum(
        out: *mut u64,
        a1: u64,
        a2: u64,
        a3: u64,
        a4: u64,
        a5: u64,
        a6: u64,
        a7: u64,
        a8: u64,
        a9: u64,
        a10: u64,
        a11: u64,
        a12: u64,
        a13: u64,
        a14: u64,
        a15: u64,
        a16: u64,
        a17: u64,
        a18: u64,
        a19: u64,
    ) {
        let v = [
            a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
        ];
        // SAFETY: the test passes a live u64 cell.
        unsafe { *out = v.iter().enumerate().map(|(i, x)| (i as u64 + 1) * x).sum() };
    }

    /// A function's address as the backend takes kernels.
    fn addr(f: *const ()) -> DeviceAddr {
        f as usize as DeviceAddr
    }

    #[test]
    fn launches_pass_every_argument_in_order() {
        let backend = HostBackend;
        // SAFETY: each function takes exactly the pointers passed, all live.
        unsafe {
            backend.launch(0, addr(no_args as *const ()), &[]).unwrap();
            assert!(CALLED.load(Ordering::SeqCst));

            // Every access to the output cells goes through the pointers the kernels get.
            let (mut out, a, b) = (0u64, 50u64, 8u64);
            let out_ptr: *mut u64 = &mut out;
            let args = [
                out_ptr as u64,
                &a as *const u64 as u64,
                &b as *const u64 as u64,
            ];
            // Twice: the second launch uses the cached call description.
            for _ in 0..2 {
                *out_ptr = 0;
                let kernel = addr(store_difference as *const ());
                backend.launch(0, kernel, &args).unwrap();
                assert_eq!(*out_ptr, 42);
            }

            let mut sum = 0u64;
            let sum_ptr: *mut u64 = &mut sum;
            let mut many = vec![sum_ptr as u64];
            many.extend(1..=19u64);
            assert!(many.len() > INLINE_ARGS);
            backend
                .launch(0, addr(weighted_sum as *const ()), &many)
                .unwrap();
            assert_eq!(*sum_ptr, (1..=19u64).map(|i| i * i).sum::<u64>());
        }
    }
}
