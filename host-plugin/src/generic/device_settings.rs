//! libomptarget's per-device settings from the environment, read as LLVM 16's
//! plugins-nextgen reads them (`GenericDeviceTy`): `LIBOMPTARGET_SHARED_MEMORY_SIZE`
//! (dynamic shared memory every launch gets, and the device environment's
//! `DynamicMemSize`), `LIBOMPTARGET_STACK_SIZE` and `LIBOMPTARGET_HEAP_SIZE` (set on the
//! device at its initialisation, before any launch), and how the device pools its
//! memory ([`crate::generic::memory_pool`]: `LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`, ours
//! `OMPTARGET_RS_MEMORY_POOL_LIMIT`). Pure: the caller says where values come from.

use crate::generic::memory_pool::{PoolSettings, DEFAULT_CACHE_LIMIT, DEFAULT_THRESHOLD};
use thiserror::Error;

pub const SHARED_MEMORY_SIZE_ENV: &str = "LIBOMPTARGET_SHARED_MEMORY_SIZE";
pub const STACK_SIZE_ENV: &str = "LIBOMPTARGET_STACK_SIZE";
pub const HEAP_SIZE_ENV: &str = "LIBOMPTARGET_HEAP_SIZE";
/// LLVM's: the largest allocation the memory pool serves; 0 turns pooling off.
pub const POOL_THRESHOLD_ENV: &str = "LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD";
/// Ours: the most bytes of free blocks the memory pool keeps.
pub const POOL_LIMIT_ENV: &str = "OMPTARGET_RS_MEMORY_POOL_LIMIT";

/// The settings of one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceSettings {
    /// Bytes of dynamic shared memory every launch's blocks get at least (0: none).
    pub dynamic_shared_memory: u32,
    /// Bytes of stack per device thread, where set.
    pub stack_size: Option<usize>,
    /// Bytes of device heap (device-side `malloc`), where set.
    pub heap_size: Option<usize>,
    /// How a GPU device pools its memory.
    pub pool: PoolSettings,
}

/// A variable set to something that is not a number of bytes.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("{name}={value:?} is not a number of bytes (a decimal integer of at most {max})")]
pub struct SettingError {
    pub name: &'static str,
    pub value: String,
    pub max: u64,
}

impl DeviceSettings {
    /// From this process's environment.
    pub fn from_env() -> Result<Self, SettingError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// From `get(name)`; an unset or empty variable is the default (LLVM's too).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, SettingError> {
        let bytes = |name: &'static str, max: u64| -> Result<Option<u64>, SettingError> {
            let Some(value) = get(name).filter(|v| !v.trim().is_empty()) else {
                return Ok(None);
            };
            match value.trim().parse::<u64>() {
                Ok(n) if n <= max => Ok(Some(n)),
                _ => Err(SettingError { name, value, max }),
            }
        };
        // The bounds make the narrowing casts exact.
        let shared = bytes(SHARED_MEMORY_SIZE_ENV, u64::from(u32::MAX))?;
        let host_size = usize::MAX as u64;
        Ok(DeviceSettings {
            dynamic_shared_memory: shared.map_or(0, |n| n as u32),
            stack_size: bytes(STACK_SIZE_ENV, host_size)?.map(|n| n as usize),
            heap_size: bytes(HEAP_SIZE_ENV, host_size)?.map(|n| n as usize),
            pool: PoolSettings {
                threshold: bytes(POOL_THRESHOLD_ENV, host_size)?
                    .map_or(DEFAULT_THRESHOLD, |n| n as usize),
                cache_limit: bytes(POOL_LIMIT_ENV, host_size)?
                    .map_or(DEFAULT_CACHE_LIMIT, |n| n as usize),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<DeviceSettings, SettingError> {
        DeviceSettings::from_lookup(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn unset_or_empty_variables_are_the_defaults() {
        assert_eq!(settings(&[]), Ok(DeviceSettings::default()));
        assert_eq!(
            settings(&[(STACK_SIZE_ENV, ""), (SHARED_MEMORY_SIZE_ENV, " ")]),
            Ok(DeviceSettings::default())
        );
    }

    #[test]
    fn each_variable_sets_its_own_setting() {
        assert_eq!(
            settings(&[
                (SHARED_MEMORY_SIZE_ENV, "256"),
                (STACK_SIZE_ENV, "2048"),
                (HEAP_SIZE_ENV, " 16777216 "),
            ]),
            Ok(DeviceSettings {
                dynamic_shared_memory: 256,
                stack_size: Some(2048),
                heap_size: Some(16 << 20),
                pool: PoolSettings::default(),
            })
        );
    }

    #[test]
    fn the_pool_variables_set_its_threshold_and_limit() {
        let pool = |vars| settings(vars).map(|s| s.pool);
        assert_eq!(pool(&[]), Ok(PoolSettings::default()));
        assert_eq!(
            pool(&[(POOL_THRESHOLD_ENV, "0"), (POOL_LIMIT_ENV, "4096")]),
            Ok(PoolSettings {
                threshold: 0,
                cache_limit: 4096
            })
        );
        assert_eq!(
            settings(&[(POOL_THRESHOLD_ENV, "8k")]).unwrap_err().name,
            POOL_THRESHOLD_ENV
        );
    }

    #[test]
    fn a_value_that_is_not_a_byte_count_is_an_error_naming_the_variable() {
        let err = settings(&[(STACK_SIZE_ENV, "2k")]).unwrap_err();
        assert_eq!(err.name, STACK_SIZE_ENV);
        assert!(
            err.to_string().contains("LIBOMPTARGET_STACK_SIZE=\"2k\""),
            "{err}"
        );
        let err = settings(&[(SHARED_MEMORY_SIZE_ENV, "4294967296")]).unwrap_err();
        assert_eq!(err.max, u64::from(u32::MAX));
        assert!(settings(&[(HEAP_SIZE_ENV, "-1")]).is_err());
    }
}
