//! The devices the stand-in reports: `OMPTARGET_RS_CUDA_STANDIN_DEVICES` of them
//! (default 1), all of compute capability `OMPTARGET_RS_CUDA_STANDIN_SM` (default 90),
//! with an H100's attributes, each with `OMPTARGET_RS_CUDA_STANDIN_MEMORY` bytes of
//! device memory (default an H100's 80 GiB).

use crate::errors::{Failure, Outcome};

pub const DEVICES_ENV: &str = "OMPTARGET_RS_CUDA_STANDIN_DEVICES";
pub const SM_ENV: &str = "OMPTARGET_RS_CUDA_STANDIN_SM";
pub const MEMORY_ENV: &str = "OMPTARGET_RS_CUDA_STANDIN_MEMORY";

/// What every device of this process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub devices: usize,
    /// 90 for sm_90.
    pub sm: u32,
    /// Each device's memory in bytes: what cuDeviceTotalMem and cuMemGetInfo report as
    /// the total, and the most its device and managed allocations may take together.
    pub memory: usize,
}

impl Config {
    /// From the environment; a value that does not parse is the default.
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// From the variables `var` gives; a value that does not parse is the default.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let number = |name: &str| {
            var(name).and_then(|v| v.trim().trim_start_matches("sm_").parse::<u32>().ok())
        };
        Config {
            devices: number(DEVICES_ENV).map_or(1, |n| n as usize),
            sm: number(SM_ENV).filter(|&sm| sm >= 10).unwrap_or(90),
            memory: var(MEMORY_ENV)
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(TOTAL_MEMORY),
        }
    }

    pub fn compute_capability(&self) -> (i32, i32) {
        ((self.sm / 10) as i32, (self.sm % 10) as i32)
    }

    /// The name cuDeviceGetName reports.
    pub fn name(&self) -> String {
        format!("CUDA driver stand-in (sm_{})", self.sm)
    }

    /// A device ordinal of this process, or CUDA_ERROR_INVALID_DEVICE.
    pub fn check(&self, device: i32) -> Outcome<usize> {
        usize::try_from(device)
            .ok()
            .filter(|&d| d < self.devices)
            .ok_or_else(|| {
                Failure::new(
                    crate::errors::CUDA_ERROR_INVALID_DEVICE,
                    format!("device {device} (the stand-in has {})", self.devices),
                )
            })
    }
}

/// Each device's memory by default: 80 GiB, as an H100 SXM.
pub const TOTAL_MEMORY: usize = 80 << 30;
pub const MAX_THREADS_PER_BLOCK: i32 = 1024;
/// Static plus dynamic shared memory a block gets without opting in.
pub const SHARED_PER_BLOCK: i32 = 48 * 1024;
/// The most a kernel may opt in to (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES plus
/// its static shared memory).
pub const SHARED_PER_BLOCK_OPTIN: i32 = 232_448;
pub const MAX_BLOCK_DIM: [u32; 3] = [1024, 1024, 64];
pub const MAX_GRID_DIM: [u32; 3] = [i32::MAX as u32, 65535, 65535];

/// The highest attribute number the stand-in accepts (current drivers define fewer);
/// attributes it does not model are 0.
const LAST_ATTRIBUTE: u32 = 200;

/// CU_DEVICE_ATTRIBUTE_* values (the driver API's numbers, checked against cudarc in
/// the tests) and what an H100 reports for them.
pub mod attribute {
    pub const MAX_THREADS_PER_BLOCK: u32 = 1;
    pub const MAX_BLOCK_DIM_X: u32 = 2;
    pub const MAX_BLOCK_DIM_Y: u32 = 3;
    pub const MAX_BLOCK_DIM_Z: u32 = 4;
    pub const MAX_GRID_DIM_X: u32 = 5;
    pub const MAX_GRID_DIM_Y: u32 = 6;
    pub const MAX_GRID_DIM_Z: u32 = 7;
    pub const MAX_SHARED_MEMORY_PER_BLOCK: u32 = 8;
    pub const TOTAL_CONSTANT_MEMORY: u32 = 9;
    pub const WARP_SIZE: u32 = 10;
    pub const MAX_REGISTERS_PER_BLOCK: u32 = 12;
    pub const CLOCK_RATE: u32 = 13;
    pub const MULTIPROCESSOR_COUNT: u32 = 16;
    pub const CAN_MAP_HOST_MEMORY: u32 = 19;
    pub const CONCURRENT_KERNELS: u32 = 31;
    pub const L2_CACHE_SIZE: u32 = 38;
    pub const MAX_THREADS_PER_MULTIPROCESSOR: u32 = 39;
    pub const ASYNC_ENGINE_COUNT: u32 = 40;
    pub const UNIFIED_ADDRESSING: u32 = 41;
    pub const COMPUTE_CAPABILITY_MAJOR: u32 = 75;
    pub const COMPUTE_CAPABILITY_MINOR: u32 = 76;
    pub const MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: u32 = 81;
    pub const MAX_REGISTERS_PER_MULTIPROCESSOR: u32 = 82;
    pub const MANAGED_MEMORY: u32 = 83;
    pub const CONCURRENT_MANAGED_ACCESS: u32 = 89;
    pub const MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: u32 = 97;
    pub const MAX_BLOCKS_PER_MULTIPROCESSOR: u32 = 106;
    pub const MEMORY_POOLS_SUPPORTED: u32 = 115;
}

