//! All of an image's entries resolved: in contiguous parts on several threads where the
//! image's own symbol tables answer, each part in batches of dynamic symbol lookups whose
//! cache misses overlap, the results joined in entry order.

use super::threads::{indirect_count, load_threads};
use super::{EntryResolver, ResolvedEntries};
use crate::backend::DeviceAddr;
use crate::elf::symbols::Symbol;
use crate::generic::error::PluginError;
use crate::generic::host_entry::{EntryKind, HostEntry};
use crate::generic::table::fptr::FptrMapEntry;
use crate::support::locking::lock;

impl<'a> EntryResolver<'a> {
    /// Each entry's device address, in entry order; with the kernels' addresses and the
    /// table's (host, device) rows, in the order [`super::row_origins`] names them.
    ///
    /// Where the image's own symbol tables answer (the host: its reads are plain memory
    /// reads, which any thread may do) and there are enough entries, contiguous parts of
    /// the entries resolve on up to [`crate::Plugin::set_load_threads`] threads at once,
    /// each into its own part of the addresses: the symbol lookups, the checks and the
    /// reads of a part need nothing of another part. The rows and kernels are joined in entry
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
        let mut addrs = crate::support::huge_pages::zeroed_vec(entries.len());
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
        let mut rows = crate::support::huge_pages::vec_with_capacity(rows_capacity);
        let (mut names, mut found) = (Vec::new(), Vec::new());
        // In the batches the symbol tables look names up in: their pointer globals are
        // then requested together too.
        let batch_len = crate::elf::symbols::LOOKUP_BATCH;
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
        let host = self.device.vendor().host_memory();
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
}
