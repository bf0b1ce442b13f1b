//! Readers and writers for the containers LLVM uses to ship offload (device) code.
//!
//! * [`entries`]: the host's offload entry tables (`llvm_offload_entries`, LLVM 20+,
//!   and `omp_offloading_entries`, LLVM <= 19), with ELF relocations applied.
//! * [`offload_binary`]: the `.llvm.offloading` container (magic `0x10FF10AD`).
//! * [`bundle`]: `clang-offload-bundler` bundles, plain and compressed (`CCOB`).
//! * [`target_id`]: target IDs (`gfx90a:sramecc+:xnack-`), canonical form, compatibility.
//! * [`cuda`]: CUDA image kinds (cubin, fatbinary, PTX), a cubin's SM and where it runs.
//! * [`device_runtime`]: the device and kernel environments LLVM 16-18's device runtime
//!   reads, by version.
//! * [`image`]: classify a file and find every device image inside it.
//!
//! Readers are zero-copy (they borrow the input) and never panic on malformed input:
//! every failure is an [`Error`] naming the field and the offset that was wrong.
//! Allocations are bounded by the input size.
//!
//! No reader or writer has `unsafe` code. The one module that does is
//! [`compressed::zstd_library`]: the calls into zstd's C API that compress bundles with
//! the machine's libzstd (for clang-offload-bundler's bytes).

#![deny(unsafe_code)]

pub mod bundle;
pub mod compressed;
pub mod cuda;
pub mod device_runtime;
pub mod entries;
pub mod error;
pub mod image;
pub mod offload_binary;
pub mod target_id;
pub mod triple;

mod reader;
pub mod string_map_order;

pub use error::{Error, Result};
