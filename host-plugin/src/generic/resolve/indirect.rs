//! Indirect entries: the device function or pointer global an indirect entry names, the
//! word such a global holds, and the device vtable it points to, checked before it is
//! read.

use super::EntryResolver;
use crate::backend::DeviceAddr;
use crate::elf::symbols::{Symbol, Wanted};
use crate::generic::error::PluginError;
use crate::generic::host_entry::HostEntry;

impl<'a> EntryResolver<'a> {
    /// The device symbol an indirect entry names, by the rule of
    /// [`crate::elf::image::ImageSymbols::indirect_target`] where the image's tables are
    /// known; else (GPU drivers) through the loaded module. Returns the address and,
    /// where the tables are known, the symbol.
    pub(super) fn indirect_target(
        &self,
        entry: &impl HostEntry,
        name: &[u8],
        wanted: Wanted,
        dynamic: Option<Symbol>,
    ) -> Result<(DeviceAddr, Option<Symbol>), PluginError> {
        let Some((symbols, bias)) = self.own_tables() else {
            let found = match wanted {
                Wanted::Function => self.module.indirect_function(entry.name()),
                Wanted::Data => self.module.global(entry.name()),
            };
            return found
                .map(|addr| (addr, None))
                .map_err(|e| self.entry_err(entry, e.to_string()));
        };
        let sym = symbols
            .indirect_target_given(name, wanted, dynamic)
            .map_err(|e| self.entry_err(entry, e.to_string()))?;
        Ok((bias.wrapping_add(sym.value), Some(sym)))
    }

    pub(super) fn read_word(
        &self,
        entry: &impl HostEntry,
        addr: DeviceAddr,
    ) -> Result<u64, PluginError> {
        let mut word = [0u8; 8];
        // SAFETY: callers pass the address of an image global whose ELF symbol size was
        // checked to be 8 bytes.
        unsafe { self.device.vendor().read(addr, &mut word) }
            .map_err(|e| self.entry_err(entry, format!("reading its device global: {e}")))?;
        Ok(u64::from_ne_bytes(word))
    }

    /// Before reading `len` bytes of a device vtable: it must not be null, and where the
    /// backend reads the image's symbols (the host, whose device reads are plain memory
    /// reads) it must lie inside one symbol of the image. GPU drivers check their own
    /// device addresses and fail the copy instead.
    pub(super) fn check_device_vtable(
        &self,
        entry: &impl HostEntry,
        global: DeviceAddr,
        device_vtable: DeviceAddr,
        len: usize,
    ) -> Result<(), PluginError> {
        if device_vtable == 0 {
            return Err(self.entry_err(entry, "its device global holds a null vtable pointer"));
        }
        let Some(symbols) = self.symbols else {
            return Ok(());
        };
        // The image's load bias: known, or from where its own global landed.
        let inside = self
            .bias
            .or_else(|| {
                symbols
                    .address_of(entry.name().to_bytes())
                    .map(|image_addr| global.wrapping_sub(image_addr))
            })
            .is_some_and(|bias| {
                symbols.within_one_symbol(device_vtable.wrapping_sub(bias), len as u64)
            });
        if inside {
            Ok(())
        } else {
            Err(self.entry_err(
                entry,
                format!(
                    "its device global points to {device_vtable:#x}, which is not inside a \
                     symbol of the image with room for the {len}-byte vtable"
                ),
            ))
        }
    }

    /// An 8-byte global of the image, address and size checked.
    pub(super) fn pointer_global(
        &self,
        entry: &impl HostEntry,
        name: &[u8],
        dynamic: Option<Symbol>,
    ) -> Result<DeviceAddr, PluginError> {
        if self.own_tables().is_some() {
            let (addr, sym) = self.indirect_target(entry, name, Wanted::Data, dynamic)?;
            return match sym.map(|s| s.size) {
                Some(8) => Ok(addr),
                n => Err(self.entry_err(
                    entry,
                    format!(
                        "its device global is {} bytes, an indirect entry needs 8 (a pointer)",
                        n.unwrap_or(0)
                    ),
                )),
            };
        }
        match self.symbol_size(entry.name()) {
            Some(8) => {}
            Some(n) => {
                return Err(self.entry_err(
                    entry,
                    format!(
                        "its device global is {n} bytes, an indirect entry needs 8 (a pointer)"
                    ),
                ))
            }
            None => {
                return Err(self.entry_err(entry, "the image does not export its device global"))
            }
        }
        self.module
            .global(entry.name())
            .map_err(|e| self.entry_err(entry, e.to_string()))
    }
}
