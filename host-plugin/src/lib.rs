//! A libomptarget 16 plugin that makes OpenMP `declare target indirect` work.
//!
//! When libomptarget loads a device image, the plugin resolves the image's offload entries,
//! builds the sorted host -> device function pointer table from its indirect entries
//! ([`table::fptr`]), copies it to the device and points the device runtime's
//! `__omp_offloading_fptr_map_p` / `__omp_offloading_fptr_map_size` at it, so that
//! `__kmpc_target_translate_fptr` can translate host function addresses on the device.
//!
//! One library, three plugins: `libomptarget.rtl.x86_64.so` (the host CPU, through
//! dlopen and libffi), `libomptarget.rtl.cuda.so` (NVIDIA GPUs, through the CUDA driver
//! API) and `libomptarget.rtl.amdgpu.so` (AMD GPUs, through HIP); the name a copy was
//! loaded by picks its [`plugin_kind::PluginKind`].
//!
//! Layout: [`abi`] holds the `#[repr(C)]` LLVM 16 structures and the `extern "C"`
//! `__tgt_rtl_*` shims; [`plugin`] is the safe core (the plugin, one image's load) and
//! [`device`] its per-device half (images, [`kernels`], launches, memory); [`backend`]
//! holds the vendor hooks, one module per device kind (`host`, `cuda`, `hip`).
//! docs/ARCHITECTURE.md walks one image through.

pub mod abi;
pub mod backend;
pub mod device;
pub mod device_buffer;
pub mod device_env;
pub mod device_settings;
pub mod diag;
pub mod error;
pub mod host_entry;
mod huge_pages;
pub mod image;
pub mod kernels;
pub mod launch_shape;
pub mod load;
mod locking;
pub mod memory_pool;
mod own_file;
pub mod plugin;
pub mod plugin_kind;
mod prefetch;
pub mod resolve;
pub mod symbols;
pub mod table;

pub use backend::{Backend, BackendError, DeviceAddr};
pub use device::Device;
/// The table's head as the device reads it (device-rtl's, the one definition).
pub use device_rtl::head as fptr_head;
pub use device_rtl::FptrHead;
pub use error::PluginError;
pub use host_entry::{EntryKind, HostOffloadEntry};
pub use load::DeviceEntry;
pub use plugin::Plugin;
pub use plugin_kind::PluginKind;
pub use table::device_table::IndexInfo;
pub use table::fptr::FptrMapEntry;
