//! One NVIDIA GPU (nextgen's per-device object): its primary context, memory,
//! transfers, launches, streams and events through the CUDA driver API.

use super::driver::{driver_err, Context, DEFAULT_BLOCKS, DEFAULT_THREADS};
use super::image::{self, CudaImage, DefinedSymbols};
use super::module::CudaModule;
use super::ordered::StreamOrdered;
use super::pinned::PinnedHostMemory;
use super::staging::Staging;
use crate::backend::{
    peer, AllocKind, BackendDevice, BackendError, DeviceAddr, DeviceLimit, EventHandle, HandleKind,
    HandleRegistry, InteropHandles, LoadedModule, QueueHandle, StagedImage,
};
use crate::support::launch_shape::{Limits, Shape};
use crate::support::locking::lock;
use cudarc::driver::{result, sys, DriverError};
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// One GPU as the backend sees it: what discovery read, and its primary context once
/// retained.
pub struct CudaDevice {
    /// The device's number (the CUDA ordinal).
    pub(super) index: usize,
    /// How many devices the driver reported (for what `print_device_info` says).
    pub(super) of: usize,
    pub(super) handle: sys::CUdevice,
    pub(super) compute_capability: (i32, i32),
    pub(super) name: String,
    pub(super) max_threads: u32,
    pub(super) block_limit: u32,
    /// Total device memory in bytes (0 if the driver did not say).
    pub(super) total_memory: usize,
    pub(super) multiprocessors: i32,
    /// Resident threads per multiprocessor (for the device environment's parallelism).
    pub(super) threads_per_multiprocessor: i32,
    /// The most shared memory a block can have once its kernel opts in
    /// (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), static and dynamic.
    pub(super) shared_memory_per_block: u32,
    pub(super) context: Mutex<Option<Context>>,
    /// Streams of finished queues, handed out again by `queue_create`.
    pub(super) idle_streams: Mutex<Vec<QueueHandle>>,
    /// Events given back by libomptarget, reused (it makes and drops two a region).
    pub(super) idle_events: Mutex<Vec<EventHandle>>,
    /// The streams and events handed out: only these reach the driver.
    pub(super) handles: HandleRegistry,
    /// The page-locked host memory of every device of the backend.
    pub(super) pinned: Arc<PinnedHostMemory>,
    /// Pinned buffers for large copies from and to pageable memory.
    pub(super) staging: Staging,
    /// Device memory released in stream order, where the device can.
    pub(super) ordered: StreamOrdered,
}

impl CudaDevice {
    /// The device's launch limits; `max_threads` is capped per kernel.
    pub(super) fn limits(&self) -> Limits {
        Limits {
            warp_size: 32,
            max_threads: self.max_threads,
            block_limit: self.block_limit,
            default_threads: DEFAULT_THREADS,
            default_blocks: DEFAULT_BLOCKS,
            max_dynamic_shared_memory: self.shared_memory_per_block,
        }
    }

    /// An event and the queue it is recorded on or waited from must both be live.
    fn check_event_and_queue(
        &self,
        event: EventHandle,
        queue: Option<QueueHandle>,
    ) -> Result<(), BackendError> {
        self.handles.check(HandleKind::Event, event)?;
        queue.map_or(Ok(()), |q| self.handles.check(HandleKind::Queue, q))
    }

    /// Retain the device's primary context on first use and make it current here.
    pub(super) fn enter(&self) -> Result<Context, BackendError> {
        let mut slot = lock(&self.context);
        let ctx = match *slot {
            Some(c) => c,
            None => {
                // SAFETY: `self.handle` came from cuDeviceGet; the retain is balanced by
                // the release in Drop.
                let c = unsafe { result::primary_ctx::retain(self.handle) }
                    .map_err(|e| driver_err("cuDevicePrimaryCtxRetain", e))?;
                *slot = Some(Context(c));
                Context(c)
            }
        };
        ctx.make_current()?;
        Ok(ctx)
    }

    /// Whether a copy of `len` bytes from or to host memory at `host` goes through the
    /// staging buffers: large, and not memory the user pinned.
    fn staged(&self, host: *const u8, len: usize) -> bool {
        self.staging.settings().stages(len) && !self.pinned.covers(host, len)
    }
}

