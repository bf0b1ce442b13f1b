//! Pooled device memory: nextgen's `MemoryManagerTy`, for every GPU device. A target
//! region in a loop maps its arrays on every iteration; without a pool each is a
//! `cuMemAlloc` and a `cuMemFree`, and `cuMemFree` waits for the whole device, so
//! `nowait` regions on other queues are serialised behind it. With the pool, a freed
//! block goes to a free list of its size class and the next allocation of that class
//! takes it back: no driver call, no device-wide wait.
//!
//! The settings come from the environment with the device's others
//! ([`crate::generic::device_settings`]). Rules, as LLVM 16's plugins keep them where ours say
//! nothing new:
//! - only device memory (`TARGET_ALLOC_DEFAULT` and `_DEVICE`) of at most
//!   `LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD` bytes is pooled; 0 turns pooling off.
//!   LLVM's default is 8 KiB; ours is [`DEFAULT_THRESHOLD`], because the arrays that
//!   recur in loops are KiB to MiB;
//! - the pool holds at most `OMPTARGET_RS_MEMORY_POOL_LIMIT` bytes of free blocks
//!   ([`DEFAULT_CACHE_LIMIT`]); a block freed beyond it goes back to the driver;
//! - when the driver runs out of memory, the pool gives back every free block and the
//!   allocation is tried once more;
//! - the owner gives everything back at the device's end ([`MemoryPool::trim`]).
//!
//! Blocks are rounded up to a size class: four classes per power of two (so at most a
//! quarter of a block is slack), at least 256 bytes. libomptarget frees a block only
//! once the queues that used it are done with it (its post-processing runs after the
//! queue's synchronisation), so a block taken back from a free list is idle.

use crate::backend::{AllocKind, BackendDevice, BackendError, DeviceAddr};
use crate::support::locking::lock;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// The largest allocation pooled by default (64 MiB).
pub const DEFAULT_THRESHOLD: usize = 64 << 20;
/// The most free bytes kept by default (1 GiB).
pub const DEFAULT_CACHE_LIMIT: usize = 1 << 30;
/// The smallest size class.
const MIN_CLASS: usize = 256;

/// How a device pools its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolSettings {
    /// Allocations of at most this many bytes are pooled (0: none is).
    pub threshold: usize,
    /// The most bytes of free blocks kept.
    pub cache_limit: usize,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            threshold: DEFAULT_THRESHOLD,
            cache_limit: DEFAULT_CACHE_LIMIT,
        }
    }
}

impl PoolSettings {
    /// Whether an allocation of `size` bytes of `kind` comes from the pool.
    pub fn pools(&self, size: usize, kind: AllocKind) -> bool {
        matches!(kind, AllocKind::Default | AllocKind::Device)
            && self.threshold > 0
            && size <= self.threshold
    }
}

/// The size class of a `size`-byte request: `size` rounded up to a quarter of its
/// power of two, at least [`MIN_CLASS`].
pub fn class_of(size: usize) -> usize {
    let size = size.max(MIN_CLASS);
    let power = usize::BITS - 1 - size.leading_zeros();
    let step = 1usize << power.saturating_sub(2);
    size.div_ceil(step) * step
}

/// What the pool did, for tests and the plugin's debug output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Allocations served from a free list.
    pub reused: u64,
    /// Allocations the driver made for the pool.
    pub driver_allocs: u64,
    /// Blocks given back to the driver (over the limit, out of memory, at the end).
    pub driver_frees: u64,
    /// Bytes in the free lists now.
    pub cached_bytes: usize,
    /// Pooled blocks handed out and not yet freed.
    pub live_blocks: usize,
}

#[derive(Default)]
struct PoolState {
    /// Free blocks by size class.
    free: BTreeMap<usize, Vec<DeviceAddr>>,
    /// The size class of every pooled block handed out.
    live: HashMap<DeviceAddr, usize>,
    stats: PoolStats,
}

/// One device's pool. The device's vendor object is passed to each call rather than
/// held, so the pool never outlives it unnoticed: its owner trims it first.
pub struct MemoryPool {
    settings: PoolSettings,
    state: Mutex<PoolState>,
}

impl MemoryPool {
    pub fn new(settings: PoolSettings) -> Self {
        MemoryPool {
            settings,
            state: Mutex::default(),
        }
    }

    pub fn settings(&self) -> PoolSettings {
        self.settings
    }

    /// `size` bytes of `kind` on `device`: a free block of the size class when there
    /// is one, else the driver's (after giving back every free block, when the driver
    /// is out of memory).
    pub fn alloc(
        &self,
        device: &dyn BackendDevice,
        size: usize,
        kind: AllocKind,
    ) -> Result<DeviceAddr, BackendError> {
        if !self.settings.pools(size, kind) {
            return device.alloc(size, kind);
        }
        let class = class_of(size);
        let mut state = lock(&self.state);
        if let Some(addr) = state.free.get_mut(&class).and_then(Vec::pop) {
            state.stats.cached_bytes -= class;
            state.stats.reused += 1;
            state.live.insert(addr, class);
            return Ok(addr);
        }
        let addr = match device.alloc(class, kind) {
            Err(BackendError::OutOfMemory(_)) if state.stats.cached_bytes > 0 => {
                give_back_all(&mut state, device)?;
                device.alloc(class, kind)?
            }
            other => other?,
        };
        state.stats.driver_allocs += 1;
        state.live.insert(addr, class);
        Ok(addr)
    }

    /// Free `addr`: a pooled block goes to its free list (or to the driver, past the
    /// limit); anything else to the driver.
    ///
    /// # Safety
    /// `addr` came from [`MemoryPool::alloc`] with `device` (or from `device` itself)
    /// and is dead.
    pub unsafe fn free(
        &self,
        device: &dyn BackendDevice,
        addr: DeviceAddr,
    ) -> Result<(), BackendError> {
        let mut state = lock(&self.state);
        let Some(class) = state.live.remove(&addr) else {
            drop(state);
            // SAFETY: forwarded caller contract (not a pooled block: the driver's own).
            return unsafe { device.free(addr) };
        };
        if state.stats.cached_bytes + class <= self.settings.cache_limit {
            state.free.entry(class).or_default().push(addr);
            state.stats.cached_bytes += class;
            return Ok(());
        }
        state.stats.driver_frees += 1;
        drop(state);
        // SAFETY: a pooled block of `device`, dead per the caller, now in no list.
        unsafe { device.free(addr) }
    }

    /// Give every free block back to `device`'s driver; the bytes given back.
    pub fn trim(&self, device: &dyn BackendDevice) -> Result<usize, BackendError> {
        give_back_all(&mut lock(&self.state), device)
    }

    pub fn stats(&self) -> PoolStats {
        let state = lock(&self.state);
        PoolStats {
            live_blocks: state.live.len(),
            ..state.stats
        }
    }
}

/// Every free block of `state` back to `device`'s driver; the bytes. The first refusal
/// is returned after every block has been tried (none is kept on a list twice).
fn give_back_all(state: &mut PoolState, device: &dyn BackendDevice) -> Result<usize, BackendError> {
    let mut given = 0;
    let mut first_error = None;
    for (class, blocks) in std::mem::take(&mut state.free) {
        for addr in blocks {
            // SAFETY: a block on a free list is a dead allocation of `device` that
            // nothing else holds (it left `live` when it was freed into the list).
            match unsafe { device.free(addr) } {
                Ok(()) => given += class,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
            state.stats.driver_frees += 1;
        }
    }
    state.stats.cached_bytes = 0;
    first_error.map_or(Ok(given), Err)
}

#[cfg(test)]
mod tests;
