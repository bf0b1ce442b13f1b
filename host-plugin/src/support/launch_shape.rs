//! How many blocks (work-groups) and threads (work-items) a clang-16 OpenMP kernel is
//! launched with: the rules of LLVM 16's plugins-nextgen (`GenericKernelTy::getNumThreads`
//! / `getNumBlocks` in `PluginInterface.cpp`), as a pure function so they are tested
//! without a GPU. Vendor-neutral: each GPU backend supplies its device's [`Limits`]
//! (NVPTX grid values in `cuda`, AMDGPU ones in `hip::grid`).

/// `<kernel>_exec_mode`, the i8 global clang emits next to each OpenMP kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecMode {
    /// OMP_TGT_EXEC_MODE_GENERIC: one main thread runs the region; the workers wait in
    /// the state machine. The main thread lives in an extra warp.
    Generic,
    /// OMP_TGT_EXEC_MODE_SPMD: every thread runs the region.
    Spmd,
    /// OMP_TGT_EXEC_MODE_GENERIC_SPMD: generic code the compiler proved SPMD-safe.
    GenericSpmd,
}

impl ExecMode {
    /// The mode from the global's value, None for a value LLVM 16 does not define.
    pub fn from_raw(value: u8) -> Option<Self> {
        match value {
            1 => Some(ExecMode::Generic),
            2 => Some(ExecMode::Spmd),
            3 => Some(ExecMode::GenericSpmd),
            _ => None,
        }
    }
}

/// Read a kernel's `<kernel>_exec_mode`, the one rule for every GPU backend: `None` when
/// the image has no such global (a plain kernel), an error when it is not one byte or
/// holds a value LLVM 16 does not define. The caller supplies two calls, `global` (the
/// global's device address and size, if it exists) and `read_byte` (one byte of the
/// device), and `invalid`, which makes its error from what is wrong (this module knows
/// no backend).
pub fn read_exec_mode<E>(
    kernel: &std::ffi::CStr,
    global: impl FnOnce(&std::ffi::CStr) -> Result<Option<(u64, u64)>, E>,
    read_byte: impl FnOnce(u64) -> Result<u8, E>,
    invalid: impl Fn(String) -> E,
) -> Result<Option<ExecMode>, E> {
    let mut name = kernel.to_bytes().to_vec();
    name.extend_from_slice(b"_exec_mode");
    let name = std::ffi::CString::new(name)
        .map_err(|_| invalid("a kernel name holds a NUL byte".into()))?;
    let Some((addr, size)) = global(&name)? else {
        return Ok(None);
    };
    let name = name.to_string_lossy();
    if size != 1 {
        return Err(invalid(format!(
            "{name} is {size} bytes, not a 1-byte variable"
        )));
    }
    let value = read_byte(addr)?;
    ExecMode::from_raw(value).map(Some).ok_or_else(|| {
        invalid(format!(
            "{name} holds {value}, not an LLVM 16 execution mode"
        ))
    })
}

/// clang 18's `<kernel>_kernel_environment`, which replaces `<kernel>_exec_mode`.
pub use offload_formats::device_runtime::kernel_environment;

/// What the device and the kernel allow, and the plugin's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub warp_size: u32,
    /// min(the kernel's MAX_THREADS_PER_BLOCK attribute, the device's limit).
    pub max_threads: u32,
    /// The most blocks a launch gets (LLVM 16: `GV_Max_Teams` as the device sets it).
    pub block_limit: u32,
    /// Threads per block without a thread_limit clause (LLVM 16 NVPTX: 128, AMDGPU: 256).
    pub default_threads: u32,
    /// Blocks without a num_teams clause or trip count (LLVM 16 NVPTX grid value 3200;
    /// AMDGPU: compute units x 4).
    pub default_blocks: u32,
    /// The most dynamic shared memory one block of the kernel can get, in bytes: the
    /// device's per-block maximum (on CUDA the opt-in one) less the kernel's static
    /// shared memory.
    pub max_dynamic_shared_memory: u32,
}

/// What a launch gets: one-dimensional geometry, and each block's dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub blocks: u32,
    pub threads: u32,
    /// Bytes of dynamic shared memory (CUDA's `sharedMemBytes`, AMDGPU's dynamic LDS)
    /// each block gets: what [`dynamic_shared_memory`] decided.
    pub dynamic_shared_memory: u32,
}

