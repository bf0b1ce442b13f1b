//! What a device tells its runtime beyond its number: a plain type of the vendor API,
//! which each backend answers ([`super::BackendDevice::device_facts`]) and the core writes
//! into the device environment ([`crate::generic::device_env`]).

/// What a device tells its runtime beyond its number: the backend's answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceFacts {
    /// Ticks per second of the clock the device runtime reads (`omp_get_wtime`).
    pub clock_frequency: u64,
    /// How many independent threads of execution the device runs at once (LLVM 18's
    /// plugins: warps or wavefronts per multiprocessor x multiprocessors; 0: unknown).
    pub hardware_parallelism: u64,
}

impl Default for DeviceFacts {
    /// LLVM's generic plugin defaults: `CLOCKS_PER_SEC` and 0.
    fn default() -> Self {
        DeviceFacts {
            clock_frequency: 1_000_000,
            hardware_parallelism: 0,
        }
    }
}
