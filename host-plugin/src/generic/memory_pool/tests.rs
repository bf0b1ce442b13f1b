//! The pool's rules against a device that counts what the driver is asked and can be
//! told how much memory it has.

use super::*;
use crate::backend::{LoadedModule, StagedImage};
use crate::support::launch_shape::Shape;
use std::collections::HashSet;

/// A driver in small: addresses handed out and taken back, counted, within `capacity`
/// bytes.
struct CountingDevice {
    capacity: usize,
    state: Mutex<Driver>,
}

#[derive(Default)]
struct Driver {
    next: DeviceAddr,
    live: HashMap<DeviceAddr, usize>,
    allocs: usize,
    frees: usize,
    freed: HashSet<DeviceAddr>,
}

impl CountingDevice {
    fn with_capacity(capacity: usize) -> Self {
        CountingDevice {
            capacity,
            state: Mutex::new(Driver {
                next: 0x10_0000,
                ..Driver::default()
            }),
        }
    }
    /// (allocations, frees) the driver made.
    fn calls(&self) -> (usize, usize) {
        let d = self.state.lock().unwrap();
        (d.allocs, d.frees)
    }
    fn in_use(&self) -> usize {
        self.state.lock().unwrap().live.values().sum()
    }
}

impl BackendDevice for CountingDevice {
    fn index(&self) -> usize {
        0
    }
    fn init(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn load_image(
        &self,
        _: &[u8],
        _: Option<&crate::elf::symbols::ImageSymbols<'_>>,
        _: Option<StagedImage>,
    ) -> Result<Box<dyn LoadedModule>, BackendError> {
        Err(BackendError::Load("no images here".into()))
    }
    fn alloc(&self, size: usize, _: AllocKind) -> Result<DeviceAddr, BackendError> {
        let mut d = self.state.lock().unwrap();
        if d.live.values().sum::<usize>() + size > self.capacity {
            return Err(BackendError::OutOfMemory(size));
        }
        d.allocs += 1;
        let addr = d.next;
        d.next += size.max(1) as DeviceAddr;
        d.live.insert(addr, size);
        Ok(addr)
    }
    unsafe fn free(&self, addr: DeviceAddr) -> Result<(), BackendError> {
        let mut d = self.state.lock().unwrap();
        d.frees += 1;
        assert!(
            d.live.remove(&addr).is_some(),
            "{addr:#x} freed twice or never allocated"
        );
        d.freed.insert(addr);
        Ok(())
    }
    unsafe fn write(&self, _: DeviceAddr, _: &[u8]) -> Result<(), BackendError> {
        Ok(())
    }
    unsafe fn read(&self, _: DeviceAddr, _: &mut [u8]) -> Result<(), BackendError> {
        Ok(())
    }
    unsafe fn copy(
        &self,
        _: DeviceAddr,
        _: &dyn BackendDevice,
        _: DeviceAddr,
        _: usize,
    ) -> Result<(), BackendError> {
        Ok(())
    }
    unsafe fn launch(
        &self,
        _: DeviceAddr,
        _: &[DeviceAddr],
        _: Option<Shape>,
    ) -> Result<(), BackendError> {
        Ok(())
    }
    unsafe fn launch_on(
        &self,
        _: DeviceAddr,
        _: &[DeviceAddr],
        _: Option<Shape>,
        _: crate::backend::QueueHandle,
    ) -> Result<(), BackendError> {
        Ok(())
    }
    fn synchronize(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn device_info(&self) -> Vec<String> {
        vec!["a counting device".into()]
    }
}

fn settings(threshold: usize, cache_limit: usize) -> PoolSettings {
    PoolSettings {
        threshold,
        cache_limit,
    }
}

#[test]
fn a_steady_loop_asks_the_driver_once() {
    let device = CountingDevice::with_capacity(1 << 30);
    let pool = MemoryPool::new(PoolSettings::default());
    for _ in 0..1000 {
        let a = pool.alloc(&device, 4096, AllocKind::Default).unwrap();
        let b = pool.alloc(&device, 1 << 20, AllocKind::Device).unwrap();
        // SAFETY: both came from this pool on this device and are dead now.
        unsafe {
            pool.free(&device, a).unwrap();
            pool.free(&device, b).unwrap();
        }
    }
    assert_eq!(device.calls(), (2, 0));
    let stats = pool.stats();
    assert_eq!((stats.reused, stats.driver_allocs), (1998, 2));
    assert_eq!(stats.cached_bytes, 4096 + (1 << 20));
    assert_eq!(pool.trim(&device).unwrap(), 4096 + (1 << 20));
    assert_eq!(device.calls(), (2, 2));
    assert_eq!(
        device.in_use(),
        0,
        "nothing left with the driver after the trim"
    );
}

#[test]
fn blocks_in_use_are_never_handed_out_twice() {
    let device = CountingDevice::with_capacity(1 << 30);
    let pool = MemoryPool::new(PoolSettings::default());
    let held: Vec<_> = (0..64)
        .map(|_| pool.alloc(&device, 1000, AllocKind::Default).unwrap())
        .collect();
    let distinct: HashSet<_> = held.iter().collect();
    assert_eq!(distinct.len(), 64);
    // SAFETY: from this pool, dead now.
    unsafe { pool.free(&device, held[7]).unwrap() };
    let again = pool.alloc(&device, 900, AllocKind::Default).unwrap();
    assert_eq!(
        again, held[7],
        "the freed block of the same class comes back"
    );
    assert_eq!(pool.stats().live_blocks, 64);
}

#[test]
fn threshold_zero_and_other_kinds_go_straight_to_the_driver() {
    let device = CountingDevice::with_capacity(1 << 30);
    for (pool, kind, size) in [
        (
            MemoryPool::new(settings(0, 1 << 30)),
            AllocKind::Default,
            64,
        ),
        (
            MemoryPool::new(PoolSettings::default()),
            AllocKind::Host,
            64,
        ),
        (
            MemoryPool::new(PoolSettings::default()),
            AllocKind::Shared,
            64,
        ),
        (
            MemoryPool::new(settings(8192, 1 << 30)),
            AllocKind::Device,
            8193,
        ),
    ] {
        let before = device.calls();
        for _ in 0..3 {
            let a = pool.alloc(&device, size, kind).unwrap();
            // SAFETY: from this pool, dead now.
            unsafe { pool.free(&device, a).unwrap() };
        }
        let after = device.calls();
        assert_eq!(
            (after.0 - before.0, after.1 - before.1),
            (3, 3),
            "{kind:?} {size}"
        );
        assert_eq!(pool.stats().cached_bytes, 0);
    }
}

#[test]
fn what_the_pool_keeps_is_bounded_by_its_limit() {
    let device = CountingDevice::with_capacity(1 << 30);
    let pool = MemoryPool::new(settings(1 << 20, 3 * 4096));
    let blocks: Vec<_> = (0..5)
        .map(|_| pool.alloc(&device, 4096, AllocKind::Default).unwrap())
        .collect();
    for b in blocks {
        // SAFETY: from this pool, dead now.
        unsafe { pool.free(&device, b).unwrap() };
    }
    assert_eq!(pool.stats().cached_bytes, 3 * 4096);
    assert_eq!(
        device.calls(),
        (5, 2),
        "two blocks past the limit went back"
    );
}

#[test]
fn out_of_memory_gives_back_the_free_blocks_and_retries() {
    let device = CountingDevice::with_capacity(3 << 20);
    let pool = MemoryPool::new(PoolSettings::default());
    let small: Vec<_> = (0..2)
        .map(|_| pool.alloc(&device, 1 << 20, AllocKind::Default).unwrap())
        .collect();
    for b in small {
        // SAFETY: from this pool, dead now.
        unsafe { pool.free(&device, b).unwrap() };
    }
    // 2 MiB in the free lists, 1 MiB left with the driver: 2 MiB fits only after the
    // pool gives its blocks back.
    let big = pool.alloc(&device, 2 << 20, AllocKind::Default).unwrap();
    assert_eq!(pool.stats().cached_bytes, 0);
    assert_eq!(device.calls(), (3, 2));
    // Still out of memory after the give-back: the driver's error comes through.
    let err = pool
        .alloc(&device, 2 << 20, AllocKind::Default)
        .unwrap_err();
    assert!(matches!(err, BackendError::OutOfMemory(_)), "{err}");
    // SAFETY: from this pool, dead now.
    unsafe { pool.free(&device, big).unwrap() };
}

#[test]
fn an_address_the_pool_did_not_hand_out_goes_to_the_driver() {
    let device = CountingDevice::with_capacity(1 << 30);
    let pool = MemoryPool::new(PoolSettings::default());
    let direct = device.alloc(128, AllocKind::Default).unwrap();
    // SAFETY: the driver's own allocation, dead now.
    unsafe { pool.free(&device, direct).unwrap() };
    assert_eq!(device.calls(), (1, 1));
    assert_eq!(pool.stats().cached_bytes, 0);
}

#[test]
fn size_classes_are_quarters_of_a_power_of_two() {
    assert_eq!(class_of(0), 256);
    assert_eq!(class_of(1), 256);
    assert_eq!(class_of(256), 256);
    assert_eq!(class_of(257), 320);
    assert_eq!(class_of(4096), 4096);
    assert_eq!(class_of(4097), 5120);
    assert_eq!(class_of(1 << 20), 1 << 20);
    assert_eq!(class_of(3 << 20), 3 << 20);
    assert_eq!(class_of((3 << 20) + 1), 7 << 19);
    for size in [300, 5000, 70_000, 12_345_678] {
        let class = class_of(size);
        assert!(
            class >= size && class - size <= size / 4,
            "{size} -> {class}"
        );
    }
}
