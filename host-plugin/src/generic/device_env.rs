//! The device environment (`DeviceEnvironmentTy`) that LLVM's device runtime of every GPU
//! image reads, and which the plugin writes after loading the image, whatever the vendor.
//! Its layout grew with each LLVM version, and the image says which one it links by the
//! global's size ([`Layout`]):
//! - 16: DebugKind, NumDevices, DeviceNum, DynamicMemSize (four u32), 16 bytes;
//! - 17: then ClockFrequency (u64; AMDGPU's `omp_get_wtick` divides by it), 24 bytes;
//! - 18: then IndirectCallTable (a device pointer), IndirectCallTableSize (rows) and
//!   HardwareParallelism (u64 each), 48 bytes. LLVM 18's `__llvm_omp_indirect_call_lookup`
//!   searches that table; its rows are this plugin's (host, device) rows, sorted by host
//!   address, so the image's table is published there too
//!   ([`crate::generic::table::device_table`]).
//!
//! The layouts and names are offload-formats' ([`offload_formats::device_runtime`]).

use crate::backend::{BackendDevice, BackendError, DeviceAddr, LoadedModule};

/// Which LLVM's device environment an image's runtime reads.
pub use offload_formats::device_runtime::DeviceEnvironmentLayout as Layout;
/// The names of the global, newest first.
pub use offload_formats::device_runtime::DEVICE_ENVIRONMENT_NAMES as NAMES;

/// What the backend tells about a device (vendor API's plain type).
pub use crate::backend::DeviceFacts;

/// The bytes for device `device` of `num_devices` (no debug output, no indirect call
/// table yet), in the device's (little-endian) byte order. `dynamic_memory` is
/// `DynamicMemSize`: the dynamic shared memory every launch gets
/// (`LIBOMPTARGET_SHARED_MEMORY_SIZE`), which the device runtime hands out.
pub fn contents(
    layout: Layout,
    num_devices: u32,
    device: u32,
    dynamic_memory: u32,
    facts: DeviceFacts,
) -> Vec<u8> {
    let debug_kind = 0u32;
    let mut out: Vec<u8> = [debug_kind, num_devices, device, dynamic_memory]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    if layout != Layout::Llvm16 {
        out.extend(facts.clock_frequency.to_le_bytes());
    }
    if layout == Layout::Llvm18 {
        let (no_table, no_rows) = (0u64, 0u64);
        for word in [no_table, no_rows, facts.hardware_parallelism] {
            out.extend(word.to_le_bytes());
        }
    }
    debug_assert_eq!(out.len(), layout.size());
    out
}

/// The environment as written into one loaded image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Installed {
    pub layout: Layout,
    /// The global's device address.
    pub addr: DeviceAddr,
}

impl Installed {
    /// Where the 16 bytes of LLVM 18's (IndirectCallTable, IndirectCallTableSize) lie:
    /// None for the layouts without them.
    pub fn indirect_call_table(&self) -> Option<DeviceAddr> {
        Some(self.addr + self.layout.indirect_call_table_offset()?)
    }
}

/// Write the environment into a freshly loaded image, if its device runtime has one (an
/// image without LLVM's device runtime has none, and needs none).
pub fn install(
    device: &dyn BackendDevice,
    device_count: usize,
    module: &dyn LoadedModule,
    dynamic_memory: u32,
) -> Result<Option<Installed>, BackendError> {
    let Some((name, size)) = NAMES
        .iter()
        .find_map(|name| module.global_size(name).map(|size| (name, size)))
    else {
        return Ok(None);
    };
    let layout = Layout::of_size(size).ok_or_else(|| {
        BackendError::Load(format!(
            "{} is {size} bytes; LLVM 16's is 16, 17's 24, 18's 48",
            name.to_string_lossy()
        ))
    })?;
    let addr = module.global(name)?;
    let bytes = contents(
        layout,
        device_count as u32,
        device.index() as u32,
        dynamic_memory,
        device.device_facts(),
    );
    // SAFETY: `addr` is the address the module gives for its own global, whose size it
    // just reported as the layout's: memory of `device` that holds all of `bytes`.
    unsafe { device.write(addr, &bytes) }?;
    Ok(Some(Installed { layout, addr }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llvm_16_is_four_little_endian_words() {
        let bytes = contents(Layout::Llvm16, 3, 2, 0, DeviceFacts::default());
        assert_eq!(bytes[..4], [0; 4]);
        assert_eq!(bytes[4..8], 3u32.to_le_bytes());
        assert_eq!(bytes[8..12], 2u32.to_le_bytes());
        assert_eq!(bytes[12..], [0; 4]);
        // DynamicMemSize: LIBOMPTARGET_SHARED_MEMORY_SIZE, in every layout.
        for layout in [Layout::Llvm16, Layout::Llvm17, Layout::Llvm18] {
            let bytes = contents(layout, 1, 0, 256, DeviceFacts::default());
            assert_eq!(bytes[12..16], 256u32.to_le_bytes(), "{layout:?}");
        }
    }

    #[test]
    fn later_layouts_extend_16s() {
        let facts = DeviceFacts {
            clock_frequency: 1_000_000_000,
            hardware_parallelism: 132 * 64,
        };
        let v16 = contents(Layout::Llvm16, 3, 2, 0, facts);
        let v17 = contents(Layout::Llvm17, 3, 2, 0, facts);
        let v18 = contents(Layout::Llvm18, 3, 2, 0, facts);
        assert_eq!((v17.len(), v18.len()), (24, 48));
        assert_eq!(v17[..16], v16[..]);
        assert_eq!(v17[16..], 1_000_000_000u64.to_le_bytes());
        assert_eq!(v18[..24], v17[..]);
        // No table until the image's table is installed.
        assert_eq!(v18[24..40], [0; 16]);
        assert_eq!(v18[40..], (132u64 * 64).to_le_bytes());
    }

    #[test]
    fn the_indirect_call_table_lies_in_llvm_18s_only() {
        let env = Installed {
            layout: Layout::Llvm18,
            addr: 0x1000,
        };
        assert_eq!(env.indirect_call_table(), Some(0x1018));
        let env16 = Installed {
            layout: Layout::Llvm16,
            ..env
        };
        assert_eq!(env16.indirect_call_table(), None);
    }
}
