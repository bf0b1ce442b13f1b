//! What the two host devices share: the one in this process ([`super::host`]) and the
//! isolated one ([`super::isolated`], whose device process runs the same code): an
//! x86-64 image opened with dlopen ([`dlopen`]), a kernel called through libffi
//! ([`ffi_call`]), and how many devices they offer. No vendor of its own: one copy of
//! these rules for both.

pub(super) mod dlopen;
pub(super) mod ffi_call;

/// LLVM's host plugin offers four devices; tests in LLVM's suite use more than one.
pub const HOST_DEVICE_COUNT: usize = 4;
