//! Entry resolution: each host entry of one image matched with its device side
//! (a kernel, a global, an indirect function or vtable), the table's (host, device)
//! rows gathered on the way, and the device runtime's table globals found. Reads the
//! device only; what the load installs is [`crate::device_table`]'s.

use crate::backend::{BackendError, DeviceAddr, LoadedModule};
use crate::device::Device;
use crate::device_table::{FptrMapGlobals, TableGlobals};
use crate::error::PluginError;
use crate::fptr::{self, FptrMapEntry, Origin};
use crate::fptr_index;
use crate::host_entry::{EntryKind, HostEntry};
use crate::kernels::KernelRecord;
use crate::launch_shape::{self, ExecMode};
use crate::locking::lock;
use crate::symbols::{Symbol, Wanted};
use crate::{diag, image};
use device_rtl::head::HEAD_BYTES;
use device_rtl::symbols::{HEAD_C, INDEX_C, TABLE_C, TABLE_SIZE_C};
use std::ffi::CStr;
use std::sync::Mutex;

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

/// Entries per thread below which a load resolves on the calling thread alone: a
/// thread start costs tens of microseconds, a few thousand entries take hundreds
/// (docs/BENCHMARKS.md, 1d).
pub(crate) const ENTRIES_PER_LOAD_THREAD: usize = 4096;
/// The most threads one load resolves on.
const MAX_LOAD_THREADS: usize = 8;

/// How many of `entries` are indirect: one table row each (a vtable's rows beyond its
/// first grow the vector).
fn indirect_count<E: HostEntry>(entries: &[E]) -> usize {
    entries
        .iter()
        .filter(|e| crate::host_entry::is_indirect(e.flags()))
        .count()
}

/// The default of [`crate::Plugin::set_load_threads`]: `OMPTARGET_RS_LOAD_THREADS=N` (1: the
/// calling thread alone), else the CPUs this process may use; at most
/// [`MAX_LOAD_THREADS`] either way.
pub(crate) fn default_load_thread_cap() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let asked = std::env::var("OMPTARGET_RS_LOAD_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n >= 1);
    asked.unwrap_or(cpus).min(MAX_LOAD_THREADS)
}

