//! A kernel launch on one CUDA device: the shape, the dynamic shared memory opt-in above
//! 48 KiB, the arguments, and the wait when there is no queue.

use super::device::CudaDevice;
use super::driver::{driver_err, SHARED_MEMORY_WITHOUT_OPT_IN};
use crate::backend::{BackendError, DeviceAddr, QueueHandle};
use crate::support::launch_shape::Shape;
use cudarc::driver::{result, sys};
use std::ffi::c_void;

impl CudaDevice {
    /// Launch `kernel` on `queue`'s stream (None: the legacy default stream, waited for).
    ///
    /// # Safety
    /// `kernel` is a kernel (the CUfunction handle `CudaModule::function` returned) of an
    /// image loaded on this device, taking `args.len()` pointer-sized arguments; `queue`
    /// is None or a live stream of this device.
    pub(super) unsafe fn launch_kernel(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        shape: Option<Shape>,
        queue: Option<QueueHandle>,
    ) -> Result<(), BackendError> {
        self.enter()?;
        let shape = shape.unwrap_or(Shape {
            blocks: 1,
            threads: 1,
            dynamic_shared_memory: 0,
        });
        if shape.dynamic_shared_memory > SHARED_MEMORY_WITHOUT_OPT_IN {
            // SAFETY: as for the launch below: `kernel` is a live CUfunction of this
            // device; the core checked the size against the kernel's limit.
            unsafe {
                result::function::set_function_attribute(
                    kernel as sys::CUfunction,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shape.dynamic_shared_memory as i32,
                )
            }
            .map_err(|e| driver_err("cuFuncSetAttribute", e))?;
        }
        // cuLaunchKernel takes a pointer to each argument's value and copies the values
        // before it returns (the driver API's contract for kernelParams; LLVM's plugin
        // also launches from a local array without waiting), so these may drop while
        // the kernel is still queued.
        let mut values: Vec<u64> = args.to_vec();
        let mut params: Vec<*mut c_void> = values
            .iter_mut()
            .map(|v| (v as *mut u64).cast::<c_void>())
            .collect();
        // The legacy default stream without a queue.
        let stream = queue.map_or(std::ptr::null_mut(), |q| q as sys::CUstream);
        // SAFETY: the caller promises `kernel` is a kernel (the CUfunction handle
        // `CudaModule::function` returned) of an image loaded on this device, taking
        // `args.len()` pointer-sized arguments; `stream` is null or a live stream of this
        // device (checked in the registry above); `values` outlives the call, which
        // copies them.
        unsafe {
            result::launch_kernel(
                kernel as sys::CUfunction,
                (shape.blocks, 1, 1),
                (shape.threads, 1, 1),
                shape.dynamic_shared_memory,
                stream,
                &mut params,
            )
        }
        .map_err(|e| BackendError::Launch(format!("cuLaunchKernel {shape:?}: {e:?}")))?;
        if queue.is_some() {
            // Its completion and any fault are seen when the queue is finished.
            return Ok(());
        }
        // SAFETY: the null stream is the legacy default stream of the current context.
        unsafe { result::stream::synchronize(std::ptr::null_mut()) }
            .map_err(|e| BackendError::Launch(format!("kernel {shape:?} failed: {e:?}")))
    }
}
