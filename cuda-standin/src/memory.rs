//! "Device" memory: host heap blocks whose host address is the device pointer (as
//! tests/fixtures/amdgpu/fake_hip.c does for HIP). Every range a kernel or a copy may
//! touch is recorded: device, managed and pinned allocations, host ranges registered
//! with cuMemHostRegister, and the data sections of loaded modules (their globals). A
//! copy, memset or free that touches anything else is refused with
//! CUDA_ERROR_INVALID_VALUE: what compute-sanitizer would report on a GPU. Device and
//! managed allocations belong to the device of the context that made them and count
//! against its memory (`OMPTARGET_RS_CUDA_STANDIN_MEMORY`); one past it is
//! CUDA_ERROR_OUT_OF_MEMORY.

use crate::device::MEMORY_ENV;
use crate::errors::{
    Failure, Outcome, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, CUDA_ERROR_OUT_OF_MEMORY,
};
use std::alloc::Layout;
use std::collections::BTreeMap;
use std::ptr::NonNull;

/// cuMemAlloc's alignment.
pub const DEVICE_ALIGN: usize = 256;
/// Pinned host memory comes page-aligned.
const PINNED_ALIGN: usize = 4096;

/// A zeroed heap block, freed on drop.
pub struct Block {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the block is plain memory owned by this value; nothing in it is tied to a
// thread.
unsafe impl Send for Block {}

impl Block {
    /// `len` zeroed bytes (at least one, so every block has an address of its own),
    /// aligned to `align` (a power of two).
    pub fn zeroed(len: usize, align: usize) -> Outcome<Block> {
        let layout = Layout::from_size_align(len.max(1), align.max(1))
            .map_err(|e| Failure::invalid_value(format!("{len} bytes aligned to {align}: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            Failure::new(
                CUDA_ERROR_OUT_OF_MEMORY,
                format!("{len} bytes: the host heap is exhausted"),
            )
        })?;
        Ok(Block { ptr, layout })
    }

    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// The block's bytes (its requested length, not the padding).
    pub fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        let len = len.min(self.layout.size());
        // SAFETY: the block owns `layout.size()` initialised (zeroed) bytes and this
        // borrow is unique for its lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), len) }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: allocated by `zeroed` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// What a recorded range is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// cuMemAlloc.
    Device,
    /// cuMemAllocManaged.
    Managed,
    /// cuMemHostAlloc / cuMemAllocHost.
    Pinned,
    /// cuMemHostRegister (the caller's memory).
    Registered,
    /// A data section of a loaded module (owned by the module).
    ModuleData { module: u64, section: String },
}

impl RegionKind {
    fn describe(&self) -> String {
        match self {
            RegionKind::Device => "device allocation".into(),
            RegionKind::Managed => "managed allocation".into(),
            RegionKind::Pinned => "pinned host allocation".into(),
            RegionKind::Registered => "registered host range".into(),
            RegionKind::ModuleData { module, section } => {
                format!("section {section} of module {module:#x}")
            }
        }
    }
}

struct Region {
    len: usize,
    kind: RegionKind,
    /// The device of the context that allocated it (0 for ranges recorded from
    /// elsewhere); device and managed allocations count against its memory.
    device: usize,
    /// The memory, when the registry owns it (allocations; not registered or module
    /// ranges).
    _block: Option<Block>,
}

/// Every live range, by start address.
#[derive(Default)]
pub struct Memory {
    regions: BTreeMap<u64, Region>,
}

impl Memory {
    /// A new allocation of `len` bytes (cuMemAlloc, cuMemAllocManaged, cuMemHostAlloc)
    /// by a context of `device`; a device or managed one that would take the device's
    /// allocations past `limit` bytes is CUDA_ERROR_OUT_OF_MEMORY.
    pub fn alloc(
        &mut self,
        len: usize,
        kind: RegionKind,
        device: usize,
        limit: usize,
    ) -> Outcome<u64> {
        if len == 0 {
            return Err(Failure::invalid_value("an allocation of 0 bytes"));
        }
        if counts_against_device(&kind) {
            let used = self.allocated(device);
            if len > limit.saturating_sub(used) {
                return Err(Failure::new(
                    CUDA_ERROR_OUT_OF_MEMORY,
                    format!(
                        "{len} bytes: device {device} has {used} of its {limit} bytes \
                         allocated ({MEMORY_ENV})"
                    ),
                ));
            }
        }
        let align = if kind == RegionKind::Pinned {
            PINNED_ALIGN
        } else {
            DEVICE_ALIGN
        };
        let block = Block::zeroed(len, align)?;
        let addr = block.addr();
        self.regions.insert(
            addr,
            Region {
                len,
                kind,
                device,
                _block: Some(block),
            },
        );
        Ok(addr)
    }

