//! The host -> device function pointer table that `__kmpc_target_translate_fptr` searches.
//!
//! Pure: turns (host, device) address pairs into the sorted, duplicate-free table the
//! device runtime binary-searches. Keys are ordered as unsigned 64-bit addresses.
//!
//! **One host address, several device addresses.** The host's link may give several
//! functions one address where the device keeps them apart: clang aliases a derived
//! class's constructors and destructors to its base's when their bodies are the same
//! (`-mconstructor-aliases`, the default for ELF hosts; NVPTX and AMDGPU have no
//! aliases), and `--icf=all` folds functions of identical code. Calling any of the
//! device functions does what the host does at that address, so such an address is
//! kept with the device address of its first row in input (image entry) order, and the
//! others are reported ([`Table::shared`]). The rule applies when every row of the
//! address is a function: an indirect function entry or a vtable slot's contents.
//! Anything else is refused as inconsistent ([`FptrError::Conflict`]): a vtable word
//! (data, which no function and no other vtable shares an address with; `--icf=all`
//! folds only code), or a table handed over whole (`__tgt_rtl_set_function_ptr_map`),
//! whose author gave one address two targets.
//!
//! Rows that translate nothing are left out: a null device address, and the host
//! address itself (what the lookup returns for any address the table lacks). A vtable's
//! slots that hold no function give such rows: its offsets (the same on both sides) and
//! its RTTI pointer (null where the device has no RTTI, as on NVPTX). So is a row of the
//! null host address, which is no function's: the lookup keeps null null, which the
//! compiler plugin's per-call-site memo relies on (compiler-plugin/src/inline_lookup.rs).

use std::collections::{HashMap, HashSet};
use thiserror::Error;

/// One row of the device table: the device runtime's own type, so the plugin writes
/// exactly what `__kmpc_target_translate_fptr` reads.
pub use device_rtl::FptrMapEntry;

/// A pair found while loading an image, with the offload entry it came from (for errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndirectPair<'a> {
    pub host_ptr: u64,
    pub tgt_ptr: u64,
    pub origin: Origin<'a>,
}

/// Where a pair came from. Borrowed and formatted only when a message names it: a load
/// of a million entries would otherwise allocate a million names no one reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin<'a> {
    /// An offload entry, by name.
    Entry(&'a [u8]),
    /// What one slot of an indirect vtable entry holds (a host function).
    VtableSlot { entry: &'a [u8], slot: usize },
    /// The address of one word of an indirect vtable entry (where a vptr may point).
    VtableWord { entry: &'a [u8], word: usize },
    /// A row of a table handed over whole (`__tgt_rtl_set_function_ptr_map`).
    Row(usize),
}

impl Origin<'_> {
    /// True when the row's host address is a function's: the host link may have given
    /// it to several functions (see the module docs).
    pub fn is_function(&self) -> bool {
        matches!(self, Origin::Entry(_) | Origin::VtableSlot { .. })
    }
}

impl std::fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Entry(name) => write!(f, "{}", String::from_utf8_lossy(name)),
            Origin::VtableSlot { entry, slot } => {
                write!(f, "{}[{slot}]", String::from_utf8_lossy(entry))
            }
            Origin::VtableWord { entry, word } => {
                write!(f, "&{}[{word}]", String::from_utf8_lossy(entry))
            }
            Origin::Row(i) => write!(f, "row {i}"),
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FptrError {
    #[error(
        "host address {host:#x} is mapped to two device addresses: {first_tgt:#x} by entry \
         `{first}` and {second_tgt:#x} by entry `{second}`: {why}"
    )]
    Conflict {
        host: u64,
        first: String,
        first_tgt: u64,
        second: String,
        second_tgt: u64,
        why: &'static str,
    },
}

/// Why a host address with several device addresses was refused.
const WHY_ROWS: &str = "a table handed over whole must give each host address one device address";
const WHY_VTABLE_WORD: &str =
    "a vtable's words share their addresses with no function and no other \
     vtable, so the entries contradict each other";
const WHY_UNKNOWN: &str = "the rows' origins are unknown, so they cannot be told to be functions \
     that the host's link gave one address";

/// A host address that several device functions share: the host's link gave them one
/// address (a constructor or destructor alias, or code folded by `--icf=all`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedAddress<'a> {
    pub host: u64,
    /// Each device address with the first row that gave it, in input order. The table
    /// keeps the first.
    pub targets: Vec<(u64, Origin<'a>)>,
}