/// A launch asks each block for more dynamic shared memory than the kernel can get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedMemoryTooLarge {
    /// The bytes asked for: the larger of the two requests.
    pub asked: u32,
    /// [`Limits::max_dynamic_shared_memory`].
    pub limit: u32,
}

/// The dynamic shared memory of a launch, LLVM 16's rule (`CUDAKernelTy::launchImpl`):
/// the larger of what the launch asks for (the `ompx_dyn_cgroup_mem` clause, the kernel
/// arguments' `DynCGroupMem`) and what the device gives every launch
/// (`LIBOMPTARGET_SHARED_MEMORY_SIZE`). More than the kernel can get is refused here,
/// before the vendor sees it.
pub fn dynamic_shared_memory(
    clause: u32,
    device_default: u32,
    limits: &Limits,
) -> Result<u32, SharedMemoryTooLarge> {
    let asked = clause.max(device_default);
    if asked > limits.max_dynamic_shared_memory {
        return Err(SharedMemoryTooLarge {
            asked,
            limit: limits.max_dynamic_shared_memory,
        });
    }
    Ok(asked)
}

/// Threads per block: the thread_limit clause (plus the generic main thread's warp),
/// else the default, never above the kernel's limit.
pub fn threads(mode: ExecMode, thread_limit: u32, limits: &Limits) -> u32 {
    let wanted = if thread_limit > 0 {
        match mode {
            ExecMode::Generic => thread_limit.saturating_add(limits.warp_size),
            ExecMode::Spmd | ExecMode::GenericSpmd => thread_limit,
        }
    } else {
        limits.default_threads
    };
    wanted.min(limits.max_threads).max(1)
}

/// Blocks: the num_teams clause, else enough blocks for the loop's trip count (one
/// iteration per thread in SPMD, one per team otherwise), capped by the default.
pub fn blocks(
    mode: ExecMode,
    num_teams: u32,
    tripcount: u64,
    threads: u32,
    limits: &Limits,
) -> u32 {
    if num_teams > 0 {
        return num_teams.min(limits.block_limit).max(1);
    }
    let from_tripcount = if tripcount == 0 {
        u64::MAX
    } else {
        match mode {
            ExecMode::Spmd => (tripcount - 1) / u64::from(threads.max(1)) + 1,
            ExecMode::Generic | ExecMode::GenericSpmd => tripcount,
        }
    };
    let preferred = from_tripcount.min(u64::from(limits.default_blocks)) as u32;
    preferred.min(limits.block_limit).max(1)
}

