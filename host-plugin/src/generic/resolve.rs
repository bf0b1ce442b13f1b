//! Entry resolution: each host entry of one image matched with its device side
//! (a kernel, a global, an indirect function or vtable), the table's (host, device)
//! rows gathered on the way, and the device runtime's table globals found. Reads the
//! device only; what the load installs is [`crate::generic::table::device_table`]'s.
//!
//! Here: the resolver, each entry dispatched by its kind, and the table globals. Its
//! children: kernels and globals ([`kernels_and_globals`]), indirect entries
//! ([`indirect`]), all of an image's entries on several threads ([`parallel`], with
//! [`threads`] counting them).

mod indirect;
mod kernels_and_globals;
mod parallel;
mod threads;

use crate::backend::{DeviceAddr, LoadedModule};
use crate::elf::symbols::{Symbol, Wanted};
use crate::generic::device::Device;
use crate::generic::error::PluginError;
use crate::generic::host_entry::{EntryKind, HostEntry};
use crate::generic::kernels::KernelRecord;
use crate::generic::table::device_table::{FptrMapGlobals, TableGlobals};
use crate::generic::table::fptr::{self, FptrMapEntry, Origin};
use crate::generic::table::fptr_index;
use crate::{elf::image, support::diag};
use device_rtl::head::HEAD_BYTES;
use device_rtl::symbols::{HEAD_C, INDEX_C, TABLE_C, TABLE_SIZE_C};
use std::ffi::CStr;
use std::sync::Mutex;
pub(crate) use threads::{default_load_thread_cap, ENTRIES_PER_LOAD_THREAD};

/// The (host address, origin) of every table row the entries give, in the order
/// [`EntryResolver::resolve_entries`] gathers them: the rows carry no names, so a conflict
/// or the table dump finds them again from the host side alone.
pub(crate) fn row_origins<'e, E: HostEntry>(
    entries: &'e [E],
) -> impl Iterator<Item = (u64, Origin<'e>)> {
    entries.iter().flat_map(|e| {
        let name = e.name().to_bytes();
        let kind = e.kind();
        let function = matches!(
            kind,
            Some(EntryKind::IndirectFunction | EntryKind::IndirectThroughGlobal)
        )
        .then(|| (e.host_addr(), Origin::Entry(name)));
        // The slots vtable_pairs pairs up, then the words vtable_word_pairs does (the
        // host vtable stands in for the device one: only the host side is named).
        let vtable = e
            .host_vtable()
            .filter(|_| kind == Some(EntryKind::IndirectVtable));
        let slots = vtable
            .map(|host| fptr::vtable_pairs(name, host, host))
            .unwrap_or_default();
        let words = vtable.map_or(0, <[u8]>::len);
        function
            .into_iter()
            .chain(slots.into_iter().map(|p| (p.host_ptr, p.origin)))
            .chain(
                fptr::vtable_word_pairs(name, e.host_addr(), e.host_addr(), words)
                    .map(|p| (p.host_ptr, p.origin)),
            )
    })
}

/// What [`EntryResolver::resolve_entries`] found.
pub(crate) struct ResolvedEntries {
    /// Each entry's device address, in entry order.
    pub(crate) addrs: Vec<DeviceAddr>,
    /// The kernels' device addresses.
    pub(crate) kernels: Vec<DeviceAddr>,
    /// The table's (host, device) rows, in the order [`row_origins`] names them.
    pub(crate) rows: Vec<FptrMapEntry>,
    /// The kernels with what their launches need, for the device's kernel registry.
    pub(crate) kernel_records: Vec<(DeviceAddr, KernelRecord)>,
}

/// One loaded image's entries being resolved on its device.
pub(crate) struct EntryResolver<'a> {
    /// The device the image is loaded on (its generic side and vendor hooks).
    device: &'a Device,
    /// The image's name in messages.
    image: &'a str,
    module: &'a dyn LoadedModule,
    /// The image's symbol sizes from its ELF file; None: ask the loaded module.
    symbols: Option<&'a image::ImageSymbols<'a>>,
    /// Where the backend's loader put the image (see [`LoadedModule::load_bias`]).
    bias: Option<u64>,
    /// The image's kernels and their records, as they are resolved.
    kernel_records: Mutex<Vec<(DeviceAddr, KernelRecord)>>,
}

