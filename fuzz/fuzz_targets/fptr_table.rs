//! Offload entries decoded from fuzzer bytes -> entry classification -> the indirect
//! function table (`fptr::build`, `from_rows`, `vtable_pairs`), as `load_binary` does it
//! with the device addresses a backend would resolve. Never panics; every table it builds
//! is sorted, duplicate-free and complete (a host address that only functions share keeps
//! its first target; rows to null or to their own host address are left out), and every
//! error is a real conflict (a vtable word among them).
#![no_main]
use host_plugin::generic::host_entry::{
    EntryKind, HostEntry, HostOffloadEntry, FLAG_INDIRECT, FLAG_INDIRECT_VTABLE,
};
use host_plugin::generic::table::fptr::{self, FptrError, IndirectPair, Origin};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use std::collections::{HashMap, HashSet};
use std::ffi::CString;

/// A few addresses shared by many entries, so duplicates and conflicts are common.
const ADDRS: [u64; 6] = [0, 8, 0x1000, 0x1008, u64::MAX, 0x8000_0000_0000_0000];

fn addr(u: &mut Unstructured) -> Result<u64> {
    Ok(if u.arbitrary::<bool>()? {
        ADDRS[u.choose_index(ADDRS.len())?]
    } else {
        u.arbitrary()?
    })
}

/// One entry as a host program would hand it over, plus what the device answers for it.
struct Case {
    entry: HostOffloadEntry<'static>,
    /// The device address the backend resolves for its symbol.
    device_addr: u64,
    /// For vtable entries: the device vtable's bytes.
    device_vtable: Vec<u8>,
}

fn case(u: &mut Unstructured) -> Result<Option<Case>> {
    let name: Vec<u8> = u.arbitrary()?;
    let Ok(name) = CString::new(name) else {
        // libomptarget names are C strings: an interior NUL cannot reach the plugin.
        return Ok(None);
    };
    let flags = match u.choose_index(5)? {
        0 => 0,
        1 => FLAG_INDIRECT,
        2 => FLAG_INDIRECT | FLAG_INDIRECT_VTABLE,
        3 => u.choose(&[0x2, 0x4, 0x1, 0x10, i32::MIN, -1])?.to_owned(),
        _ => u.arbitrary()?,
    };
    let size = match u.choose_index(3)? {
        0 => *u.choose(&[0u64, 4, 8, 16, 24])?,
        1 => u.int_in_range(0..=256u64)?,
        _ => u.arbitrary()?,
    };
    let host_addr = addr(u)?;
    let device_addr = addr(u)?;
    // The ABI layer copies `size` bytes of host vtable; keep it bounded here.
    let vt_len = usize::try_from(size.min(512)).unwrap_or(0);
    let host_vtable = if flags & FLAG_INDIRECT_VTABLE != 0 && u.arbitrary::<bool>()? {
        let mut v = Vec::with_capacity(vt_len);
        for _ in 0..vt_len / 8 {
            v.extend_from_slice(&addr(u)?.to_ne_bytes());
        }
        v.resize(vt_len, 0);
        Some(v)
    } else {
        None
    };
    let mut device_vtable = Vec::with_capacity(vt_len);
    for _ in 0..vt_len / 8 {
        device_vtable.extend_from_slice(&addr(u)?.to_ne_bytes());
    }
    Ok(Some(Case {
        entry: HostOffloadEntry {
            host_addr,
            name: name.into(),
            size,
            flags,
            host_vtable,
        },
        device_addr,
        device_vtable,
    }))
}

/// The documented classification, restated: what each flag/size combination means.
/// LLVM's loader rule (`setupIndirectCallTable`): either bit makes an entry indirect,
/// and 0x20 makes it a vtable, with or without 0x08.
fn expected_kind(e: &HostOffloadEntry) -> Option<EntryKind> {
    let vtable = e.flags & FLAG_INDIRECT_VTABLE != 0;
    let indirect = e.flags & FLAG_INDIRECT != 0 || vtable;
    match (indirect, vtable, e.size) {
        (false, _, 0) => Some(EntryKind::Kernel),
        (false, _, _) => Some(EntryKind::Global),
        (true, true, s) if s != 0 && s % 8 == 0 => Some(EntryKind::IndirectVtable),
        (true, true, _) => None,
        (true, false, 0) => Some(EntryKind::IndirectFunction),
        (true, false, 8) => Some(EntryKind::IndirectThroughGlobal),
        (true, false, _) => None,
    }
}

