//! How many threads one load resolves its entries on: one per few thousand entries, at
//! most the cap the plugin sets (its default from the environment or the CPUs).

use crate::generic::host_entry::HostEntry;

/// Entries per thread below which a load resolves on the calling thread alone: a
/// thread start costs tens of microseconds, a few thousand entries take hundreds
/// (docs/BENCHMARKS.md, 1d).
pub(crate) const ENTRIES_PER_LOAD_THREAD: usize = 4096;
/// The most threads one load resolves on.
const MAX_LOAD_THREADS: usize = 8;

/// How many of `entries` are indirect: one table row each (a vtable's rows beyond its
/// first grow the vector).
pub(super) fn indirect_count<E: HostEntry>(entries: &[E]) -> usize {
    entries
        .iter()
        .filter(|e| crate::generic::host_entry::is_indirect(e.flags()))
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
pub(super) fn load_threads(entries: usize, cap: usize) -> usize {
    (entries / ENTRIES_PER_LOAD_THREAD).clamp(1, cap.max(1))
}
