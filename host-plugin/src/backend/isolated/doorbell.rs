//! One page of shared memory between the plugin and the device process: the request and
//! reply counters both sides wait on, the launch itself (the kernel and its arguments,
//! the fast path: no system call when the other side is awake), how far the device's
//! output has got, and a fault's record.
//!
//! Each side spins a little, then yields a little, before it sleeps on the counter (a
//! futex), and the other side wakes it only when it sleeps: a launch loop costs a few
//! microseconds where a socket round trip, two process wake-ups, cost tens.

use super::protocol::FaultRecord;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Launches with more arguments go through the socket.
pub const PAGE_ARGS: usize = 400;

/// What a request is.
pub const KIND_SOCKET: u32 = 1;
pub const KIND_LAUNCH: u32 = 2;

/// How a request ended.
pub const STATUS_DONE: u32 = 0;
pub const STATUS_FAILED: u32 = 1;
pub const STATUS_FAULT: u32 = 2;

/// How long a side spins on the counter (a pause between reads) before it yields, and
/// how long it yields (lets other threads run, where CPUs are fewer than the threads
/// that want them) before it sleeps.
const SPIN: Duration = Duration::from_micros(20);
const YIELD: Duration = Duration::from_micros(100);

/// The page. Every field is an atomic: both processes read and write it.
#[repr(C)]
pub struct Doorbell {
    /// Bumped by the plugin for each request; the device process waits on it.
    pub request: AtomicU32,
    pub device_sleeping: AtomicU32,
    /// Set to the request's number when it is done; the plugin waits on it.
    pub reply: AtomicU32,
    pub host_sleeping: AtomicU32,
    pub kind: AtomicU32,
    pub status: AtomicU32,
    /// How far the device's stdout and stderr files reach after the request.
    pub out_end: AtomicU64,
    pub err_end: AtomicU64,
    pub kernel: AtomicU64,
    pub nargs: AtomicU64,
    pub args: [AtomicU64; PAGE_ARGS],
    pub fault: [AtomicU64; FaultRecord::WORDS],
}

const _: () = assert!(std::mem::size_of::<Doorbell>() <= 4096);

/// The page mapped in this process.
pub struct Mapped {
    page: *const Doorbell,
    file: OwnedFd,
}

// SAFETY: the page is only reached through atomics, made for sharing; the mapping lives
// as long as the value.
unsafe impl Send for Mapped {}
// SAFETY: as for Send.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// A new page (zeroed) in a memory file the device process is handed.
    pub fn create() -> std::io::Result<Mapped> {
        // SAFETY: memfd_create returns a fresh descriptor (or -1), owned below.
        let raw =
            unsafe { libc::memfd_create(c"omptarget-rs-doorbell".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fresh and ours only.
        let file = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate on our own descriptor.
        if unsafe { libc::ftruncate(file.as_raw_fd(), 4096) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Self::map(file)
    }

    /// Map the page of `file` (the device process, with the file it was handed).
    pub fn map(file: OwnedFd) -> std::io::Result<Mapped> {
        // SAFETY: a new shared mapping of one page of our own file.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapped {
            page: p.cast(),
            file,
        })
    }

    pub fn file(&self) -> &OwnedFd {
        &self.file
    }

    pub fn page(&self) -> &Doorbell {
        // SAFETY: a page-sized, page-aligned shared mapping that lives as long as self;
        // zero is a valid value of every (atomic) field.
        unsafe { &*self.page }
    }

    /// The page's address (the device's fault handler reaches it from a static).
    pub fn as_ptr(&self) -> *const Doorbell {
        self.page
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`; nothing refers to it past this value.
        unsafe { libc::munmap(self.page.cast_mut().cast(), 4096) };
    }
}

/// Sleep until `word` is no longer `expected` (or a spurious wake-up, or `timeout`).
/// Not private: the word is in memory shared by two processes.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: FUTEX_WAIT reads the aligned u32 behind `word` (a live atomic) and sleeps;
    // `ts_ptr` is null or points at a live timespec.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
        )
    };
}

/// Wake whoever sleeps on `word`. Async-signal-safe (a plain system call).
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address of a live atomic as the key.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

/// Wait until `word` satisfies `done`: spin a little, then sleep, with `sleeping` set
/// so the other side knows to wake us. `alive` is asked between sleeps (false: stop
/// waiting, None). Returns the value that satisfied `done`.
pub fn wait_until(
    word: &AtomicU32,
    done: impl Fn(u32) -> bool,
    sleeping: &AtomicU32,
    alive: &mut dyn FnMut() -> bool,
) -> Option<u32> {
    let start = Instant::now();
    loop {
        let now = word.load(Ordering::Acquire);
        if done(now) {
            return Some(now);
        }
        let waited = start.elapsed();
        if waited > YIELD {
            break;
        }
        if waited > SPIN {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    loop {
        sleeping.store(1, Ordering::SeqCst);
        let now = word.load(Ordering::SeqCst);
        if done(now) {
            sleeping.store(0, Ordering::SeqCst);
            return Some(now);
        }
        futex_wait(word, now, Some(Duration::from_millis(50)));
        sleeping.store(0, Ordering::SeqCst);
        let now = word.load(Ordering::Acquire);
        if done(now) {
            return Some(now);
        }
        if !alive() {
            return None;
        }
    }
}

/// Publish `value` in `word` and wake the other side if it sleeps.
pub fn ring(word: &AtomicU32, value: u32, sleeping: &AtomicU32) {
    word.store(value, Ordering::SeqCst);
    if sleeping.load(Ordering::SeqCst) != 0 {
        futex_wake(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_mappings_of_the_page_ring_each_other() {
        let host = Mapped::create().unwrap();
        let dup = host.file().try_clone().unwrap();
        let device = Mapped::map(dup).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                let page = device.page();
                let mut seen = 0;
                for _ in 0..1000 {
                    let old = seen;
                    seen = wait_until(
                        &page.request,
                        |v| v != old,
                        &page.device_sleeping,
                        &mut || true,
                    )
                    .unwrap();
                    let k = page.kernel.load(Ordering::Relaxed);
                    page.status.store(k as u32 * 2, Ordering::Relaxed);
                    ring(&page.reply, seen, &page.host_sleeping);
                }
            });
            let page = host.page();
            for i in 1..=1000u32 {
                page.kernel.store(i as u64, Ordering::Relaxed);
                ring(&page.request, i, &page.device_sleeping);
                let r = wait_until(&page.reply, |v| v == i, &page.host_sleeping, &mut || true);
                assert_eq!(r, Some(i));
                assert_eq!(page.status.load(Ordering::Relaxed), i * 2);
            }
        });
    }

    #[test]
    fn a_wait_ends_when_the_other_side_is_gone() {
        let host = Mapped::create().unwrap();
        let page = host.page();
        let mut asked = 0;
        let r = wait_until(&page.reply, |v| v == 1, &page.host_sleeping, &mut || {
            asked += 1;
            asked < 2
        });
        assert_eq!(r, None);
    }
}
