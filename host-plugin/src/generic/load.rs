//! Loading one image on one device, as one straight sequence (nextgen's `loadBinary`):
//!
//! 1. the device's code out of the image ([`BackendDevice::device_code`](crate::backend::BackendDevice::device_code));
//! 2. its checks, with the backend's staging beside them ([`Backend::inspect_image`](crate::Backend::inspect_image),
//!    [`BackendDevice::stage_image`](crate::backend::BackendDevice::stage_image));
//! 3. the backend loads it ([`BackendDevice::load_image`](crate::backend::BackendDevice::load_image)) and, on a GPU, the device
//!    environment is written ([`crate::generic::device_env`]);
//! 4. its entries resolve ([`crate::generic::resolve`]);
//! 5. the indirect function table is built from their rows and installed
//!    ([`crate::generic::table::device_table`]), while the caller's entry table is published;
//! 6. the image replaces any image of the same key in the device's registry.
//!
//! Every step owns what it made until the next takes it over (the loaded module, the
//! table's device buffers), so a step that fails leaves nothing loaded or allocated.

use crate::backend::{DeviceAddr, StagedImage};
use crate::elf::image::{ImageError, ImageSymbols};
use crate::generic::device::{Device, LoadedImage};
use crate::generic::error::PluginError;
use crate::generic::host_entry::{self, HostEntry, HostOffloadEntry};
use crate::generic::resolve::{
    row_origins, EntryResolver, ResolvedEntries, ENTRIES_PER_LOAD_THREAD,
};
use crate::generic::table::device_table::DeviceTable;
use crate::generic::table::fptr::{self, FptrMapEntry};
use crate::support::diag;
use std::collections::{HashMap, HashSet};

/// `OMPTARGET_RS_TRANSLATE=0` turns the translation off: no table is installed, so
/// device code gets host function addresses unchanged (what a program sees without this
/// plugin; the demo shows the isolated device's fault report with it).
pub const TRANSLATE_ENV: &str = "OMPTARGET_RS_TRANSLATE";

fn translation_enabled() -> bool {
    std::env::var(TRANSLATE_ENV).map_or(true, |v| v != "0")
}

/// Images from this size on are staged on a second thread while their checks run
/// ([`Device::inspect_and_stage`]), and their load files released on one while the
/// entries resolve: below it, a thread start (tens of microseconds) would cost what
/// the overlap saves.
const STAGE_ALONGSIDE_BYTES: usize = 256 << 10;

/// One entry of the table returned to libomptarget: the device side of a host entry,
/// whose name it shares (the C ABI returns the host entry's name pointer, as LLVM's
/// plugins do).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceEntry {
    pub addr: DeviceAddr,
    pub size: u64,
    pub flags: i32,
}

/// A name for an image in messages: where libomptarget keeps it and how big it is.
pub fn image_name(key: usize, len: usize) -> String {
    format!("image {key:#x} ({len} bytes)")
}

impl Device {
    /// Load an image here, resolve its entries (one device entry per host entry,
    /// in order), and install its indirect function table. `key` identifies the image
    /// (libomptarget's address of it); loading the same key again replaces it.
    pub fn load_binary(
        &self,
        key: usize,
        image_bytes: &[u8],
        entries: &[HostOffloadEntry],
    ) -> Result<Vec<DeviceEntry>, PluginError> {
        self.load_entries(key, image_bytes, entries, |addrs| {
            entries
                .iter()
                .zip(addrs)
                .map(|(e, &addr)| DeviceEntry {
                    addr,
                    size: e.size,
                    flags: e.flags,
                })
                .collect()
        })
    }

