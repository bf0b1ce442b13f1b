//! Pinned staging for large copies between pageable host memory and a device. From
//! pageable memory the driver stages a copy itself, one bounce buffer at a time: 11 GB/s
//! on an H200 (2026-11-26) where the link moves about 50 GB/s from pinned memory. Here a
//! copy of at least [`StagingSettings::threshold`] bytes goes through a few pinned
//! buffers of the device in chunks: the host copies chunk i into a free buffer (split
//! over a few threads) while the DMA engine moves chunk i-1, each buffer's event saying
//! when its DMA is done and it may be filled again.
//!
//! Host to device returns once the last chunk is queued (the buffers stay busy until
//! their events pass, and the next user waits for them); device to host returns once
//! the bytes are in the host buffer, as the driver's own copy to pageable memory does.
//! Memory the user pinned (a pinned allocation, or a buffer locked through
//! `__tgt_rtl_data_lock`) is copied directly. `OMPTARGET_RS_PINNED_STAGING=0` turns
//! staging off; `..._THRESHOLD` and `..._CHUNK` set the sizes.
//!
//! A failure mid-copy returns the driver's error after every queued chunk has been
//! waited for, so no buffer is left in use; the buffers are given back with the device.

use super::driver::driver_err;
use crate::backend::{BackendError, DeviceAddr};
use crate::support::locking::lock;
use cudarc::driver::sys;
use std::sync::Mutex;

/// `0` turns staging off.
pub const STAGING_ENV: &str = "OMPTARGET_RS_PINNED_STAGING";
/// The smallest copy staged, in bytes.
pub const THRESHOLD_ENV: &str = "OMPTARGET_RS_PINNED_STAGING_THRESHOLD";
/// The bytes of one pinned buffer.
pub const CHUNK_ENV: &str = "OMPTARGET_RS_PINNED_STAGING_CHUNK";
/// Pinned buffers per device: one filled by the host while the others' DMA runs.
const BUFFERS: usize = 3;
/// The most threads one chunk's host copy is split over.
const COPY_THREADS: usize = 4;
/// The least bytes a copy thread is given (a thread costs more than a smaller copy).
const BYTES_PER_COPY_THREAD: usize = 2 << 20;

/// When and how copies are staged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagingSettings {
    pub enabled: bool,
    pub threshold: usize,
    pub chunk: usize,
}

impl Default for StagingSettings {
    fn default() -> Self {
        StagingSettings {
            enabled: true,
            threshold: 32 << 20,
            chunk: 16 << 20,
        }
    }
}

impl StagingSettings {
    /// From `get(name)`: unset, empty or unreadable values keep the defaults (a copy
    /// is correct either way).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let default = StagingSettings::default();
        let bytes = |name: &str, default: usize| {
            get(name)
                .and_then(|v| v.trim().parse::<usize>().ok())
                .filter(|&n| n > 0)
                .unwrap_or(default)
        };
        StagingSettings {
            enabled: get(STAGING_ENV).is_none_or(|v| v.trim() != "0"),
            threshold: bytes(THRESHOLD_ENV, default.threshold),
            chunk: bytes(CHUNK_ENV, default.chunk),
        }
    }

    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Whether a copy of `len` pageable bytes is staged.
    pub fn stages(&self, len: usize) -> bool {
        self.enabled && len >= self.threshold
    }
}

/// One pinned buffer and the event recorded after its last DMA.
struct Buffer {
    host: *mut u8,
    event: sys::CUevent,
    /// A DMA into or out of it is queued and its event not yet waited for.
    busy: bool,
}

// SAFETY: the pinned memory and the event belong to this buffer alone (made by
// `Staging::buffers`, freed by `Staging::release`); they are only touched under the
// staging's mutex.
unsafe impl Send for Buffer {}

/// One device's staging buffers, made on first use.
pub struct Staging {
    settings: StagingSettings,
    buffers: Mutex<Vec<Buffer>>,
}

impl Staging {
    pub fn new(settings: StagingSettings) -> Self {
        Staging {
            settings,
            buffers: Mutex::default(),
        }
    }

    pub fn settings(&self) -> StagingSettings {
        self.settings
    }

