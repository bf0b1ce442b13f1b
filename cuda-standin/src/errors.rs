//! CUresult values (the driver API's numbers, checked against cudarc's bindings in the
//! tests), their names and descriptions, and [`Failure`]: an error result with the
//! detail the report gives.

/// A CUresult as the driver API returns it (a C enum: 32 bits).
pub type CuResult = u32;

pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CuResult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CuResult = 3;
pub const CUDA_ERROR_NO_DEVICE: CuResult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CuResult = 101;
pub const CUDA_ERROR_INVALID_IMAGE: CuResult = 200;
pub const CUDA_ERROR_INVALID_CONTEXT: CuResult = 201;
pub const CUDA_ERROR_NO_BINARY_FOR_GPU: CuResult = 209;
pub const CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: CuResult = 217;
pub const CUDA_ERROR_INVALID_HANDLE: CuResult = 400;
pub const CUDA_ERROR_NOT_FOUND: CuResult = 500;
pub const CUDA_ERROR_NOT_READY: CuResult = 600;
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CuResult = 700;
pub const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: CuResult = 704;
pub const CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE: CuResult = 708;
pub const CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: CuResult = 712;
pub const CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: CuResult = 713;
pub const CUDA_ERROR_NOT_SUPPORTED: CuResult = 801;
pub const CUDA_ERROR_UNKNOWN: CuResult = 999;

/// Every value this stand-in returns: (value, name, description). cuGetErrorName and
/// cuGetErrorString answer from here (NUL-terminated for C).
const KNOWN: &[(CuResult, &str, &str)] = &[
    (CUDA_SUCCESS, "CUDA_SUCCESS\0", "no error\0"),
    (
        CUDA_ERROR_INVALID_VALUE,
        "CUDA_ERROR_INVALID_VALUE\0",
        "invalid argument\0",
    ),
    (
        CUDA_ERROR_OUT_OF_MEMORY,
        "CUDA_ERROR_OUT_OF_MEMORY\0",
        "out of memory\0",
    ),
    (
        CUDA_ERROR_NOT_INITIALIZED,
        "CUDA_ERROR_NOT_INITIALIZED\0",
        "initialization error\0",
    ),
    (
        CUDA_ERROR_NO_DEVICE,
        "CUDA_ERROR_NO_DEVICE\0",
        "no CUDA-capable device is detected\0",
    ),
    (
        CUDA_ERROR_INVALID_DEVICE,
        "CUDA_ERROR_INVALID_DEVICE\0",
        "invalid device ordinal\0",
    ),
    (
        CUDA_ERROR_INVALID_IMAGE,
        "CUDA_ERROR_INVALID_IMAGE\0",
        "device kernel image is invalid\0",
    ),
    (
        CUDA_ERROR_INVALID_CONTEXT,
        "CUDA_ERROR_INVALID_CONTEXT\0",
        "invalid device context\0",
    ),
    (
        CUDA_ERROR_NO_BINARY_FOR_GPU,
        "CUDA_ERROR_NO_BINARY_FOR_GPU\0",
        "no kernel image is available for execution on the device\0",
    ),
    (
        CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
        "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED\0",
        "peer access is not supported between these two devices\0",
    ),
    (
        CUDA_ERROR_INVALID_HANDLE,
        "CUDA_ERROR_INVALID_HANDLE\0",
        "invalid resource handle\0",
    ),
    (
        CUDA_ERROR_NOT_FOUND,
        "CUDA_ERROR_NOT_FOUND\0",
        "named symbol not found\0",
    ),
    (
        CUDA_ERROR_NOT_READY,
        "CUDA_ERROR_NOT_READY\0",
        "device not ready\0",
    ),
    (
        CUDA_ERROR_ILLEGAL_ADDRESS,
        "CUDA_ERROR_ILLEGAL_ADDRESS\0",
        "an illegal memory access was encountered\0",
    ),
    (
        CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
        "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED\0",
        "peer access is already enabled\0",
    ),
    (
        CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
        "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE\0",
        "primary context active\0",
    ),
    (
        CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
        "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED\0",
        "part or all of the requested memory range is already mapped\0",
    ),
    (
        CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
        "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED\0",
        "pointer does not correspond to a registered memory region\0",
    ),
    (
        CUDA_ERROR_NOT_SUPPORTED,
        "CUDA_ERROR_NOT_SUPPORTED\0",
        "operation not supported\0",
    ),
    (
        CUDA_ERROR_UNKNOWN,
        "CUDA_ERROR_UNKNOWN\0",
        "unknown error\0",
    ),
];

