//! The kernels of the images loaded on one device: one registry, owned by the generic
//! side (as nextgen's `GenericDeviceTy` owns its kernels), holding for each kernel what
//! its launches need, and the one rule that turns a launch request into what the vendor
//! is asked to do.

use crate::backend::{DeviceAddr, LaunchRequest};
use crate::support::launch_shape::{self, ExecMode, Limits, Shape, SharedMemoryTooLarge};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// What a launch needs to know about a kernel, recorded once, when its image is loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelRecord {
    /// From `<kernel>_exec_mode` (read by the core, [`launch_shape::read_exec_mode`]) or
    /// clang 18's `<kernel>_kernel_environment`;
    /// for a kernel without it, the vendor's choice
    /// ([`crate::Backend::untagged_kernel_mode`]); None on the host, which reads none.
    pub mode: Option<ExecMode>,
    /// The kernel's symbol, for the launch's info line (None in unit tests).
    pub name: Option<std::sync::Arc<std::ffi::CStr>>,
    /// The device's and the kernel's limits ([`crate::backend::LoadedModule::kernel_limits`]);
    /// None where launches have no geometry (the host runs a kernel once).
    pub limits: Option<Limits>,
    /// Bytes of teams-reduction buffer the kernel's launch environment must point at
    /// (clang 18 GPU kernels, [`launch_shape::kernel_environment`]); 0 for none.
    pub reduction_buffer_bytes: u64,
}

/// What the vendor is asked to do for a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchPlan {
    /// Run the kernel once ([`crate::backend::BackendDevice::launch`] without a shape).
    Once,
    /// Launch it with this shape ([`crate::backend::BackendDevice::launch`] with it).
    Shaped(ExecMode, Shape),
}

impl KernelRecord {
    /// The launch for `request` (None: "run it once", `Device::launch`). With limits, a
    /// request gets LLVM 16's shape for the kernel's mode (SPMD's for a kernel without
    /// one: every work-item runs it); without a request an OpenMP kernel gets the default
    /// shape (its generic-mode main thread needs its full block) and any other runs once.
    /// A shaped launch's blocks get the larger of the request's dynamic shared memory and
    /// `device_shared_memory` (`LIBOMPTARGET_SHARED_MEMORY_SIZE`), up to the kernel's
    /// limit ([`launch_shape::dynamic_shared_memory`]).
    pub fn plan(
        &self,
        request: Option<LaunchRequest>,
        device_shared_memory: u32,
    ) -> Result<LaunchPlan, SharedMemoryTooLarge> {
        let Some(limits) = self.limits else {
            return Ok(LaunchPlan::Once);
        };
        let (mode, request) = match (self.mode, request) {
            (Some(mode), request) => (mode, request.unwrap_or_default()),
            (None, Some(request)) => (ExecMode::Spmd, request),
            (None, None) => return Ok(LaunchPlan::Once),
        };
        let mut shape = launch_shape::shape(
            mode,
            request.num_teams,
            request.thread_limit,
            request.tripcount,
            &limits,
        );
        shape.dynamic_shared_memory = launch_shape::dynamic_shared_memory(
            request.dynamic_shared_memory,
            device_shared_memory,
            &limits,
        )?;
        Ok(LaunchPlan::Shaped(mode, shape))
    }
}

/// The kernels of a device by address. Looked up on every launch, so hashed with one
/// multiply instead of SipHash (which was a visible part of each launch): the keys are
/// symbol addresses of images we loaded ourselves, not keys anyone can choose to collide.
pub type KernelRegistry = HashMap<DeviceAddr, KernelRecord, BuildHasherDefault<AddrHasher>>;

#[derive(Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        // The multiply leaves the low bits (the table index) depending only on the low
        // bits of the address, which are all zero for aligned functions: fold in the top.
        self.0 ^ (self.0 >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        warp_size: 32,
        max_threads: 1024,
        block_limit: 65536,
        default_threads: 128,
        default_blocks: 3200,
        max_dynamic_shared_memory: 48 << 10,
    };

    fn request(num_teams: u32, thread_limit: u32) -> Option<LaunchRequest> {
        Some(LaunchRequest {
            num_teams,
            thread_limit,
            tripcount: 0,
            dynamic_shared_memory: 0,
        })
    }

    fn shape(blocks: u32, threads: u32) -> Shape {
        Shape {
            blocks,
            threads,
            dynamic_shared_memory: 0,
        }
    }

    #[test]
    fn without_limits_every_launch_runs_once() {
        let host = KernelRecord {
            mode: None,
            limits: None,
            name: None,
            reduction_buffer_bytes: 0,
        };
        assert_eq!(host.plan(None, 0), Ok(LaunchPlan::Once));
        assert_eq!(host.plan(request(4, 64), 256), Ok(LaunchPlan::Once));
    }

    #[test]
    fn a_request_gets_llvm_16s_shape_for_the_kernels_mode() {
        let generic = KernelRecord {
            mode: Some(ExecMode::Generic),
            limits: Some(LIMITS),
            name: None,
            reduction_buffer_bytes: 0,
        };
        let shaped = |blocks, threads| {
            Ok(LaunchPlan::Shaped(
                ExecMode::Generic,
                shape(blocks, threads),
            ))
        };
        assert_eq!(generic.plan(request(4, 64), 0), shaped(4, 64 + 32));
        // No request: the defaults.
        assert_eq!(generic.plan(None, 0), shaped(3200, 128));
    }

    #[test]
    fn a_launch_gets_the_larger_dynamic_shared_memory_up_to_the_kernels_limit() {
        let generic = KernelRecord {
            mode: Some(ExecMode::Generic),
            limits: Some(LIMITS),
            name: None,
            reduction_buffer_bytes: 0,
        };
        let with_clause = |bytes| {
            Some(LaunchRequest {
                dynamic_shared_memory: bytes,
                ..request(4, 64).unwrap()
            })
        };
        let shared = |plan: Result<LaunchPlan, _>| match plan {
            Ok(LaunchPlan::Shaped(_, s)) => Ok(s.dynamic_shared_memory),
            Ok(LaunchPlan::Once) => panic!("a generic kernel on a GPU is shaped"),
            Err(e) => Err(e),
        };
        assert_eq!(shared(generic.plan(with_clause(16), 256)), Ok(256));
        assert_eq!(shared(generic.plan(with_clause(1024), 256)), Ok(1024));
        assert_eq!(shared(generic.plan(None, 512)), Ok(512));
        assert_eq!(
            shared(generic.plan(with_clause(48 << 10 | 1), 0)),
            Err(SharedMemoryTooLarge {
                asked: 48 << 10 | 1,
                limit: 48 << 10
            })
        );
    }

    #[test]
    fn a_kernel_without_a_mode_runs_once_unless_a_request_shapes_it_as_spmd() {
        let plain = KernelRecord {
            mode: None,
            limits: Some(LIMITS),
            name: None,
            reduction_buffer_bytes: 0,
        };
        assert_eq!(plain.plan(None, 0), Ok(LaunchPlan::Once));
        assert_eq!(
            plain.plan(request(2, 64), 0),
            Ok(LaunchPlan::Shaped(ExecMode::Spmd, shape(2, 64)))
        );
    }
}
