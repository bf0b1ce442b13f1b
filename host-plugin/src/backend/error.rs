//! What a vendor's call can fail with, typed by what failed.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum BackendError {
    /// A driver call (CUDA driver API, HIP) failed: which call, the driver's own code and
    /// its name or message. Every driver failure is one of these, so callers and tests
    /// can tell a driver refusal from the plugin's own checks.
    #[error("{call} failed: {name} (error {code})")]
    Driver {
        call: &'static str,
        code: i32,
        name: String,
    },
    /// A queue or event handle this backend did not hand out on this device, or one
    /// already destroyed: refused before any driver call sees it.
    #[error("device {device}: no {kind} {handle:#x} (never created here, or already destroyed)")]
    UnknownHandle {
        kind: HandleKind,
        device: usize,
        handle: u64,
    },
    /// The image or a symbol of it cannot be used: the plugin's own checks, or the
    /// loader's refusal.
    #[error("{0}")]
    Load(String),
    /// A range outside the memory it must lie in (an allocation, the device's memory),
    /// refused before any copy.
    #[error("{0}")]
    Bounds(String),
    /// A copy between the host and device memory failed where it was made (the
    /// isolated device's process memory).
    #[error("{0}")]
    Transfer(String),
    /// The isolated device's process: it could not start, has ended, or refused a
    /// request with its own reason.
    #[error("{0}")]
    DeviceProcess(String),
    /// An answer of the isolated device's process that does not fit the request.
    #[error("{0}")]
    Protocol(String),
    #[error("symbol `{0}` not found in the image")]
    MissingSymbol(String),
    #[error("out of device memory allocating {0} bytes")]
    OutOfMemory(usize),
    #[error("kernel launch failed: {0}")]
    Launch(String),
    /// A request the backend refuses before any driver call (e.g. locking 0 bytes).
    #[error("{0}")]
    Invalid(String),
    #[error("this plugin has no {0} devices")]
    NoDevices(&'static str),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// The kinds of handle a backend hands out and must recognise when they come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HandleKind {
    Queue,
    Event,
    /// A host buffer page-locked by `__tgt_rtl_data_lock`.
    Locked,
}

impl std::fmt::Display for HandleKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HandleKind::Queue => "queue",
            HandleKind::Event => "event",
            HandleKind::Locked => "locked host buffer",
        })
    }
}