impl Drop for CudaDevice {
    /// Destroys the idle streams and releases the primary context; the plugin unloads
    /// the device's images first (they are dropped before the device).
    fn drop(&mut self) {
        let idle = std::mem::take(&mut *lock(&self.idle_streams));
        let idle_events = std::mem::take(&mut *lock(&self.idle_events));
        if let Some(context) = *lock(&self.context) {
            if context.make_current().is_ok() {
                // SAFETY: the buffers were made in this context, current now.
                unsafe { self.staging.release() };
                for event in idle_events {
                    // SAFETY: an idle event was made by event_create in this context and
                    // given back by event_destroy: nothing refers to it.
                    let _ = unsafe { result::event::destroy(event as sys::CUevent) };
                }
                for stream in idle {
                    // SAFETY: an idle stream was created by queue_create in this
                    // context, finished, and is referenced nowhere else.
                    let _ = unsafe { result::stream::destroy(stream as sys::CUstream) };
                }
            }
        }
        if lock(&self.context).take().is_some() {
            // SAFETY: balances the retain in `enter`; modules were unloaded first.
            let _ = unsafe { result::primary_ctx::release(self.handle) };
        }
    }
}

impl BackendDevice for CudaDevice {
    fn index(&self) -> usize {
        self.index
    }

    fn init(&self) -> Result<(), BackendError> {
        self.enter().map(|_| ())
    }

    fn load_image(
        &self,
        bytes: &[u8],
        _symbols: Option<&crate::elf::symbols::ImageSymbols<'_>>,
        _staged: Option<StagedImage>,
    ) -> Result<Box<dyn LoadedModule>, BackendError> {
        let kind = image::classify(bytes)
            .ok_or_else(|| BackendError::Load("not a cubin, fatbinary or PTX".into()))?;
        if let CudaImage::Cubin { sm } = kind {
            let (major, minor) = self.compute_capability;
            if !image::cubin_runs_on(sm, major, minor) {
                return Err(BackendError::Load(format!(
                    "the cubin is for sm_{sm}; device {} ({}) is sm_{major}{minor}",
                    self.index, self.name
                )));
            }
        }
        // cuModuleLoadData reads PTX up to its NUL; give it one. Every image is copied to
        // an aligned buffer the driver may read as 8-byte words.
        let mut words = vec![0u64; bytes.len() / 8 + 1];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        let context = self.enter()?;
        // SAFETY: `words` holds the whole image plus a terminating zero byte and lives
        // across the call; the context is current.
        let module = unsafe { result::module::load_data(words.as_ptr().cast::<c_void>()) }
            .map_err(|e| driver_err("cuModuleLoadData", e))?;
        let loaded = CudaModule {
            module,
            context,
            device_limits: self.limits(),
            defined: DefinedSymbols::of_image(bytes),
        };
        Ok(Box::new(loaded))
    }

    fn alloc(&self, size: usize, kind: AllocKind) -> Result<DeviceAddr, BackendError> {
        self.enter()?;
        // The driver refuses zero-byte allocations; a one-byte one keeps the address unique.
        let size = size.max(1);
        let oom = |_| BackendError::OutOfMemory(size);
        // SAFETY: the device's context is current; the memory is returned uninitialised,
        // which is what data_alloc promises.
        unsafe {
            match kind {
                AllocKind::Default | AllocKind::Device => match self.ordered.alloc(size) {
                    Some(made) => made,
                    None => result::malloc_sync(size).map_err(oom),
                },
                AllocKind::Shared => {
                    result::malloc_managed(size, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL)
                        .map_err(oom)
                }
                AllocKind::Host => {
                    let p = result::malloc_host(size, 0).map_err(oom)? as DeviceAddr;
                    lock(&self.pinned.host_allocations).insert(p, size);
                    Ok(p)
                }
            }
        }
    }

    fn pools_memory(&self) -> bool {
        true
    }

