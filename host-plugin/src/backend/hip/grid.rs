//! LLVM 16's AMDGPU launch limits: what its plugins-nextgen AMDGPU plugin
//! (`openmp/libomptarget/plugins-nextgen/amdgpu/src/rtl.cpp`, `AMDGPUDeviceTy::initImpl`)
//! puts in the device's grid values, computed here from what HIP reports instead of HSA.
//! The launch rules themselves are the vendor-neutral ones of
//! [`launch_shape`](crate::support::launch_shape).
//!
//! Facts, from LLVM 16 (`llvm/include/llvm/Frontend/OpenMP/OMPGridValues.h` of llvm-16-dev,
//! and the release's `libomptarget.rtl.amdgpu.nextgen.so.16`):
//! - `AMDGPUGridValues64` / `AMDGPUGridValues32` differ only in the warp size (64 / 32);
//!   both have default work-group 256, max work-group 1024, max teams 65536 and default
//!   teams 440. The plugin picks one by the agent's wavefront size (gfx10+ run wave32).
//! - `initImpl` then overwrites: max work-group = the agent's largest work-group in x;
//!   max teams = the grid's largest size in x / max work-group; default teams = compute
//!   units x `LIBOMPTARGET_AMDGPU_TEAMS_PER_CU` (default 4). So 440 and 65536 are never
//!   used on a real device; they are this module's fallbacks for a runtime that cannot
//!   say.
//! - `GenericKernelTy::init` keeps the max work-group as the kernel's thread limit. HIP
//!   also knows the kernel's own limit (its `amdgpu-flat-work-group-size`); a launch
//!   above it fails, so it caps the threads too (as CUDA's per-kernel limit does in the
//!   CUDA plugin).
//! - `OMP_NUM_TEAMS` / `OMP_TEAMS_THREAD_LIMIT` are applied by LLVM 16 before `initImpl`
//!   overwrites the values, so they do not change AMDGPU launches there; not read here.

use crate::support::launch_shape::Limits;

/// `GV_Default_WG_Size` of both AMDGPU grid value sets.
pub const DEFAULT_WORK_GROUP_SIZE: u32 = 256;
/// `GV_Max_WG_Size`: used when HIP cannot report the device's largest work-group.
pub const MAX_WORK_GROUP_SIZE: u32 = 1024;
/// `GV_Max_Teams`: used when neither the grid size nor the work-group size is known.
pub const GRID_VALUE_MAX_TEAMS: u32 = 1 << 16;
/// `GV_Default_Num_Teams`: used when HIP cannot count the compute units.
pub const GRID_VALUE_DEFAULT_TEAMS: u32 = 440;
/// Default of `LIBOMPTARGET_AMDGPU_TEAMS_PER_CU` in LLVM 16's AMDGPU plugin.
pub const DEFAULT_TEAMS_PER_CU: u32 = 4;
/// The environment variable LLVM 16 reads for it (same meaning here).
pub const TEAMS_PER_CU_ENV: &str = "LIBOMPTARGET_AMDGPU_TEAMS_PER_CU";
/// The local data share (LDS) one work-group can have on the AMDGPU processors LLVM 16
/// targets (gfx9, gfx10, gfx11): 64 KiB, static and dynamic together.
pub const LDS_PER_WORK_GROUP: u32 = 64 << 10;
/// HSA's largest grid in x, in work-items, on ROCr agents (`HSA_AGENT_INFO_GRID_MAX_DIM`):
/// HIP launches `grid x block` work-items, so it bounds their product too.
pub const HSA_GRID_MAX_WORK_ITEMS: u32 = u32::MAX;

/// What HIP said about a device; None where it could not say (an older runtime without
/// hipDeviceGetAttribute, or a failed or nonsensical answer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceAttributes {
    /// hipDeviceAttributeWarpSize (the wavefront size).
    pub warp_size: Option<u32>,
    /// hipDeviceAttributeMaxBlockDimX.
    pub max_block_dim_x: Option<u32>,
    /// hipDeviceAttributeMaxGridDimX (in blocks, as HIP counts a grid).
    pub max_grid_dim_x: Option<u32>,
    /// hipDeviceAttributeMultiprocessorCount (compute units).
    pub compute_units: Option<u32>,
}

/// The wavefront size clang 16 compiles OpenMP code for on `processor` by default:
/// wave32 from gfx10 on, wave64 before (GCN, CDNA).
pub fn default_wavefront_size(processor: &str) -> u32 {
    let generation = processor
        .strip_prefix("gfx")
        .map(|digits| digits.len() >= 4 && digits.starts_with('1'));
    if generation == Some(true) {
        32
    } else {
        64
    }
}