fn check_table(pairs: &[IndirectPair]) {
    let result = fptr::build(pairs.to_vec());
    // What the table must say: each host address's first target; an address with two
    // targets is shared when all its rows are functions, else a conflict.
    let mut want: HashMap<u64, u64> = HashMap::new();
    let mut targets: HashMap<u64, HashSet<u64>> = HashMap::new();
    let mut has_word: HashSet<u64> = HashSet::new();
    // Rows that translate nothing (of the null host address, to 0, or to their own host
    // address) are left out.
    for p in pairs
        .iter()
        .filter(|p| p.host_ptr != 0 && p.tgt_ptr != 0 && p.tgt_ptr != p.host_ptr)
    {
        want.entry(p.host_ptr).or_insert(p.tgt_ptr);
        targets.entry(p.host_ptr).or_default().insert(p.tgt_ptr);
        if !p.origin.is_function() {
            has_word.insert(p.host_ptr);
        }
    }
    let several = |h: &u64| targets.get(h).is_some_and(|t| t.len() > 1);
    let conflict = targets.keys().any(|h| several(h) && has_word.contains(h));
    match result {
        Ok(table) => {
            assert!(!conflict, "a conflicting pair set was accepted");
            let rows = &table.rows;
            assert!(rows.windows(2).all(|w| w[0].host_ptr < w[1].host_ptr));
            assert_eq!(rows.len(), want.len());
            for row in rows {
                assert_eq!(want.get(&row.host_ptr), Some(&row.tgt_ptr));
            }
            assert_eq!(
                table.shared.len(),
                targets.keys().filter(|h| several(h)).count()
            );
            for shared in &table.shared {
                assert_eq!(Some(&shared.targets[0].0), want.get(&shared.host));
                assert!(shared.targets.iter().all(|(_, o)| o.is_function()));
            }
            assert_eq!(fptr::as_bytes(rows).len(), rows.len() * 16);
            // The whole-table path (`set_function_ptr_map`) accepts its own output as is.
            assert_eq!(fptr::from_rows(rows).as_ref(), Ok(rows));
        }
        Err(FptrError::Conflict {
            host,
            first_tgt,
            second_tgt,
            ..
        }) => {
            assert!(conflict, "a consistent pair set was rejected");
            assert!(has_word.contains(&host));
            assert_ne!(first_tgt, second_tgt);
            let of_host = &targets[&host];
            assert!(of_host.contains(&first_tgt) && of_host.contains(&second_tgt));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    // All cases first: the pairs borrow their names from them.
    let mut cases = Vec::new();
    for _ in 0..64 {
        if u.is_empty() {
            break;
        }
        if let Ok(Some(c)) = case(&mut u) {
            cases.push(c);
        }
    }
    let mut pairs = Vec::new();
    for c in &cases {
        let kind = c.entry.kind();
        assert_eq!(
            kind,
            expected_kind(&c.entry),
            "flags {:#x} size {}",
            c.entry.flags,
            c.entry.size
        );
        let name = c.entry.name.to_bytes();
        match kind {
            Some(EntryKind::IndirectFunction | EntryKind::IndirectThroughGlobal) => {
                pairs.push(IndirectPair {
                    host_ptr: c.entry.host_addr,
                    tgt_ptr: c.device_addr,
                    origin: Origin::Entry(name),
                })
            }
            Some(EntryKind::IndirectVtable) => {
                if let Some(host) = &c.entry.host_vtable {
                    let slots = fptr::vtable_pairs(name, host, &c.device_vtable);
                    // One pair per non-null host slot, in slot order.
                    let nonnull = host
                        .chunks_exact(8)
                        .zip(c.device_vtable.chunks_exact(8))
                        .filter(|(h, _)| h.iter().any(|&b| b != 0))
                        .count();
                    assert_eq!(slots.len(), nonnull);
                    pairs.extend(slots);
                    pairs.extend(fptr::vtable_word_pairs(
                        name,
                        c.entry.host_addr,
                        c.device_addr,
                        host.len(),
                    ));
                }
            }
            _ => {}
        }
    }
    check_table(&pairs);
});