    unsafe fn free(&self, addr: DeviceAddr) -> Result<(), BackendError> {
        self.enter()?;
        // SAFETY: the context is current; the caller promises `addr` is dead.
        if let Some(freed) = unsafe { self.ordered.free(addr) } {
            return freed;
        }
        let pinned = lock(&self.pinned.host_allocations).remove(&addr).is_some();
        // SAFETY: the caller promises `addr` came from alloc on this device and is
        // dead; pinned host memory is told apart by the set it was recorded in.
        unsafe {
            if pinned {
                result::free_host(addr as *mut c_void)
            } else {
                result::free_sync(addr)
            }
        }
        .map_err(|e| driver_err("freeing", e))
    }

    unsafe fn write(&self, dst: DeviceAddr, src: &[u8]) -> Result<(), BackendError> {
        self.enter()?;
        if self.staged(src.as_ptr(), src.len()) {
            // SAFETY: the context is current; `dst` is memory of this device (the
            // caller's promise) and `src` a live slice; the null stream; waited for.
            unsafe {
                self.staging
                    .to_device(dst, src.as_ptr(), src.len(), std::ptr::null_mut())?
            };
            return self.staging.finish();
        }
        // SAFETY: the caller promises dst..dst+len is memory of this device; `src` is a
        // live slice; the copy is synchronous.
        unsafe { result::memcpy_htod_sync(dst, src) }.map_err(|e| driver_err("cuMemcpyHtoD", e))
    }

    unsafe fn read(&self, src: DeviceAddr, dst: &mut [u8]) -> Result<(), BackendError> {
        self.enter()?;
        if self.staged(dst.as_ptr(), dst.len()) {
            // SAFETY: the context is current; `src` is memory of this device (the
            // caller's promise) and `dst` a live, exclusively borrowed slice.
            return unsafe {
                self.staging
                    .to_host(dst.as_mut_ptr(), src, dst.len(), std::ptr::null_mut())
            };
        }
        // SAFETY: the caller promises src..src+len is memory of this device; the copy is
        // synchronous.
        unsafe { result::memcpy_dtoh_sync(dst, src) }.map_err(|e| driver_err("cuMemcpyDtoH", e))
    }

    unsafe fn copy(
        &self,
        src: DeviceAddr,
        to: &dyn BackendDevice,
        dst: DeviceAddr,
        len: usize,
    ) -> Result<(), BackendError> {
        peer::<CudaDevice>(to)?.enter()?;
        // SAFETY: the caller promises both ranges are device memory; with unified
        // addressing cuMemcpy finds each side's device from the address.
        unsafe { sys::cuMemcpy(dst, src, len) }
            .result()
            .map_err(|e| driver_err("cuMemcpy", e))
    }

    /// Without a shape: one block of one thread (the core asks for that only for a
    /// kernel without an exec mode launched without a request, and CUDA records those as
    /// SPMD, [`crate::backend::Backend::untagged_kernel_mode`], so through the core every
    /// CUDA launch is shaped). Waited for.
    unsafe fn launch(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        shape: Option<Shape>,
    ) -> Result<(), BackendError> {
        // SAFETY: forwarded caller contract; no queue.
        unsafe { self.launch_kernel(kernel, args, shape, None) }
    }

    /// Enqueued on the queue's stream, not waited for.
    unsafe fn launch_on(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        shape: Option<Shape>,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        self.handles.check(HandleKind::Queue, queue)?;
        // SAFETY: forwarded caller contract; the queue is a live stream of this device.
        unsafe { self.launch_kernel(kernel, args, shape, Some(queue)) }
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        self.enter()?;
        result::ctx::synchronize().map_err(|e| driver_err("cuCtxSynchronize", e))
    }

    fn queue_create(&self) -> Result<Option<QueueHandle>, BackendError> {
        let idle = lock(&self.idle_streams).pop();
        let stream = match idle {
            Some(stream) => stream,
            None => {
                self.enter()?;
                // A blocking stream: work without a queue, on the legacy default stream,
                // is ordered after it.
                result::stream::create(result::stream::StreamKind::Default)
                    .map_err(|e| driver_err("cuStreamCreate", e))? as QueueHandle
            }
        };
        self.handles.insert(HandleKind::Queue, stream);
        Ok(Some(stream))
    }

