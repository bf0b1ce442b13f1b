//! One isolated device (nextgen's per-device object): its number over the device
//! process the four devices share ([`super::running`]); memory, copies, the images it
//! loads there ([`super::module`]) and launches, each waited for.

use super::address_space;
use super::args::ISOLATED_ENV;
use super::module::IsolatedModule;
use super::process::{self, LaunchOutcome};
use super::protocol::{Reply, Request};
use super::running::{
    unexpected, Isolated, ProcessOnFirstUse, DEVICE_MEMORY_BYTES, HOST_MEMORY_BYTES,
};
use crate::backend::host_common::{dlopen, HOST_DEVICE_COUNT};
use crate::backend::{
    take_staged, AllocKind, BackendDevice, BackendError, DeviceAddr, LoadedModule, StagedImage,
};
use crate::support::diag;
use crate::support::launch_shape::Shape;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

/// One of the isolated devices: its number, over the process they share.
pub struct IsolatedDevice {
    pub(super) index: usize,
    pub(super) process: Arc<ProcessOnFirstUse>,
}

/// An image staged for loading (its file, written while the checks ran).
struct StagedDescriptor(OwnedFd, String);

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
        _symbols: Option<&crate::elf::symbols::ImageSymbols<'_>>,
        staged: Option<StagedImage>,
    ) -> Result<Box<dyn LoadedModule>, BackendError> {
        let device = Arc::clone(self.process.running()?);
        let (fd, name) = match take_staged::<StagedDescriptor>(staged) {
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
        crate::support::locking::lock(&device.images).insert(name.clone(), Arc::new(fd));
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