    /// Free the allocation starting at `addr`, which must be of one of `kinds`.
    pub fn free(&mut self, addr: u64, kinds: &[RegionKind]) -> Outcome {
        match self.regions.get(&addr) {
            Some(r) if kinds.contains(&r.kind) => {
                self.regions.remove(&addr);
                Ok(())
            }
            Some(r) => Err(Failure::invalid_value(format!(
                "{addr:#x} is a {}, not {}",
                r.kind.describe(),
                describe_kinds(kinds)
            ))),
            None => Err(Failure::invalid_value(format!(
                "{addr:#x} is not the start of a live {}{}",
                describe_kinds(kinds),
                self.inside(addr)
            ))),
        }
    }

    /// Record a range owned elsewhere (a module's data section).
    pub fn record(&mut self, addr: u64, len: usize, kind: RegionKind) {
        self.regions.insert(
            addr,
            Region {
                len,
                kind,
                device: 0,
                _block: None,
            },
        );
    }

    /// Forget a range recorded with [`Memory::record`].
    pub fn forget(&mut self, addr: u64) {
        self.regions.remove(&addr);
    }

    /// The region holding `addr`: (start, region).
    fn containing(&self, addr: u64) -> Option<(u64, &Region)> {
        let (&start, region) = self.regions.range(..=addr).next_back()?;
        (addr - start < region.len.max(1) as u64).then_some((start, region))
    }

    /// `" (inside <what> at <start>+<offset>)"` when `addr` lies in a region, else "".
    fn inside(&self, addr: u64) -> String {
        match self.containing(addr) {
            Some((start, r)) => format!(
                " (it lies inside the {} at {start:#x}+{})",
                r.kind.describe(),
                addr - start
            ),
            None => String::new(),
        }
    }

    /// `addr .. addr + len` lies inside one live range: memory a device may touch. `what`
    /// names the operand for the report ("destination of cuMemcpyHtoD_v2").
    pub fn check(&self, addr: u64, len: usize, what: &str) -> Outcome {
        if len == 0 {
            return Ok(());
        }
        let fits = self.containing(addr).is_some_and(|(start, r)| {
            addr.checked_add(len as u64)
                .is_some_and(|end| end <= start + r.len as u64)
        });
        if fits {
            return Ok(());
        }
        let why = match self.containing(addr) {
            Some((start, r)) => format!(
                "it starts inside the {} at {start:#x} ({} bytes) but runs past its end",
                r.kind.describe(),
                r.len
            ),
            None => "no live allocation or module global holds it".into(),
        };
        Err(Failure::invalid_value(format!(
            "{what}: {addr:#x}+{len} is not device memory: {why}"
        )))
    }

    /// The kind of the range holding `addr`, if any.
    pub fn kind_of(&self, addr: u64) -> Option<&RegionKind> {
        self.containing(addr).map(|(_, r)| &r.kind)
    }

