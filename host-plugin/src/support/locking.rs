//! Locks whose holder panicked stay usable: the panic was reported where it happened
//! (the C ABI's guard), and the data they protect is never left half-updated.

use std::sync::{Mutex, MutexGuard};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
