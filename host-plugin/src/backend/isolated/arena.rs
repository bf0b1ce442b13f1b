//! Memory of the isolated device: anonymous memory files shared by both processes.
//!
//! - Device memory: mapped at the start of the device window in the device process,
//!   and elsewhere in the window in the host process (the host's view, like a GPU's
//!   BAR; see [`super::address_space::Layout`]). The host allocates in it and copies through its view with plain
//!   memcpy: no message, no system call per copy. The addresses handed out are device
//!   addresses; the host never dereferences one (its view is at another address, and
//!   the window itself is reserved inaccessible in the host).
//! - Host memory the device reaches (`TARGET_ALLOC_HOST`/`SHARED`, a GPU's pinned and
//!   managed memory): mapped at the same address in both processes, inside the window.

use super::super::{BackendError, DeviceAddr};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

/// Every allocation starts on this boundary (what GPU allocators give at least).
const ALIGN: u64 = 256;
/// Freed memory keeps its pages, for the next allocation (as a GPU driver's pool does:
/// a first touch of a 4 KiB page of shared memory is what a copy into fresh device
/// memory waits for), up to this many bytes; past it, freed blocks from
/// [`RELEASE_PAGES_FROM`] on give their pages back to the system.
const RETAIN_FREED_BYTES: u64 = 1 << 30;
const RELEASE_PAGES_FROM: u64 = 1 << 20;
const PAGE: u64 = 4096;

/// Which ranges of the arena are in use: best fit over the free blocks, neighbours
/// merged on free. Offsets and lengths are multiples of [`ALIGN`].
#[derive(Default, Debug)]
pub(crate) struct Allocator {
    size: u64,
    /// Everything from here to `size` is free (never handed out, or given back).
    top: u64,
    free_by_offset: BTreeMap<u64, u64>,
    free_by_size: BTreeSet<(u64, u64)>,
    used: HashMap<u64, u64>,
    /// About how many freed bytes still have their pages (an upper bound: reused
    /// blocks are subtracted as they are handed out again).
    retained: u64,
}

impl Allocator {
    pub(crate) fn new(size: u64) -> Self {
        Allocator {
            size,
            ..Default::default()
        }
    }

    /// The offset of `len` fresh bytes, None when the arena is full.
    pub(crate) fn alloc(&mut self, len: u64) -> Option<u64> {
        let len = len.max(1).checked_next_multiple_of(ALIGN)?;
        let offset = if let Some(&(size, offset)) = self.free_by_size.range((len, 0)..).next() {
            self.take_free(offset, size);
            if size > len {
                self.put_free(offset + len, size - len);
            }
            offset
        } else {
            let offset = self.top;
            if self.size - offset < len {
                return None;
            }
            self.top += len;
            offset
        };
        self.used.insert(offset, len);
        self.retained = self.retained.saturating_sub(len);
        Some(offset)
    }

    /// Give back the block at `offset`: the merged free block it became part of, or
    /// None when no block starts there.
    pub(crate) fn free(&mut self, offset: u64) -> Option<(u64, u64)> {
        let len = self.used.remove(&offset)?;
        self.retained += len;
        let (mut start, mut end) = (offset, offset + len);
        if let Some((&before, &size)) = self.free_by_offset.range(..start).next_back() {
            if before + size == start {
                self.take_free(before, size);
                start = before;
            }
        }
        if let Some(&size) = self.free_by_offset.get(&end) {
            self.take_free(end, size);
            end += size;
        }
        if end == self.top {
            self.top = start;
        } else {
            self.put_free(start, end - start);
        }
        Some((start, end))
    }

    /// Whether freed memory holds more pages than it may keep; the caller then gives
    /// back `[start, end)`, which is free, and says so here.
    pub(crate) fn over_retained(&self) -> bool {
        self.retained > RETAIN_FREED_BYTES
    }

    pub(crate) fn pages_released(&mut self, bytes: u64) {
        self.retained = self.retained.saturating_sub(bytes);
    }

    fn take_free(&mut self, offset: u64, size: u64) {
        self.free_by_offset.remove(&offset);
        self.free_by_size.remove(&(size, offset));
    }

    fn put_free(&mut self, offset: u64, size: u64) {
        self.free_by_offset.insert(offset, size);
        self.free_by_size.insert((size, offset));
    }
}

/// The arena: its file, the host's view of it, where the device sees it, and who uses
/// which part.
pub(crate) struct Arena {
    file: OwnedFd,
    /// The host's view (this process's address of offset 0).
    view: *mut u8,
    size: u64,
    /// The device's address of offset 0.
    device_base: u64,
    blocks: Mutex<Allocator>,
}

