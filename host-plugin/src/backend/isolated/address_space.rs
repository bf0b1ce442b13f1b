//! The two address spaces kept apart: what `/proc/PID/maps` says is mapped, address
//! ranges reserved inaccessible (`PROT_NONE`, no memory behind them), and the device
//! window.
//!
//! How no host address can reach anything on the device:
//! - the host reserves a window ([`Window`]) that it never uses; the device process
//!   keeps its arena (all device memory) and everything it maps later (images, libomp,
//!   thread stacks, heap) inside it;
//! - the device process, at start, reserves every other free range of its address space
//!   ([`reserve_all_gaps`]): so every host address, mapped now or later, is either
//!   reserved there or covered by one of its start-up mappings;
//! - those start-up mappings (its executable, the C library, its stack) must not
//!   overlap the host's (else it execs itself again, to a new random layout), and the
//!   host reserves them in its own space, so it never maps anything there later.

use super::protocol::Range;
use std::io;

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// `rwxp` as the kernel prints it.
    pub perms: String,
    pub offset: u64,
    /// The file, `[heap]`, `[stack]`, ... or empty (anonymous).
    pub path: String,
}

impl Mapping {
    /// Readable, writable or executable: something an access could reach.
    pub fn accessible(&self) -> bool {
        self.perms.bytes().take(3).any(|b| b != b'-')
    }

    pub fn range(&self) -> Range {
        (self.start, self.end)
    }

    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }
}

/// The kernel's vsyscall page (the same in every process, outside the user range).
const VSYSCALL: &str = "[vsyscall]";

/// The mappings of process `pid` (None: this process).
pub fn read_maps(pid: Option<u32>) -> io::Result<Vec<Mapping>> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/maps"),
        None => "/proc/self/maps".to_owned(),
    };
    Ok(parse_maps(&std::fs::read_to_string(path)?))
}

/// `/proc/PID/maps` text as mappings; lines that do not parse are left out.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mapping> {
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?.to_owned();
    let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
    let _device = fields.next()?;
    let _inode = fields.next()?;
    let path = fields.next().unwrap_or("").trim_start().to_owned();
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms,
        offset,
        path,
    })
}

/// Whether a mapping is the kernel's vsyscall page (above the user range, execute-only,
/// the same in every process).
pub fn is_vsyscall(m: &Mapping) -> bool {
    m.path == VSYSCALL
}

/// The user ranges of `maps` (without the vsyscall page), sorted.
pub fn user_ranges(maps: &[Mapping]) -> Vec<Range> {
    maps.iter()
        .filter(|m| !is_vsyscall(m))
        .map(Mapping::range)
        .collect()
}

/// Whether `[a, b)` and `[c, d)` share an address.
pub fn overlap((a, b): Range, (c, d): Range) -> bool {
    a < d && c < b
}

/// How many ranges of `ranges` share an address with some range of `others` (both
/// lists sorted by start, as the kernel prints them).
pub fn count_overlapping(ranges: &[Range], others: &[Range]) -> usize {
    let mut j = 0;
    let mut count = 0;
    for &r in ranges {
        while j < others.len() && others[j].1 <= r.0 {
            j += 1;
        }
        if others[j..]
            .iter()
            .take_while(|o| o.0 < r.1)
            .any(|&o| overlap(r, o))
        {
            count += 1;
        }
    }
    count
}