    fn queue_finish(&self, queue: QueueHandle) -> Result<(), BackendError> {
        self.handles.check(HandleKind::Queue, queue)?;
        self.enter()?;
        self.handles.remove(HandleKind::Queue, queue)?;
        let stream = queue as sys::CUstream;
        // SAFETY: the registry held `queue` from queue_create on this device, and it was
        // just removed there, so it is finished once.
        match unsafe { result::stream::synchronize(stream) } {
            Ok(()) => {
                // Idle and empty: the next queue of this device reuses it.
                lock(&self.idle_streams).push(queue);
                Ok(())
            }
            Err(e) => {
                // A failed stream (a faulting kernel) is not reused.
                // SAFETY: as above; nothing refers to the stream any more.
                let _ = unsafe { result::stream::destroy(stream) };
                Err(driver_err("cuStreamSynchronize", e))
            }
        }
    }

    fn queue_done(&self, queue: QueueHandle) -> Result<bool, BackendError> {
        self.handles.check(HandleKind::Queue, queue)?;
        self.enter()?;
        // SAFETY: the registry holds `queue`: a live stream of this device.
        match unsafe { sys::cuStreamQuery(queue as sys::CUstream) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            e => Err(driver_err("cuStreamQuery", DriverError(e))),
        }
    }