    /// [`Device::load_binary`] for any kind of host entry (the C ABI reads
    /// libomptarget's in place): `publish` gets every entry's device address, in entry
    /// order, and makes the caller's table of them. It runs on a second thread while
    /// the indirect function table is built and installed, for loads of
    /// [`ENTRIES_PER_LOAD_THREAD`] entries or more: a million-entry table of
    /// libomptarget's is 32 MB of fresh memory to write. Its result is returned once the
    /// image is loaded.
    pub fn load_entries<E: HostEntry + Sync, R: Send>(
        &self,
        key: usize,
        image_bytes: &[u8],
        entries: &[E],
        publish: impl FnOnce(&[DeviceAddr]) -> R + Send,
    ) -> Result<R, PluginError> {
        let name = image_name(key, image_bytes.len());
        let load_err = |source| PluginError::Load {
            image: name.clone(),
            device: self.id(),
            source,
        };
        // 1-3: the code, its checks and staging, the module.
        let code = self.vendor().device_code(image_bytes).map_err(load_err)?;
        let code = code.bytes();
        let (symbols, staged) = self.inspect_and_stage(code);
        let symbols = symbols.map_err(|source| PluginError::Image {
            image: name.clone(),
            device: self.id(),
            source,
        })?;
        let module = staged
            .and_then(|staged| self.vendor().load_image(code, symbols.as_ref(), staged))
            .map_err(load_err)?;
        let environment = if self.kind().has_device_environment() {
            crate::generic::device_env::install(
                self.vendor(),
                self.backend().device_count(),
                module.as_ref(),
                self.settings().dynamic_shared_memory,
            )
            .map_err(load_err)?
        } else {
            None
        };
        // 4: the entries. Removing the host's image file took 0.1 ms of a 2 ms load at
        // 10k entries (docs/BENCHMARKS.md 1d): for big images it runs beside them.
        let resolver = EntryResolver::new(self, &name, module.as_ref(), symbols.as_ref());
        let ((), resolved) = self.beside(
            code.len() >= STAGE_ALONGSIDE_BYTES,
            || module.release_load_files(),
            || resolver.resolve_entries(entries),
        );
        let ResolvedEntries {
            addrs,
            kernels,
            rows,
            kernel_records,
        } = resolved?;
        // 5: the table, while the caller's entry table is published.
        let (published, table) = self.beside(
            entries.len() >= ENTRIES_PER_LOAD_THREAD,
            || publish(&addrs),
            || {
                let llvm_table = environment.and_then(|env| env.indirect_call_table());
                self.install_table(&resolver, &name, entries, rows, llvm_table)
            },
        );
        let table = table?;
        // 6: registered, replacing the image of the same key.
        self.register(
            LoadedImage {
                key,
                name,
                module,
                kernels,
                table,
                published: None,
            },
            kernel_records,
        )?;
        Ok(published)
    }

    /// `first` on a second thread while `second` runs on this one, where `worth_it`
    /// and the load may use more than one thread; else one after the other.
    fn beside<A: Send, B>(
        &self,
        worth_it: bool,
        first: impl FnOnce() -> A + Send,
        second: impl FnOnce() -> B,
    ) -> (A, B) {
        if !worth_it || self.load_thread_cap() <= 1 {
            return (first(), second());
        }
        std::thread::scope(|scope| {
            let first = scope.spawn(first);
            let second = second();
            // A panic on the second thread goes on here, where the C ABI's guard
            // catches it.
            let first = first
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            (first, second)
        })
    }