/// Reserve `[start, end)` inaccessible: no memory behind it, and nothing else can be
/// mapped there without MAP_FIXED. Fails where anything is mapped in the range.
pub fn reserve((start, end): Range) -> io::Result<()> {
    let len = usize::try_from(end - start).map_err(|_| io::Error::other("range too long"))?;
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping (the call fails
    // with EEXIST instead), so nothing of this process's memory changes; the new
    // mapping is PROT_NONE anonymous memory that nothing refers to.
    let p = unsafe {
        libc::mmap(
            start as *mut libc::c_void,
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE
                | libc::MAP_ANONYMOUS
                | libc::MAP_NORESERVE
                | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    if p as u64 != start {
        // A kernel without MAP_FIXED_NOREPLACE takes it as a hint: undo.
        // SAFETY: `p..p+len` is the mapping just made, which nothing uses.
        unsafe { libc::munmap(p, len) };
        return Err(io::Error::from_raw_os_error(libc::EEXIST));
    }
    Ok(())
}

/// Make `[start, end)`, which the caller owns, a reservation again (whatever was mapped
/// there is replaced).
pub fn reserve_over((start, end): Range) -> io::Result<()> {
    // SAFETY: MAP_FIXED replaces the caller's own range only (its contract) with
    // inaccessible anonymous memory.
    let p = unsafe {
        libc::mmap(
            start as *mut libc::c_void,
            (end - start) as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The host's reserved window, where the device keeps everything it maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub base: u64,
    pub size: u64,
}

/// Addresses tried for the window, far from where Linux puts programs (PIE executables
/// near 0x5555_5555_0000, libraries and stacks below 0x7fff_ffff_ffff, non-PIE ones at
/// 0x40_0000) in the 47-bit user address space.
const WINDOW_BASES: &[u64] = &[
    0x2000_0000_0000,
    0x2800_0000_0000,
    0x3000_0000_0000,
    0x1800_0000_0000,
    0x1000_0000_0000,
];

impl Window {
    /// Reserve a window of `size` bytes in this process at one of the usual places.
    pub fn reserve(size: u64) -> io::Result<Window> {
        let mut last = io::Error::other("no address tried");
        for &base in WINDOW_BASES {
            match reserve((base, base + size)) {
                Ok(()) => return Ok(Window { base, size }),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    pub fn range(&self) -> Range {
        (self.base, self.base + self.size)
    }

    pub fn contains(&self, addr: u64) -> bool {
        self.base <= addr && addr < self.base + self.size
    }
}

/// How the device process uses the window (the same on both sides, from the window
/// and two sizes): device memory at its base, then the host memory the device reaches
/// (at the same address in both processes), then the host's view of device memory
/// (a host mapping, so reserved inaccessible in the device), then the free rest, where
/// the device process maps everything else (images, libomp, stacks, heap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub window: Window,
    pub device_memory_bytes: u64,
    pub host_memory_bytes: u64,
}

impl Layout {
    pub fn device_memory(&self) -> Range {
        let base = self.window.base;
        (base, base + self.device_memory_bytes)
    }

    pub fn host_memory(&self) -> Range {
        let start = self.device_memory().1;
        (start, start + self.host_memory_bytes)
    }

    /// Where the host maps its view of device memory.
    pub fn host_view(&self) -> Range {
        let start = self.host_memory().1;
        (start, start + self.device_memory_bytes)
    }

    /// What the device process maps everything else in.
    pub fn device_free(&self) -> Range {
        (self.host_view().1, self.window.base + self.window.size)
    }
}

/// The highest user address plus one on x86-64 with 4-level paging (the kernel's
/// TASK_SIZE); mappings above it need a hint (5-level paging), which nothing here uses.
pub const USER_END: u64 = 0x7fff_ffff_f000;

/// The lowest address a process may map (`vm.mmap_min_addr`, 64 KiB by default).
fn mmap_min_addr() -> u64 {
    std::fs::read_to_string("/proc/sys/vm/mmap_min_addr")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0x10000)
        .max(0x1000)
}

/// How far the main thread's stack may grow below its mapping: kept free, not reserved.
pub fn stack_growth_room() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `limit`.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut limit) };
    let wanted = if rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY {
        limit.rlim_cur
    } else {
        256 << 20
    };
    wanted.clamp(8 << 20, 256 << 20)
}

/// The free ranges of an address space whose mappings are `maps`, between the lowest
/// mappable address and [`USER_END`], less `keep_free` (ranges to leave unreserved).
pub fn gaps(maps: &[Mapping], keep_free: &[Range]) -> Vec<Range> {
    let mut used: Vec<Range> = user_ranges(maps);
    used.extend_from_slice(keep_free);
    used.sort_unstable();
    let mut out = Vec::new();
    let mut at = mmap_min_addr();
    for (start, end) in used {
        if start > at {
            out.push((at, start.min(USER_END)));
        }
        at = at.max(end);
        if at >= USER_END {
            break;
        }
    }
    if at < USER_END {
        out.push((at, USER_END));
    }
    out.retain(|&(a, b)| a < b);
    out
}

/// Reserve every gap of this process's address space but `keep_free`: (reserved,
/// failed) counts. A failure (an address-space limit, say) leaves that gap free.
pub fn reserve_all_gaps(keep_free: &[Range]) -> io::Result<(u64, Vec<Range>)> {
    let maps = read_maps(None)?;
    let mut reserved = 0;
    let mut failed = Vec::new();
    for gap in gaps(&maps, keep_free) {
        match reserve(gap) {
            Ok(()) => reserved += 1,
            Err(_) => failed.push(gap),
        }
    }
    Ok((reserved, failed))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0000000-55d0c0002000 r--p 00000000 fd:01 1234   /usr/bin/prog
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0      [heap]
7f0000000000-7f0000001000 ---p 00000000 00:00 0 
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0      [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0      [vsyscall]
";

    #[test]
    fn maps_lines_parse_with_and_without_a_path() {
        let maps = parse_maps(MAPS);
        assert_eq!(maps.len(), 5);
        assert_eq!(maps[0].path, "/usr/bin/prog");
        assert_eq!(maps[0].range(), (0x55d0_c000_0000, 0x55d0_c000_2000));
        assert_eq!(maps[2].path, "");
        assert!(!maps[2].accessible());
        assert!(maps[3].accessible() && maps[3].contains(0x7ffd_0000_0010));
        assert_eq!(user_ranges(&maps).len(), 4, "no vsyscall");
    }

    #[test]
    fn gaps_cover_everything_but_the_mappings_and_what_is_kept_free() {
        let maps = parse_maps(MAPS);
        let keep = [(0x2000_0000_0000, 0x2100_0000_0000)];
        let gaps = gaps(&maps, &keep);
        let mut all: Vec<Range> = user_ranges(&maps);
        all.extend(keep);
        all.extend(&gaps);
        all.sort_unstable();
        // Gaps, mappings and the kept range tile the user range without overlap.
        assert_eq!(all[0].0, mmap_min_addr());
        for pair in all.windows(2) {
            assert_eq!(pair[0].1, pair[1].0, "{pair:x?}");
        }
        assert_eq!(all.last().unwrap().1, USER_END);
        assert_eq!(count_overlapping(&gaps, &user_ranges(&maps)), 0);
    }

    #[test]
    fn overlaps_are_counted_per_range() {
        let a = [(0, 10), (20, 30), (40, 50)];
        let b = [(5, 6), (25, 45)];
        assert_eq!(count_overlapping(&a, &b), 3);
        assert_eq!(count_overlapping(&a, &[(10, 20), (30, 40)]), 0);
        assert_eq!(count_overlapping(&[], &b), 0);
    }

    #[test]
    fn a_reserved_range_cannot_be_reserved_twice_and_faults_on_access() {
        let window = Window::reserve(1 << 30).expect("a window");
        assert!(reserve((window.base, window.base + 4096)).is_err());
        let maps = read_maps(None).unwrap();
        let m = maps.iter().find(|m| m.contains(window.base)).unwrap();
        assert!(!m.accessible(), "{m:?}");
        // SAFETY: the window was reserved by this test only.
        unsafe { libc::munmap(window.base as *mut libc::c_void, window.size as usize) };
    }
}
