//! Launches on a device: a kernel checked against the registry of loaded kernels, its
//! shape from the generic rules, then the vendor's launch (to completion or on a queue).

use super::{AsyncInfo, Device};
use crate::backend::{DeviceAddr, LaunchRequest, QueueHandle};
use crate::generic::error::{backend_err_with, PluginError};
use crate::generic::kernels::{KernelRecord, LaunchPlan};
use crate::support::diag;
use crate::support::launch_shape::ExecMode;

impl Device {
    /// The record of a kernel of an image loaded here.
    pub(crate) fn loaded_kernel(&self, kernel: DeviceAddr) -> Result<KernelRecord, PluginError> {
        let record = self
            .kernels
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&kernel)
            .cloned();
        record.ok_or_else(|| PluginError::Invalid {
            device: self.id(),
            what: format!("{kernel:#x} is not a kernel of any image loaded on it"),
        })
    }

    /// Run a kernel of a loaded image with pointer arguments, once (an OpenMP kernel of
    /// a GPU: with the default shape, see [`KernelRecord::plan`]), to completion.
    ///
    /// # Safety
    /// The arguments are device addresses valid for what the kernel does with them.
    pub unsafe fn launch(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
    ) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.launch_planned(kernel, args, None, None) }
    }

    /// Run a kernel of a loaded image with the team and thread counts libomptarget asks
    /// for (0: the default), shaped by LLVM 16's rules ([`KernelRecord::plan`]), to
    /// completion.
    ///
    /// # Safety
    /// The arguments are device addresses valid for what the kernel does with them.
    pub unsafe fn launch_teams(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        request: LaunchRequest,
    ) -> Result<(), PluginError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.launch_planned(kernel, args, Some(request), None) }
    }

    /// [`Device::launch_teams`] on the async info's queue (created on first use): where
    /// the device has queues the launch is only enqueued, and completes when the queue
    /// is synchronized ([`Device::synchronize_queue`]); elsewhere it completes here.
    ///
    /// # Safety
    /// The arguments are device addresses valid for what the kernel does with them until
    /// the queue is synchronized.
    pub unsafe fn launch_async(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        request: LaunchRequest,
        info: &mut AsyncInfo,
    ) -> Result<(), PluginError> {
        let queue = self.queue(info)?;
        // SAFETY: forwarded caller contract.
        unsafe { self.launch_planned(kernel, args, Some(request), queue) }
    }

    /// Check the kernel, plan its launch and hand it to the vendor.
    ///
    /// # Safety
    /// The arguments are valid for the kernel (until `queue` is finished, if any);
    /// `queue` came from this device's backend.
    unsafe fn launch_planned(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        request: Option<LaunchRequest>,
        queue: Option<QueueHandle>,
    ) -> Result<(), PluginError> {
        let device = self.id();
        let record = self.loaded_kernel(kernel)?;
        if record.reduction_buffer_bytes != 0 {
            // LLVM 18's device runtime would write the reduction through the implicit
            // launch-environment argument: refuse rather than let it write through ~0.
            return Err(PluginError::Invalid {
                device,
                what: format!(
                    "kernel {} is a clang 18 teams reduction: it needs a launch environment \
                     with a {}-byte reduction buffer, which omptarget-rs does not provide yet",
                    record
                        .name
                        .as_deref()
                        .map_or("?".into(), |n| n.to_string_lossy()),
                    record.reduction_buffer_bytes
                ),
            });
        }
        let device_shared = self.settings().dynamic_shared_memory;
        let plan = record
            .plan(request, device_shared)
            .map_err(|e| PluginError::Invalid {
                device,
                what: format!(
                    "kernel {}: its blocks would get {} bytes of dynamic shared memory (the \
                 larger of the launch's ompx_dyn_cgroup_mem, {} bytes, and \
                 LIBOMPTARGET_SHARED_MEMORY_SIZE, {device_shared}), more than the {} bytes \
                 this device gives a block of this kernel",
                    record
                        .name
                        .as_deref()
                        .map_or("?".into(), |n| n.to_string_lossy()),
                    e.asked,
                    request.map_or(0, |r| r.dynamic_shared_memory),
                    e.limit
                ),
            })?;
        diag::debug(|| {
            format!(
                "device {device}: launching {kernel:#x} with {} args, {request:?} as \
                 {plan:?}{}",
                args.len(),
                queue.map_or(String::new(), |q| format!(" on queue {q:#x}"))
            )
        });
        let shape = match plan {
            LaunchPlan::Once => None,
            LaunchPlan::Shaped(_, shape) => Some(shape),
        };
        // What LLVM's plugins print (`GenericKernelTy::printLaunchInfo`), which LLVM 17's
        // lit tests check (api/omp_env_vars.c, offloading/info.c). A kernel run once (the
        // host) is what LLVM's host plugin says of every kernel: 1 block of 1 thread, in
        // Generic mode (`GenELF64KernelTy` is made with OMP_TGT_EXEC_MODE_GENERIC).
        diag::info(diag::INFO_PLUGIN, || {
            let (blocks, threads) = shape.map_or((1, 1), |s| (u64::from(s.blocks), s.threads));
            let mode = match plan {
                LaunchPlan::Shaped(mode, _) => mode,
                LaunchPlan::Once => record.mode.unwrap_or(ExecMode::Generic),
            };
            let mode = match mode {
                ExecMode::Generic => "Generic",
                ExecMode::Spmd => "SPMD",
                ExecMode::GenericSpmd => "Generic-SPMD",
            };
            let name = record.name.as_ref().map_or_else(
                || format!("{kernel:#x}"),
                |n| n.to_string_lossy().into_owned(),
            );
            format!(
                "Launching kernel {name} with {blocks} blocks and {threads} threads in {mode} mode"
            )
        });
        // SAFETY: `kernel` is a kernel of an image loaded on this device (its record was
        // found); the caller vouches for the arguments and the queue.
        unsafe {
            match queue {
                None => self.vendor.launch(kernel, args, shape),
                Some(queue) => self.vendor.launch_on(kernel, args, shape, queue),
            }
        }
        .map_err(backend_err_with(self.id(), || {
            format!("kernel {kernel:#x}")
        }))
    }
}