    /// Copy `len` host bytes at `src` to `dst` through the buffers, queued on `stream`.
    ///
    /// # Safety
    /// The device's context is current; `dst .. dst + len` is device memory of it and
    /// `src .. src + len` readable host memory; `stream` is a live stream of the device
    /// (or null).
    pub unsafe fn to_device(
        &self,
        dst: DeviceAddr,
        src: *const u8,
        len: usize,
        stream: sys::CUstream,
    ) -> Result<(), BackendError> {
        let mut buffers = lock(&self.buffers);
        self.make_buffers(&mut buffers)?;
        let chunk = self.settings.chunk;
        let result = (|| {
            for (i, at) in (0..len).step_by(chunk).enumerate() {
                let n = chunk.min(len - at);
                let buffer = &mut buffers[i % BUFFERS];
                wait(buffer)?;
                // SAFETY: `src + at .. + n` lies in the caller's readable range; the
                // buffer holds `chunk >= n` pinned bytes, idle (waited for above).
                unsafe { copy_in_parts(src.add(at), buffer.host, n) };
                // SAFETY: the buffer's bytes stay untouched until its event passes;
                // `dst + at .. + n` is device memory per the caller.
                unsafe {
                    sys::cuMemcpyHtoDAsync_v2(dst + at as u64, buffer.host.cast(), n, stream)
                }
                .result()
                .map_err(|e| driver_err("cuMemcpyHtoDAsync (staged)", e))?;
                record(buffer, stream)?;
            }
            Ok(())
        })();
        if result.is_err() {
            drain(&mut buffers);
        }
        result
    }

    /// Copy `len` device bytes at `src` into host memory at `dst` through the buffers,
    /// on `stream` (after what is queued there); returns with the bytes in `dst`.
    ///
    /// # Safety
    /// The device's context is current; `src .. src + len` is device memory of it and
    /// `dst .. dst + len` writable host memory nothing else uses meanwhile; `stream` is
    /// a live stream of the device (or null).
    pub unsafe fn to_host(
        &self,
        dst: *mut u8,
        src: DeviceAddr,
        len: usize,
        stream: sys::CUstream,
    ) -> Result<(), BackendError> {
        let mut buffers = lock(&self.buffers);
        self.make_buffers(&mut buffers)?;
        let chunk = self.settings.chunk;
        let chunks = len.div_ceil(chunk);
        let queue = |buffers: &mut Vec<Buffer>, i: usize| -> Result<(), BackendError> {
            let at = i * chunk;
            let n = chunk.min(len - at);
            let buffer = &mut buffers[i % BUFFERS];
            wait(buffer)?;
            // SAFETY: the buffer is idle (waited for) and holds `chunk >= n` bytes;
            // `src + at .. + n` is device memory per the caller.
            unsafe { sys::cuMemcpyDtoHAsync_v2(buffer.host.cast(), src + at as u64, n, stream) }
                .result()
                .map_err(|e| driver_err("cuMemcpyDtoHAsync (staged)", e))?;
            record(buffer, stream)
        };
        let result = (|| {
            // Up to BUFFERS - 1 chunks in flight ahead of the one copied out.
            for i in 0..chunks.min(BUFFERS - 1) {
                queue(&mut buffers, i)?;
            }
            for i in 0..chunks {
                if i + BUFFERS - 1 < chunks {
                    queue(&mut buffers, i + BUFFERS - 1)?;
                }
                let at = i * chunk;
                let n = chunk.min(len - at);
                let buffer = &mut buffers[i % BUFFERS];
                wait(buffer)?;
                // SAFETY: the DMA into the buffer is done (its event passed);
                // `dst + at .. + n` lies in the caller's writable range.
                unsafe { copy_in_parts(buffer.host, dst.add(at), n) };
            }
            Ok(())
        })();
        if result.is_err() {
            drain(&mut buffers);
        }
        result
    }

    /// Wait for every chunk still in flight (a synchronous copy's end); the first
    /// driver error.
    pub fn finish(&self) -> Result<(), BackendError> {
        let mut buffers = lock(&self.buffers);
        let mut first = Ok(());
        for buffer in buffers.iter_mut() {
            let waited = wait(buffer);
            if first.is_ok() {
                first = waited;
            }
            buffer.busy = false;
        }
        first
    }

    /// The pinned buffers and their events, made once.
    fn make_buffers(&self, buffers: &mut Vec<Buffer>) -> Result<(), BackendError> {
        while buffers.len() < BUFFERS {
            let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
            // SAFETY: `host` is writable; the caller made the device's context current.
            unsafe { sys::cuMemHostAlloc(&mut host, self.settings.chunk, 0) }
                .result()
                .map_err(|e| driver_err("cuMemHostAlloc (staging buffer)", e))?;
            let mut event: sys::CUevent = std::ptr::null_mut();
            let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
            // SAFETY: `event` is writable; the device's context is current.
            if let Err(e) = unsafe { sys::cuEventCreate(&mut event, flags) }.result() {
                // SAFETY: allocated just above and known to nothing else.
                let _ = unsafe { sys::cuMemFreeHost(host) };
                return Err(driver_err("cuEventCreate (staging buffer)", e));
            }
            buffers.push(Buffer {
                host: host.cast(),
                event,
                busy: false,
            });
        }
        Ok(())
    }

