//! The isolated host device (`OMPTARGET_RS_ISOLATED=1`): the x86_64 device in a process
//! of its own, so that it sees what a discrete GPU sees. Images, libomp and the device
//! RTL load there; all device memory lives there; and every address of the host
//! process faults there, reported with what it is in the host (`_ZTV5Child+16`, a
//! heap address, a host function) and whether it was read, written or called.
//!
//! Beside [`super::host`], it shares the ELF checks and the whole load path of the core
//! (entries resolve from the image's symbol tables and the load bias the device
//! process reports), and dlopen and the libffi call ([`super::host_common`]) with the
//! in-process host device.
//!
//! - [`address_space`]: the window, reservations, and why no host address can be
//!   reached on the device;
//! - [`arena`]: device memory, shared with the plugin for copies;
//! - [`protocol`]: the messages; [`process`]: the plugin's side of the device process;
//!   [`server`]: the device process itself; [`fault`]: the fault report.

pub mod address_space;
mod arena;
pub mod args;
mod c_streams;
pub mod doorbell;
pub mod fault;
pub mod process;
pub mod protocol;
pub mod server;

use super::host_common::{dlopen, HOST_DEVICE_COUNT};
use super::{
    AllocKind, Backend, BackendDevice, BackendError, DeviceAddr, LoadedModule, StagedImage,
};
use crate::diag;
use crate::launch_shape::Shape;
use address_space::{Layout, Window};
use arena::Arena;
use process::{DeviceProcess, LaunchOutcome};
use protocol::{FaultRecord, Reply, Request};
use std::collections::HashMap;
use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub use args::ISOLATED_ENV;

