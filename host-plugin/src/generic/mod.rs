//! The core, named after LLVM 16 nextgen's `GenericPluginTy` / `GenericDeviceTy`: every
//! rule the devices share, over the vendor API ([`crate::backend`]), below the C shims
//! ([`crate::abi`]). The [`plugin::Plugin`] and its kind ([`plugin_kind`], the one
//! place that picks a vendor), one [`device::Device`] per device, one image's load
//! ([`load`], [`resolve`], [`table`]), the device's memory ([`device_buffer`],
//! [`memory_pool`]), and what those read and write ([`host_entry`], [`kernels`],
//! [`device_env`], [`device_settings`]); its errors are [`error::PluginError`].
//! docs/ARCHITECTURE.md, "The layers".

pub mod device;
pub mod device_buffer;
pub mod device_env;
pub mod device_settings;
pub mod error;
pub mod host_entry;
pub mod kernels;
pub mod load;
pub mod memory_pool;
pub mod plugin;
pub mod plugin_kind;
pub mod resolve;
pub mod table;
