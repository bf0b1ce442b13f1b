//! Faults on request: `OMPTARGET_RS_CUDA_STANDIN_FAIL_COPY=<n>` makes the n-th copy
//! call of this process (1-based, every copy function counted together, whatever its
//! arguments) return CUDA_ERROR_ILLEGAL_ADDRESS before it checks or touches anything,
//! as a GPU's copy engine reports a bad access. The copies before and after it behave
//! as usual.

use crate::errors::{Failure, Outcome, CUDA_ERROR_ILLEGAL_ADDRESS};
use std::sync::atomic::{AtomicU64, Ordering};

pub const FAIL_COPY_ENV: &str = "OMPTARGET_RS_CUDA_STANDIN_FAIL_COPY";

/// Copy calls so far.
static COPIES: AtomicU64 = AtomicU64::new(0);
/// The copy to fail (0: none); [`UNREAD`] until the environment is read.
static FAIL_AT: AtomicU64 = AtomicU64::new(UNREAD);
const UNREAD: u64 = u64::MAX;

/// `n` of `FAIL_COPY_ENV=n`: 0 (fail none) when unset or not a positive number.
pub fn parse_fail_copy(value: Option<&str>) -> u64 {
    value
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&n| n != UNREAD)
        .unwrap_or(0)
}

fn fail_at() -> u64 {
    match FAIL_AT.load(Ordering::Relaxed) {
        UNREAD => {
            let n = parse_fail_copy(std::env::var(FAIL_COPY_ENV).ok().as_deref());
            // Another thread may have read it first: the same value.
            let _ = FAIL_AT.compare_exchange(UNREAD, n, Ordering::Relaxed, Ordering::Relaxed);
            FAIL_AT.load(Ordering::Relaxed)
        }
        n => n,
    }
}

/// Count one copy call of `len` bytes; the one told to fail is an error.
pub fn copy(len: usize) -> Outcome {
    let nth = COPIES.fetch_add(1, Ordering::Relaxed) + 1;
    if nth == fail_at() {
        return Err(Failure::new(
            CUDA_ERROR_ILLEGAL_ADDRESS,
            format!(
                "told to fail copy {nth} of this process ({FAIL_COPY_ENV}={nth}): {len} bytes, \
                 no memory touched"
            ),
        ));
    }
    Ok(())
}

/// Copy calls so far (tests).
#[cfg(test)]
pub fn copies_so_far() -> u64 {
    COPIES.load(Ordering::Relaxed)
}

/// Fail copy `n` instead of what the environment says (tests; 0: none).
#[cfg(test)]
pub fn set_fail_copy(n: u64) {
    FAIL_AT.store(n, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_is_a_positive_copy_number() {
        assert_eq!(parse_fail_copy(Some("3")), 3);
        assert_eq!(parse_fail_copy(Some(" 12\n")), 12);
        assert_eq!(parse_fail_copy(Some("0")), 0);
        assert_eq!(parse_fail_copy(Some("-1")), 0);
        assert_eq!(parse_fail_copy(Some("third")), 0);
        assert_eq!(parse_fail_copy(None), 0);
    }
}