/// Whether this process asked for the isolated device.
pub fn requested() -> bool {
    std::env::var(ISOLATED_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The address range the host keeps free for the device process.
const WINDOW_BYTES: u64 = 256 << 30;
/// Device memory: the first part of the window (sparse: only what is written costs).
const DEVICE_MEMORY_BYTES: u64 = 64 << 30;
/// Host memory the device reaches (pinned and managed memory), right after it.
const HOST_MEMORY_BYTES: u64 = 16 << 30;
/// `OMP_REQ_UNIFIED_SHARED_MEMORY` of `__tgt_rtl_init_requires`.
const REQUIRES_UNIFIED_SHARED_MEMORY: i64 = 0x008;

/// The backend: the device process is started on the first device's use.
#[derive(Default)]
pub struct IsolatedBackend {
    process: Arc<ProcessOnFirstUse>,
}

/// The device process every isolated device shares, started on the first use of any.
#[derive(Default)]
struct ProcessOnFirstUse {
    started: OnceLock<Result<Arc<Isolated>, String>>,
}

impl ProcessOnFirstUse {
    /// The running device, started on first use.
    fn running(&self) -> Result<&Arc<Isolated>, BackendError> {
        self.started
            .get_or_init(|| Isolated::start().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| BackendError::DeviceProcess(e.clone()))
    }
}

/// One of the isolated devices: its number, over the process they share.
pub struct IsolatedDevice {
    index: usize,
    process: Arc<ProcessOnFirstUse>,
}

/// A running isolated device: its window, memory and process.
pub struct Isolated {
    layout: Layout,
    device_memory: Arena,
    host_memory: Arena,
    process: DeviceProcess,
    /// The images loaded there, by the name of their memory file (how the device
    /// process's mappings show them), for naming a faulting instruction.
    images: Mutex<HashMap<String, Arc<OwnedFd>>>,
    /// `process_vm_readv`/`_writev` were refused (a ptrace policy): image globals go
    /// through messages instead.
    vm_refused: AtomicBool,
}

/// Every started device, ended when the program exits (before libomptarget's own
/// destructor unloads the images, which then finds the device gone and stays quiet).
static STARTED: Mutex<Vec<Arc<Isolated>>> = Mutex::new(Vec::new());

extern "C" fn end_devices_at_exit() {
    for device in crate::locking::lock(&STARTED).drain(..) {
        device.process.end("the program exited");
    }
}

impl IsolatedBackend {
    pub fn new() -> Self {
        Self::default()
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
        let mut started = crate::locking::lock(&STARTED);
        if started.is_empty() {
            // SAFETY: registers a plain extern "C" function of this library, which is
            // never unloaded (linked with -z nodelete).
            unsafe { libc::atexit(end_devices_at_exit) };
        }
        started.push(Arc::clone(&isolated));
        Ok(isolated)
    }

    fn request(&self, request: &Request) -> Result<Reply, BackendError> {
        self.process.request(request, None)
    }

    /// The host's view of `[addr, addr + len)` of device memory, if it lies in one of
    /// the arenas.
    fn view(&self, addr: DeviceAddr, len: usize) -> Option<*mut u8> {
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

    fn write(&self, dst: DeviceAddr, src: &[u8]) -> Result<(), BackendError> {
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

    fn read(&self, src: DeviceAddr, dst: &mut [u8]) -> Result<(), BackendError> {
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
    fn fault_report(&self, record: FaultRecord, kernel: DeviceAddr) -> String {
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
                let fd = crate::locking::lock(&self.images).get(name).cloned()?;
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

fn unexpected(reply: Reply) -> BackendError {
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

/// An image loaded in the device process.
struct IsolatedModule {
    device: Arc<Isolated>,
    module: u64,
    load_bias: u64,
    /// The name of the image's memory file (see [`Isolated::images`]).
    name: String,
}

impl IsolatedModule {
    fn symbol(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        let request = Request::Symbol {
            module: self.module,
            name: name.to_bytes().to_vec(),
        };
        match self.device.request(&request)? {
            Reply::Address { addr } => Ok(addr),
            Reply::Failed { missing: true, .. } => Err(BackendError::MissingSymbol(
                name.to_string_lossy().into_owned(),
            )),
            other => Err(unexpected(other)),
        }
    }
}

impl LoadedModule for IsolatedModule {
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

impl Drop for IsolatedModule {
    fn drop(&mut self) {
        crate::locking::lock(&self.device.images).remove(&self.name);
        if !self.device.process.ended() {
            let _ = self.device.request(&Request::Unload {
                module: self.module,
            });
        }
    }
}

/// An image staged for loading (its file, written while the checks ran).
struct StagedDescriptor(OwnedFd, String);

impl Backend for IsolatedBackend {
    fn elf_machine(&self) -> u16 {
        object::elf::EM_X86_64
    }

    fn inspect_image<'a>(
        &self,
        image: &'a [u8],
    ) -> Result<Option<crate::image::ImageSymbols<'a>>, crate::image::ImageError> {
        super::host::inspect_loadable(image).map(Some)
    }

    fn device_count(&self) -> usize {
        HOST_DEVICE_COUNT
    }

    fn device(&self, index: usize) -> Arc<dyn BackendDevice> {
        Arc::new(IsolatedDevice {
            index,
            process: Arc::clone(&self.process),
        })
    }

    fn unsupported_requirements(&self, flags: i64) -> Option<String> {
        (flags & REQUIRES_UNIFIED_SHARED_MEMORY != 0).then(|| {
            "`requires unified_shared_memory`: the isolated host device, like a discrete \
             GPU, shares no memory with the host process (run without \
             OMPTARGET_RS_ISOLATED for the in-process host device)"
                .to_owned()
        })
    }
}

impl BackendDevice for IsolatedDevice {
    fn index(&self) -> usize {
        self.index
    }

    fn init(&self) -> Result<(), BackendError> {
        self.process.running().map(drop)
    }

    fn stage_image(&self, code: &[u8]) -> Result<Option<StagedImage>, BackendError> {
        let (fd, name) = dlopen::image_descriptor(code)?;
        Ok(Some(Box::new(StagedDescriptor(fd, name))))
    }

    fn load_image(
        &self,
        code: &[u8],
        _symbols: Option<&crate::symbols::ImageSymbols<'_>>,
        staged: Option<StagedImage>,
    ) -> Result<Box<dyn LoadedModule>, BackendError> {
        let device = Arc::clone(self.process.running()?);
        let (fd, name) = match super::take_staged::<StagedDescriptor>(staged) {
            Some(StagedDescriptor(fd, name)) => (fd, name),
            // Not staged (or staged by something else): write it now.
            None => dlopen::image_descriptor(code)?,
        };
        let reply = device.process.request(&Request::Load, Some(fd.as_fd()))?;
        let (module, load_bias) = match reply {
            Reply::Loaded { module, load_bias } => (module, load_bias),
            // The device process's loader refused the image: a load failure, as dlopen's
            // refusal is on the in-process host device.
            Reply::Failed { message, .. } => return Err(BackendError::Load(message)),
            other => return Err(unexpected(other)),
        };
        crate::locking::lock(&device.images).insert(name.clone(), Arc::new(fd));
        Ok(Box::new(IsolatedModule {
            device,
            module,
            load_bias,
            name,
        }))
    }

    fn alloc(&self, size: usize, kind: AllocKind) -> Result<DeviceAddr, BackendError> {
        match kind {
            AllocKind::Default | AllocKind::Device => {
                self.process.running()?.device_memory.alloc(size)
            }
            // As a GPU's pinned and managed memory: one address, used by both sides.
            AllocKind::Host | AllocKind::Shared => self.process.running()?.host_memory.alloc(size),
        }
    }

    unsafe fn free(&self, addr: DeviceAddr) -> Result<(), BackendError> {
        let device = self.process.running()?;
        if device.host_memory.view(addr, 1).is_some() {
            device.host_memory.free(addr)
        } else {
            device.device_memory.free(addr)
        }
    }

    unsafe fn write(&self, dst: DeviceAddr, src: &[u8]) -> Result<(), BackendError> {
        self.process.running()?.write(dst, src)
    }

    unsafe fn read(&self, src: DeviceAddr, dst: &mut [u8]) -> Result<(), BackendError> {
        self.process.running()?.read(src, dst)
    }

    /// The isolated devices share one process and its memory: a copy to any of them
    /// stays in it.
    unsafe fn copy(
        &self,
        src: DeviceAddr,
        _to: &dyn BackendDevice,
        dst: DeviceAddr,
        len: usize,
    ) -> Result<(), BackendError> {
        let device = self.process.running()?;
        if let (Some(from), Some(to)) = (device.view(src, len), device.view(dst, len)) {
            // SAFETY: both are the host's views of device ranges inside the arena.
            unsafe { std::ptr::copy(from, to, len) };
            return Ok(());
        }
        let mut bytes = vec![0u8; len];
        device.read(src, &mut bytes)?;
        device.write(dst, &bytes)
    }

    /// A call in the device process, waited for: no geometry (and no queues: none are
    /// handed out).
    unsafe fn launch(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        _shape: Option<Shape>,
    ) -> Result<(), BackendError> {
        let device = self.process.running()?;
        if diag::debug_enabled() {
            check_host_unreachable(device);
        }
        match device.process.launch(kernel, args)? {
            LaunchOutcome::Done => Ok(()),
            LaunchOutcome::Fault(record) => {
                let report = device.fault_report(record, kernel);
                device.process.end("a kernel faulted");
                // What the program and the device printed before the fault shows
                // before libomptarget ends the program.
                // SAFETY: fflush(NULL) flushes this process's C streams.
                unsafe { libc::fflush(std::ptr::null_mut()) };
                Err(BackendError::Launch(format!("isolated device: {report}")))
            }
            LaunchOutcome::Failed(why) => Err(BackendError::Launch(why)),
        }
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        // Every request completes before it returns.
        Ok(())
    }

    fn device_info(&self) -> Vec<String> {
        let state = match self.process.started.get() {
            None => "not started yet (it starts on first use)".to_string(),
            Some(Ok(d)) => format!("running as process {}", d.process.pid()),
            Some(Err(e)) => format!("failed to start: {e}"),
        };
        vec![
            format!(
                "device {} of {}: the host CPU in a process of its own \
                 ({ISOLATED_ENV}), shared by the devices: host addresses fault there, as \
                 on a discrete GPU",
                self.index, HOST_DEVICE_COUNT
            ),
            format!("device process: {state}"),
            format!(
                "memory: {} GiB of device memory, {} GiB of host memory it reaches \
                 (pinned and managed allocations)",
                DEVICE_MEMORY_BYTES >> 30,
                HOST_MEMORY_BYTES >> 30
            ),
            "queues: none (every request completes before it returns)".into(),
        ]
    }
}

/// The check before a launch (debug log only): how many of the host's ranges the device
/// process could reach now.
fn check_host_unreachable(device: &Isolated) {
    let host_maps = address_space::read_maps(None).unwrap_or_default();
    let host = process::host_data_ranges(&host_maps, device.layout.window);
    let total = host.len();
    match device.request(&Request::CheckHost { host }) {
        Ok(Reply::Reachable { count }) => diag::debug(|| {
            format!("isolated device: before the launch, {count} of the host's {total} mapped ranges are reachable on the device")
        }),
        other => diag::debug(|| format!("isolated device: the range check failed: {other:?}")),
    }
}
