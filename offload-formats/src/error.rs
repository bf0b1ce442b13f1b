//! The one error type of the crate: what was wrong, in which field, at which offset.

/// Result alias used by every reader and writer here.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A malformed or unsupported input. `container` names the format being read
/// (`"offload bundle"`, `"OffloadBinary"`, ...), `field` the field, `offset` the byte
/// offset of that field from the start of the container.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{container}: field `{field}` at offset {offset:#x} needs {needed} bytes, only {available} left")]
    Truncated {
        container: &'static str,
        field: &'static str,
        offset: u64,
        needed: u64,
        available: u64,
    },
    #[error("{container}: bad magic at offset {offset:#x}")]
    BadMagic {
        container: &'static str,
        offset: u64,
    },
    #[error(
        "{container}: field `{field}` at offset {offset:#x} has invalid value {value:#x}: {reason}"
    )]
    InvalidField {
        container: &'static str,
        field: &'static str,
        offset: u64,
        value: u64,
        reason: &'static str,
    },
    #[error("{container}: string `{field}` at offset {offset:#x} is not NUL-terminated UTF-8 inside the container")]
    BadString {
        container: &'static str,
        field: &'static str,
        offset: u64,
    },
    #[error("{container}: cannot decompress payload at offset {offset:#x}: {reason}")]
    Decompress {
        container: &'static str,
        offset: u64,
        reason: String,
    },
    /// Reading or writing a stream failed (not the data's fault).
    #[error("{container}: {doing}: {reason}")]
    Io {
        container: &'static str,
        doing: &'static str,
        reason: String,
    },
    #[error("ELF: {0}")]
    Elf(String),
    #[error("invalid {what} `{text}`: {reason}")]
    Syntax {
        what: &'static str,
        text: String,
        reason: String,
    },
}

impl From<object::Error> for Error {
    fn from(e: object::Error) -> Self {
        Error::Elf(e.to_string())
    }
}
