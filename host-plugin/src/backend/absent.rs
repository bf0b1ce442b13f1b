//! The backend of a plugin kind whose driver is not written yet (CUDA, AMDGPU): it has no
//! devices, so libomptarget loads the plugin cleanly and then sets it aside.

use super::{Backend, BackendError, DeviceAddr, LoadedModule};

pub struct Absent {
    kind: &'static str,
    machine: u16,
}

impl Absent {
    pub fn new(kind: &'static str, machine: u16) -> Self {
        Absent { kind, machine }
    }
    fn none<T>(&self) -> Result<T, BackendError> {
        Err(BackendError::NoDevices(self.kind))
    }
}

impl Backend for Absent {
    fn elf_machine(&self) -> u16 {
        self.machine
    }
    fn device_count(&self) -> usize {
        0
    }
    fn init_device(&self, _: usize) -> Result<(), BackendError> {
        self.none()
    }
    fn load_image(&self, _: usize, _: &[u8]) -> Result<Box<dyn LoadedModule>, BackendError> {
        self.none()
    }
    fn alloc(&self, _: usize, _: usize) -> Result<DeviceAddr, BackendError> {
        self.none()
    }
    unsafe fn free(&self, _: usize, _: DeviceAddr) -> Result<(), BackendError> {
        self.none()
    }
    unsafe fn write(&self, _: usize, _: DeviceAddr, _: &[u8]) -> Result<(), BackendError> {
        self.none()
    }
    unsafe fn read(&self, _: usize, _: DeviceAddr, _: &mut [u8]) -> Result<(), BackendError> {
        self.none()
    }
    unsafe fn copy(
        &self,
        _: usize,
        _: DeviceAddr,
        _: usize,
        _: DeviceAddr,
        _: usize,
    ) -> Result<(), BackendError> {
        self.none()
    }
    unsafe fn launch(&self, _: usize, _: DeviceAddr, _: &[DeviceAddr]) -> Result<(), BackendError> {
        self.none()
    }
    fn synchronize(&self, _: usize) -> Result<(), BackendError> {
        self.none()
    }
}