impl<'a> EntryResolver<'a> {
    pub(crate) fn new(
        device: &'a Device,
        image: &'a str,
        module: &'a dyn LoadedModule,
        symbols: Option<&'a image::ImageSymbols<'a>>,
    ) -> Self {
        EntryResolver {
            device,
            image,
            module,
            symbols,
            bias: module.load_bias(),
            kernel_records: Mutex::default(),
        }
    }

    /// The image's own symbol tables and its load bias, where both are known (the
    /// host): entries then resolve from the tables parsed once, not name by name
    /// through the loader.
    fn own_tables(&self) -> Option<(&'a image::ImageSymbols<'a>, u64)> {
        Some((self.symbols?, self.bias?))
    }

    fn symbol_size(&self, name: &CStr) -> Option<u64> {
        match self.symbols {
            Some(symbols) => symbols.size_of(name.to_bytes()),
            None => self.module.global_size(name),
        }
    }

    fn entry_err(&self, entry: &impl HostEntry, reason: impl Into<String>) -> PluginError {
        PluginError::Entry {
            image: self.image.to_string(),
            device: self.device.id(),
            entry: entry.name_lossy(),
            reason: reason.into(),
        }
    }

    /// One entry's device address (`name` is its name); its (host, device) function
    /// pairs go to `rows`.
    fn resolve<E: HostEntry>(
        &self,
        entry: &E,
        name: &[u8],
        dynamic: Option<Symbol>,
        rows: &mut Vec<FptrMapEntry>,
    ) -> Result<DeviceAddr, PluginError> {
        let kind = entry.kind().ok_or_else(|| {
            self.entry_err(
                entry,
                format!(
                    "flags {:#x} with size {} is not a known kind of offload entry",
                    entry.flags(),
                    entry.size()
                ),
            )
        })?;
        let addr = match kind {
            EntryKind::Kernel | EntryKind::Global => self.exported(entry, kind, dynamic)?,
            EntryKind::IndirectFunction => {
                let (f, _) = self.indirect_target(entry, name, Wanted::Function, dynamic)?;
                rows.push(FptrMapEntry {
                    host_ptr: entry.host_addr(),
                    tgt_ptr: f,
                });
                f
            }
            EntryKind::IndirectThroughGlobal => {
                let global = self.pointer_global(entry, name, dynamic)?;
                let f = self.read_word(entry, global)?;
                if f == 0 {
                    return Err(self.entry_err(
                        entry,
                        "its device global holds a null pointer: there is no device \
                             function to call",
                    ));
                }
                rows.push(FptrMapEntry {
                    host_ptr: entry.host_addr(),
                    tgt_ptr: f,
                });
                // libomptarget 16 maps a size-8 entry's host address to what we
                // return here, and translates pointers through that map (a function
                // pointer captured by a target region): so return the device
                // function, not the global that holds it.
                f
            }
            EntryKind::IndirectVtable => {
                let global = self.pointer_global(entry, name, dynamic)?;
                let device_vtable = self.read_word(entry, global)?;
                let host = entry.host_vtable().ok_or_else(|| {
                    self.entry_err(entry, "the host vtable's contents were not provided")
                })?;
                self.check_device_vtable(entry, global, device_vtable, host.len())?;
                let mut dev = vec![0u8; host.len()];
                // SAFETY: the device global holds the device vtable's address, which
                // is not null and, where the image's symbols are known, lies inside
                // one of its symbols with room for the whole vtable
                // (check_device_vtable); the device vtable has the host one's layout.
                unsafe { self.device.vendor().read(device_vtable, &mut dev) }.map_err(|e| {
                    self.entry_err(entry, format!("reading the device vtable: {e}"))
                })?;
                let word_pairs =
                    fptr::vtable_word_pairs(name, entry.host_addr(), device_vtable, host.len());
                rows.extend(
                    fptr::vtable_pairs(name, host, &dev)
                        .into_iter()
                        .chain(word_pairs)
                        .map(|p| FptrMapEntry {
                            host_ptr: p.host_ptr,
                            tgt_ptr: p.tgt_ptr,
                        }),
                );
                // The device counterpart of the host vtable object.
                device_vtable
            }
        };
        Ok(addr)
    }