impl std::fmt::Display for SharedAddress<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let targets: Vec<String> = self
            .targets
            .iter()
            .map(|(tgt, origin)| format!("{tgt:#x} (`{origin}`)"))
            .collect();
        write!(
            f,
            "host address {:#x} is one function on the host and {} on the device (a \
             constructor/destructor alias or code the host's link folded): {}; it \
             translates to the first, {:#x}",
            self.host,
            self.targets.len(),
            targets.join(", "),
            self.targets[0].0
        )
    }
}

/// A built table: its rows, and the host addresses several device functions shared.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table<'a> {
    pub rows: Vec<FptrMapEntry>,
    pub shared: Vec<SharedAddress<'a>>,
}

/// Sort by host address, drop exact duplicates, keep the first device address of a
/// host address that several device functions share, refuse any other host address
/// with two targets.
pub fn build(pairs: Vec<IndirectPair>) -> Result<Table, FptrError> {
    let rows = pairs
        .iter()
        .map(|p| FptrMapEntry {
            host_ptr: p.host_ptr,
            tgt_ptr: p.tgt_ptr,
        })
        .collect();
    build_rows(rows, |hosts| {
        let mut origins: HashMap<u64, Vec<Origin>> = HashMap::new();
        for p in pairs.iter().filter(|p| hosts.contains(&p.host_ptr)) {
            origins.entry(p.host_ptr).or_default().push(p.origin);
        }
        origins
    })
}

/// [`build`] for rows gathered without their origins (a million-entry load would keep
/// 48 bytes per pair for names only an error reads): `origins(hosts)` gives, for each of
/// the host addresses `hosts` (those with several device addresses), the origins of its
/// input rows in input order. It is asked once, and only when there are such addresses.
pub fn build_rows<'a>(
    rows: Vec<FptrMapEntry>,
    origins: impl FnOnce(&HashSet<u64>) -> HashMap<u64, Vec<Origin<'a>>>,
) -> Result<Table<'a>, FptrError> {
    let (rows, collisions) = sorted_table(rows);
    if collisions.is_empty() {
        return Ok(Table {
            rows,
            shared: Vec::new(),
        });
    }
    let hosts: HashSet<u64> = collisions.iter().map(|c| c.host).collect();
    let mut origins = origins(&hosts);
    let shared = collisions
        .into_iter()
        .map(|c| {
            let of_host = origins.remove(&c.host).unwrap_or_default();
            c.judge(&of_host)
        })
        .collect::<Result<_, _>>()?;
    Ok(Table { rows, shared })
}

/// Validate a table handed to us whole (`__tgt_rtl_set_function_ptr_map`): sorted and
/// deduplicated as [`build`] does; a host address with two targets is refused.
pub fn from_rows(rows: &[FptrMapEntry]) -> Result<Vec<FptrMapEntry>, FptrError> {
    let table = build_rows(rows.to_vec(), |hosts| {
        let mut origins: HashMap<u64, Vec<Origin>> = HashMap::new();
        for (i, r) in rows.iter().enumerate() {
            if hosts.contains(&r.host_ptr) {
                origins.entry(r.host_ptr).or_default().push(Origin::Row(i));
            }
        }
        origins
    })?;
    Ok(table.rows)
}

/// The input rows of one host address that have more than one target: their targets in
/// input order.
struct Collision {
    host: u64,
    targets: Vec<u64>,
}

impl Collision {
    /// A [`SharedAddress`] when every row of the address that translates something is a
    /// function (`origins`: one per row, in input order), else the conflict between the
    /// first of those rows and the first with another target.
    fn judge<'a>(self, origins: &[Origin<'a>]) -> Result<SharedAddress<'a>, FptrError> {
        let known = origins.len() == self.targets.len();
        let useful: Vec<usize> = (0..self.targets.len())
            .filter(|&i| translates(self.host, self.targets[i]))
            .collect();
        let origin_of = |i: usize| origins.get(i).filter(|_| known);
        let why = if !known {
            Some(WHY_UNKNOWN)
        } else if useful
            .iter()
            .any(|&i| matches!(origin_of(i), Some(Origin::Row(_))))
        {
            Some(WHY_ROWS)
        } else if !useful
            .iter()
            .all(|&i| origin_of(i).is_some_and(Origin::is_function))
        {
            Some(WHY_VTABLE_WORD)
        } else {
            None
        };
        if let Some(why) = why {
            let first = useful[0];
            let first_tgt = self.targets[first];
            let second = useful
                .iter()
                .copied()
                .find(|&i| self.targets[i] != first_tgt)
                .unwrap_or(first);
            let name = |i: usize| origin_of(i).map_or_else(String::new, Origin::to_string);
            return Err(FptrError::Conflict {
                host: self.host,
                first: name(first),
                first_tgt,
                second: name(second),
                second_tgt: self.targets[second],
                why,
            });
        }
        let mut targets: Vec<(u64, Origin<'a>)> = Vec::new();
        for &i in &useful {
            let tgt = self.targets[i];
            if targets.iter().all(|&(t, _)| t != tgt) {
                targets.push((tgt, origins[i]));
            }
        }
        Ok(SharedAddress {
            host: self.host,
            targets,
        })
    }
}

