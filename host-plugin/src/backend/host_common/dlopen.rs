//! An x86-64 device image where dlopen can open it, opened, with its load bias: what the
//! host backend does in this process and the isolated device process does in its own
//! (one copy of the rules for both).

use crate::backend::BackendError;
use libloading::os::unix::{Library, RTLD_LAZY, RTLD_LOCAL};
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// An image where dlopen can open it, released on drop: the mapping dlopen made stays
/// valid after the name and the file are gone, so nothing is left in the temporary
/// directory once a load ends, failed or not (LLVM 16's plugin never removes its files).
pub(crate) enum ImageFile {
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
    pub(crate) fn path(&self) -> &Path {
        match self {
            ImageFile::Memory { link, .. } => link,
            ImageFile::Disk(path) => path,
        }
    }

    /// `image` where dlopen can open it: a big one in memory where the system allows,
    /// else in a temp file.
    pub(crate) fn write(image: &[u8]) -> Result<ImageFile, BackendError> {
        let name = unique_image_name();
        if image.len() >= MEMORY_FILE_MIN_BYTES {
            if let Some(fd) = memory_file(&name, image)? {
                if let Some(file) = ImageFile::link(fd, &name)? {
                    return Ok(file);
                }
            }
        }
        write_image_disk(&name, image)
    }

    /// An image someone else wrote into the file `fd` (the isolated device process gets
    /// its images so), behind a uniquely named link; None where /proc/self/fd is missing.
    pub(crate) fn link(fd: OwnedFd, name: &str) -> Result<Option<ImageFile>, BackendError> {
        let target = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        if std::fs::symlink_metadata(&target).is_err() {
            return Ok(None);
        }
        let link = std::env::temp_dir().join(name);
        std::os::unix::fs::symlink(&target, &link)?;
        Ok(Some(ImageFile::Memory { link, _fd: fd }))
    }
}

impl Drop for ImageFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.path());
    }
}

/// A unique name for an image's file (or link): dlopen needs a path, and the same image
/// may be loaded on several devices at once.
pub(crate) fn unique_image_name() -> String {
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

/// `image` in an anonymous memory file named `name` (/proc/PID/maps shows the name),
/// close-on-exec. None where memfd_create is missing.
fn memory_file(name: &str, image: &[u8]) -> Result<Option<OwnedFd>, BackendError> {
    let c_name = CString::new(name).map_err(|e| BackendError::Load(e.to_string()))?;
    // SAFETY: memfd_create reads the NUL-terminated name and returns a new descriptor
    // (or -1), which is owned right below and by nothing else.
    let raw = unsafe { libc::memfd_create(c_name.as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Ok(None);
    }
    // SAFETY: `raw` is a fresh descriptor that only this value owns.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    file.write_all(image)?;
    Ok(Some(file.into()))
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

/// An image in a file the device process can be handed: a memory file, or (where there
/// is no memfd) an unlinked temp file; with the name the device's mappings show (the
/// isolated device process opens it through its descriptor).
pub(crate) fn image_descriptor(image: &[u8]) -> Result<(OwnedFd, String), BackendError> {
    let name = unique_image_name();
    if let Some(fd) = memory_file(&name, image)? {
        return Ok((fd, name));
    }
    let path = std::env::temp_dir().join(&name);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    let _ = std::fs::remove_file(&path);
    std::io::Write::write_all(&mut file, image)?;
    Ok((file.into(), name))
}

/// The public head of glibc's `struct link_map` (<link.h>); the loader's private fields
/// follow it and are never touched.
#[repr(C)]
struct LinkMapHead {
    l_addr: usize,
}

/// dlopen `file` the way a device loads a module, and its load bias (what the loader
/// added to every ELF address of it).
pub(crate) fn open(file: &ImageFile) -> Result<(Library, u64), BackendError> {
    // Local binding, like separate GPU modules: two images never interpose each other's
    // globals (each has its own `__omp_offloading_fptr_map_p`).
    // SAFETY: loading runs the image's ELF constructors; the image is a device image
    // libomptarget handed us to run, exactly what this device exists to execute.
    let opened = unsafe { Library::open(Some(file.path()), RTLD_LAZY | RTLD_LOCAL) };
    let library = opened.map_err(|e| BackendError::Load(e.to_string()))?;
    load_bias_of(library)
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

/// The address of `name` in `library`, or MissingSymbol.
pub(crate) fn symbol(library: &Library, name: &std::ffi::CStr) -> Result<u64, BackendError> {
    let missing = || BackendError::MissingSymbol(name.to_string_lossy().into_owned());
    // SAFETY: we only take the symbol's address (a `*mut c_void` read out of dlsym's
    // answer); nothing is called or dereferenced here.
    let sym = unsafe { library.get::<*mut std::ffi::c_void>(name.to_bytes_with_nul()) }
        .map_err(|_| missing())?;
    let addr = *sym as u64;
    if addr == 0 {
        return Err(missing());
    }
    Ok(addr)
}