    /// cuMemHostRegister: the range must not overlap a registered or pinned one.
    pub fn register_host(&mut self, addr: u64, len: usize) -> Outcome {
        if addr == 0 || len == 0 {
            return Err(Failure::invalid_value(format!(
                "cannot register {len} bytes at {addr:#x}"
            )));
        }
        let end = addr.saturating_add(len as u64);
        let overlapping = self
            .regions
            .range(..end)
            .filter(|(&start, r)| start + r.len as u64 > addr)
            .find(|(_, r)| matches!(r.kind, RegionKind::Registered | RegionKind::Pinned));
        if let Some((start, r)) = overlapping {
            return Err(Failure::new(
                CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                format!(
                    "{addr:#x}+{len} overlaps the {} at {start:#x}",
                    r.kind.describe()
                ),
            ));
        }
        self.record(addr, len, RegionKind::Registered);
        Ok(())
    }

    /// cuMemHostUnregister: `addr` must start a registered range.
    pub fn unregister_host(&mut self, addr: u64) -> Outcome {
        match self.regions.get(&addr) {
            Some(r) if r.kind == RegionKind::Registered => {
                self.regions.remove(&addr);
                Ok(())
            }
            _ => Err(Failure::new(
                CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
                format!("{addr:#x} does not start a registered host range"),
            )),
        }
    }

    /// cuMemHostGetDevicePointer: the device address of registered or pinned host memory
    /// (the host address itself).
    pub fn host_device_pointer(&self, addr: u64) -> Outcome<u64> {
        match self.kind_of(addr) {
            Some(RegionKind::Registered | RegionKind::Pinned) => Ok(addr),
            _ => Err(Failure::invalid_value(format!(
                "{addr:#x} is not registered or pinned host memory"
            ))),
        }
    }