/// Whether a row translates anything: a null device address is never one to call, and a
/// row to the host address itself is what the lookup does for any address it lacks (the
/// offset and RTTI words of a vtable, which hold no function, give such rows).
fn translates(host: u64, tgt: u64) -> bool {
    host != 0 && tgt != 0 && tgt != host
}

/// Sort rows by host address (stable: rows of one address keep their input order) and
/// keep the first row of each address that [`translates`] anything. Addresses whose
/// translating rows have more than one target are returned beside, with every one of
/// their rows' targets in input order (to match their origins one to one).
fn sorted_table(mut rows: Vec<FptrMapEntry>) -> (Vec<FptrMapEntry>, Vec<Collision>) {
    crate::generic::table::radix::sort_by_u64_key(&mut rows, |r| r.host_ptr);
    let mut collisions: Vec<Collision> = Vec::new();
    let mut kept = 0;
    let mut start = 0;
    while start < rows.len() {
        let host = rows[start].host_ptr;
        let end = rows[start..]
            .iter()
            .position(|r| r.host_ptr != host)
            .map_or(rows.len(), |n| start + n);
        let group = &rows[start..end];
        let mut useful = group.iter().filter(|r| translates(host, r.tgt_ptr));
        if let Some(&first) = useful.next() {
            if useful.any(|r| r.tgt_ptr != first.tgt_ptr) {
                collisions.push(Collision {
                    host,
                    targets: group.iter().map(|r| r.tgt_ptr).collect(),
                });
            }
            // `kept` <= `start`: this overwrites only rows already read.
            rows[kept] = first;
            kept += 1;
        }
        start = end;
    }
    rows.truncate(kept);
    (rows, collisions)
}

/// Pairs for an indirect vtable: host slot i -> device slot i, both read as 8-byte words.
/// Null host slots (offset-to-top of zero, absent RTTI) carry no function and are skipped.
pub fn vtable_pairs<'a>(
    entry: &'a [u8],
    host_vtable: &[u8],
    device_vtable: &[u8],
) -> Vec<IndirectPair<'a>> {
    host_vtable
        .chunks_exact(8)
        .zip(device_vtable.chunks_exact(8))
        .enumerate()
        .filter_map(|(slot, (h, d))| {
            let host_ptr = u64::from_ne_bytes(h.try_into().ok()?);
            let tgt_ptr = u64::from_ne_bytes(d.try_into().ok()?);
            (host_ptr != 0).then_some(IndirectPair {
                host_ptr,
                tgt_ptr,
                origin: Origin::VtableSlot { entry, slot },
            })
        })
        .collect()
}

/// Pairs for an indirect vtable's words (LLVM 22's rule): host `vtable + 8i` -> device
/// `vtable + 8i` for every word of the group, so a vptr (which points inside the group,
/// past offset-to-top and RTTI) translates to the same place in the device's group.
pub fn vtable_word_pairs(
    entry: &[u8],
    host_vtable: u64,
    device_vtable: u64,
    len: usize,
) -> impl Iterator<Item = IndirectPair<'_>> {
    (0..len / 8).map(move |word| {
        let offset = 8 * word as u64;
        IndirectPair {
            host_ptr: host_vtable.wrapping_add(offset),
            tgt_ptr: device_vtable.wrapping_add(offset),
            origin: Origin::VtableWord { entry, word },
        }
    })
}

/// The table as the bytes the device reads.
pub fn as_bytes(table: &[FptrMapEntry]) -> &[u8] {
    bytemuck::cast_slice(table)
}

#[cfg(test)]
mod tests;