fn known(code: CuResult) -> Option<&'static (CuResult, &'static str, &'static str)> {
    KNOWN.iter().find(|(c, _, _)| *c == code)
}

/// The value's name with its NUL (for C), if this stand-in knows it.
pub fn name_with_nul(code: CuResult) -> Option<&'static str> {
    known(code).map(|(_, name, _)| *name)
}

/// The value's description with its NUL (for C), if this stand-in knows it.
pub fn description_with_nul(code: CuResult) -> Option<&'static str> {
    known(code).map(|(_, _, text)| *text)
}

/// The value's name, as the report writes it (`CUresult 123` for one it does not know).
pub fn name(code: CuResult) -> String {
    match name_with_nul(code) {
        Some(n) => n.trim_end_matches('\0').to_owned(),
        None => format!("CUresult {code}"),
    }
}

/// A driver call's failure: the CUresult it returns and what the report says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: CuResult,
    pub detail: String,
}

impl Failure {
    pub fn new(code: CuResult, detail: impl Into<String>) -> Self {
        Failure {
            code,
            detail: detail.into(),
        }
    }

    pub fn invalid_value(detail: impl Into<String>) -> Self {
        Self::new(CUDA_ERROR_INVALID_VALUE, detail)
    }

    pub fn invalid_handle(detail: impl Into<String>) -> Self {
        Self::new(CUDA_ERROR_INVALID_HANDLE, detail)
    }

    pub fn invalid_context(detail: impl Into<String>) -> Self {
        Self::new(CUDA_ERROR_INVALID_CONTEXT, detail)
    }
}

/// What every call's body returns.
pub type Outcome<T = ()> = Result<T, Failure>;

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::sys::CUresult;

    /// Every value equals cudarc's binding of the same name (the plugin compares them).
    #[test]
    fn values_are_the_driver_apis() {
        let pairs = [
            (CUDA_SUCCESS, CUresult::CUDA_SUCCESS),
            (CUDA_ERROR_INVALID_VALUE, CUresult::CUDA_ERROR_INVALID_VALUE),
            (CUDA_ERROR_OUT_OF_MEMORY, CUresult::CUDA_ERROR_OUT_OF_MEMORY),
            (
                CUDA_ERROR_NOT_INITIALIZED,
                CUresult::CUDA_ERROR_NOT_INITIALIZED,
            ),
            (CUDA_ERROR_NO_DEVICE, CUresult::CUDA_ERROR_NO_DEVICE),
            (
                CUDA_ERROR_INVALID_DEVICE,
                CUresult::CUDA_ERROR_INVALID_DEVICE,
            ),
            (CUDA_ERROR_INVALID_IMAGE, CUresult::CUDA_ERROR_INVALID_IMAGE),
            (
                CUDA_ERROR_INVALID_CONTEXT,
                CUresult::CUDA_ERROR_INVALID_CONTEXT,
            ),
            (
                CUDA_ERROR_NO_BINARY_FOR_GPU,
                CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU,
            ),
            (
                CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
                CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
            ),
            (
                CUDA_ERROR_INVALID_HANDLE,
                CUresult::CUDA_ERROR_INVALID_HANDLE,
            ),
            (CUDA_ERROR_NOT_FOUND, CUresult::CUDA_ERROR_NOT_FOUND),
            (CUDA_ERROR_NOT_READY, CUresult::CUDA_ERROR_NOT_READY),
            (
                CUDA_ERROR_ILLEGAL_ADDRESS,
                CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            ),
            (
                CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
                CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
            ),
            (
                CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
                CUresult::CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
            ),
            (
                CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
            ),
            (
                CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
                CUresult::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
            ),
            (CUDA_ERROR_NOT_SUPPORTED, CUresult::CUDA_ERROR_NOT_SUPPORTED),
            (CUDA_ERROR_UNKNOWN, CUresult::CUDA_ERROR_UNKNOWN),
        ];
        for (ours, theirs) in pairs {
            assert_eq!(ours, theirs as u32, "{theirs:?}");
            assert_eq!(name(ours), format!("{theirs:?}"));
        }
        assert_eq!(pairs.len(), KNOWN.len(), "every known value is checked");
    }

    #[test]
    fn unknown_values_have_no_name() {
        assert_eq!(name_with_nul(12345), None);
        assert_eq!(name(12345), "CUresult 12345");
    }
}
