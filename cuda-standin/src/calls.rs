//! The `calls` event: every exported function called in this process with its call
//! count, and for each copy function the bytes it was asked to copy (whether or not the
//! copy went through). `shim` counts every call; the copy helpers add the bytes.
//!
//! The event is written at exit: the first cuInit registers an `atexit` handler (run
//! before the ELF destructors, so after the handlers registered before it, such as
//! libomptarget's `__tgt_unregister_lib`). Calls made later still, from later exit
//! handlers or destructors, get a second, complete `calls` event from this library's
//! own ELF destructor (`.fini_array`, run at exit or dlclose): the report's last
//! `calls` event is always the whole tally. Neither waits long for a lock another
//! thread holds (see [`crate::log::lock_patiently`]): a process that exits while its
//! other threads are inside driver calls does not hang.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, Once};

/// One function's tally.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub count: u64,
    /// Bytes asked for: `Some` for the copy functions only.
    pub bytes: Option<u64>,
}

static CALLS: Mutex<BTreeMap<&'static str, Tally>> = Mutex::new(BTreeMap::new());
/// Calls counted so far.
static TOTAL: AtomicU64 = AtomicU64::new(0);
/// [`TOTAL`] when a `calls` event was last written; u64::MAX before the first.
static WRITTEN: AtomicU64 = AtomicU64::new(u64::MAX);
/// Whether cuInit was called (registering the exit handler): only then is there a
/// `calls` event.
static HOOKED: AtomicBool = AtomicBool::new(false);

fn lock() -> std::sync::MutexGuard<'static, BTreeMap<&'static str, Tally>> {
    CALLS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Count one call of `call`.
pub fn count(call: &'static str) {
    let mut calls = lock();
    calls.entry(call).or_default().count += 1;
    // Under the lock: a snapshot's sum of counts is TOTAL as it was then.
    TOTAL.fetch_add(1, Ordering::Relaxed);
}

/// Add `len` bytes to the copy function `call`'s total.
pub fn add_bytes(call: &'static str, len: usize) {
    let mut calls = lock();
    let bytes = &mut calls.entry(call).or_default().bytes;
    *bytes = Some(bytes.unwrap_or(0).saturating_add(len as u64));
}

/// Every function's tally so far.
#[cfg(test)]
pub fn tallies() -> BTreeMap<&'static str, Tally> {
    lock().clone()
}

/// The `calls` event's `calls` object: `{"name": {"count": N}, "copy": {"count": N,
/// "bytes": B}, ...}`, sorted by name.
pub fn to_json(tallies: &BTreeMap<&'static str, Tally>) -> Value {
    let calls: Map<String, Value> = tallies
        .iter()
        .map(|(&name, tally)| {
            let value = match tally.bytes {
                Some(bytes) => json!({"count": tally.count, "bytes": bytes}),
                None => json!({"count": tally.count}),
            };
            (name.to_owned(), value)
        })
        .collect();
    Value::Object(calls)
}

/// Register the exit handler (once; the first cuInit calls this).
pub fn write_at_exit() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: `at_exit` is an `extern "C" fn()` that never unwinds (it catches
        // panics) and only touches statics, which outlive every exit handler. glibc's
        // atexit (libc_nonshared's, linked into this library) registers it with this
        // library's DSO handle, so a dlclose runs it before the code goes away.
        // Should it fail (no memory), the destructor still writes the event.
        let _ = unsafe { libc::atexit(at_exit) };
        HOOKED.store(true, Ordering::Release);
    });
}

/// Write the `calls` event (when there is a report) unless nothing was called since the
/// last one, without waiting long for a lock.
fn write_if_new() {
    if !HOOKED.load(Ordering::Acquire)
        || TOTAL.load(Ordering::Relaxed) == WRITTEN.load(Ordering::Acquire)
        || !crate::log::enabled()
    {
        return;
    }
    let Some(calls) = crate::log::lock_patiently(&CALLS) else {
        return;
    };
    let snapshot = calls.clone();
    let total = TOTAL.load(Ordering::Relaxed);
    drop(calls);
    crate::log::event_at_exit("calls", json!({"calls": to_json(&snapshot)}));
    WRITTEN.store(total, Ordering::Release);
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(write_if_new);
}

/// This library's destructor: a second `calls` event when calls came after the exit
/// handler's. (On a dlclose it runs first, and the exit handler, run after it by
/// `__cxa_finalize`, finds nothing new.)
extern "C" fn at_fini() {
    let _ = std::panic::catch_unwind(write_if_new);
}

/// Run by the dynamic loader (at exit, or when the library is unloaded) after the
/// `atexit` handlers.
#[used]
#[link_section = ".fini_array"]
static AT_FINI: extern "C" fn() = at_fini;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_have_bytes_and_other_calls_only_a_count() {
        let mut tallies = BTreeMap::new();
        tallies.insert(
            "cuMemcpyHtoD_v2",
            Tally {
                count: 2,
                bytes: Some(96),
            },
        );
        tallies.insert(
            "cuInit",
            Tally {
                count: 1,
                bytes: None,
            },
        );
        assert_eq!(
            to_json(&tallies).to_string(),
            r#"{"cuInit":{"count":1},"cuMemcpyHtoD_v2":{"bytes":96,"count":2}}"#
        );
    }
}
