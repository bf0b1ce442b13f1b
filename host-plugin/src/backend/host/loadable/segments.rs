//! The image's PT_LOAD segments as the loader maps them: where each lies in memory, which
//! file bytes back it, whether it holds code or writable data; every other check reads
//! the image through them.

use object::elf::{self, ProgramHeader64};
use object::read::elf::ProgramHeader;
use object::LittleEndian as LE;
use std::ops::Range;

/// One PT_LOAD: where it lies in memory and which file bytes back it.
struct Load {
    mem: Range<u64>,
    file_start: u64,
    file_len: u64,
    exec: bool,
    writable: bool,
}

pub(super) struct Segments<'a> {
    pub(super) bytes: &'a [u8],
    loads: Vec<Load>,
}

impl<'a> Segments<'a> {
    /// `addr .. addr + len` lies in one segment's memory.
    pub(super) fn in_memory(&self, addr: u64, len: u64) -> bool {
        self.find(addr, len).is_some()
    }

    fn find(&self, addr: u64, len: u64) -> Option<&Load> {
        let end = addr.checked_add(len)?;
        self.loads
            .iter()
            .find(|l| l.mem.start <= addr && end <= l.mem.end)
    }

    /// The file bytes the loader maps at `addr .. addr + len`, if all are file-backed.
    pub(super) fn file_bytes(&self, addr: u64, len: u64) -> Option<&'a [u8]> {
        let l = self.find(addr, len)?;
        let off = addr - l.mem.start;
        if off.checked_add(len)? > l.file_len {
            return None;
        }
        let start = usize::try_from(l.file_start + off).ok()?;
        self.bytes
            .get(start..start.checked_add(usize::try_from(len).ok()?)?)
    }

    /// The loader maps file offset `offset` at image address `addr`.
    pub(super) fn maps_at_offset(&self, addr: u64, offset: u64) -> bool {
        self.find(addr, 0).is_some_and(|l| {
            addr - l.mem.start < l.file_len && l.file_start + (addr - l.mem.start) == offset
        })
    }

    pub(super) fn executable(&self, addr: u64) -> bool {
        self.find(addr, 1).is_some_and(|l| l.exec)
    }

    /// Relocations write here: a read-only or code page would fault in the loader.
    pub(super) fn writable(&self, addr: u64, len: u64) -> bool {
        self.find(addr, len).is_some_and(|l| l.writable)
    }
}

pub(super) fn segments<'a>(
    phdrs: &[ProgramHeader64<LE>],
    bytes: &'a [u8],
) -> Result<Segments<'a>, String> {
    let mut loads: Vec<Load> = Vec::new();
    for ph in phdrs.iter().filter(|p| p.p_type(LE) == elf::PT_LOAD) {
        let (vaddr, memsz) = (ph.p_vaddr(LE), ph.p_memsz(LE));
        let (offset, filesz, align) = (ph.p_offset(LE), ph.p_filesz(LE), ph.p_align(LE));
        let end = vaddr.checked_add(memsz).ok_or("segment wraps")?;
        let exec = ph.p_flags(LE) & elf::PF_X != 0;
        // An executable segment's zero fill would be run as code.
        if filesz > memsz
            || (exec && filesz != memsz)
            || !align.is_power_of_two()
            || vaddr % align != offset % align
        {
            return Err(format!("inconsistent PT_LOAD at {vaddr:#x}"));
        }
        if loads.last().is_some_and(|l| l.mem.end > vaddr) {
            return Err("PT_LOAD segments overlap or are out of order".into());
        }
        loads.push(Load {
            mem: vaddr..end,
            file_start: offset,
            file_len: filesz,
            exec,
            writable: ph.p_flags(LE) & elf::PF_W != 0,
        });
    }
    if loads.is_empty() {
        return Err("no PT_LOAD segment".into());
    }
    Ok(Segments { bytes, loads })
}

/// The loader mprotects the RELRO range read-only: outside the image's writable segment
/// it would seal whatever else is mapped there.
pub(super) fn check_relro(
    phdrs: &[ProgramHeader64<LE>],
    segs: &Segments<'_>,
) -> Result<(), String> {
    for ph in phdrs {
        if ph.p_type(LE) == elf::PT_GNU_RELRO && !segs.writable(ph.p_vaddr(LE), ph.p_memsz(LE)) {
            return Err("PT_GNU_RELRO is not inside a writable segment".into());
        }
    }
    Ok(())
}
