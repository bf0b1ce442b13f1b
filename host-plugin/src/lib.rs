//! A libomptarget 16 plugin that makes OpenMP `declare target indirect` work.
//!
//! When libomptarget loads a device image, the plugin resolves the image's offload entries,
//! builds the sorted host -> device function pointer table from its indirect entries
//! ([`generic::table::fptr`]), copies it to the device and points the device runtime's
//! `__omp_offloading_fptr_map_p` / `__omp_offloading_fptr_map_size` at it, so that
//! `__kmpc_target_translate_fptr` can translate host function addresses on the device.
//!
//! One library, three plugins: `libomptarget.rtl.x86_64.so` (the host CPU, through
//! dlopen and libffi), `libomptarget.rtl.cuda.so` (NVIDIA GPUs, through the CUDA driver
//! API) and `libomptarget.rtl.amdgpu.so` (AMD GPUs, through HIP); the name a copy was
//! loaded by picks its [`generic::plugin_kind::PluginKind`].
//!
//! Layout, one folder per layer, imports running down: [`abi`] holds the `#[repr(C)]`
//! LLVM 16 structures and the `extern "C"` `__tgt_rtl_*` shims; [`generic`] is the safe
//! core (nextgen's `GenericPluginTy` / `GenericDeviceTy`: [`generic::plugin`], one
//! image's [`generic::load`], and [`generic::device`], the per-device half with its
//! [`generic::kernels`], launches and memory); [`backend`] holds the vendor API and the
//! vendors, one module per device kind (`host`, `isolated`, `cuda`, `hip`); the leaves,
//! which any layer may import, are [`elf`] (image checks, symbol tables) and [`support`]
//! (launch rules, diagnostics, locks). docs/ARCHITECTURE.md walks one image through.

pub mod abi;
pub mod backend;
pub mod elf;
pub mod generic;
pub mod support;

pub use backend::{Backend, BackendError, DeviceAddr};
/// The table's head as the device reads it (device-rtl's, the one definition).
pub use device_rtl::head as fptr_head;
pub use device_rtl::FptrHead;
pub use generic::device::Device;
pub use generic::error::PluginError;
pub use generic::host_entry::{EntryKind, HostOffloadEntry};
pub use generic::load::DeviceEntry;
pub use generic::plugin::Plugin;
pub use generic::plugin_kind::PluginKind;
pub use generic::table::device_table::IndexInfo;
pub use generic::table::fptr::FptrMapEntry;