    /// The device runtime's table globals of the image, where it has both 8-byte table
    /// globals (an image without the device runtime has none: its indirect calls are
    /// then not translated, which the log says when it has indirect entries).
    pub(crate) fn table_globals(
        &self,
        has_indirect: bool,
        llvm_indirect_call_table: Option<DeviceAddr>,
    ) -> Result<Option<TableGlobals>, PluginError> {
        let fptr_map = match (
            self.table_global(TABLE_C)?,
            self.table_global(TABLE_SIZE_C)?,
        ) {
            (Some(map_p), Some(map_size)) => Some(FptrMapGlobals { map_p, map_size }),
            _ => None,
        };
        if fptr_map.is_none() && llvm_indirect_call_table.is_none() {
            if has_indirect {
                diag::info(diag::INFO_PLUGIN | diag::INFO_DUMP_TABLE, || {
                    format!(
                        "device {}: {} has indirect functions but no {} / {} (nor LLVM 18's \
                         device environment): its indirect calls will not be translated \
                         (link the device runtime into it)",
                        self.device.id(),
                        self.image,
                        TABLE_C.to_string_lossy(),
                        TABLE_SIZE_C.to_string_lossy()
                    )
                });
            }
            return Ok(None);
        }
        let (index, head) = match fptr_map {
            Some(_) => (
                self.runtime_global(
                    (INDEX_C, fptr_index::HEADER_BYTES),
                    "the index",
                    "its lookups search the sorted table",
                )?,
                self.runtime_global(
                    (HEAD_C, HEAD_BYTES as u64),
                    "the head",
                    "its lookups go to the index or the search first",
                )?,
            ),
            None => (None, None),
        };
        Ok(Some(TableGlobals {
            fptr_map,
            index,
            head,
            llvm_indirect_call_table,
        }))
    }

    /// A table global's address: None when the image lacks it, an error when it is not
    /// 8 bytes.
    fn table_global(&self, name: &CStr) -> Result<Option<DeviceAddr>, PluginError> {
        match self.symbol_size(name) {
            None => Ok(None),
            Some(8) => self
                .own_tables()
                .and_then(|(symbols, bias)| {
                    let sym = symbols.dynamic(name.to_bytes()).filter(Symbol::is_plain)?;
                    Some(Ok(bias.wrapping_add(sym.value)))
                })
                .unwrap_or_else(|| self.module.global(name))
                .map(Some)
                .map_err(|source| self.load_err(source)),
            Some(n) => Err(PluginError::Entry {
                image: self.image.to_string(),
                device: self.device.id(),
                entry: name.to_string_lossy().into_owned(),
                reason: format!("the device runtime's table global is {n} bytes, not 8"),
            }),
        }
    }

    fn load_err(&self, source: crate::BackendError) -> PluginError {
        PluginError::Load {
            image: self.image.to_string(),
            device: self.device.id(),
            source,
        }
    }

    /// The image's index header global, if its device runtime has one of the size this
    /// plugin writes. Images linked with a device runtime from before the index have none
    /// and keep working with the search (said in the debug log).
    /// One of our device runtime's lookup structures beside the table (`structure`: the
    /// index header, the head): the address of its global (`name`, of `bytes` bytes) where
    /// the image defines it with that size; None for a device runtime from before it, or
    /// with another size, whose lookups do `without` it (the debug log says so).
    fn runtime_global(
        &self,
        (name, bytes): (&CStr, u64),
        structure: &str,
        without: &str,
    ) -> Result<Option<DeviceAddr>, PluginError> {
        let shown = name.to_string_lossy();
        let size = self.symbol_size(name);
        if size == Some(bytes) {
            return self
                .module
                .global(name)
                .map(Some)
                .map_err(|source| self.load_err(source));
        }
        diag::debug(|| {
            let found = match size {
                None => format!("has no {shown} (a device runtime from before {structure})"),
                Some(n) => format!("{shown} is {n} bytes, not the {bytes} this plugin writes"),
            };
            format!(
                "device {}: {}: {found}: {without}",
                self.device.id(),
                self.image
            )
        });
        Ok(None)
    }
}