/// The device's grid values, as LLVM 16's AMDGPU plugin sets them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    pub warp_size: u32,
    /// `GV_Max_WG_Size`: the largest work-group.
    pub max_threads: u32,
    /// `GV_Max_Teams`: the most work-groups of a launch.
    pub block_limit: u32,
    /// `GV_Default_WG_Size`.
    pub default_threads: u32,
    /// `GV_Default_Num_Teams`.
    pub default_blocks: u32,
}

impl DeviceLimits {
    /// From HIP's answers, falling back to LLVM 16's grid values (and to the processor's
    /// default wavefront size) where HIP gave none. `teams_per_cu` 0 means the default.
    pub fn new(attributes: DeviceAttributes, processor: Option<&str>, teams_per_cu: u32) -> Self {
        let positive = |v: Option<u32>| v.filter(|&v| v > 0);
        let warp_size = positive(attributes.warp_size)
            .or_else(|| processor.map(default_wavefront_size))
            .unwrap_or(64);
        let max_threads = positive(attributes.max_block_dim_x).unwrap_or(MAX_WORK_GROUP_SIZE);
        // LLVM divides HSA's grid limit (work-items) by the largest work-group; HIP's
        // own grid limit, in blocks, may only lower it.
        let mut block_limit = HSA_GRID_MAX_WORK_ITEMS / max_threads;
        if let Some(grid) = positive(attributes.max_grid_dim_x) {
            block_limit = block_limit.min(grid);
        }
        let teams_per_cu = if teams_per_cu == 0 {
            DEFAULT_TEAMS_PER_CU
        } else {
            teams_per_cu
        };
        let default_blocks = positive(attributes.compute_units)
            .map_or(GRID_VALUE_DEFAULT_TEAMS, |cus| {
                cus.saturating_mul(teams_per_cu)
            });
        DeviceLimits {
            warp_size,
            max_threads,
            block_limit: block_limit.max(1),
            default_threads: DEFAULT_WORK_GROUP_SIZE,
            default_blocks,
        }
    }

    /// The limits of one kernel: the device's, with the threads also capped by the
    /// kernel's own largest work-group where HIP reported it, and the dynamic shared
    /// memory by what the kernel's static LDS leaves of [`LDS_PER_WORK_GROUP`].
    pub fn for_kernel(&self, kernel_max_threads: Option<u32>, static_lds: u32) -> Limits {
        let max_threads = kernel_max_threads
            .filter(|&m| m > 0)
            .map_or(self.max_threads, |m| m.min(self.max_threads));
        Limits {
            warp_size: self.warp_size,
            max_threads,
            block_limit: self.block_limit,
            default_threads: self.default_threads,
            default_blocks: self.default_blocks,
            max_dynamic_shared_memory: LDS_PER_WORK_GROUP.saturating_sub(static_lds),
        }
    }
}