    /// The image's checks ([`Backend::inspect_image`](crate::Backend::inspect_image)) and the work the backend can do
    /// on it meanwhile ([`BackendDevice::stage_image`](crate::backend::BackendDevice::stage_image)): for an image of
    /// [`STAGE_ALONGSIDE_BYTES`] or more, the staging runs on a second thread while the
    /// checks run (the host writes the image file; docs/BENCHMARKS.md 1d times the file
    /// write with dlopen at 0.45 and 48 ms, the checks at 0.17 and 18 ms, for 10k and 1M
    /// entries); smaller ones do both in turn. Nothing is loaded before the checks pass:
    /// the caller loads only then.
    #[allow(clippy::type_complexity)]
    fn inspect_and_stage<'i>(
        &self,
        image: &'i [u8],
    ) -> (
        Result<Option<ImageSymbols<'i>>, ImageError>,
        Result<Option<StagedImage>, crate::BackendError>,
    ) {
        let (backend, vendor) = (self.backend(), self.vendor());
        if image.len() < STAGE_ALONGSIDE_BYTES || self.load_thread_cap() <= 1 {
            let symbols = backend.inspect_image(image);
            let staged = match symbols {
                Ok(_) => vendor.stage_image(image),
                Err(_) => Ok(None),
            };
            return (symbols, staged);
        }
        let (staged, symbols) = self.beside(
            true,
            || vendor.stage_image(image),
            || backend.inspect_image(image),
        );
        (symbols, staged)
    }

    /// Build the image's indirect function table from the resolved `rows` (checked, in
    /// order) and install it where the image has the device runtime's globals.
    fn install_table<E: HostEntry>(
        &self,
        resolver: &EntryResolver<'_>,
        image: &str,
        entries: &[E],
        rows: Vec<FptrMapEntry>,
        llvm_indirect_call_table: Option<DeviceAddr>,
    ) -> Result<Option<DeviceTable>, PluginError> {
        let table = build_table(self.id(), image, entries, rows)?;
        if !translation_enabled() {
            diag::info(diag::INFO_PLUGIN, || {
                format!(
                    "{image}: {TRANSLATE_ENV}=0: no function pointer table installed ({} \
                     rows); host function addresses reach device code untranslated",
                    table.len()
                )
            });
            return Ok(None);
        }
        let has_indirect = entries.iter().any(|e| host_entry::is_indirect(e.flags()));
        let Some(globals) = resolver.table_globals(has_indirect, llvm_indirect_call_table)? else {
            return Ok(None);
        };
        let (installed, index_note) = DeviceTable::install(&self.memory(), globals, table)?;
        log_table(self.id(), image, &installed, entries, &index_note);
        Ok(Some(installed))
    }
}

/// The image's table from its resolved rows: sorted, duplicates of one pair merged, a
/// host address that several device functions share kept with its first (and said so
/// in the debug log), other conflicting pairs refused (naming both entries): the rule
/// is [`fptr`]'s.
fn build_table<E: HostEntry>(
    device: i32,
    image: &str,
    entries: &[E],
    rows: Vec<FptrMapEntry>,
) -> Result<Vec<FptrMapEntry>, PluginError> {
    // Origins are found only for the host addresses with several device addresses, in
    // one pass: a name copy and a hash insert per entry cost 18 % of a 1M-entry load
    // (docs/BENCHMARKS.md 1d).
    let origins_of = |hosts: &HashSet<u64>| {
        let mut origins: HashMap<u64, Vec<fptr::Origin>> = HashMap::new();
        for (host, origin) in row_origins(entries).filter(|(h, _)| hosts.contains(h)) {
            origins.entry(host).or_default().push(origin);
        }
        origins
    };
    let table = fptr::build_rows(rows, origins_of).map_err(|source| PluginError::Fptr {
        image: image.to_string(),
        device,
        source,
    })?;
    for shared in &table.shared {
        diag::debug(|| format!("device {device}: {image}: indirect function table: {shared}"));
    }
    Ok(table.rows)
}

/// The table dump (`LIBOMPTARGET_INFO` or the debug log): its rows with the entries
/// they came from, named only when the dump is printed.
fn log_table<E: HostEntry>(
    device: i32,
    image: &str,
    table: &DeviceTable,
    entries: &[E],
    index_note: &str,
) {
    diag::info(diag::INFO_PLUGIN | diag::INFO_DUMP_TABLE, || {
        let origins: HashMap<u64, String> = row_origins(entries)
            .map(|(host, origin)| (host, origin.to_string()))
            .collect();
        let mut s = format!(
            "device {device}: {image}: indirect function table, {} entries at {:#x}; \
             {index_note}",
            table.rows().len(),
            table.addr()
        );
        for row in table.rows() {
            s.push_str(&format!(
                "\n  host {:#018x} -> device {:#018x}  {}",
                row.host_ptr,
                row.tgt_ptr,
                origins.get(&row.host_ptr).map_or("", String::as_str)
            ));
        }
        s
    });
}

#[cfg(test)]
mod tests;