    unsafe fn write_async(
        &self,
        dst: DeviceAddr,
        src: *const u8,
        len: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        self.handles.check(HandleKind::Queue, queue)?;
        self.enter()?;
        if self.staged(src, len) {
            // SAFETY: the context is current; the caller promises `dst` is device
            // memory and `src` readable for `len` bytes; the queue is a live stream of
            // this device (checked above).
            return unsafe {
                self.staging
                    .to_device(dst, src, len, queue as sys::CUstream)
            };
        }
        // SAFETY: the caller promises `dst` is device memory and `src` stays readable
        // until the queue (a live stream of this device, checked above) is finished.
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, queue as sys::CUstream) }
            .result()
            .map_err(|e| driver_err("cuMemcpyHtoDAsync", e))
    }

    unsafe fn read_async(
        &self,
        src: DeviceAddr,
        dst: *mut u8,
        len: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        self.handles.check(HandleKind::Queue, queue)?;
        self.enter()?;
        if self.staged(dst, len) {
            // SAFETY: the context is current; the caller promises `src` is device
            // memory and `dst` writable and otherwise unused for `len` bytes; the queue
            // is a live stream of this device (checked above). Returns with the bytes
            // in `dst`, as the driver's copy to pageable memory does.
            return unsafe { self.staging.to_host(dst, src, len, queue as sys::CUstream) };
        }
        // SAFETY: the caller promises `src` is device memory and `dst` stays writable and
        // otherwise unused until the queue (a live stream of this device, checked above)
        // is finished.
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, queue as sys::CUstream) }
            .result()
            .map_err(|e| driver_err("cuMemcpyDtoHAsync", e))
    }

    /// On the source device's stream: cuMemcpyDtoDAsync within a device,
    /// cuMemcpyPeerAsync between two.
    unsafe fn copy_async(
        &self,
        src: DeviceAddr,
        to: &dyn BackendDevice,
        dst: DeviceAddr,
        len: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        self.handles.check(HandleKind::Queue, queue)?;
        let to = peer::<CudaDevice>(to)?;
        let dst_context = to.enter()?;
        let src_context = self.enter()?;
        let stream = queue as sys::CUstream;
        // SAFETY: the caller promises both ranges are device memory of their devices and
        // stay allocated until the queue is finished; the stream is a live stream of the
        // source device (checked above), whose context is current; both contexts were
        // retained by `enter`.
        unsafe {
            if std::ptr::eq(self, to) {
                sys::cuMemcpyDtoDAsync_v2(dst, src, len, stream)
                    .result()
                    .map_err(|e| driver_err("cuMemcpyDtoDAsync", e))
            } else {
                sys::cuMemcpyPeerAsync(dst, dst_context.0, src, src_context.0, len, stream)
                    .result()
                    .map_err(|e| driver_err("cuMemcpyPeerAsync", e))
            }
        }
    }

    /// cuMemHostRegister (portable, device-mapped), counted per buffer
    /// ([`super::pinned`]).
    unsafe fn lock_host(&self, ptr: *mut u8, len: usize) -> Result<*mut u8, BackendError> {
        self.enter()?;
        // SAFETY: forwarded caller contract; the context is current.
        unsafe { self.pinned.lock(ptr, len) }
    }

    fn unlock_host(&self, ptr: *mut u8) -> Result<(), BackendError> {
        self.pinned
            .unlock(ptr, self.index, || self.enter().map(drop))
    }

    /// cuCtxSetLimit in the device's primary context (LLVM 16's `setDeviceStackSize`
    /// and `setDeviceHeapSize`).
    fn set_limit(&self, limit: DeviceLimit, bytes: usize) -> Result<bool, BackendError> {
        self.enter()?;
        let (limit, call) = match limit {
            DeviceLimit::StackSize => (
                sys::CUlimit::CU_LIMIT_STACK_SIZE,
                "cuCtxSetLimit(CU_LIMIT_STACK_SIZE)",
            ),
            DeviceLimit::HeapSize => (
                sys::CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE,
                "cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE)",
            ),
        };
        result::ctx::set_limit(limit, bytes).map_err(|e| driver_err(call, e))?;
        Ok(true)
    }

    /// The primary context and the CUdevice, as LLVM's plugin gives them.
    fn interop_handles(&self) -> Result<InteropHandles, BackendError> {
        let context = self.enter()?;
        Ok(InteropHandles {
            context: context.0 as u64,
            device: self.handle as u64,
        })
    }

    /// LLVM 18's CUDA plugin: a 1 GHz clock (the device runtime reads the nanosecond
    /// global timer) and warps resident per multiprocessor x multiprocessors.
    fn device_facts(&self) -> crate::backend::DeviceFacts {
        let warps_per_multiprocessor = (self.threads_per_multiprocessor.max(0) / 32) as u64;
        crate::backend::DeviceFacts {
            clock_frequency: 1_000_000_000,
            hardware_parallelism: self.multiprocessors.max(0) as u64 * warps_per_multiprocessor,
        }
    }

    fn device_info(&self) -> Vec<String> {
        let mut version = 0;
        // SAFETY: the driver is loaded (it reported this device); `version` is writable.
        let driver = match unsafe { sys::cuDriverGetVersion(&mut version) }.result() {
            Ok(()) => format!("CUDA {}.{}", version / 1000, version % 1000 / 10),
            Err(e) => format!("unknown ({e:?})"),
        };
        let (major, minor) = self.compute_capability;
        vec![
            format!(
                "device {} of {}: {}, an NVIDIA GPU through the CUDA driver API",
                self.index, self.of, self.name
            ),
            format!("compute capability: {major}.{minor} (sm_{major}{minor})"),
            format!("global memory: {} MiB", self.total_memory >> 20),
            format!("multiprocessors: {}", self.multiprocessors),
            format!(
                "threads per block: {}, blocks per launch: at most {}",
                self.max_threads, self.block_limit
            ),
            format!("driver: {driver}"),
            "queues: CUDA streams (launches and copies on a queue do not wait)".into(),
        ]
    }

    fn event_create(&self) -> Result<Option<EventHandle>, BackendError> {
        let event = match lock(&self.idle_events).pop() {
            Some(event) => event,
            None => {
                self.enter()?;
                result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                    .map_err(|e| driver_err("cuEventCreate", e))? as EventHandle
            }
        };
        self.handles.insert(HandleKind::Event, event);
        Ok(Some(event))
    }

    fn event_record(
        &self,
        event: EventHandle,
        queue: Option<QueueHandle>,
    ) -> Result<(), BackendError> {
        self.check_event_and_queue(event, queue)?;
        self.enter()?;
        let stream = queue.map_or(std::ptr::null_mut(), |q| q as sys::CUstream);
        // SAFETY: the registry holds `event` and `queue`, if any, live on this device;
        // the null stream is the legacy default stream.
        unsafe { result::event::record(event as sys::CUevent, stream) }
            .map_err(|e| driver_err("cuEventRecord", e))
    }

    fn event_wait(
        &self,
        event: EventHandle,
        queue: Option<QueueHandle>,
    ) -> Result<(), BackendError> {
        self.check_event_and_queue(event, queue)?;
        self.enter()?;
        let stream = queue.map_or(std::ptr::null_mut(), |q| q as sys::CUstream);
        // SAFETY: as in event_record.
        unsafe {
            result::stream::wait_event(
                stream,
                event as sys::CUevent,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .map_err(|e| driver_err("cuStreamWaitEvent", e))
    }

    fn event_sync(&self, event: EventHandle) -> Result<(), BackendError> {
        self.handles.check(HandleKind::Event, event)?;
        self.enter()?;
        // SAFETY: the registry holds `event`: live on this device.
        unsafe { result::event::synchronize(event as sys::CUevent) }
            .map_err(|e| driver_err("cuEventSynchronize", e))
    }

    /// The event goes to the idle list for the next event_create (a recorded event is
    /// recorded again there: CUDA events may be), destroyed with the device.
    fn event_destroy(&self, event: EventHandle) -> Result<(), BackendError> {
        self.handles.remove(HandleKind::Event, event)?;
        lock(&self.idle_events).push(event);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device the driver never saw (no context is ever retained): enough for the
    /// checks that come before any driver call.
    fn detached() -> CudaDevice {
        CudaDevice {
            index: 0,
            of: 1,
            handle: 0,
            compute_capability: (9, 0),
            name: "no GPU".into(),
            max_threads: 1024,
            block_limit: 1,
            total_memory: 0,
            multiprocessors: 1,
            threads_per_multiprocessor: 32,
            shared_memory_per_block: 0,
            context: Mutex::new(None),
            idle_streams: Mutex::new(Vec::new()),
            idle_events: Mutex::new(Vec::new()),
            handles: HandleRegistry::new(0),
            pinned: Arc::default(),
            staging: Staging::new(Default::default()),
            ordered: StreamOrdered::default(),
        }
    }

    /// A handle the device never handed out is refused before any driver call (with or
    /// without a driver and a GPU: the check comes first).
    #[test]
    fn unknown_queue_and_event_handles_never_reach_the_driver() {
        let device = detached();
        let unknown = |r: Result<(), BackendError>, want: HandleKind| match r {
            Err(BackendError::UnknownHandle { kind, handle, .. }) => {
                assert_eq!((kind, handle), (want, 0xdead_0000));
            }
            other => panic!("expected an unknown {want} error, got {other:?}"),
        };
        unknown(device.queue_finish(0xdead_0000), HandleKind::Queue);
        unknown(device.queue_done(0xdead_0000).map(drop), HandleKind::Queue);
        let mut byte = 0u8;
        // SAFETY: refused before the copy: the queue is unknown, so nothing is read.
        let write = unsafe { device.write_async(0x1000, &byte, 1, 0xdead_0000) };
        unknown(write, HandleKind::Queue);
        // SAFETY: as above, nothing is written.
        let read = unsafe { device.read_async(0x1000, &mut byte, 1, 0xdead_0000) };
        unknown(read, HandleKind::Queue);
        unknown(device.event_sync(0xdead_0000), HandleKind::Event);
        unknown(device.event_record(0xdead_0000, None), HandleKind::Event);
        unknown(device.event_wait(0xdead_0000, None), HandleKind::Event);
        unknown(device.event_destroy(0xdead_0000), HandleKind::Event);
        // SAFETY: refused before the launch: the queue is unknown, so nothing runs.
        let launch = unsafe { device.launch_on(0x1000, &[], None, 0xdead_0000) };
        unknown(launch, HandleKind::Queue);
        // SAFETY: refused before the copy: the queue is unknown.
        let copy = unsafe { device.copy_async(0x1000, &detached(), 0x2000, 1, 0xdead_0000) };
        unknown(copy, HandleKind::Queue);
        unknown(
            device.unlock_host(0xdead_0000 as *mut u8),
            HandleKind::Locked,
        );
    }
}