/// Threads to resolve `entries` entries on: one per [`ENTRIES_PER_LOAD_THREAD`], at
/// least one, at most `cap`.
fn load_threads(entries: usize, cap: usize) -> usize {
    (entries / ENTRIES_PER_LOAD_THREAD).clamp(1, cap.max(1))
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

    /// A kernel's or a global's device address: an exported symbol of the image.
    /// `dynamic`: the entry's name looked up in the image's dynamic symbol table, where
    /// the tables are known ([`Self::look_up`]).
    fn exported(
        &self,
        entry: &impl HostEntry,
        kind: EntryKind,
        dynamic: Option<Symbol>,
    ) -> Result<DeviceAddr, PluginError> {
        if let Some((_, bias)) = self.own_tables() {
            if let Some(sym) = dynamic.filter(Symbol::is_plain) {
                let addr = bias.wrapping_add(sym.value);
                if kind == EntryKind::Kernel {
                    self.record_kernel(entry, addr, None)?;
                }
                return Ok(addr);
            }
        }
        // No tables, or not an ordinary symbol the image defines and exports (TLS, an
        // ifunc, one from a library it depends on): the loader answers, as for LLVM's
        // plugin.
        if kind != EntryKind::Kernel {
            return self
                .module
                .global(entry.name())
                .map_err(|e| self.entry_err(entry, e.to_string()));
        }
        let addr = self
            .module
            .function(entry.name())
            .map_err(|e| self.entry_err(entry, e.to_string()))?;
        self.record_kernel(entry, addr, Some(self.module))?;
        Ok(addr)
    }

    /// Record a kernel with what its launches need: on a GPU its exec mode and the
    /// vendor's limits for it (`function_of`: the module whose `function` returned
    /// `addr`); on the host, nothing (it runs kernels once).
    fn record_kernel(
        &self,
        entry: &impl HostEntry,
        addr: DeviceAddr,
        function_of: Option<&dyn LoadedModule>,
    ) -> Result<(), PluginError> {
        let record = match function_of {
            Some(module) if self.device.kind().is_gpu() => {
                let (mode, reduction_buffer_bytes) = match self.exec_mode(entry)? {
                    Some(mode) => (Some(mode), 0),
                    None => match self.kernel_environment(entry)? {
                        Some((mode, buffer)) => (Some(mode), buffer),
                        None => (self.device.backend().untagged_kernel_mode(), 0),
                    },
                };
                // SAFETY: `addr` is what `module.function` returned for this entry's name.
                let limits = unsafe { module.kernel_limits(addr, entry.name()) }
                    .map_err(|e| self.entry_err(entry, e.to_string()))?;
                KernelRecord {
                    mode,
                    limits,
                    name: Some(entry.name().into()),
                    reduction_buffer_bytes,
                }
            }
            _ => KernelRecord {
                mode: None,
                limits: None,
                name: Some(entry.name().into()),
                reduction_buffer_bytes: 0,
            },
        };
        lock(&self.kernel_records).push((addr, record));
        Ok(())
    }

    /// The kernel's `<kernel>_exec_mode` ([`launch_shape::read_exec_mode`]): None when
    /// the image has no such global (not an OpenMP kernel).
    fn exec_mode(&self, entry: &impl HostEntry) -> Result<Option<ExecMode>, PluginError> {
        let global = |name: &CStr| {
            let Some(size) = self.symbol_size(name) else {
                return Ok(None);
            };
            if size != 1 {
                // Refused by the size alone, before the driver is asked for its address.
                return Ok(Some((0, size)));
            }
            self.module.global(name).map(|addr| Some((addr, size)))
        };
        let read_byte = |addr| {
            let mut value = [0u8; 1];
            // SAFETY: `addr` is the device address of a global of this image whose size
            // was just checked to be 1 byte.
            unsafe {
                self.device
                    .backend()
                    .read(self.device.index(), addr, &mut value)
            }?;
            Ok(value[0])
        };
        launch_shape::read_exec_mode(entry.name(), global, read_byte, BackendError::Load)
            .map_err(|e| self.entry_err(entry, e.to_string()))
    }

    /// clang 18's `<kernel>_kernel_environment` ([`launch_shape::kernel_environment`]):
    /// the kernel's mode and its reduction buffer's bytes; None when the image has none.
    fn kernel_environment(
        &self,
        entry: &impl HostEntry,
    ) -> Result<Option<(ExecMode, u64)>, PluginError> {
        use launch_shape::kernel_environment as env;
        let mut name = entry.name().to_bytes().to_vec();
        name.extend_from_slice(env::SUFFIX);
        let name =
            std::ffi::CString::new(name).map_err(|_| self.entry_err(entry, "a NUL in its name"))?;
        let shown = name.to_string_lossy();
        match self.symbol_size(&name) {
            None => return Ok(None),
            Some(env::SIZE) => {}
            Some(n) => {
                return Err(self.entry_err(
                    entry,
                    format!("{shown} is {n} bytes, LLVM 18's is {}", env::SIZE),
                ))
            }
        }
        let addr = self
            .module
            .global(&name)
            .map_err(|e| self.entry_err(entry, e.to_string()))?;
        let mut configuration = [0u8; env::CONFIGURATION_BYTES];
        // SAFETY: `addr` is the device address of this image's global of `env::SIZE`
        // bytes (checked above), more than the configuration read from its start.
        unsafe {
            self.device
                .backend()
                .read(self.device.index(), addr, &mut configuration)
        }
        .map_err(|e| self.entry_err(entry, format!("reading {shown}: {e}")))?;
        let (mode, buffer) = env::parse(&configuration);
        let mode = ExecMode::from_raw(mode).ok_or_else(|| {
            self.entry_err(
                entry,
                format!("{shown} holds exec mode {mode}, not LLVM 18's"),
            )
        })?;
        Ok(Some((mode, buffer)))
    }

    /// The device symbol an indirect entry names, by the rule of
    /// [`image::ImageSymbols::indirect_target`] where the image's tables are known;
    /// else (GPU drivers) through the loaded module. Returns the address and, where the
    /// tables are known, the symbol.
    fn indirect_target(
        &self,
        entry: &impl HostEntry,
        name: &[u8],
        wanted: Wanted,
        dynamic: Option<Symbol>,
    ) -> Result<(DeviceAddr, Option<Symbol>), PluginError> {
        let Some((symbols, bias)) = self.own_tables() else {
            let found = match wanted {
                Wanted::Function => self.module.indirect_function(entry.name()),
                Wanted::Data => self.module.global(entry.name()),
            };
            return found
                .map(|addr| (addr, None))
                .map_err(|e| self.entry_err(entry, e.to_string()));
        };
        let sym = symbols
            .indirect_target_given(name, wanted, dynamic)
            .map_err(|e| self.entry_err(entry, e.to_string()))?;
        Ok((bias.wrapping_add(sym.value), Some(sym)))
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

    fn read_word(&self, entry: &impl HostEntry, addr: DeviceAddr) -> Result<u64, PluginError> {
        let mut word = [0u8; 8];
        // SAFETY: callers pass the address of an image global whose ELF symbol size was
        // checked to be 8 bytes.
        unsafe {
            self.device
                .backend()
                .read(self.device.index(), addr, &mut word)
        }
        .map_err(|e| self.entry_err(entry, format!("reading its device global: {e}")))?;
        Ok(u64::from_ne_bytes(word))
    }

    /// Before reading `len` bytes of a device vtable: it must not be null, and where the
    /// backend reads the image's symbols (the host, whose device reads are plain memory
    /// reads) it must lie inside one symbol of the image. GPU drivers check their own
    /// device addresses and fail the copy instead.
    fn check_device_vtable(
        &self,
        entry: &impl HostEntry,
        global: DeviceAddr,
        device_vtable: DeviceAddr,
        len: usize,
    ) -> Result<(), PluginError> {
        if device_vtable == 0 {
            return Err(self.entry_err(entry, "its device global holds a null vtable pointer"));
        }
        let Some(symbols) = self.symbols else {
            return Ok(());
        };
        // The image's load bias: known, or from where its own global landed.
        let inside = self
            .bias
            .or_else(|| {
                symbols
                    .address_of(entry.name().to_bytes())
                    .map(|image_addr| global.wrapping_sub(image_addr))
            })
            .is_some_and(|bias| {
                symbols.within_one_symbol(device_vtable.wrapping_sub(bias), len as u64)
            });
        if inside {
            Ok(())
        } else {
            Err(self.entry_err(
                entry,
                format!(
                    "its device global points to {device_vtable:#x}, which is not inside a \
                     symbol of the image with room for the {len}-byte vtable"
                ),
            ))
        }
    }

    /// An 8-byte global of the image, address and size checked.
    fn pointer_global(
        &self,
        entry: &impl HostEntry,
        name: &[u8],
        dynamic: Option<Symbol>,
    ) -> Result<DeviceAddr, PluginError> {
        if self.own_tables().is_some() {
            let (addr, sym) = self.indirect_target(entry, name, Wanted::Data, dynamic)?;
            return match sym.map(|s| s.size) {
                Some(8) => Ok(addr),
                n => Err(self.entry_err(
                    entry,
                    format!(
                        "its device global is {} bytes, an indirect entry needs 8 (a pointer)",
                        n.unwrap_or(0)
                    ),
                )),
            };
        }
        match self.symbol_size(entry.name()) {
            Some(8) => {}
            Some(n) => {
                return Err(self.entry_err(
                    entry,
                    format!(
                        "its device global is {n} bytes, an indirect entry needs 8 (a pointer)"
                    ),
                ))
            }
            None => {
                return Err(self.entry_err(entry, "the image does not export its device global"))
            }
        }
        self.module
            .global(entry.name())
            .map_err(|e| self.entry_err(entry, e.to_string()))
    }

    /// Each entry's device address, in entry order; with the kernels' addresses and the
    /// table's (host, device) rows, in the order [`row_origins`] names them.
    ///
    /// Where the image's own symbol tables answer (the host: its reads are plain memory
    /// reads, which any thread may do) and there are enough entries, contiguous parts of
    /// the entries resolve on up to [`Plugin::set_load_threads`] threads at once, each
    /// into its own part of the addresses: the symbol lookups, the checks and the reads
    /// of a part need nothing of another part. The rows and kernels are joined in entry
    /// order, so the results and the first error are those of one thread resolving every
    /// entry in turn.
    pub(crate) fn resolve_entries<E: HostEntry + Sync>(
        &self,
        entries: &[E],
    ) -> Result<ResolvedEntries, PluginError> {
        let (addrs, kernels, rows) = self.resolve_in_parts(entries)?;
        Ok(ResolvedEntries {
            addrs,
            kernels,
            rows,
            kernel_records: std::mem::take(&mut *lock(&self.kernel_records)),
        })
    }

    /// What [`Self::resolve_entries`] returns, less the kernel records: the addresses,
    /// the kernels, the rows.
    #[allow(clippy::type_complexity)]
    fn resolve_in_parts<E: HostEntry + Sync>(
        &self,
        entries: &[E],
    ) -> Result<(Vec<DeviceAddr>, Vec<DeviceAddr>, Vec<FptrMapEntry>), PluginError> {
        let threads = match self.own_tables() {
            Some(_) => load_threads(entries.len(), self.device.load_thread_cap()),
            None => 1,
        };
        let mut addrs = crate::huge_pages::zeroed_vec(entries.len());
        if threads <= 1 {
            let (kernels, rows) =
                self.resolve_part(entries, &mut addrs, indirect_count(entries))?;
            return Ok((addrs, kernels, rows));
        }
        let part_len = entries.len().div_ceil(threads);
        let part_rows: Vec<usize> = entries.chunks(part_len).map(indirect_count).collect();
        // The first part's rows are where every part's rows are joined: sized for all
        // of them once.
        let all_rows = part_rows.iter().sum();
        let parts = std::thread::scope(|scope| {
            let mut parts = entries
                .chunks(part_len)
                .zip(addrs.chunks_mut(part_len))
                .zip(part_rows);
            let ((first, first_out), _) = parts.next().unwrap_or_default();
            let others: Vec<_> = parts
                .map(|((part, out), rows)| scope.spawn(move || self.resolve_part(part, out, rows)))
                .collect();
            let mut results = vec![self.resolve_part(first, first_out, all_rows)];
            for other in others {
                // A panic in a helper thread goes on here, on the calling thread, where
                // the C ABI's guard catches it.
                results.push(
                    other
                        .join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p)),
                );
            }
            results
        });
        let (mut kernels, mut rows) = (Vec::new(), None::<Vec<FptrMapEntry>>);
        for part in parts {
            let (part_kernels, part_rows) = part?;
            kernels.extend(part_kernels);
            match rows.as_mut() {
                Some(rows) => rows.extend(part_rows),
                None => rows = Some(part_rows),
            }
        }
        Ok((addrs, kernels, rows.unwrap_or_default()))
    }

    /// [`Self::resolve_entries`] of `entries` on this thread, each one's address into
    /// the same place of `out` (as long as `entries`); its rows in a vector with room
    /// for `rows_capacity`.
    fn resolve_part<E: HostEntry>(
        &self,
        entries: &[E],
        out: &mut [DeviceAddr],
        rows_capacity: usize,
    ) -> Result<(Vec<DeviceAddr>, Vec<FptrMapEntry>), PluginError> {
        let mut kernels = Vec::new();
        // Sized once: growing by doubling copied and page-faulted it several times over.
        let mut rows = crate::huge_pages::vec_with_capacity(rows_capacity);
        let (mut names, mut found) = (Vec::new(), Vec::new());
        // In the batches the symbol tables look names up in: their pointer globals are
        // then requested together too.
        let batch_len = crate::symbols::LOOKUP_BATCH;
        for (batch, out) in entries.chunks(batch_len).zip(out.chunks_mut(batch_len)) {
            self.look_up(batch, &mut names, &mut found);
            for (((entry, name), &dynamic), out) in batch.iter().zip(&names).zip(&found).zip(out) {
                let addr = self.resolve(entry, name, dynamic, &mut rows)?;
                if entry.kind() == Some(EntryKind::Kernel) {
                    kernels.push(addr);
                }
                *out = addr;
            }
        }
        Ok((kernels, rows))
    }

    /// The batch's names (each read once: through the C ABI every read is a strlen),
    /// looked up in the image's dynamic symbol table where its tables are known (else
    /// `None` each), and the pointer globals among them announced to the backend as
    /// about to be read: the batch's cache misses then overlap.
    fn look_up<'e, E: HostEntry>(
        &self,
        batch: &'e [E],
        names: &mut Vec<&'e [u8]>,
        found: &mut Vec<Option<Symbol>>,
    ) {
        names.clear();
        names.extend(batch.iter().map(|e| e.name().to_bytes()));
        found.clear();
        let Some((symbols, bias)) = self.own_tables() else {
            found.resize(batch.len(), None);
            return;
        };
        symbols.dynamic_batch(names, found);
        let host = self.device.backend().host_memory();
        for (entry, sym) in batch.iter().zip(found.iter()) {
            let holds_pointer = matches!(
                entry.kind(),
                Some(EntryKind::IndirectThroughGlobal | EntryKind::IndirectVtable)
            );
            if let (Some(sym), true, Some(host)) = (sym, holds_pointer, host) {
                host.prefetch(bias.wrapping_add(sym.value));
            }
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
                unsafe {
                    self.device
                        .backend()
                        .read(self.device.index(), device_vtable, &mut dev)
                }
                .map_err(|e| self.entry_err(entry, format!("reading the device vtable: {e}")))?;
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
