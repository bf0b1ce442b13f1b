//! Which kind of CUDA image a byte string is, and for an ELF cubin which SM it was built
//! for: the driver rejects a cubin for another architecture with a bare
//! CUDA_ERROR_NO_BINARY_FOR_GPU, so the plugin checks first and says which. The one
//! place these rules live: the plugin's CUDA backend and [`crate::image`] both ask here.

use object::elf;
use object::read::elf::FileHeader;
use object::LittleEndian;

/// The three things cuModuleLoadData accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaImage {
    /// An ELF cubin for one SM (`sm` is e.g. 90 for sm_90).
    Cubin { sm: u32 },
    /// A fatbinary: the driver picks the member for the device.
    Fatbin,
    /// PTX text: the driver JIT-compiles it for the device.
    Ptx,
}

/// The fatbinary container's magic (little-endian u32 at offset 0).
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;

/// ptxas 12.8+ writes ELF ABI version 8, whose e_flags keep the SM in bits 8..16; older
/// ones keep it in bits 0..8.
const CUDA_ABI_V8: u8 = 8;

pub fn classify(bytes: &[u8]) -> Option<CudaImage> {
    if let Ok(header) = elf::FileHeader64::<LittleEndian>::parse(bytes) {
        if header.e_machine(LittleEndian) != elf::EM_CUDA {
            return None;
        }
        let sm = cubin_sm(header.e_flags(LittleEndian), header.e_ident().abi_version);
        return Some(CudaImage::Cubin { sm });
    }
    let magic = bytes.get(..4)?;
    if u32::from_le_bytes(magic.try_into().ok()?) == FATBIN_MAGIC {
        return Some(CudaImage::Fatbin);
    }
    is_ptx(bytes).then_some(CudaImage::Ptx)
}

/// The SM (90 for sm_90) of a cubin from its ELF `e_flags` and ABI version.
pub fn cubin_sm(e_flags: u32, abi_version: u8) -> u32 {
    if abi_version >= CUDA_ABI_V8 {
        (e_flags >> 8) & 0xff
    } else {
        e_flags & 0xff
    }
}

/// PTX is text whose first directive is `.version`, possibly after comments.
pub fn is_ptx(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(4096)];
    let Ok(text) = std::str::from_utf8(head) else {
        return false;
    };
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("//"))
        .is_some_and(|l| l.starts_with(".version"))
}

/// Can a cubin for `sm` run on a device of compute capability `major.minor`? The same
/// major version and a minor no newer than the device's (binary compatibility).
pub fn cubin_runs_on(sm: u32, major: i32, minor: i32) -> bool {
    let (img_major, img_minor) = ((sm / 10) as i32, (sm % 10) as i32);
    img_major == major && img_minor <= minor
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cubin_header(abi_version: u8, flags: u32) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        h[6] = 1;
        h[7] = 0x41; // ELFOSABI_CUDA
        h[8] = abi_version;
        h[16..18].copy_from_slice(&elf::ET_EXEC.to_le_bytes());
        h[18..20].copy_from_slice(&elf::EM_CUDA.to_le_bytes());
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        h[48..52].copy_from_slice(&flags.to_le_bytes());
        h[52..54].copy_from_slice(&64u16.to_le_bytes());
        h
    }

    #[test]
    fn reads_the_sm_of_both_abi_versions() {
        // Seen from ptxas 13 for sm_90 and sm_80 (ABI 8), and the older layout.
        assert_eq!(
            classify(&cubin_header(8, 0x0600_5a04)),
            Some(CudaImage::Cubin { sm: 90 })
        );
        assert_eq!(
            classify(&cubin_header(8, 0x0600_5004)),
            Some(CudaImage::Cubin { sm: 80 })
        );
        assert_eq!(
            classify(&cubin_header(7, 0x005a_005a)),
            Some(CudaImage::Cubin { sm: 90 })
        );
    }

    #[test]
    fn tells_fatbin_ptx_and_junk_apart() {
        assert_eq!(
            classify(&FATBIN_MAGIC.to_le_bytes()),
            Some(CudaImage::Fatbin)
        );
        assert_eq!(
            classify(b"//\n// Generated\n\n.version 8.0\n.target sm_90\n"),
            Some(CudaImage::Ptx)
        );
        assert_eq!(classify(b"hello"), None);
        assert_eq!(classify(b""), None);
        let mut x86 = cubin_header(8, 0);
        x86[18..20].copy_from_slice(&elf::EM_X86_64.to_le_bytes());
        assert_eq!(classify(&x86), None);
    }

    #[test]
    fn binary_compatibility_is_same_major_not_newer_minor() {
        assert!(cubin_runs_on(90, 9, 0));
        assert!(cubin_runs_on(80, 8, 6));
        assert!(!cubin_runs_on(86, 8, 0));
        assert!(!cubin_runs_on(80, 9, 0));
        assert!(!cubin_runs_on(90, 10, 0));
    }
}
