//! Which libomptarget plugin a copy of this library is, and the backend that runs its
//! devices.

use crate::backend::isolated::{self, IsolatedBackend};
use crate::backend::{cuda::CudaBackend, hip::HipBackend, host::HostBackend, Backend};

/// Which libomptarget plugin this is: its name and the device kind it drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PluginKind {
    X86_64,
    Cuda,
    Amdgpu,
}

impl PluginKind {
    /// GPU images carry LLVM's device runtime, which reads a device environment the
    /// plugin writes ([`crate::generic::device_env`]); the host device has none.
    pub fn has_device_environment(self) -> bool {
        self.is_gpu()
    }

    /// A GPU kind: its kernels carry an exec mode and launch with a shape.
    pub fn is_gpu(self) -> bool {
        matches!(self, PluginKind::Cuda | PluginKind::Amdgpu)
    }

    /// The part of `libomptarget.rtl.<name>.so` libomptarget loads this kind by.
    pub fn name(self) -> &'static str {
        match self {
            PluginKind::X86_64 => "x86_64",
            PluginKind::Cuda => "cuda",
            PluginKind::Amdgpu => "amdgpu",
        }
    }

    pub fn all() -> [PluginKind; 3] {
        [PluginKind::X86_64, PluginKind::Cuda, PluginKind::Amdgpu]
    }

    /// The backend that runs this kind's devices. CUDA and AMDGPU find no devices,
    /// quietly, where there is no driver or runtime.
    pub fn backend(self) -> Box<dyn Backend> {
        match self {
            PluginKind::X86_64 if isolated::requested() => Box::new(IsolatedBackend::new()),
            PluginKind::X86_64 => Box::new(HostBackend),
            PluginKind::Cuda => Box::new(CudaBackend::new()),
            PluginKind::Amdgpu => Box::new(HipBackend::new()),
        }
    }
}