    /// Give the buffers back (their DMAs waited for first).
    ///
    /// # Safety
    /// The device's context is current, and stays the one the buffers were made in.
    pub unsafe fn release(&self) {
        let mut buffers = lock(&self.buffers);
        drain(&mut buffers);
        for buffer in buffers.drain(..) {
            // SAFETY: made by `make_buffers` in this context and idle (drained above);
            // removed from the list, so never used again.
            unsafe {
                let _ = sys::cuEventDestroy_v2(buffer.event);
                let _ = sys::cuMemFreeHost(buffer.host.cast());
            }
        }
    }
}

/// Wait until `buffer`'s last DMA is done.
fn wait(buffer: &mut Buffer) -> Result<(), BackendError> {
    if buffer.busy {
        // SAFETY: a live event of this staging (made by `make_buffers`).
        unsafe { sys::cuEventSynchronize(buffer.event) }
            .result()
            .map_err(|e| driver_err("cuEventSynchronize (staging buffer)", e))?;
        buffer.busy = false;
    }
    Ok(())
}

/// Record `buffer`'s event after the DMA just queued on `stream`.
fn record(buffer: &mut Buffer, stream: sys::CUstream) -> Result<(), BackendError> {
    // SAFETY: a live event of this staging; `stream` is live per the callers.
    unsafe { sys::cuEventRecord(buffer.event, stream) }
        .result()
        .map_err(|e| driver_err("cuEventRecord (staging buffer)", e))?;
    buffer.busy = true;
    Ok(())
}

/// Wait for every busy buffer, errors ignored: after a failure, before the buffers are
/// used again or given back.
fn drain(buffers: &mut [Buffer]) {
    for buffer in buffers {
        if buffer.busy {
            // SAFETY: a live event of this staging.
            let _ = unsafe { sys::cuEventSynchronize(buffer.event) };
            buffer.busy = false;
        }
    }
}

/// `n` bytes from `src` to `dst`, split over up to [`COPY_THREADS`] threads when large
/// (one thread's memcpy is slower than the link from pinned memory).
///
/// # Safety
/// `src .. src + n` is readable, `dst .. dst + n` writable, and they do not overlap.
unsafe fn copy_in_parts(src: *const u8, dst: *mut u8, n: usize) {
    let parts = (n / BYTES_PER_COPY_THREAD).clamp(1, COPY_THREADS);
    if parts == 1 {
        // SAFETY: the caller's ranges.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
        return;
    }
    let part = n.div_ceil(parts);
    // Addresses cross the threads as integers: each thread copies its own disjoint
    // part of the caller's ranges, and the scope ends before this function returns.
    let (src, dst) = (src as usize, dst as usize);
    std::thread::scope(|scope| {
        for k in 1..parts {
            let (at, len) = (k * part, part.min(n.saturating_sub(k * part)));
            scope.spawn(move || {
                // SAFETY: [at, at + len) is inside [0, n) and disjoint from the other
                // parts; the caller's ranges are valid for the whole scope.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (src + at) as *const u8,
                        (dst + at) as *mut u8,
                        len,
                    )
                };
            });
        }
        // SAFETY: the first part, [0, part), on this thread.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, part.min(n)) };
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_default_and_from_the_environment() {
        let get = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let default = StagingSettings::from_lookup(get(&[]));
        assert_eq!(default, StagingSettings::default());
        assert!(default.stages(256 << 20) && !default.stages(4096));
        let off = StagingSettings::from_lookup(get(&[(STAGING_ENV, "0")]));
        assert!(!off.stages(256 << 20));
        let small = StagingSettings::from_lookup(get(&[(THRESHOLD_ENV, "100"), (CHUNK_ENV, "64")]));
        assert!(small.stages(100) && !small.stages(99));
        assert_eq!(small.chunk, 64);
        let unreadable =
            StagingSettings::from_lookup(get(&[(CHUNK_ENV, "lots"), (THRESHOLD_ENV, "0")]));
        assert_eq!(unreadable, StagingSettings::default());
    }

    #[test]
    fn a_copy_in_parts_copies_every_byte_once() {
        for n in [0, 1, 4095, (2 << 20) - 1, 5 << 20, (9 << 20) + 13] {
            let src: Vec<u8> = (0..n).map(|i| (i * 7 + i / 251) as u8).collect();
            let mut dst = vec![0u8; n + 2];
            // SAFETY: both vectors hold at least `n` bytes (dst from offset 1) and are
            // distinct allocations.
            unsafe { copy_in_parts(src.as_ptr(), dst.as_mut_ptr().add(1), n) };
            assert_eq!(&dst[1..=n], &src[..], "{n} bytes");
            assert_eq!((dst[0], dst[n + 1]), (0, 0), "{n} bytes: nothing outside");
        }
    }
}
