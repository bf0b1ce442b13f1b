//! Bounds-checked little-endian reads that name the field on failure.

use crate::error::{Error, Result};

/// A view of a container's bytes; offsets are relative to its start.
#[derive(Clone, Copy)]
pub(crate) struct Reader<'a> {
    pub data: &'a [u8],
    pub container: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8], container: &'static str) -> Self {
        Reader { data, container }
    }

    pub fn bytes(&self, offset: u64, len: u64, field: &'static str) -> Result<&'a [u8]> {
        let available = (self.data.len() as u64).saturating_sub(offset);
        if offset > self.data.len() as u64 || len > available {
            return Err(Error::Truncated {
                container: self.container,
                field,
                offset,
                needed: len,
                available,
            });
        }
        // Both fit in usize: they are bounded by data.len().
        Ok(&self.data[offset as usize..(offset + len) as usize])
    }

    /// The container's magic at `offset`: too few bytes is `Truncated`, other bytes
    /// `BadMagic`.
    pub fn expect_magic(&self, offset: u64, magic: &[u8]) -> Result<()> {
        if self.bytes(offset, magic.len() as u64, "magic")? != magic {
            return Err(Error::BadMagic {
                container: self.container,
                offset,
            });
        }
        Ok(())
    }

    fn array<const N: usize>(&self, offset: u64, field: &'static str) -> Result<[u8; N]> {
        let b = self.bytes(offset, N as u64, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    pub fn u16(&self, offset: u64, field: &'static str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(offset, field)?))
    }

    pub fn u32(&self, offset: u64, field: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(offset, field)?))
    }

    pub fn u64(&self, offset: u64, field: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(offset, field)?))
    }

    /// A NUL-terminated UTF-8 string starting at `offset`.
    pub fn c_str(&self, offset: u64, field: &'static str) -> Result<&'a str> {
        let bad = || Error::BadString {
            container: self.container,
            field,
            offset,
        };
        if offset >= self.data.len() as u64 {
            return Err(bad());
        }
        let rest = &self.data[offset as usize..];
        let end = rest.iter().position(|&b| b == 0).ok_or_else(bad)?;
        std::str::from_utf8(&rest[..end]).map_err(|_| bad())
    }

    pub fn invalid(
        &self,
        field: &'static str,
        offset: u64,
        value: u64,
        reason: &'static str,
    ) -> Error {
        Error::InvalidField {
            container: self.container,
            field,
            offset,
            value,
            reason,
        }
    }
}