pub fn shape(
    mode: ExecMode,
    num_teams: u32,
    thread_limit: u32,
    tripcount: u64,
    limits: &Limits,
) -> Shape {
    let threads = threads(mode, thread_limit, limits);
    Shape {
        blocks: blocks(mode, num_teams, tripcount, threads, limits),
        threads,
        dynamic_shared_memory: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exec_mode_global_is_one_defined_byte() {
        let read = |global: Option<(u64, u64)>, value: u8| {
            read_exec_mode(
                c"k",
                |name| {
                    assert_eq!(name, c"k_exec_mode");
                    Ok(global)
                },
                |addr| {
                    assert_eq!(addr, 0x40);
                    Ok(value)
                },
                |what| what,
            )
        };
        assert_eq!(read(None, 0).unwrap(), None);
        assert_eq!(read(Some((0x40, 1)), 1).unwrap(), Some(ExecMode::Generic));
        assert_eq!(
            read(Some((0x40, 1)), 3).unwrap(),
            Some(ExecMode::GenericSpmd)
        );
        let wide = read(Some((0x40, 4)), 2).unwrap_err();
        assert!(wide.contains("k_exec_mode is 4 bytes"), "{wide}");
        let bad = read(Some((0x40, 1)), 7).unwrap_err();
        assert!(bad.contains("holds 7"), "{bad}");
    }

    const H100: Limits = Limits {
        warp_size: 32,
        max_threads: 1024,
        block_limit: 65536,
        default_threads: 128,
        default_blocks: 3200,
        max_dynamic_shared_memory: 232_448,
    };

    #[test]
    fn dynamic_shared_memory_is_the_larger_request_up_to_the_limit() {
        assert_eq!(dynamic_shared_memory(0, 0, &H100), Ok(0));
        assert_eq!(dynamic_shared_memory(256, 0, &H100), Ok(256));
        assert_eq!(dynamic_shared_memory(16, 256, &H100), Ok(256));
        assert_eq!(dynamic_shared_memory(232_448, 0, &H100), Ok(232_448));
        assert_eq!(
            dynamic_shared_memory(0, 232_449, &H100),
            Err(SharedMemoryTooLarge {
                asked: 232_449,
                limit: 232_448
            })
        );
    }

    #[test]
    fn exec_mode_values_are_llvm_16s() {
        assert_eq!(ExecMode::from_raw(1), Some(ExecMode::Generic));
        assert_eq!(ExecMode::from_raw(2), Some(ExecMode::Spmd));
        assert_eq!(ExecMode::from_raw(3), Some(ExecMode::GenericSpmd));
        assert_eq!(ExecMode::from_raw(0), None);
        assert_eq!(ExecMode::from_raw(4), None);
    }

    #[test]
    fn generic_mode_adds_a_warp_for_the_main_thread() {
        assert_eq!(threads(ExecMode::Generic, 64, &H100), 96);
        assert_eq!(threads(ExecMode::Spmd, 64, &H100), 64);
        assert_eq!(threads(ExecMode::GenericSpmd, 64, &H100), 64);
    }

    #[test]
    fn thread_limit_is_capped_by_the_kernel_and_defaults_apply() {
        assert_eq!(threads(ExecMode::Generic, 1024, &H100), 1024);
        assert_eq!(threads(ExecMode::Spmd, 5000, &H100), 1024);
        let small = Limits {
            max_threads: 256,
            ..H100
        };
        assert_eq!(threads(ExecMode::Spmd, 0, &small), 128);
        assert_eq!(threads(ExecMode::Spmd, 300, &small), 256);
        let tiny = Limits {
            max_threads: 64,
            ..H100
        };
        assert_eq!(threads(ExecMode::Generic, 0, &tiny), 64);
    }

    #[test]
    fn num_teams_clause_wins_up_to_the_grid_limit() {
        assert_eq!(blocks(ExecMode::Spmd, 7, 1_000_000, 128, &H100), 7);
        let grid = Limits {
            block_limit: 65535,
            ..H100
        };
        assert_eq!(blocks(ExecMode::Generic, 100_000, 0, 128, &grid), 65535);
    }

    #[test]
    fn tripcount_sizes_the_grid_by_mode() {
        // SPMD: one iteration per thread, rounded up.
        assert_eq!(blocks(ExecMode::Spmd, 0, 1000, 128, &H100), 8);
        assert_eq!(blocks(ExecMode::Spmd, 0, 1024, 128, &H100), 8);
        assert_eq!(blocks(ExecMode::Spmd, 0, 1025, 128, &H100), 9);
        // Generic: one iteration per team.
        assert_eq!(blocks(ExecMode::Generic, 0, 1000, 128, &H100), 1000);
        assert_eq!(blocks(ExecMode::GenericSpmd, 0, 17, 128, &H100), 17);
        // Long loops reuse the default number of blocks.
        assert_eq!(blocks(ExecMode::Spmd, 0, u64::MAX, 128, &H100), 3200);
        assert_eq!(blocks(ExecMode::Generic, 0, 10_000, 128, &H100), 3200);
        // No clause, no trip count: the default.
        assert_eq!(blocks(ExecMode::Spmd, 0, 0, 128, &H100), 3200);
    }

    #[test]
    fn shape_combines_both_rules() {
        assert_eq!(
            shape(ExecMode::Generic, 0, 0, 0, &H100),
            Shape {
                blocks: 3200,
                threads: 128,
                dynamic_shared_memory: 0
            }
        );
        assert_eq!(
            shape(ExecMode::Spmd, 0, 256, 4096, &H100),
            Shape {
                blocks: 16,
                threads: 256,
                dynamic_shared_memory: 0
            }
        );
    }
}
