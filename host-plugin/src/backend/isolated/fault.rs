//! A device fault, told the way a user can act on it: the faulting address, what it is
//! in the host process (its mapping and, where the symbol tables tell, the symbol and
//! offset: `_ZTV5Child+16`), the kind of access, and where on the device it happened.

use super::address_space::{overlap, Layout, Mapping};
use super::protocol::FaultRecord;
use object::{Object, ObjectSegment, ObjectSymbol};

/// x86 trap numbers (`REG_TRAPNO`).
const TRAP_PAGE_FAULT: u64 = 14;
const TRAP_PROTECTION: u64 = 13;
/// Page-fault error code bits.
const PF_WRITE: u64 = 1 << 1;
const PF_FETCH: u64 = 1 << 4;

/// What kind of access faulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    /// A call or jump to the address (the instruction fetch faulted).
    Call,
    /// Not a memory access the CPU could name (an illegal instruction, an abort).
    Other,
}

impl Access {
    pub fn of(record: &FaultRecord) -> Access {
        let memory = matches!(record.signal as i32, libc::SIGSEGV | libc::SIGBUS);
        if !memory {
            return Access::Other;
        }
        if record.trap == TRAP_PAGE_FAULT {
            if record.error_code & PF_FETCH != 0 || record.ip == record.addr {
                Access::Call
            } else if record.error_code & PF_WRITE != 0 {
                Access::Write
            } else {
                Access::Read
            }
        } else if record.ip == record.addr {
            Access::Call
        } else {
            Access::Other
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Access::Read => "read of",
            Access::Write => "write to",
            Access::Call => "call to",
            Access::Other => "access to",
        }
    }
}

/// `symbol+offset` for the address at file offset `file_offset` of the ELF file `elf`
/// (the containing symbol, else the nearest function before it).
pub fn symbolize(elf: &[u8], file_offset: u64) -> Option<String> {
    let file = object::File::parse(elf).ok()?;
    let vaddr = file.segments().find_map(|s| {
        let (start, size) = s.file_range();
        (start <= file_offset && file_offset < start + size)
            .then(|| s.address() + (file_offset - start))
    })?;
    let mut best: Option<(u64, String)> = None;
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        let (addr, size) = (sym.address(), sym.size());
        let Ok(name) = sym.name() else { continue };
        if name.is_empty() || addr == 0 || addr > vaddr {
            continue;
        }
        if vaddr < addr + size {
            return Some(with_offset(name, vaddr - addr));
        }
        let function = sym.kind() == object::SymbolKind::Text;
        if function && best.as_ref().is_none_or(|(a, _)| *a < addr) {
            best = Some((addr, name.to_owned()));
        }
    }
    best.map(|(addr, name)| with_offset(&name, vaddr - addr))
}

fn with_offset(name: &str, offset: u64) -> String {
    if offset == 0 {
        name.to_owned()
    } else {
        format!("{name}+{offset}")
    }
}

/// Where `addr` lies in a process whose mappings are `maps`, with the symbol from the
/// mapped file (read with `read_file`) where one is found.
pub fn describe_address(
    addr: u64,
    maps: &[Mapping],
    read_file: impl Fn(&Mapping) -> Option<Vec<u8>>,
) -> Option<String> {
    let m = maps.iter().find(|m| m.contains(addr))?;
    let symbol = read_file(m).and_then(|elf| symbolize(&elf, m.offset + (addr - m.start)));
    let what = match m.path.as_str() {
        "" => format!("anonymous memory, {}", m.perms),
        p if p.starts_with("/memfd:omptarget-rs-image-") => "the device image".to_owned(),
        "[heap]" => "the heap".to_owned(),
        "[stack]" => "the main thread's stack".to_owned(),
        p if p.starts_with('[') => p.to_owned(),
        p => format!("{}, {}", p.trim_end_matches(" (deleted)"), m.perms),
    };
    Some(match symbol {
        Some(s) => format!("{s} in {what}"),
        None => what,
    })
}

/// A mapped file's bytes, where the mapping is of a regular file that can still be read.
pub fn read_mapped_file(m: &Mapping) -> Option<Vec<u8>> {
    if !m.path.starts_with('/') || m.path.ends_with(" (deleted)") {
        return None;
    }
    std::fs::read(&m.path).ok()
}

/// Everything the user gets for one fault.
pub struct FaultReport<'a> {
    pub record: FaultRecord,
    pub kernel: Option<String>,
    /// The host process's mappings, read when the fault arrived.
    pub host_maps: &'a [Mapping],
    /// Where the faulting instruction is, on the device (for a call, where the call was).
    pub device_ip: Option<String>,
    pub layout: Layout,
}

impl std::fmt::Display for FaultReport<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.record;
        let signal = signal_name(r.signal).unwrap_or("a signal");
        let kernel = self
            .kernel
            .as_deref()
            .map_or(String::new(), |k| format!("kernel `{k}` "));
        if r.signal as i32 == libc::SIGABRT {
            write!(
                f,
                "{kernel}aborted on the device ({signal}: abort() or a failed assert)"
            )?;
        } else if r.signal as i32 == libc::SIGILL {
            write!(
                f,
                "{kernel}ran an illegal instruction on the device ({signal}; a trap?)"
            )?;
        } else if r.trap == TRAP_PROTECTION && r.addr == 0 {
            write!(
                f,
                "{kernel}faulted on the device: an access through a non-canonical address \
                 (a protection fault, {signal}: a corrupt or uninitialised pointer)"
            )?;
        } else {
            let access = Access::of(r);
            write!(
                f,
                "{kernel}faulted on the device: {} address {:#x}",
                access.noun(),
                r.addr
            )?;
            write!(f, " ({})", self.where_in_host(r.addr))?;
        }
        let (what, at) = if Access::of(r) == Access::Call && r.return_address != 0 {
            ("called from device code returning to", r.return_address)
        } else {
            ("at device instruction", r.ip)
        };
        write!(f, "; {what} {at:#x}")?;
        if let Some(place) = &self.device_ip {
            write!(f, " ({place})")?;
        }
        Ok(())
    }
}

