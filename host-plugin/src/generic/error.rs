//! The plugin's errors. Each says which device, image and entry it is about; the C ABI
//! layer prints it and returns OFFLOAD_FAIL.

use crate::backend::BackendError;
use crate::elf::image::ImageError;
use crate::generic::table::fptr::FptrError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum PluginError {
    #[error("device {device} does not exist (this plugin has {count})")]
    NoSuchDevice { device: i32, count: usize },
    #[error("{image} on device {device}: {source}")]
    Image {
        image: String,
        device: i32,
        source: ImageError,
    },
    #[error("{image} on device {device}: could not load it: {source}")]
    Load {
        image: String,
        device: i32,
        source: BackendError,
    },
    #[error("{image} on device {device}: entry `{entry}`: {reason}")]
    Entry {
        image: String,
        device: i32,
        entry: String,
        reason: String,
    },
    #[error("{image} on device {device}: indirect function table: {source}")]
    Fptr {
        image: String,
        device: i32,
        source: FptrError,
    },
    #[error("device {device}: {what}: {source}")]
    Backend {
        device: i32,
        what: String,
        source: BackendError,
    },
    #[error("device {device}: {what}")]
    Invalid { device: i32, what: String },
    #[error("a panic was caught in {0}: {1}")]
    Panic(&'static str, String),
}

/// An error mapper for a backend call. `what` becomes a String only on failure: these
/// run on every transfer and launch, where an allocation per call showed up.
pub(crate) fn backend_err(
    device: i32,
    what: impl Into<String>,
) -> impl FnOnce(BackendError) -> PluginError {
    move |source| PluginError::Backend {
        device,
        what: what.into(),
        source,
    }
}

/// As [`backend_err`], for a message that has to be formatted (only on failure).
pub(crate) fn backend_err_with(
    device: i32,
    what: impl FnOnce() -> String,
) -> impl FnOnce(BackendError) -> PluginError {
    move |source| PluginError::Backend {
        device,
        what: what(),
        source,
    }
}
