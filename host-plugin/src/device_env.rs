//! LLVM 16's device environment: the `DeviceEnvironmentTy` (DebugKind, NumDevices,
//! DeviceNum, DynamicMemSize: four u32) that the device runtime of every GPU image
//! reads, and which the plugin writes after loading the image, whatever the vendor.
//! Seen as `__omp_rtl_device_environment` in clang-16 sm_90 images; LLVM 16's AMDGPU
//! device runtime names it `omptarget_device_environment` (protected visibility).

use crate::backend::{Backend, BackendError, LoadedModule};
use std::ffi::CStr;

/// The names of the global, newest first.
pub const NAMES: [&CStr; 2] = [
    c"__omp_rtl_device_environment",
    c"omptarget_device_environment",
];
/// Its size in LLVM 16.
pub const SIZE: usize = 16;

/// The bytes for device `device` of `num_devices` (no debug output, no dynamic shared
/// memory), in the device's (little-endian) byte order.
pub fn contents(num_devices: u32, device: u32) -> [u8; SIZE] {
    let debug_kind = 0u32;
    let dynamic_memory = 0u32;
    let mut out = [0u8; SIZE];
    for (slot, word) in
        out.chunks_exact_mut(4)
            .zip([debug_kind, num_devices, device, dynamic_memory])
    {
        slot.copy_from_slice(&word.to_le_bytes());
    }
    out
}

/// Write the environment into a freshly loaded image, if its device runtime has one (an
/// image without LLVM's device runtime has none, and needs none).
pub fn install(
    backend: &dyn Backend,
    module: &dyn LoadedModule,
    device: usize,
) -> Result<(), BackendError> {
    let Some((name, size)) = NAMES
        .iter()
        .find_map(|name| module.global_size(name).map(|size| (name, size)))
    else {
        return Ok(());
    };
    if size != SIZE as u64 {
        return Err(BackendError::Load(format!(
            "{} is {size} bytes; LLVM 16's is {SIZE}",
            name.to_string_lossy()
        )));
    }
    let addr = module.global(name)?;
    let bytes = contents(backend.device_count() as u32, device as u32);
    // SAFETY: `addr` is the address the module gives for its own global, whose size it
    // just reported as SIZE bytes: device memory of `device` that holds all of `bytes`.
    unsafe { backend.write(device, addr, &bytes) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_little_endian_words() {
        let bytes = contents(3, 2);
        assert_eq!(bytes[..4], [0; 4]);
        assert_eq!(bytes[4..8], 3u32.to_le_bytes());
        assert_eq!(bytes[8..12], 2u32.to_le_bytes());
        assert_eq!(bytes[12..], [0; 4]);
    }
}
