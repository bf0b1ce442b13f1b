//! The bytes of the code to load on one device, aligned for the ELF reader and the
//! drivers.

use std::borrow::Cow;

/// The bytes of the code to load on one device: the image libomptarget handed over, or
/// one code object out of a container in it, copied to 8-byte aligned storage when it
/// sat at an odd offset (the ELF reader and the drivers want aligned headers).
pub enum DeviceCode<'a> {
    Borrowed(&'a [u8]),
    Aligned(AlignedCopy),
}

impl DeviceCode<'_> {
    pub fn bytes(&self) -> &[u8] {
        match self {
            DeviceCode::Borrowed(bytes) => bytes,
            DeviceCode::Aligned(copy) => copy.bytes(),
        }
    }
}

impl<'a> From<Cow<'a, [u8]>> for DeviceCode<'a> {
    /// Borrow when already aligned, else copy.
    fn from(bytes: Cow<'a, [u8]>) -> Self {
        match bytes {
            Cow::Borrowed(b) if b.as_ptr().align_offset(8) == 0 => DeviceCode::Borrowed(b),
            other => DeviceCode::Aligned(AlignedCopy::new(&other)),
        }
    }
}

/// A copy of some bytes in 8-byte aligned storage.
pub struct AlignedCopy {
    words: Vec<u64>,
    len: usize,
}

impl AlignedCopy {
    pub fn new(bytes: &[u8]) -> Self {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        AlignedCopy {
            words,
            len: bytes.len(),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..self.len]
    }
}