/// cuDeviceGetAttribute's answer: what an H100 reports for the attributes modelled, 0
/// for the others.
pub fn attribute_value(config: &Config, attribute: u32) -> Outcome<i32> {
    if !(1..=LAST_ATTRIBUTE).contains(&attribute) {
        return Err(Failure::invalid_value(format!(
            "device attribute {attribute}"
        )));
    }
    Ok(modelled(config, attribute).unwrap_or(0))
}

fn modelled(config: &Config, attribute: u32) -> Option<i32> {
    use attribute::*;
    let (major, minor) = config.compute_capability();
    Some(match attribute {
        MAX_THREADS_PER_BLOCK => self::MAX_THREADS_PER_BLOCK,
        MAX_BLOCK_DIM_X => MAX_BLOCK_DIM[0] as i32,
        MAX_BLOCK_DIM_Y => MAX_BLOCK_DIM[1] as i32,
        MAX_BLOCK_DIM_Z => MAX_BLOCK_DIM[2] as i32,
        MAX_GRID_DIM_X => MAX_GRID_DIM[0] as i32,
        MAX_GRID_DIM_Y => MAX_GRID_DIM[1] as i32,
        MAX_GRID_DIM_Z => MAX_GRID_DIM[2] as i32,
        MAX_SHARED_MEMORY_PER_BLOCK => SHARED_PER_BLOCK,
        TOTAL_CONSTANT_MEMORY => 64 * 1024,
        WARP_SIZE => 32,
        MAX_REGISTERS_PER_BLOCK | MAX_REGISTERS_PER_MULTIPROCESSOR => 65536,
        CLOCK_RATE => 1_980_000,
        MULTIPROCESSOR_COUNT => 132,
        MAX_THREADS_PER_MULTIPROCESSOR => 2048,
        L2_CACHE_SIZE => 50 << 20,
        ASYNC_ENGINE_COUNT => 3,
        CAN_MAP_HOST_MEMORY
        | CONCURRENT_KERNELS
        | UNIFIED_ADDRESSING
        | MANAGED_MEMORY
        | CONCURRENT_MANAGED_ACCESS
        | MEMORY_POOLS_SUPPORTED => 1,
        COMPUTE_CAPABILITY_MAJOR => major,
        COMPUTE_CAPABILITY_MINOR => minor,
        MAX_SHARED_MEMORY_PER_MULTIPROCESSOR => 233_472,
        MAX_SHARED_MEMORY_PER_BLOCK_OPTIN => SHARED_PER_BLOCK_OPTIN,
        MAX_BLOCKS_PER_MULTIPROCESSOR => 32,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::sys::CUdevice_attribute as A;

    #[test]
    fn attribute_numbers_are_the_driver_apis() {
        let pairs = [
            (
                attribute::MAX_THREADS_PER_BLOCK,
                A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            ),
            (
                attribute::MAX_BLOCK_DIM_X,
                A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
            ),
            (
                attribute::MAX_BLOCK_DIM_Y,
                A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
            ),
            (
                attribute::MAX_BLOCK_DIM_Z,
                A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
            ),
            (
                attribute::MAX_GRID_DIM_X,
                A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
            ),
            (
                attribute::MAX_GRID_DIM_Y,
                A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
            ),
            (
                attribute::MAX_GRID_DIM_Z,
                A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
            ),
            (
                attribute::MAX_SHARED_MEMORY_PER_BLOCK,
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
            ),
            (
                attribute::TOTAL_CONSTANT_MEMORY,
                A::CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY,
            ),
            (attribute::WARP_SIZE, A::CU_DEVICE_ATTRIBUTE_WARP_SIZE),
            (
                attribute::MAX_REGISTERS_PER_BLOCK,
                A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK,
            ),
            (attribute::CLOCK_RATE, A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
            (
                attribute::MULTIPROCESSOR_COUNT,
                A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            ),
            (
                attribute::CAN_MAP_HOST_MEMORY,
                A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY,
            ),
            (
                attribute::CONCURRENT_KERNELS,
                A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS,
            ),
            (
                attribute::L2_CACHE_SIZE,
                A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
            ),
            (
                attribute::MAX_THREADS_PER_MULTIPROCESSOR,
                A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
            ),
            (
                attribute::ASYNC_ENGINE_COUNT,
                A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT,
            ),
            (
                attribute::UNIFIED_ADDRESSING,
                A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING,
            ),
            (
                attribute::COMPUTE_CAPABILITY_MAJOR,
                A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            ),
            (
                attribute::COMPUTE_CAPABILITY_MINOR,
                A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            ),
            (
                attribute::MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            ),
            (
                attribute::MAX_REGISTERS_PER_MULTIPROCESSOR,
                A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
            ),
            (
                attribute::MANAGED_MEMORY,
                A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY,
            ),
            (
                attribute::CONCURRENT_MANAGED_ACCESS,
                A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
            ),
            (
                attribute::MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            ),
            (
                attribute::MAX_BLOCKS_PER_MULTIPROCESSOR,
                A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
            ),
            (
                attribute::MEMORY_POOLS_SUPPORTED,
                A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
            ),
        ];
        for (ours, theirs) in pairs {
            assert_eq!(ours, theirs as u32, "{theirs:?}");
        }
    }

    #[test]
    fn an_h100_by_default() {
        let config = Config::from_vars(|_| None);
        let get = |a| attribute_value(&config, a).unwrap();
        assert_eq!(get(attribute::MAX_THREADS_PER_BLOCK), 1024);
        assert_eq!(get(attribute::MAX_GRID_DIM_X), i32::MAX);
        assert_eq!(get(attribute::MULTIPROCESSOR_COUNT), 132);
        assert_eq!(get(attribute::MAX_THREADS_PER_MULTIPROCESSOR), 2048);
        assert_eq!(get(attribute::WARP_SIZE), 32);
        assert_eq!(get(attribute::MAX_SHARED_MEMORY_PER_BLOCK), 49152);
        assert_eq!(get(attribute::MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), 232_448);
        assert_eq!(get(attribute::COMPUTE_CAPABILITY_MAJOR), 9);
        assert_eq!(get(attribute::COMPUTE_CAPABILITY_MINOR), 0);
        assert_eq!(get(150), 0, "an attribute not modelled is 0");
        assert!(attribute_value(&config, 0).is_err());
        assert!(attribute_value(&config, 100_000).is_err());
        assert_eq!(config.name(), "CUDA driver stand-in (sm_90)");
    }

    #[test]
    fn the_environment_sets_devices_sm_and_memory() {
        let defaults = Config::from_vars(|_| None);
        assert_eq!(
            defaults,
            Config {
                devices: 1,
                sm: 90,
                memory: TOTAL_MEMORY
            }
        );
        let set = Config::from_vars(|name| {
            Some(match name {
                DEVICES_ENV => "4".into(),
                SM_ENV => "sm_80".into(),
                MEMORY_ENV => " 1048576\n".into(),
                _ => return None,
            })
        });
        assert_eq!(
            set,
            Config {
                devices: 4,
                sm: 80,
                memory: 1 << 20
            }
        );
        let junk = Config::from_vars(|name| (name == MEMORY_ENV).then(|| "1G".into()));
        assert_eq!(junk.memory, TOTAL_MEMORY, "a value that does not parse");
    }

    #[test]
    fn device_ordinals_are_checked() {
        let config = Config {
            devices: 2,
            sm: 80,
            memory: 1 << 20,
        };
        assert_eq!(config.check(1), Ok(1));
        assert!(config.check(2).is_err());
        assert!(config.check(-1).is_err());
        assert_eq!(config.compute_capability(), (8, 0));
    }
}
