//! Kernels and globals: the device address of an exported symbol of the image, and each
//! kernel's record (on a GPU its exec mode, or clang 18's kernel environment, and the
//! vendor's limits for it).

use super::EntryResolver;
use crate::backend::{BackendError, DeviceAddr, LoadedModule};
use crate::elf::symbols::Symbol;
use crate::generic::error::PluginError;
use crate::generic::host_entry::{EntryKind, HostEntry};
use crate::generic::kernels::KernelRecord;
use crate::support::launch_shape::{self, ExecMode};
use crate::support::locking::lock;
use std::ffi::CStr;

impl<'a> EntryResolver<'a> {
    /// A kernel's or a global's device address: an exported symbol of the image.
    /// `dynamic`: the entry's name looked up in the image's dynamic symbol table, where
    /// the tables are known ([`Self::look_up`]).
    pub(super) fn exported(
        &self,
        entry: &impl HostEntry,
        kind: EntryKind,
        dynamic: Option<Symbol>,
    ) -> Result<DeviceAddr, PluginError> {
        if let Some((_, bias)) = self.own_tables() {
            if let Some(sym) = dynamic.filter(Symbol::is_plain) {
                let addr = bias.wrapping_add(sym.value);
                if kind == EntryKind::Kernel {
                    self.record_kernel(entry, addr, None)?;
                }
                return Ok(addr);
            }
        }
        // No tables, or not an ordinary symbol the image defines and exports (TLS, an
        // ifunc, one from a library it depends on): the loader answers, as for LLVM's
        // plugin.
        if kind != EntryKind::Kernel {
            return self
                .module
                .global(entry.name())
                .map_err(|e| self.entry_err(entry, e.to_string()));
        }
        let addr = self
            .module
            .function(entry.name())
            .map_err(|e| self.entry_err(entry, e.to_string()))?;
        self.record_kernel(entry, addr, Some(self.module))?;
        Ok(addr)
    }

    /// Record a kernel with what its launches need: on a GPU its exec mode and the
    /// vendor's limits for it (`function_of`: the module whose `function` returned
    /// `addr`); on the host, nothing (it runs kernels once).
    fn record_kernel(
        &self,
        entry: &impl HostEntry,
        addr: DeviceAddr,
        function_of: Option<&dyn LoadedModule>,
    ) -> Result<(), PluginError> {
        let record = match function_of {
            Some(module) if self.device.kind().is_gpu() => {
                let (mode, reduction_buffer_bytes) = match self.exec_mode(entry)? {
                    Some(mode) => (Some(mode), 0),
                    None => match self.kernel_environment(entry)? {
                        Some((mode, buffer)) => (Some(mode), buffer),
                        None => (self.device.backend().untagged_kernel_mode(), 0),
                    },
                };
                // SAFETY: `addr` is what `module.function` returned for this entry's name.
                let limits = unsafe { module.kernel_limits(addr, entry.name()) }
                    .map_err(|e| self.entry_err(entry, e.to_string()))?;
                KernelRecord {
                    mode,
                    limits,
                    name: Some(entry.name().into()),
                    reduction_buffer_bytes,
                }
            }
            _ => KernelRecord {
                mode: None,
                limits: None,
                name: Some(entry.name().into()),
                reduction_buffer_bytes: 0,
            },
        };
        lock(&self.kernel_records).push((addr, record));
        Ok(())
    }

    /// The kernel's `<kernel>_exec_mode` ([`launch_shape::read_exec_mode`]): None when
    /// the image has no such global (not an OpenMP kernel).
    fn exec_mode(&self, entry: &impl HostEntry) -> Result<Option<ExecMode>, PluginError> {
        let global = |name: &CStr| {
            let Some(size) = self.symbol_size(name) else {
                return Ok(None);
            };
            if size != 1 {
                // Refused by the size alone, before the driver is asked for its address.
                return Ok(Some((0, size)));
            }
            self.module.global(name).map(|addr| Some((addr, size)))
        };
        let read_byte = |addr| {
            let mut value = [0u8; 1];
            // SAFETY: `addr` is the device address of a global of this image whose size
            // was just checked to be 1 byte.
            unsafe { self.device.vendor().read(addr, &mut value) }?;
            Ok(value[0])
        };
        launch_shape::read_exec_mode(entry.name(), global, read_byte, BackendError::Load)
            .map_err(|e| self.entry_err(entry, e.to_string()))
    }

    /// clang 18's `<kernel>_kernel_environment` ([`launch_shape::kernel_environment`]):
    /// the kernel's mode and its reduction buffer's bytes; None when the image has none.
    fn kernel_environment(
        &self,
        entry: &impl HostEntry,
    ) -> Result<Option<(ExecMode, u64)>, PluginError> {
        use launch_shape::kernel_environment as env;
        let mut name = entry.name().to_bytes().to_vec();
        name.extend_from_slice(env::SUFFIX);
        let name =
            std::ffi::CString::new(name).map_err(|_| self.entry_err(entry, "a NUL in its name"))?;
        let shown = name.to_string_lossy();
        match self.symbol_size(&name) {
            None => return Ok(None),
            Some(env::SIZE) => {}
            Some(n) => {
                return Err(self.entry_err(
                    entry,
                    format!("{shown} is {n} bytes, LLVM 18's is {}", env::SIZE),
                ))
            }
        }
        let addr = self
            .module
            .global(&name)
            .map_err(|e| self.entry_err(entry, e.to_string()))?;
        let mut configuration = [0u8; env::CONFIGURATION_BYTES];
        // SAFETY: `addr` is the device address of this image's global of `env::SIZE`
        // bytes (checked above), more than the configuration read from its start.
        unsafe { self.device.vendor().read(addr, &mut configuration) }
            .map_err(|e| self.entry_err(entry, format!("reading {shown}: {e}")))?;
        let (mode, buffer) = env::parse(&configuration);
        let mode = ExecMode::from_raw(mode).ok_or_else(|| {
            self.entry_err(
                entry,
                format!("{shown} holds exec mode {mode}, not LLVM 18's"),
            )
        })?;
        Ok(Some((mode, buffer)))
    }
}