// SAFETY: `view` is a shared mapping owned by the Arena for its whole life; copies
// through it go to disjoint or caller-synchronised device ranges (as device memory on a
// GPU), and the allocator is behind a Mutex.
unsafe impl Send for Arena {}
// SAFETY: as for Send.
unsafe impl Sync for Arena {}

impl Arena {
    /// A new arena of `size` bytes (sparse: memory is used only where written), which
    /// the device will map at `device_base` and the host maps at `view_at`, in place of
    /// part of a reservation the caller owns (the device window); the same address for
    /// host memory the device reaches.
    pub(crate) fn new(size: u64, device_base: u64, view_at: u64) -> std::io::Result<Arena> {
        // SAFETY: memfd_create reads the NUL-terminated name and returns a new
        // descriptor (or -1), owned right below.
        let raw = unsafe {
            libc::memfd_create(c"omptarget-rs-device-memory".as_ptr(), libc::MFD_CLOEXEC)
        };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor that only this value owns.
        let file = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate on our own descriptor.
        if unsafe { libc::ftruncate(file.as_raw_fd(), size as libc::off_t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let view = map_shared_over_reservation(&file, size, view_at)?;
        Ok(Arena {
            file,
            view,
            size,
            device_base,
            blocks: Mutex::new(Allocator::new(size)),
        })
    }

    pub(crate) fn file(&self) -> &OwnedFd {
        &self.file
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    pub(crate) fn alloc(&self, len: usize) -> Result<DeviceAddr, BackendError> {
        let offset = crate::support::locking::lock(&self.blocks)
            .alloc(len as u64)
            .ok_or(BackendError::OutOfMemory(len))?;
        Ok(self.device_base + offset)
    }

    pub(crate) fn free(&self, addr: DeviceAddr) -> Result<(), BackendError> {
        let offset = addr.wrapping_sub(self.device_base);
        let mut blocks = crate::support::locking::lock(&self.blocks);
        let (start, end) = blocks.free(offset).ok_or_else(|| {
            BackendError::Bounds(format!("{addr:#x} is not an allocation of this device"))
        })?;
        if blocks.over_retained() && end - start >= RELEASE_PAGES_FROM {
            self.release_pages(start, end);
            blocks.pages_released(end - start);
        }
        Ok(())
    }

    /// Give the whole pages of `[start, end)` back to the system (they read as zeros
    /// afterwards); nothing else changes.
    fn release_pages(&self, start: u64, end: u64) {
        let (from, to) = (start.next_multiple_of(PAGE), end / PAGE * PAGE);
        if from < to {
            // SAFETY: punching a hole in our own memory file changes only the contents
            // of that free range, which no allocation covers.
            unsafe {
                libc::fallocate(
                    self.file.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    from as libc::off_t,
                    (to - from) as libc::off_t,
                )
            };
        }
    }

    /// The host's view of device range `[addr, addr + len)`, if it lies in the arena.
    pub(crate) fn view(&self, addr: DeviceAddr, len: usize) -> Option<*mut u8> {
        let offset = addr.checked_sub(self.device_base)?;
        let end = offset.checked_add(len as u64)?;
        if end > self.size {
            return None;
        }
        // SAFETY: offset + len <= size: the result stays inside the view's mapping.
        Some(unsafe { self.view.add(offset as usize) })
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // Back to a reservation: the window stays whole.
        let view = self.view as u64;
        let _ = super::address_space::reserve_over((view, view + self.size));
    }
}

/// Map `file` at `at`, replacing what is there: part of a reservation the caller owns.
fn map_shared_over_reservation(file: &OwnedFd, size: u64, at: u64) -> std::io::Result<*mut u8> {
    // SAFETY: MAP_FIXED replaces only `at..at+size`, which the caller reserved itself
    // (PROT_NONE, holding nothing); the new mapping is our own file.
    let p = unsafe {
        libc::mmap(
            at as *mut libc::c_void,
            size as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_NORESERVE | libc::MAP_FIXED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// Map `file` shared, read-write, `size` bytes, at `at` exactly (never replacing
/// anything) or anywhere.
pub(crate) fn map_shared(file: &OwnedFd, size: u64, at: Option<u64>) -> std::io::Result<*mut u8> {
    let fixed = if at.is_some() {
        libc::MAP_FIXED_NOREPLACE
    } else {
        0
    };
    // SAFETY: a new shared mapping of our own file; with MAP_FIXED_NOREPLACE nothing
    // existing is replaced (the call fails instead).
    let p = unsafe {
        libc::mmap(
            at.unwrap_or(0) as *mut libc::c_void,
            size as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_NORESERVE | fixed,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    if let Some(at) = at {
        if p as u64 != at {
            // SAFETY: the mapping just made, used by nothing.
            unsafe { libc::munmap(p, size as usize) };
            return Err(std::io::Error::from_raw_os_error(libc::EEXIST));
        }
    }
    Ok(p.cast())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn freed_blocks_are_reused_and_merge() {
        let mut a = Allocator::new(1 << 20);
        let x = a.alloc(100).unwrap();
        let y = a.alloc(300).unwrap();
        let z = a.alloc(10).unwrap();
        assert_eq!((x, y, z), (0, 256, 768));
        assert_eq!(a.free(y), Some((256, 768)));
        // Best fit: the freed 512-byte block takes a 200-byte request.
        assert_eq!(a.alloc(200), Some(256));
        assert_eq!(a.free(x), Some((0, 256)));
        // 256..512 is in use; 512..768 is what the 200-byte request left free.
        assert_eq!(a.free(256), Some((0, 768)), "merged with both neighbours");
        assert_eq!(
            a.free(z),
            Some((0, 1024)),
            "merged with both sides and the top"
        );
        assert_eq!(a.top, 0);
        assert_eq!(a.free(z), None, "freed once");
        assert_eq!(a.alloc(1 << 20), Some(0));
        assert_eq!(a.alloc(1), None, "full");
    }

    proptest! {
        /// Live blocks never overlap, and after everything is freed the arena is empty.
        #[test]
        fn blocks_never_overlap(ops in proptest::collection::vec((any::<bool>(), 1u64..5000), 1..200)) {
            let mut a = Allocator::new(1 << 22);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (alloc, n) in ops {
                if alloc || live.is_empty() {
                    if let Some(off) = a.alloc(n) {
                        prop_assert_eq!(off % ALIGN, 0);
                        for &(o, l) in &live {
                            prop_assert!(off + n <= o || o + l <= off);
                        }
                        live.push((off, n));
                    }
                } else {
                    let (off, _) = live.remove((n as usize) % live.len());
                    prop_assert!(a.free(off).is_some());
                }
            }
            for (off, _) in live {
                prop_assert!(a.free(off).is_some());
            }
            prop_assert_eq!(a.top, 0);
            prop_assert!(a.free_by_offset.is_empty());
        }
    }

    #[test]
    fn the_host_view_and_a_second_mapping_see_the_same_bytes() {
        let window = super::super::address_space::Window::reserve(1 << 30).unwrap();
        let arena = Arena::new(64 << 20, 0x4000_0000_0000, window.base).unwrap();
        let addr = arena.alloc(4 << 20).unwrap();
        assert_eq!(addr, 0x4000_0000_0000);
        let view = arena.view(addr, 4 << 20).unwrap();
        // SAFETY: the view covers the 4 MiB allocation.
        unsafe { view.add(12345).write(0xa5) };
        let other = map_shared(arena.file(), arena.size(), None).unwrap();
        // SAFETY: `other` maps the same 64 MiB file.
        assert_eq!(unsafe { other.add(12345).read() }, 0xa5);
        assert!(
            arena.view(addr + (64 << 20) - 1, 2).is_none(),
            "past the end"
        );
        assert!(arena.view(0x1000, 1).is_none(), "not a device address");
        arena.free(addr).unwrap();
        // SAFETY: as above; freed, the block keeps its pages for the next allocation.
        assert_eq!(unsafe { other.add(12345).read() }, 0xa5);
        // Past what freed memory may keep, a freed block gives its pages back.
        let big = arena.alloc(48 << 20).unwrap();
        crate::support::locking::lock(&arena.blocks).retained = RETAIN_FREED_BYTES;
        arena.free(big).unwrap();
        // SAFETY: as above; the pages were given back and read as zeros.
        assert_eq!(unsafe { other.add(12345).read() }, 0);
        assert!(arena.free(addr).is_err());
        // SAFETY: mapped above with this size.
        unsafe { libc::munmap(other.cast(), arena.size() as usize) };
        drop(arena);
        // SAFETY: the window was reserved by this test only.
        unsafe { libc::munmap(window.base as *mut libc::c_void, window.size as usize) };
    }

    #[test]
    fn host_memory_the_device_reaches_has_one_address_in_both() {
        let window = super::super::address_space::Window::reserve(1 << 30).unwrap();
        let arena = Arena::new(16 << 20, window.base, window.base).unwrap();
        let addr = arena.alloc(100).unwrap();
        assert_eq!(arena.view(addr, 100), Some(addr as *mut u8));
        // SAFETY: the allocation is mapped at its own address in this process.
        unsafe { (addr as *mut u8).write(7) };
        drop(arena);
        let maps = super::super::address_space::read_maps(None).unwrap();
        let m = maps.iter().find(|m| m.contains(window.base)).unwrap();
        assert!(!m.accessible(), "reserved again: {m:?}");
        // SAFETY: the window was reserved by this test only.
        unsafe { libc::munmap(window.base as *mut libc::c_void, window.size as usize) };
    }
}