    /// Bytes held by `device`'s device and managed allocations (for cuMemGetInfo and
    /// the limit).
    pub fn allocated(&self, device: usize) -> usize {
        self.regions
            .values()
            .filter(|r| r.device == device && counts_against_device(&r.kind))
            .map(|r| r.len)
            .sum()
    }
}

/// Device and managed allocations take a device's memory; pinned, registered and
/// module ranges do not.
fn counts_against_device(kind: &RegionKind) -> bool {
    matches!(kind, RegionKind::Device | RegionKind::Managed)
}

fn describe_kinds(kinds: &[RegionKind]) -> String {
    kinds
        .iter()
        .map(RegionKind::describe)
        .collect::<Vec<_>>()
        .join(" or ")
}

/// Copy `len` bytes; the caller has checked both ranges.
///
/// # Safety
/// `src .. src + len` must be readable and `dst .. dst + len` writable (they may overlap).
pub unsafe fn copy(dst: u64, src: u64, len: usize) {
    if len == 0 {
        return;
    }
    // SAFETY: the caller promises both ranges; `copy` allows overlap.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) }
}

/// Fill `count` elements of `width` bytes (1 or 4) with `value`'s low bytes.
///
/// # Safety
/// `dst .. dst + count * width` must be writable.
pub unsafe fn fill(dst: u64, value: u32, width: usize, count: usize) {
    let bytes = value.to_le_bytes();
    for i in 0..count {
        for (j, byte) in bytes[..width].iter().enumerate() {
            // SAFETY: the caller promises the whole range is writable.
            unsafe { ((dst as *mut u8).add(i * width + j)).write(*byte) }
        }
    }
}

/// Read `len` bytes at `addr`, which must lie in one of `memory`'s ranges.
pub fn read(memory: &Memory, addr: u64, len: usize, what: &str) -> Outcome<Vec<u8>> {
    memory.check(addr, len, what)?;
    let mut out = vec![0u8; len];
    // SAFETY: the range was just checked to lie inside a live range of this registry,
    // whose memory stays allocated while the caller holds `memory`.
    unsafe { copy(out.as_mut_ptr() as u64, addr, len) };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 1 << 20;

    #[test]
    fn each_device_has_its_own_allocations_and_limit() {
        let mut m = Memory::default();
        let a = m.alloc(600, RegionKind::Device, 0, 1000).unwrap();
        let full = m.alloc(401, RegionKind::Managed, 0, 1000).unwrap_err();
        assert_eq!(full.code, CUDA_ERROR_OUT_OF_MEMORY);
        assert!(
            full.detail.contains("device 0 has 600 of its 1000"),
            "{full:?}"
        );
        assert!(full.detail.contains(MEMORY_ENV), "{full:?}");
        let b = m.alloc(400, RegionKind::Managed, 0, 1000).unwrap();
        assert_eq!(m.allocated(0), 1000);
        // Another device's memory, and pinned host memory, are not device 0's.
        let c = m.alloc(1000, RegionKind::Device, 1, 1000).unwrap();
        m.alloc(5000, RegionKind::Pinned, 0, 1000).unwrap();
        assert_eq!((m.allocated(0), m.allocated(1)), (1000, 1000));
        assert!(m.alloc(1, RegionKind::Device, 1, 1000).is_err());
        m.free(a, &[RegionKind::Device]).unwrap();
        assert_eq!(m.allocated(0), 400);
        m.alloc(600, RegionKind::Device, 0, 1000).unwrap();
        m.free(b, &[RegionKind::Managed]).unwrap();
        m.free(c, &[RegionKind::Device]).unwrap();
        assert_eq!((m.allocated(0), m.allocated(1)), (600, 0));
    }

    #[test]
    fn allocations_are_aligned_zeroed_and_checked() {
        let mut m = Memory::default();
        let a = m.alloc(100, RegionKind::Device, 0, LIMIT).unwrap();
        assert_eq!(a % DEVICE_ALIGN as u64, 0);
        assert_eq!(read(&m, a, 100, "test").unwrap(), vec![0u8; 100]);
        assert!(m.check(a, 100, "x").is_ok());
        assert!(m.check(a + 50, 50, "x").is_ok());
        let past = m.check(a + 50, 51, "x").unwrap_err();
        assert!(past.detail.contains("runs past its end"), "{past:?}");
        assert!(m.check(8, 1, "x").is_err());
        assert!(m.alloc(0, RegionKind::Device, 0, LIMIT).is_err());
        // Not the start, the wrong kind, twice.
        assert!(m.free(a + 8, &[RegionKind::Device]).is_err());
        assert!(m.free(a, &[RegionKind::Pinned]).is_err());
        m.free(a, &[RegionKind::Device]).unwrap();
        assert!(m.free(a, &[RegionKind::Device]).is_err());
        assert!(m.check(a, 1, "x").is_err());
    }

    #[test]
    fn copies_and_fills_move_bytes() {
        let mut m = Memory::default();
        let a = m.alloc(16, RegionKind::Device, 0, LIMIT).unwrap();
        let src = [1u8, 2, 3, 4];
        // SAFETY: `a` has 16 bytes; `src` has 4.
        unsafe { copy(a + 4, src.as_ptr() as u64, 4) };
        // SAFETY: 2 words of 4 bytes at `a + 8`, inside the 16.
        unsafe { fill(a + 8, 0xaabb_ccdd, 4, 2) };
        assert_eq!(
            read(&m, a, 16, "t").unwrap(),
            [0, 0, 0, 0, 1, 2, 3, 4, 0xdd, 0xcc, 0xbb, 0xaa, 0xdd, 0xcc, 0xbb, 0xaa]
        );
    }

    #[test]
    fn host_registration_refuses_overlaps() {
        let mut m = Memory::default();
        let host = [0u8; 64];
        let p = host.as_ptr() as u64;
        m.register_host(p, 64).unwrap();
        let again = m.register_host(p + 8, 8).unwrap_err();
        assert_eq!(again.code, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
        assert_eq!(m.host_device_pointer(p + 8), Ok(p + 8));
        assert!(m.unregister_host(p + 8).is_err());
        m.unregister_host(p).unwrap();
        assert!(m.host_device_pointer(p).is_err());
    }
}
