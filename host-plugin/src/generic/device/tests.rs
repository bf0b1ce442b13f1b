//! The device's queue rules against a recording vendor device and the host.

use super::*;
use crate::backend::host;
use crate::backend::{AllocKind, DeviceAddr, LaunchRequest, QueueHandle};
use crate::support::launch_shape::Shape;
use crate::BackendError;

/// A backend with queues, as CUDA has them, that records what it is asked (no
/// driver: nothing runs). `done` is what `queue_done` answers.
#[derive(Default)]
struct QueueBackend {
    calls: Mutex<Vec<String>>,
    done: std::sync::atomic::AtomicBool,
}

const QUEUE: QueueHandle = 0x5100;
const KERNEL: DeviceAddr = 0x4000;

impl QueueBackend {
    fn record(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
    fn calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

impl Backend for QueueBackend {
    fn elf_machine(&self) -> u16 {
        0
    }
    fn device_count(&self) -> usize {
        1
    }
    fn device(&self, _: usize) -> Arc<dyn BackendDevice> {
        unreachable!("the tests make the device themselves")
    }
}

impl BackendDevice for QueueBackend {
    fn index(&self) -> usize {
        0
    }
    fn init(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn load_image(
        &self,
        _: &[u8],
        _: Option<&crate::elf::symbols::ImageSymbols<'_>>,
        _: Option<crate::backend::StagedImage>,
    ) -> Result<Box<dyn LoadedModule>, BackendError> {
        Err(BackendError::Load("no images here".into()))
    }
    fn alloc(&self, _: usize, _: AllocKind) -> Result<DeviceAddr, BackendError> {
        Err(BackendError::OutOfMemory(0))
    }
    unsafe fn free(&self, _: DeviceAddr) -> Result<(), BackendError> {
        Ok(())
    }
    unsafe fn write(&self, _: DeviceAddr, _: &[u8]) -> Result<(), BackendError> {
        self.record("write".into());
        Ok(())
    }
    unsafe fn read(&self, _: DeviceAddr, _: &mut [u8]) -> Result<(), BackendError> {
        self.record("read".into());
        Ok(())
    }
    unsafe fn copy(
        &self,
        _: DeviceAddr,
        _: &dyn BackendDevice,
        _: DeviceAddr,
        _: usize,
    ) -> Result<(), BackendError> {
        self.record("copy".into());
        Ok(())
    }
    unsafe fn launch(
        &self,
        kernel: DeviceAddr,
        _: &[DeviceAddr],
        shape: Option<Shape>,
    ) -> Result<(), BackendError> {
        self.record(format!("launch {kernel:#x} {shape:?} to completion"));
        Ok(())
    }
    unsafe fn launch_on(
        &self,
        kernel: DeviceAddr,
        _: &[DeviceAddr],
        shape: Option<Shape>,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        self.record(format!("launch {kernel:#x} {shape:?} on {queue:#x}"));
        Ok(())
    }
    fn synchronize(&self) -> Result<(), BackendError> {
        self.record("synchronize".into());
        Ok(())
    }
    fn device_info(&self) -> Vec<String> {
        vec!["a recording backend".into()]
    }
    fn queue_create(&self) -> Result<Option<QueueHandle>, BackendError> {
        self.record("queue_create".into());
        Ok(Some(QUEUE))
    }
    fn queue_finish(&self, queue: QueueHandle) -> Result<(), BackendError> {
        self.record(format!("queue_finish {queue:#x}"));
        Ok(())
    }
    fn queue_done(&self, _: QueueHandle) -> Result<bool, BackendError> {
        Ok(self.done.load(std::sync::atomic::Ordering::SeqCst))
    }
    unsafe fn write_async(
        &self,
        _: DeviceAddr,
        _: *const u8,
        _: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        self.record(format!("write_async {queue:#x}"));
        Ok(())
    }
    unsafe fn read_async(
        &self,
        _: DeviceAddr,
        _: *mut u8,
        _: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        self.record(format!("read_async {queue:#x}"));
        Ok(())
    }
    unsafe fn copy_async(
        &self,
        _: DeviceAddr,
        _: &dyn BackendDevice,
        _: DeviceAddr,
        _: usize,
        queue: QueueHandle,
    ) -> Result<(), BackendError> {
        self.record(format!("copy_async {queue:#x}"));
        Ok(())
    }
}

/// Device 0 of `backend`, with one kernel (no exec mode, no limits: run once).
fn device_with_kernel(backend: Arc<QueueBackend>) -> Device {
    let device = Device::new(0, PluginKind::Cuda, backend.clone(), backend, 1);
    device.kernels.write().unwrap().insert(
        KERNEL,
        KernelRecord {
            mode: None,
            limits: None,
            name: None,
            reduction_buffer_bytes: 0,
        },
    );
    device
}

/// The queue is created by the first operation that needs one and kept in the async
/// info; the launch and the copies go on it, nothing waits, and synchronize lets it
/// go and empties the info.
#[test]
fn an_async_info_gets_its_queue_on_first_use_and_keeps_it_until_synchronized() {
    let backend = Arc::new(QueueBackend::default());
    let device = device_with_kernel(backend.clone());
    let mut info = AsyncInfo::default();
    let mut byte = 0u8;
    // SAFETY: the recording backend reads and writes nothing.
    unsafe {
        device.write_async(0x10, &byte, 1, &mut info).unwrap();
        device
            .launch_async(KERNEL, &[], LaunchRequest::default(), &mut info)
            .unwrap();
        device.read_async(0x10, &mut byte, 1, &mut info).unwrap();
        device
            .copy_to(0x10, &device, 0x20, 1, Some(&mut info))
            .unwrap();
    }
    assert_eq!(info.queue, Some(QUEUE));
    device.synchronize_queue(&mut info).unwrap();
    assert_eq!(info.queue, None, "synchronized: the info is empty again");
    assert_eq!(
        backend.calls(),
        [
            "queue_create",
            "write_async 0x5100",
            "launch 0x4000 None on 0x5100",
            "read_async 0x5100",
            "copy_async 0x5100",
            "queue_finish 0x5100",
        ]
    );
    // Without an async info: to completion, no queue.
    // SAFETY: as above.
    unsafe {
        device.launch(KERNEL, &[]).unwrap();
        device.copy_to(0x10, &device, 0x20, 1, None).unwrap();
    }
    device.synchronize_queue(&mut info).unwrap();
    assert_eq!(
        backend.calls(),
        ["launch 0x4000 None to completion", "copy", "synchronize"]
    );
}

/// query_async leaves an unfinished queue in place and lets a finished one go.
#[test]
fn a_query_lets_only_a_finished_queue_go() {
    let backend = Arc::new(QueueBackend::default());
    let device = device_with_kernel(backend.clone());
    let mut info = AsyncInfo { queue: Some(QUEUE) };
    device.query_queue(Some(&mut info)).unwrap();
    assert_eq!(info.queue, Some(QUEUE), "not done: still queued");
    assert_eq!(backend.calls(), Vec::<String>::new());
    backend
        .done
        .store(true, std::sync::atomic::Ordering::SeqCst);
    device.query_queue(Some(&mut info)).unwrap();
    assert_eq!(info.queue, None);
    assert_eq!(backend.calls(), ["queue_finish 0x5100"]);
    device.query_queue(None).unwrap();
    assert_eq!(backend.calls(), ["synchronize"]);
}

/// Where the backend has no queues (the host) the async calls complete at once and
/// leave the info empty, and events are tokens no backend call sees.
#[test]
fn without_queues_async_calls_complete_at_once_and_events_are_tokens() {
    let backend = Arc::new(host::HostBackend);
    let device = Device::new(0, PluginKind::X86_64, backend.clone(), backend.device(0), 1);
    let mut info = AsyncInfo::default();
    let source = [7u8; 4];
    let mut target = [0u8; 4];
    let mut back = [0u8; 4];
    // SAFETY: on the host device, device memory is process memory: the arrays.
    unsafe {
        let at = target.as_mut_ptr() as DeviceAddr;
        device
            .write_async(at, source.as_ptr(), 4, &mut info)
            .unwrap();
        device
            .read_async(at, back.as_mut_ptr(), 4, &mut info)
            .unwrap();
    }
    assert_eq!(back, source, "both copies completed before they returned");
    assert_eq!(info.queue, None);
    let event = device.event_create().unwrap();
    assert_eq!(event, token_event());
    device.event_record(event, Some(&mut info)).unwrap();
    device.event_wait(event, Some(&mut info)).unwrap();
    device.event_sync(event).unwrap();
    device.event_destroy(event).unwrap();
    assert_eq!(info.queue, None, "a token event creates no queue");
}