impl FaultReport<'_> {
    /// What the faulting address is to the host, and what to do about it.
    fn where_in_host(&self, addr: u64) -> String {
        if addr < 4096 {
            return "a null pointer".into();
        }
        let at = (addr, addr + 1);
        if overlap(at, self.layout.device_memory()) {
            return "device memory that is not allocated: freed, or never allocated".into();
        }
        if overlap(at, self.layout.host_view()) {
            return "the plugin's host view of device memory, a host address".into();
        }
        if self.layout.window.contains(addr) {
            return "an address of the device's own that is not mapped".into();
        }
        let advice = if Access::of(&self.record) == Access::Call {
            "a device cannot run host code: declare the function `declare target \
             indirect`, so that calls through its host address are translated"
        } else {
            "a device cannot reach host memory: map the data"
        };
        match describe_address(addr, self.host_maps, read_mapped_file) {
            Some(place) => format!("a host address: {place}; {advice}"),
            None => "mapped neither on the device nor in the host".into(),
        }
    }
}

/// A signal's name, for messages.
pub fn signal_name(signal: u64) -> Option<&'static str> {
    Some(match signal as i32 {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::isolated::address_space::parse_maps;

    fn record(signal: i32, addr: u64, ip: u64, error_code: u64, trap: u64) -> FaultRecord {
        FaultRecord {
            signal: signal as u64,
            code: 0,
            addr,
            ip,
            error_code,
            trap,
            return_address: if addr == ip { 0x2000_1000_0040 } else { 0 },
        }
    }

    #[test]
    fn the_access_kind_comes_from_the_page_fault_error_code() {
        let s = libc::SIGSEGV;
        assert_eq!(
            Access::of(&record(s, 0x1000, 0x2000, 0x4, 14)),
            Access::Read
        );
        assert_eq!(
            Access::of(&record(s, 0x1000, 0x2000, 0x6, 14)),
            Access::Write
        );
        assert_eq!(
            Access::of(&record(s, 0x1000, 0x1000, 0x14, 14)),
            Access::Call
        );
        assert_eq!(
            Access::of(&record(libc::SIGILL, 0, 0x1000, 0, 6)),
            Access::Other
        );
    }

    /// This test program's own symbol: the report names it, with the offset.
    #[test]
    fn a_host_address_is_named_by_its_symbol_and_mapping() {
        static TABLE: [u64; 4] = [1, 2, 3, 4];
        let addr = TABLE.as_ptr() as u64 + 16;
        let maps = crate::backend::isolated::address_space::read_maps(None).unwrap();
        let place = describe_address(addr, &maps, read_mapped_file).expect("mapped");
        assert!(place.contains("TABLE") && place.contains("+16"), "{place}");
        let exe = std::env::current_exe().unwrap();
        assert!(place.contains(&*exe.to_string_lossy()), "{place}");
    }

    #[test]
    fn the_report_says_read_write_or_call_and_where() {
        let maps = parse_maps(
            "555500000000-555500001000 r--p 00000000 fd:01 1 /nonexistent/prog\n\
             7f0000000000-7f0000100000 rw-p 00000000 00:00 0 [heap]\n",
        );
        let layout = Layout {
            window: crate::backend::isolated::address_space::Window {
                base: 0x2000_0000_0000,
                size: 1 << 34,
            },
            device_memory_bytes: 1 << 30,
            host_memory_bytes: 1 << 28,
        };
        let report = |r| {
            FaultReport {
                record: r,
                kernel: Some("k".into()),
                host_maps: &maps,
                device_ip: Some("f+4 in the device image".into()),
                layout,
            }
            .to_string()
        };
        let text = report(record(
            libc::SIGSEGV,
            0x5555_0000_0010,
            0x2000_1000_0000,
            4,
            14,
        ));
        assert!(text.starts_with("kernel `k` faulted on the device: read of address 0x555500000010 (a host address: /nonexistent/prog, r--p;"), "{text}");
        assert!(
            text.ends_with("; at device instruction 0x200010000000 (f+4 in the device image)"),
            "{text}"
        );
        let text = report(record(
            libc::SIGSEGV,
            0x7f00_0000_0100,
            0x2000_1000_0000,
            6,
            14,
        ));
        assert!(
            text.contains("write to address 0x7f0000000100 (a host address: the heap;"),
            "{text}"
        );
        let text = report(record(
            libc::SIGSEGV,
            0x5555_0000_0000,
            0x5555_0000_0000,
            0x14,
            14,
        ));
        assert!(text.contains("call to address 0x555500000000"), "{text}");
        assert!(text.contains("declare target"), "{text}");
        assert!(
            text.contains("called from device code returning to 0x200010000040"),
            "{text}"
        );
        let text = report(record(
            libc::SIGSEGV,
            0x2000_0000_1000,
            0x2000_1000_0000,
            4,
            14,
        ));
        assert!(
            text.contains("device memory that is not allocated"),
            "{text}"
        );
        let text = report(record(libc::SIGSEGV, 8, 0x2000_1000_0000, 4, 14));
        assert!(text.contains("(a null pointer)"), "{text}");
        let text = report(record(libc::SIGABRT, 0, 0x2000_1000_0000, 0, 0));
        assert!(text.contains("aborted on the device"), "{text}");
    }
}
