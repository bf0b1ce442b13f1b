//! What LLVM's OpenMP device runtime (DeviceRTL) of a GPU image expects the plugin to
//! find and write, by LLVM version: the device environment global and clang 18's
//! per-kernel environment. Read by the host plugin when it loads an image, and by the
//! checks of images clang 17 and 18 build.

/// The names of the device environment global (`DeviceEnvironmentTy`), newest first:
/// `__omp_rtl_device_environment` (NVPTX, and AMDGPU from LLVM 17), LLVM 16's AMDGPU
/// `omptarget_device_environment` (protected visibility).
pub const DEVICE_ENVIRONMENT_NAMES: [&core::ffi::CStr; 2] = [
    c"__omp_rtl_device_environment",
    c"omptarget_device_environment",
];

/// Which LLVM's device environment an image's runtime reads, told by the global's size:
/// - 16: DebugKind, NumDevices, DeviceNum, DynamicMemSize (four u32), 16 bytes;
/// - 17: then ClockFrequency (u64), 24 bytes;
/// - 18: then IndirectCallTable (a device pointer), IndirectCallTableSize (rows) and
///   HardwareParallelism (u64 each), 48 bytes (`include/Shared/Environment.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceEnvironmentLayout {
    Llvm16,
    Llvm17,
    Llvm18,
}

impl DeviceEnvironmentLayout {
    /// The layout of a global of `size` bytes, None for a size no LLVM 16-18 has.
    pub fn of_size(size: u64) -> Option<Self> {
        match size {
            16 => Some(Self::Llvm16),
            24 => Some(Self::Llvm17),
            48 => Some(Self::Llvm18),
            _ => None,
        }
    }

    pub fn size(self) -> usize {
        match self {
            Self::Llvm16 => 16,
            Self::Llvm17 => 24,
            Self::Llvm18 => 48,
        }
    }

    /// Where LLVM 18's (IndirectCallTable, IndirectCallTableSize) lie in it: None for
    /// the layouts without them.
    pub fn indirect_call_table_offset(self) -> Option<u64> {
        (self == Self::Llvm18).then_some(24)
    }
}

/// clang 18's `<kernel>_kernel_environment` (LLVM 18's `KernelEnvironmentTy`), which
/// replaces `<kernel>_exec_mode`: its configuration's ExecMode byte and its teams
/// reduction's buffer (`include/Shared/Environment.h`).
pub mod kernel_environment {
    /// The global's name suffix.
    pub const SUFFIX: &[u8] = b"_kernel_environment";
    /// Its size on a 64-bit device (the configuration, two pointers).
    pub const SIZE: u64 = 48;
    /// What is read of it: the configuration (3 bytes, padding, six i32).
    pub const CONFIGURATION_BYTES: usize = 28;
    const EXEC_MODE: usize = 2;
    const REDUCTION_DATA_SIZE: usize = 20;
    const REDUCTION_BUFFER_LENGTH: usize = 24;

    /// The kernel's mode byte and how many bytes of reduction buffer its launch
    /// environment must carry (ReductionDataSize x ReductionBufferLength; 0: none).
    pub fn parse(configuration: &[u8; CONFIGURATION_BYTES]) -> (u8, u64) {
        let i32_at = |at: usize| {
            let mut word = [0u8; 4];
            word.copy_from_slice(&configuration[at..at + 4]);
            i32::from_le_bytes(word)
        };
        let (size, length) = (i32_at(REDUCTION_DATA_SIZE), i32_at(REDUCTION_BUFFER_LENGTH));
        let buffer = if size > 0 && length > 0 {
            size as u64 * length as u64
        } else {
            0
        };
        (configuration[EXEC_MODE], buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_name_layouts() {
        use DeviceEnvironmentLayout::*;
        for layout in [Llvm16, Llvm17, Llvm18] {
            assert_eq!(
                DeviceEnvironmentLayout::of_size(layout.size() as u64),
                Some(layout)
            );
        }
        assert_eq!(DeviceEnvironmentLayout::of_size(32), None);
        assert_eq!(Llvm18.indirect_call_table_offset(), Some(24));
        assert_eq!(Llvm17.indirect_call_table_offset(), None);
    }

    #[test]
    fn a_kernel_environment_gives_its_mode_and_reduction_buffer() {
        // clang 18's bytes for `target teams distribute parallel for reduction(+: s)`
        // over an int (sm_90, Debian's 18.1.8): SPMD, 4 bytes x 1024.
        let mut configuration = [0u8; kernel_environment::CONFIGURATION_BYTES];
        configuration[..4].copy_from_slice(&[0, 0, 2, 0]);
        for (at, word) in [(4, 1i32), (8, 128), (12, 0), (16, 0), (20, 4), (24, 1024)] {
            configuration[at..at + 4].copy_from_slice(&word.to_le_bytes());
        }
        assert_eq!(kernel_environment::parse(&configuration), (2, 4096));
        configuration[20..24].copy_from_slice(&0i32.to_le_bytes());
        assert_eq!(kernel_environment::parse(&configuration), (2, 0));
    }
}
