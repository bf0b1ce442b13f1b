//! The queue, event and locked-buffer handles a device hands out, and the check that
//! only those come back to its driver.

use super::error::{BackendError, HandleKind};
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

/// An ordered queue of asynchronous operations on one device (a CUDA stream): an opaque,
/// non-zero backend handle that libomptarget keeps in `__tgt_async_info::Queue`.
pub type QueueHandle = u64;
/// A backend event (a CUDA event): an opaque, non-zero handle.
pub type EventHandle = u64;

/// The error for a handle device `device` never handed out (or already destroyed).
pub fn unknown(kind: HandleKind, device: usize, handle: u64) -> BackendError {
    BackendError::UnknownHandle {
        kind,
        device,
        handle,
    }
}

/// The queue and event handles one device handed out: a handle is checked here before
/// it reaches the driver, and forgotten when it is destroyed.
pub struct HandleRegistry {
    /// The device's number, for the errors.
    device: usize,
    live: Mutex<HashSet<(HandleKind, u64)>>,
}

impl HandleRegistry {
    /// The registry of device `device` (its number names it in errors).
    pub fn new(device: usize) -> Self {
        HandleRegistry {
            device,
            live: Mutex::default(),
        }
    }

    fn live(&self) -> MutexGuard<'_, HashSet<(HandleKind, u64)>> {
        crate::support::locking::lock(&self.live)
    }

    /// Record a handle the driver just created.
    pub fn insert(&self, kind: HandleKind, handle: u64) {
        self.live().insert((kind, handle));
    }

    /// `Ok` if `handle` is live, else [`BackendError::UnknownHandle`].
    pub fn check(&self, kind: HandleKind, handle: u64) -> Result<(), BackendError> {
        if self.live().contains(&(kind, handle)) {
            Ok(())
        } else {
            Err(unknown(kind, self.device, handle))
        }
    }

    /// Forget a handle that is about to be destroyed; an error if it was not live (so
    /// it is destroyed at most once).
    pub fn remove(&self, kind: HandleKind, handle: u64) -> Result<(), BackendError> {
        if self.live().remove(&(kind, handle)) {
            Ok(())
        } else {
            Err(unknown(kind, self.device, handle))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_is_live_from_insert_to_remove_on_its_own_device_only() {
        let handles = HandleRegistry::new(0);
        let other_device = HandleRegistry::new(1);
        handles.insert(HandleKind::Queue, 0x10);
        assert!(handles.check(HandleKind::Queue, 0x10).is_ok());
        // Another device, another kind, another value: unknown.
        assert!(other_device.check(HandleKind::Queue, 0x10).is_err());
        assert!(handles.check(HandleKind::Event, 0x10).is_err());
        assert!(handles.check(HandleKind::Queue, 0x11).is_err());
        assert!(handles.remove(HandleKind::Queue, 0x10).is_ok());
        // Destroyed once: a second destroy is refused, not passed on.
        let err = handles.remove(HandleKind::Queue, 0x10).unwrap_err();
        assert!(
            err.to_string().contains("no queue 0x10") && err.to_string().contains("device 0"),
            "{err}"
        );
    }
}
