//! The device process the isolated devices share, once running ([`Isolated`]): its
//! address window, its memory (device memory and the host memory it reaches) and the
//! copies into it, its requests and its fault reports; started on the first use of any
//! device ([`ProcessOnFirstUse`]) and ended when the program exits.

use super::address_space::{self, Layout, Window};
use super::arena::Arena;
use super::fault;
use super::process::DeviceProcess;
use super::protocol::{FaultRecord, Reply, Request};
use crate::backend::{BackendError, DeviceAddr};
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The address range the host keeps free for the device process.
const WINDOW_BYTES: u64 = 256 << 30;
/// Device memory: the first part of the window (sparse: only what is written costs).
pub(super) const DEVICE_MEMORY_BYTES: u64 = 64 << 30;
/// Host memory the device reaches (pinned and managed memory), right after it.
pub(super) const HOST_MEMORY_BYTES: u64 = 16 << 30;

/// The device process every isolated device shares, started on the first use of any.
#[derive(Default)]
pub(super) struct ProcessOnFirstUse {
    pub(super) started: OnceLock<Result<Arc<Isolated>, String>>,
}

impl ProcessOnFirstUse {
    /// The running device, started on first use.
    pub(super) fn running(&self) -> Result<&Arc<Isolated>, BackendError> {
        self.started
            .get_or_init(|| Isolated::start().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| BackendError::DeviceProcess(e.clone()))
    }
}

/// A running isolated device: its window, memory and process.
pub struct Isolated {
    pub(super) layout: Layout,
    pub(super) device_memory: Arena,
    pub(super) host_memory: Arena,
    pub(super) process: DeviceProcess,
    /// The images loaded there, by the name of their memory file (how the device
    /// process's mappings show them), for naming a faulting instruction.
    pub(super) images: Mutex<HashMap<String, Arc<OwnedFd>>>,
    /// `process_vm_readv`/`_writev` were refused (a ptrace policy): image globals go
    /// through messages instead.
    vm_refused: AtomicBool,
}

/// Every started device, ended when the program exits (before libomptarget's own
/// destructor unloads the images, which then finds the device gone and stays quiet).
static STARTED: Mutex<Vec<Arc<Isolated>>> = Mutex::new(Vec::new());

extern "C" fn end_devices_at_exit() {
    for device in crate::support::locking::lock(&STARTED).drain(..) {
        device.process.end("the program exited");
    }
}