/// `LIBOMPTARGET_AMDGPU_TEAMS_PER_CU` if set to a positive integer, else 0 (the default).
pub fn teams_per_cu_from_env() -> u32 {
    std::env::var(TEAMS_PER_CU_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::launch_shape::{shape, threads, ExecMode, Shape};

    /// An MI210-like gfx90a (wave64, 104 compute units) as HIP describes it.
    const GFX90A: DeviceAttributes = DeviceAttributes {
        warp_size: Some(64),
        max_block_dim_x: Some(1024),
        max_grid_dim_x: Some(i32::MAX as u32),
        compute_units: Some(104),
    };
    /// A gfx1100 (wave32, 48 compute units).
    const GFX1100: DeviceAttributes = DeviceAttributes {
        warp_size: Some(32),
        max_block_dim_x: Some(1024),
        max_grid_dim_x: Some(i32::MAX as u32),
        compute_units: Some(48),
    };

    #[test]
    fn wave_size_follows_the_processor_generation() {
        assert_eq!(default_wavefront_size("gfx90a"), 64);
        assert_eq!(default_wavefront_size("gfx942"), 64);
        assert_eq!(default_wavefront_size("gfx803"), 64);
        assert_eq!(default_wavefront_size("gfx1030"), 32);
        assert_eq!(default_wavefront_size("gfx1100"), 32);
        assert_eq!(default_wavefront_size("gfx1201"), 32);
        assert_eq!(default_wavefront_size("sm_90"), 64);
    }

    #[test]
    fn device_limits_are_llvm_16s_from_hips_answers() {
        let wave64 = DeviceLimits::new(GFX90A, Some("gfx90a"), 0);
        assert_eq!(
            wave64,
            DeviceLimits {
                warp_size: 64,
                max_threads: 1024,
                // 0xffffffff work-items / 1024 per work-group.
                block_limit: 4_194_303,
                default_threads: 256,
                default_blocks: 104 * 4,
            }
        );
        let wave32 = DeviceLimits::new(GFX1100, Some("gfx1100"), 0);
        assert_eq!(wave32.warp_size, 32);
        assert_eq!(wave32.default_blocks, 48 * 4);
        // LIBOMPTARGET_AMDGPU_TEAMS_PER_CU scales the default.
        assert_eq!(DeviceLimits::new(GFX1100, None, 8).default_blocks, 48 * 8);
        // A smaller grid limit from HIP wins.
        let small_grid = DeviceAttributes {
            max_grid_dim_x: Some(1000),
            ..GFX90A
        };
        assert_eq!(DeviceLimits::new(small_grid, None, 0).block_limit, 1000);
    }

    #[test]
    fn without_answers_the_grid_values_apply() {
        let gfx90a = DeviceLimits::new(DeviceAttributes::default(), Some("gfx90a"), 0);
        assert_eq!(
            gfx90a,
            DeviceLimits {
                warp_size: 64,
                max_threads: 1024,
                block_limit: 4_194_303,
                default_threads: 256,
                default_blocks: 440,
            }
        );
        let gfx1100 = DeviceLimits::new(DeviceAttributes::default(), Some("gfx1100"), 0);
        assert_eq!(gfx1100.warp_size, 32);
        // Zero answers count as none.
        let zeros = DeviceAttributes {
            warp_size: Some(0),
            max_block_dim_x: Some(0),
            max_grid_dim_x: Some(0),
            compute_units: Some(0),
        };
        assert_eq!(DeviceLimits::new(zeros, Some("gfx90a"), 0), gfx90a);
    }

    #[test]
    fn generic_mode_adds_a_wavefront_for_the_main_thread() {
        let wave64 = DeviceLimits::new(GFX90A, None, 0).for_kernel(None, 0);
        let wave32 = DeviceLimits::new(GFX1100, None, 0).for_kernel(None, 0);
        assert_eq!(threads(ExecMode::Generic, 128, &wave64), 192);
        assert_eq!(threads(ExecMode::Generic, 128, &wave32), 160);
        assert_eq!(threads(ExecMode::Spmd, 128, &wave64), 128);
        assert_eq!(threads(ExecMode::GenericSpmd, 128, &wave32), 128);
        // Without a clause: the default work-group, in every mode (LLVM 16 adds the
        // warp to the clause only).
        assert_eq!(threads(ExecMode::Generic, 0, &wave64), 256);
        assert_eq!(threads(ExecMode::Spmd, 0, &wave32), 256);
    }

    #[test]
    fn the_kernels_own_limit_caps_the_work_group() {
        let device = DeviceLimits::new(GFX90A, None, 0);
        let kernel = device.for_kernel(Some(256), 0);
        assert_eq!(kernel.max_threads, 256);
        assert_eq!(threads(ExecMode::Generic, 256, &kernel), 256);
        assert_eq!(
            threads(ExecMode::Spmd, 1000, &device.for_kernel(None, 0)),
            1000
        );
        assert_eq!(
            threads(ExecMode::Spmd, 5000, &device.for_kernel(None, 0)),
            1024
        );
        // A kernel limit above the device's does not raise it; 0 means unknown.
        assert_eq!(device.for_kernel(Some(2048), 0).max_threads, 1024);
        assert_eq!(device.for_kernel(Some(0), 0).max_threads, 1024);
    }

    #[test]
    fn shapes_of_typical_launches() {
        let limits = DeviceLimits::new(GFX90A, None, 0).for_kernel(None, 0);
        // `target teams` without clauses, generic: CUs x 4 teams of 256.
        assert_eq!(
            shape(ExecMode::Generic, 0, 0, 0, &limits),
            Shape {
                dynamic_shared_memory: 0,
                blocks: 416,
                threads: 256
            }
        );
        // `target teams distribute parallel for` over 100000 iterations: one per thread.
        assert_eq!(
            shape(ExecMode::Spmd, 0, 0, 100_000, &limits),
            Shape {
                dynamic_shared_memory: 0,
                blocks: 391,
                threads: 256
            }
        );
        // A long loop is capped by the default number of teams.
        assert_eq!(shape(ExecMode::Spmd, 0, 0, 10_000_000, &limits).blocks, 416);
        // Clauses: num_teams(7) thread_limit(64) in generic mode.
        assert_eq!(
            shape(ExecMode::Generic, 7, 64, 0, &limits),
            Shape {
                dynamic_shared_memory: 0,
                blocks: 7,
                threads: 128
            }
        );
        // num_teams beyond the grid is capped.
        let small_grid = DeviceLimits::new(
            DeviceAttributes {
                max_grid_dim_x: Some(1000),
                ..GFX90A
            },
            None,
            0,
        )
        .for_kernel(None, 0);
        assert_eq!(shape(ExecMode::Spmd, 5000, 0, 0, &small_grid).blocks, 1000);
    }
}
