//! One host device (nextgen's per-device object): its memory is this process's (malloc),
//! its images load with dlopen ([`super::module`]), its kernels are called on the
//! calling thread through libffi; every operation completes before it returns.

use super::module::HostModule;
use crate::backend::host_common::dlopen::{self, ImageFile};
use crate::backend::host_common::{ffi_call, HOST_DEVICE_COUNT};
use crate::backend::{
    take_staged, AllocKind, BackendDevice, BackendError, DeviceAddr, HostMemory, LoadedModule,
    StagedImage,
};
use crate::support::launch_shape::Shape;
use std::ffi::c_void;
use std::sync::Mutex;

/// One of the host devices: they share the process, so a device is only its number.
pub struct HostDevice {
    pub(super) index: usize,
}

impl BackendDevice for HostDevice {
    fn index(&self) -> usize {
        self.index
    }

    fn init(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn stage_image(&self, code: &[u8]) -> Result<Option<StagedImage>, BackendError> {
        Ok(Some(Box::new(ImageFile::write(code)?)))
    }

    fn load_image(
        &self,
        code: &[u8],
        _symbols: Option<&crate::elf::symbols::ImageSymbols<'_>>,
        staged: Option<StagedImage>,
    ) -> Result<Box<dyn LoadedModule>, BackendError> {
        let file = match take_staged::<ImageFile>(staged) {
            Some(file) => file,
            // Not staged (or staged by something else): write it now.
            None => ImageFile::write(code)?,
        };
        let (library, load_bias) = dlopen::open(&file)?;
        Ok(Box::new(HostModule {
            library,
            load_bias,
            file: Mutex::new(Some(file)),
        }))
    }

    /// Every kind is ordinary process memory: the host device and the host are one.
    fn alloc(&self, size: usize, _kind: AllocKind) -> Result<DeviceAddr, BackendError> {
        // SAFETY: malloc has no preconditions; a zero-size request asks for one byte so a
        // successful allocation is never null.
        let ptr = unsafe { libc::malloc(size.max(1)) };
        if ptr.is_null() {
            return Err(BackendError::OutOfMemory(size));
        }
        // The table and the index of a large image: written right after this.
        crate::support::huge_pages::advise(ptr.cast(), size);
        Ok(ptr as DeviceAddr)
    }

    fn host_memory(&self) -> Option<&HostMemory> {
        Some(&HostMemory)
    }

    unsafe fn free(&self, addr: DeviceAddr) -> Result<(), BackendError> {
        // SAFETY: the caller promises `addr` came from `alloc` (malloc) and is dead.
        unsafe { libc::free(addr as *mut c_void) };
        Ok(())
    }

    unsafe fn write(&self, dst: DeviceAddr, src: &[u8]) -> Result<(), BackendError> {
        // SAFETY: the caller promises dst..dst+len is device (= process) memory; `src` is a
        // live slice; `copy` tolerates overlap.
        unsafe { std::ptr::copy(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    unsafe fn read(&self, src: DeviceAddr, dst: &mut [u8]) -> Result<(), BackendError> {
        // SAFETY: the caller promises src..src+len is device (= process) memory.
        unsafe { std::ptr::copy(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Every host device's memory is this process's: a copy to any of them is a move.
    unsafe fn copy(
        &self,
        src: DeviceAddr,
        _to: &dyn BackendDevice,
        dst: DeviceAddr,
        len: usize,
    ) -> Result<(), BackendError> {
        // SAFETY: the caller promises both ranges are device (= process) memory.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
        Ok(())
    }

    /// A call on this thread: no geometry (and no queues: the host hands none out).
    unsafe fn launch(
        &self,
        kernel: DeviceAddr,
        args: &[DeviceAddr],
        _shape: Option<Shape>,
    ) -> Result<(), BackendError> {
        // SAFETY: forwarded caller contract.
        unsafe { ffi_call::call_kernel(kernel, args) }
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        // Every operation on the host device completes before it returns.
        Ok(())
    }

    fn device_info(&self) -> Vec<String> {
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
        // SAFETY: sysconf has no preconditions.
        let (pages, page) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let memory =
            u64::try_from(pages.max(0)).unwrap_or(0) * u64::try_from(page.max(0)).unwrap_or(0);
        vec![
            format!(
                "device {} of {HOST_DEVICE_COUNT}: the host CPU (images run through \
                 dlopen + libffi, in this process)",
                self.index
            ),
            format!("CPUs available to this process: {cpus}"),
            format!("memory: {} MiB (shared with the host)", memory >> 20),
            "queues: none (every operation completes before it returns)".into(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::host::HostBackend;
    use crate::backend::Backend;
    use std::sync::atomic::Ordering;

    extern "C" fn no_args() {
        CALLED.store(true, Ordering::SeqCst);
    }
    static CALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    extern "C" fn store_difference(out: *mut u64, a: *const u64, b: *const u64) {
        // SAFETY: the test passes three live u64 cells.
        unsafe { *out = *a - *b };
    }

    /// 1 + 19 arguments: more than ffi_call::INLINE_ARGS, so the uncached, heap path.
    #[allow(clippy::too_many_arguments)]
    extern "C" fn weighted_sum(
        out: *mut u64,
        a1: u64,
        a2: u64,
        a3: u64,
        a4: u64,
        a5: u64,
        a6: u64,
        a7: u64,
        a8: u64,
        a9: u64,
        a10: u64,
        a11: u64,
        a12: u64,
        a13: u64,
        a14: u64,
        a15: u64,
        a16: u64,
        a17: u64,
        a18: u64,
        a19: u64,
    ) {
        let v = [
            a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
        ];
        // SAFETY: the test passes a live u64 cell.
        unsafe { *out = v.iter().enumerate().map(|(i, x)| (i as u64 + 1) * x).sum() };
    }

    /// A function's address as the backend takes kernels.
    fn addr(f: *const ()) -> DeviceAddr {
        f as usize as DeviceAddr
    }

    /// print_device_info's lines are facts of this machine, not a fixed sentence.
    #[test]
    fn device_info_names_the_device_and_counts_the_cpus() {
        let lines = HostBackend.device(2).device_info();
        assert!(
            lines[0].starts_with("device 2 of 4: the host CPU"),
            "{lines:?}"
        );
        let cpus: usize = lines
            .iter()
            .find_map(|l| l.strip_prefix("CPUs available to this process: "))
            .and_then(|n| n.parse().ok())
            .expect("a CPU count");
        assert_eq!(
            cpus,
            std::thread::available_parallelism().unwrap().get(),
            "{lines:?}"
        );
    }

    #[test]
    fn launches_pass_every_argument_in_order() {
        let device = HostBackend.device(0);
        // SAFETY: each function takes exactly the pointers passed, all live.
        unsafe {
            device
                .launch(addr(no_args as *const ()), &[], None)
                .unwrap();
            assert!(CALLED.load(Ordering::SeqCst));

            // Every access to the output cells goes through the pointers the kernels get.
            let (mut out, a, b) = (0u64, 50u64, 8u64);
            let out_ptr: *mut u64 = &mut out;
            let args = [
                out_ptr as u64,
                &a as *const u64 as u64,
                &b as *const u64 as u64,
            ];
            // Twice: the second launch uses the cached call description.
            for _ in 0..2 {
                *out_ptr = 0;
                let kernel = addr(store_difference as *const ());
                device.launch(kernel, &args, None).unwrap();
                assert_eq!(*out_ptr, 42);
            }

            let mut sum = 0u64;
            let sum_ptr: *mut u64 = &mut sum;
            let mut many = vec![sum_ptr as u64];
            many.extend(1..=19u64);
            assert!(many.len() > ffi_call::INLINE_ARGS);
            device
                .launch(addr(weighted_sum as *const ()), &many, None)
                .unwrap();
            assert_eq!(*sum_ptr, (1..=19u64).map(|i| i * i).sum::<u64>());
        }
    }
}