impl Isolated {
    fn start() -> Result<Arc<Isolated>, BackendError> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |e: std::io::Error| {
                BackendError::DeviceProcess(format!("isolated device: {what}: {e}"))
            }
        };
        let window = Window::reserve(WINDOW_BYTES).map_err(io("reserving its address window"))?;
        let layout = Layout {
            window,
            device_memory_bytes: DEVICE_MEMORY_BYTES,
            host_memory_bytes: HOST_MEMORY_BYTES,
        };
        let (device_base, host_base) = (layout.device_memory().0, layout.host_memory().0);
        let device_memory = Arena::new(DEVICE_MEMORY_BYTES, device_base, layout.host_view().0)
            .map_err(io("creating its memory"))?;
        let host_memory = Arena::new(HOST_MEMORY_BYTES, host_base, host_base)
            .map_err(io("creating the host memory it reaches"))?;
        let process = DeviceProcess::start(layout, &device_memory, &host_memory)?;
        let isolated = Arc::new(Isolated {
            layout,
            device_memory,
            host_memory,
            process,
            images: Mutex::default(),
            vm_refused: AtomicBool::new(false),
        });
        let mut started = crate::support::locking::lock(&STARTED);
        if started.is_empty() {
            // SAFETY: registers a plain extern "C" function of this library, which is
            // never unloaded (linked with -z nodelete).
            unsafe { libc::atexit(end_devices_at_exit) };
        }
        started.push(Arc::clone(&isolated));
        Ok(isolated)
    }

    pub(super) fn request(&self, request: &Request) -> Result<Reply, BackendError> {
        self.process.request(request, None)
    }

    /// The host's view of `[addr, addr + len)` of device memory, if it lies in one of
    /// the arenas.
    pub(super) fn view(&self, addr: DeviceAddr, len: usize) -> Option<*mut u8> {
        self.device_memory
            .view(addr, len)
            .or_else(|| self.host_memory.view(addr, len))
    }

    /// A host buffer must be host memory: a device address of this device in its place
    /// (a device pointer used as a host one) is refused instead of faulting here.
    fn check_host_buffer(&self, buffer: *const u8, len: usize) -> Result<(), BackendError> {
        let range = (buffer as u64, buffer as u64 + len as u64);
        let device = [self.layout.device_memory(), self.layout.device_free()];
        if len > 0 && device.iter().any(|&d| address_space::overlap(range, d)) {
            return Err(BackendError::Bounds(format!(
                "the host buffer {:#x} ({len} bytes) is a device address of the \
                 isolated device, not host memory (a device pointer used as a host one)",
                range.0
            )));
        }
        Ok(())
    }

    pub(super) fn write(&self, dst: DeviceAddr, src: &[u8]) -> Result<(), BackendError> {
        self.check_host_buffer(src.as_ptr(), src.len())?;
        if let Some(view) = self.view(dst, src.len()) {
            // SAFETY: `view` is the host's view of `len` bytes of device memory inside
            // the arena's mapping; `src` is a live slice; `copy` tolerates overlap.
            unsafe { std::ptr::copy(src.as_ptr(), view, src.len()) };
            return Ok(());
        }
        if !self.vm_refused.load(Ordering::Relaxed) {
            match vm_transfer(
                self.process.pid(),
                dst,
                src.as_ptr().cast_mut(),
                src.len(),
                true,
            ) {
                Ok(()) => return Ok(()),
                Err(e) if refused(&e) => self.vm_refused.store(true, Ordering::Relaxed),
                Err(e) => return Err(copy_err("writing", dst, e)),
            }
        }
        for (i, chunk) in src.chunks(MESSAGE_CHUNK).enumerate() {
            let addr = dst + (i * MESSAGE_CHUNK) as u64;
            expect_done(self.request(&Request::Write {
                addr,
                bytes: chunk.to_vec(),
            })?)?;
        }
        Ok(())
    }

    pub(super) fn read(&self, src: DeviceAddr, dst: &mut [u8]) -> Result<(), BackendError> {
        self.check_host_buffer(dst.as_ptr(), dst.len())?;
        if let Some(view) = self.view(src, dst.len()) {
            // SAFETY: as in `write`, the other way.
            unsafe { std::ptr::copy(view, dst.as_mut_ptr(), dst.len()) };
            return Ok(());
        }
        if !self.vm_refused.load(Ordering::Relaxed) {
            match vm_transfer(self.process.pid(), src, dst.as_mut_ptr(), dst.len(), false) {
                Ok(()) => return Ok(()),
                Err(e) if refused(&e) => self.vm_refused.store(true, Ordering::Relaxed),
                Err(e) => return Err(copy_err("reading", src, e)),
            }
        }
        for (i, chunk) in dst.chunks_mut(MESSAGE_CHUNK).enumerate() {
            let addr = src + (i * MESSAGE_CHUNK) as u64;
            match self.request(&Request::Read {
                addr,
                len: chunk.len() as u64,
            })? {
                Reply::Bytes { bytes } if bytes.len() == chunk.len() => {
                    chunk.copy_from_slice(&bytes)
                }
                other => return Err(unexpected(other)),
            }
        }
        Ok(())
    }

    /// The fault, told: the device process is ended afterwards (a faulted GPU context
    /// is gone too).
    pub(super) fn fault_report(&self, record: FaultRecord, kernel: DeviceAddr) -> String {
        let device_maps = self.process.maps().unwrap_or_default();
        let host_maps = address_space::read_maps(None).unwrap_or_default();
        let name_on_device =
            |addr: u64| fault::describe_address(addr, &device_maps, |m| self.device_file(m));
        let kernel_name = name_on_device(kernel)
            .map(|place| place.split(" in ").next().unwrap_or(&place).to_owned());
        let code_at =
            if fault::Access::of(&record) == fault::Access::Call && record.return_address != 0 {
                record.return_address
            } else {
                record.ip
            };
        let report = fault::FaultReport {
            record,
            kernel: kernel_name,
            host_maps: &host_maps,
            device_ip: name_on_device(code_at),
            layout: self.layout,
        };
        report.to_string()
    }

    /// The bytes of a file mapped in the device process: one of our images (by its
    /// memory file's name), or a library on disk.
    fn device_file(&self, m: &address_space::Mapping) -> Option<Vec<u8>> {
        let name = m
            .path
            .strip_prefix("/memfd:")
            .map(|n| n.trim_end_matches(" (deleted)"));
        match name {
            Some(name) => {
                let fd = crate::support::locking::lock(&self.images)
                    .get(name)
                    .cloned()?;
                let file = std::fs::File::from(fd.as_fd().try_clone_to_owned().ok()?);
                let len = file.metadata().ok()?.len() as usize;
                let mut bytes = vec![0u8; len];
                file.read_exact_at(&mut bytes, 0).ok()?;
                Some(bytes)
            }
            None => fault::read_mapped_file(m),
        }
    }
}

/// Image globals go through messages of at most this many bytes where
/// `process_vm_writev` is refused.
const MESSAGE_CHUNK: usize = 32 << 10;

fn refused(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM | libc::ENOSYS | libc::EACCES)
    )
}

fn copy_err(what: &str, addr: DeviceAddr, e: std::io::Error) -> BackendError {
    BackendError::Transfer(format!("{what} device address {addr:#x}: {e}"))
}

pub(super) fn unexpected(reply: Reply) -> BackendError {
    match reply {
        Reply::Failed { message, .. } => BackendError::DeviceProcess(message),
        other => BackendError::Protocol(format!("unexpected answer from the device: {other:?}")),
    }
}

fn expect_done(reply: Reply) -> Result<(), BackendError> {
    match reply {
        Reply::Done => Ok(()),
        other => Err(unexpected(other)),
    }
}

/// Copy `len` bytes between this process's `local` and the device process's `remote`
/// with one `process_vm_writev` (`write`) or `process_vm_readv`.
fn vm_transfer(
    pid: u32,
    remote: DeviceAddr,
    local: *mut u8,
    len: usize,
    write: bool,
) -> std::io::Result<()> {
    let mut done = 0;
    while done < len {
        // SAFETY: done < len: the pointer stays inside the caller's buffer.
        let rest = unsafe { local.add(done) };
        let local_iov = libc::iovec {
            iov_base: rest.cast(),
            iov_len: len - done,
        };
        let remote_iov = libc::iovec {
            iov_base: (remote + done as u64) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the local iovec covers the caller's live buffer of `len` bytes; the
        // remote one is checked by the kernel against the device process's mappings
        // (an unmapped range fails with EFAULT, nothing is touched here).
        let n = unsafe {
            if write {
                libc::process_vm_writev(pid as libc::pid_t, &local_iov, 1, &remote_iov, 1, 0)
            } else {
                libc::process_vm_readv(pid as libc::pid_t, &local_iov, 1, &remote_iov, 1, 0)
            }
        };
        if n <= 0 {
            return Err(if n == 0 {
                std::io::Error::from_raw_os_error(libc::EFAULT)
            } else {
                std::io::Error::last_os_error()
            });
        }
        done += n as usize;
    }
    Ok(())
}
