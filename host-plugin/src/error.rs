//! The plugin's errors. Each says which device, image and entry it is about; the C ABI
//! layer prints it and returns OFFLOAD_FAIL.

use crate::backend::BackendError;
use crate::fptr::FptrError;
use crate::image::ImageError;
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
