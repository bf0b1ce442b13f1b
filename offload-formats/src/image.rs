//! Classify a file and find the device images inside it, whatever the container:
//! OffloadBinary (`.llvm.offloading`), clang offload bundle (plain or compressed, also
//! in `.hip_fatbin`), or a bare device code object (cubin, AMDGPU code object).

use crate::bundle::{self, Bundle, BundleEntryId};
use crate::compressed::{self, CompressedBundle};
use crate::error::{Error, Result};
use crate::offload_binary::{self, shift};
use object::read::elf::ElfFile64;
use object::{Object, ObjectSection};
use std::borrow::Cow;
use std::ops::Range;

/// What a buffer holds, from its first bytes (and the ELF header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ImageKind {
    OffloadBinary,
    Bundle,
    CompressedBundle,
    /// An ELF file: `machine` is `e_machine`, `relocatable` for ET_REL.
    Elf {
        machine: u16,
        relocatable: bool,
    },
    /// LLVM bitcode (raw or with the wrapper header).
    Bitcode,
    /// PTX assembly text.
    Ptx,
    /// An NVIDIA fatbinary.
    Fatbinary,
    Unknown,
}

impl ImageKind {
    pub fn name(self) -> &'static str {
        match self {
            ImageKind::OffloadBinary => "offload-binary",
            ImageKind::Bundle => "bundle",
            ImageKind::CompressedBundle => "compressed-bundle",
            ImageKind::Elf {
                machine: object::elf::EM_CUDA,
                ..
            } => "cubin",
            ImageKind::Elf {
                machine: object::elf::EM_AMDGPU,
                ..
            } => "amdgpu-elf",
            ImageKind::Elf {
                relocatable: true, ..
            } => "elf-object",
            ImageKind::Elf { .. } => "elf",
            ImageKind::Bitcode => "bitcode",
            ImageKind::Ptx => "ptx",
            ImageKind::Fatbinary => "fatbinary",
            ImageKind::Unknown => "unknown",
        }
    }
}

/// Classify `bytes` by magic number.
pub fn classify(bytes: &[u8]) -> ImageKind {
    if offload_binary::is_offload_binary(bytes) {
        ImageKind::OffloadBinary
    } else if bundle::is_bundle(bytes) {
        ImageKind::Bundle
    } else if compressed::is_compressed_bundle(bytes) {
        ImageKind::CompressedBundle
    } else if bytes.starts_with(b"\x7fELF") && bytes.len() >= 20 {
        let little = bytes.get(5) == Some(&1);
        let half = |at: usize| {
            let b = [bytes[at], bytes[at + 1]];
            if little {
                u16::from_le_bytes(b)
            } else {
                u16::from_be_bytes(b)
            }
        };
        ImageKind::Elf {
            machine: half(18),
            relocatable: half(16) == object::elf::ET_REL,
        }
    } else if bytes.starts_with(b"BC\xC0\xDE") || bytes.starts_with(&[0xDE, 0xC0, 0x17, 0x0B]) {
        ImageKind::Bitcode
    } else if bytes.starts_with(&crate::cuda::FATBIN_MAGIC.to_le_bytes()) {
        ImageKind::Fatbinary
    } else if crate::cuda::is_ptx(bytes) {
        ImageKind::Ptx
    } else {
        ImageKind::Unknown
    }
}

/// One device image found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceImage<'a> {
    /// The container it was found in (`"OffloadBinary"`, `"bundle"`, ...).
    pub container: &'static str,
    /// The ELF section it came from, when the input was an ELF file.
    pub section: Option<String>,
    /// Offload kind (`openmp`, `hip`, `cuda`, ...).
    pub offload_kind: String,
    pub triple: String,
    /// Processor or target ID (`sm_90`, `gfx90a:xnack+`), when known.
    pub arch: Option<String>,
    /// What the image bytes are.
    pub kind: ImageKind,
    /// Where the image lies in the input, `None` when it was decompressed.
    pub range: Option<Range<u64>>,
    pub data: Cow<'a, [u8]>,
}

/// Every device image in `bytes`: in an OffloadBinary, a bundle (host entries are not
/// device images and are skipped), a compressed bundle, the offload sections of an ELF
/// host file, or `bytes` itself when it is a device code object (cubin, AMDGPU code
/// object, PTX).
pub fn find_images(bytes: &[u8]) -> Result<Vec<DeviceImage<'_>>> {
    let mut out = Vec::new();
    match classify(bytes) {
        ImageKind::OffloadBinary => from_offload_binaries(bytes, 0, None, &mut out)?,
        ImageKind::Bundle => from_bundle(bytes, Some(0), None, &mut out)?,
        ImageKind::CompressedBundle => from_compressed(bytes, 0, None, &mut out)?,
        ImageKind::Elf { machine, .. } => from_elf(bytes, machine, &mut out)?,
        ImageKind::Ptx => out.push(bare_ptx(bytes)),
        _ => {}
    }
    Ok(out)
}

fn from_offload_binaries<'a>(
    bytes: &'a [u8],
    base: u64,
    section: Option<&str>,
    out: &mut Vec<DeviceImage<'a>>,
) -> Result<()> {
    for (at, bin) in offload_binary::parse_all(bytes).map_err(|e| shift(e, base))? {
        let start = base + at + bin.image_offset;
        out.push(DeviceImage {
            container: "OffloadBinary",
            section: section.map(str::to_owned),
            offload_kind: bin.offload_kind.name().to_owned(),
            triple: bin.triple().unwrap_or("").to_owned(),
            arch: bin.arch().filter(|a| !a.is_empty()).map(str::to_owned),
            kind: classify(bin.image),
            range: Some(start..start + bin.image.len() as u64),
            data: Cow::Borrowed(bin.image),
        });
    }
    Ok(())
}

fn from_bundle<'a>(
    bytes: &'a [u8],
    base: Option<u64>,
    section: Option<&str>,
    out: &mut Vec<DeviceImage<'a>>,
) -> Result<()> {
    let parsed = Bundle::parse(bytes).map_err(|e| shift(e, base.unwrap_or(0)))?;
    for e in parsed.entries {
        let id = BundleEntryId::parse(e.id).ok();
        if id.as_ref().is_some_and(|i| i.is_host()) || e.data.is_empty() {
            continue;
        }
        let (kind, triple, arch) = match id {
            Some(i) => (
                i.kind,
                i.triple,
                Some(i.target_id).filter(|t| !t.is_empty()),
            ),
            None => (String::new(), e.id.to_owned(), None),
        };
        out.push(DeviceImage {
            container: if base.is_some() {
                "bundle"
            } else {
                "compressed bundle"
            },
            section: section.map(str::to_owned),
            offload_kind: kind,
            triple: triple.trim_end_matches('-').to_owned(),
            arch,
            kind: classify(e.data),
            range: base.map(|b| b + e.offset..b + e.offset + e.data.len() as u64),
            data: Cow::Borrowed(e.data),
        });
    }
    Ok(())
}

fn from_compressed<'a>(
    bytes: &'a [u8],
    base: u64,
    section: Option<&str>,
    out: &mut Vec<DeviceImage<'a>>,
) -> Result<()> {
    let header = CompressedBundle::parse(bytes).map_err(|e| shift(e, base))?;
    let plain = header.decompress().map_err(|e| shift(e, base))?;
    let mut inner = Vec::new();
    from_bundle(&plain, None, section, &mut inner)?;
    // The images borrow `plain`: make them owned before it goes away.
    out.extend(inner.into_iter().map(|img| DeviceImage {
        data: Cow::Owned(img.data.into_owned()),
        ..img
    }));
    Ok(())
}

/// Sections that carry device images in host ELF files.
const IMAGE_SECTIONS: &[&str] = &[".llvm.offloading", ".hip_fatbin"];

fn from_elf<'a>(bytes: &'a [u8], machine: u16, out: &mut Vec<DeviceImage<'a>>) -> Result<()> {
    if machine == object::elf::EM_CUDA || machine == object::elf::EM_AMDGPU {
        out.push(bare_device_elf(bytes, machine));
        return Ok(());
    }
    let file = ElfFile64::<object::Endianness>::parse(bytes)?;
    for section in file.sections() {
        let Ok(name) = section.name() else { continue };
        let is_bundle_section = name.starts_with("__CLANG_OFFLOAD_BUNDLE__");
        if !IMAGE_SECTIONS.contains(&name) && !is_bundle_section {
            continue;
        }
        let Some((offset, _)) = section.file_range() else {
            continue;
        };
        let data = section.data()?;
        match classify(data) {
            ImageKind::OffloadBinary => from_offload_binaries(data, offset, Some(name), out)?,
            ImageKind::Bundle | ImageKind::CompressedBundle => {
                // A linked .hip_fatbin holds one bundle per translation unit, back to
                // back at aligned offsets: walk them all.
                let mut at = 0usize;
                while at < data.len() {
                    let rest = &data[at..];
                    let base = offset + at as u64;
                    let len = match classify(rest) {
                        ImageKind::Bundle => {
                            from_bundle(rest, Some(base), Some(name), out)?;
                            bundle_len(rest)
                        }
                        ImageKind::CompressedBundle => {
                            from_compressed(rest, base, Some(name), out)?;
                            CompressedBundle::parse(rest)
                                .map_err(|e| shift(e, base))?
                                .total_size
                                .unwrap_or(rest.len() as u64)
                        }
                        _ => break,
                    };
                    at = next_container(data, at + len.max(1) as usize);
                }
            }
            _ if is_bundle_section => {
                // clang-offload-bundler -type=o puts each code object in its own section.
                let target = &name["__CLANG_OFFLOAD_BUNDLE__".len()..];
                if let Ok(id) = BundleEntryId::parse(target) {
                    if !id.is_host() && !data.is_empty() {
                        out.push(DeviceImage {
                            container: "object bundle section",
                            section: Some(name.to_owned()),
                            offload_kind: id.kind.clone(),
                            triple: id.triple.trim_end_matches('-').to_owned(),
                            arch: Some(id.target_id.clone()).filter(|t| !t.is_empty()),
                            kind: classify(data),
                            range: Some(offset..offset + data.len() as u64),
                            data: Cow::Borrowed(data),
                        });
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Bytes a plain bundle spans: its header and code objects.
fn bundle_len(data: &[u8]) -> u64 {
    let Ok(b) = Bundle::parse(data) else {
        return data.len() as u64;
    };
    let header_end = 32
        + b.entries
            .iter()
            .map(|e| 24 + e.id.len() as u64)
            .sum::<u64>();
    b.entries
        .iter()
        .map(|e| e.offset + e.data.len() as u64)
        .fold(header_end, u64::max)
}

/// The next 8-byte-aligned offset at or after `from` where a bundle starts, or the end.
fn next_container(data: &[u8], from: usize) -> usize {
    let mut at = from.div_ceil(8) * 8;
    while at < data.len() {
        let rest = &data[at..];
        if bundle::is_bundle(rest) || compressed::is_compressed_bundle(rest) {
            return at;
        }
        at += 8;
    }
    data.len()
}

/// A cubin or AMDGPU code object on its own: triple and arch from the ELF header.
fn bare_device_elf(bytes: &[u8], machine: u16) -> DeviceImage<'_> {
    // Read e_flags straight from the ELF64 header (offset 48): newer cubins have
    // section tables that general ELF readers reject, but the header is plain.
    let e_flags = bytes
        .get(48..52)
        .filter(|_| bytes.get(4) == Some(&2) && bytes.get(5) == Some(&1))
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let abi_version = bytes.get(8).copied().unwrap_or(0);
    let (triple, arch) = if machine == object::elf::EM_CUDA {
        (
            "nvptx64-nvidia-cuda",
            e_flags.map(|f| cuda_arch(f, abi_version)),
        )
    } else {
        ("amdgcn-amd-amdhsa", e_flags.and_then(amdgpu_target_id))
    };
    DeviceImage {
        container: "ELF",
        section: None,
        offload_kind: String::new(),
        triple: triple.to_owned(),
        arch,
        kind: classify(bytes),
        range: Some(0..bytes.len() as u64),
        data: Cow::Borrowed(bytes),
    }
}

/// `sm_XX` from a cubin's `e_flags`: the low byte in the classic encoding, bits 8..16
/// from ELF ABI version 8 on (CUDA 12.8+, e.g. `0x6005a04` is sm_90).
fn cuda_arch(e_flags: u32, abi_version: u8) -> String {
    format!("sm_{}", crate::cuda::cubin_sm(e_flags, abi_version))
}

/// PTX text on its own: the `.target sm_XX` directive gives the arch.
fn bare_ptx(bytes: &[u8]) -> DeviceImage<'_> {
    let head = &bytes[..bytes.len().min(4096)];
    let arch = std::str::from_utf8(head).ok().and_then(|t| {
        t.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(".target "))
            .and_then(|rest| rest.split([',', ' ']).next())
            .map(str::to_owned)
    });
    DeviceImage {
        container: "PTX",
        section: None,
        offload_kind: String::new(),
        triple: "nvptx64-nvidia-cuda".to_owned(),
        arch,
        kind: ImageKind::Ptx,
        range: Some(0..bytes.len() as u64),
        data: Cow::Borrowed(bytes),
    }
}

/// The target ID of an AMDGPU code object (code object v4+ feature bits).
fn amdgpu_target_id(e_flags: u32) -> Option<String> {
    const MACHS: &[(u32, &str)] = &[
        (0x020, "gfx600"),
        (0x021, "gfx601"),
        (0x022, "gfx700"),
        (0x023, "gfx701"),
        (0x024, "gfx702"),
        (0x025, "gfx703"),
        (0x026, "gfx704"),
        (0x028, "gfx801"),
        (0x029, "gfx802"),
        (0x02a, "gfx803"),
        (0x02b, "gfx810"),
        (0x02c, "gfx900"),
        (0x02d, "gfx902"),
        (0x02e, "gfx904"),
        (0x02f, "gfx906"),
        (0x030, "gfx908"),
        (0x031, "gfx909"),
        (0x032, "gfx90c"),
        (0x033, "gfx1010"),
        (0x034, "gfx1011"),
        (0x035, "gfx1012"),
        (0x036, "gfx1030"),
        (0x037, "gfx1031"),
        (0x038, "gfx1032"),
        (0x039, "gfx1033"),
        (0x03a, "gfx602"),
        (0x03b, "gfx705"),
        (0x03c, "gfx805"),
        (0x03d, "gfx1035"),
        (0x03e, "gfx1034"),
        (0x03f, "gfx90a"),
        (0x041, "gfx1100"),
        (0x042, "gfx1013"),
        (0x043, "gfx1150"),
        (0x044, "gfx1103"),
        (0x045, "gfx1036"),
        (0x046, "gfx1101"),
        (0x047, "gfx1102"),
        (0x048, "gfx1200"),
        (0x04a, "gfx1151"),
        (0x04c, "gfx942"),
        (0x04e, "gfx1201"),
        (0x04f, "gfx950"),
        (0x055, "gfx1152"),
        (0x058, "gfx1153"),
    ];
    let mach = e_flags & 0xff;
    let processor = MACHS.iter().find(|(m, _)| *m == mach)?.1;
    let mut id = processor.to_owned();
    // Canonical order: sramecc before xnack. 0x..1 = Any (omitted), 0x..2 = Off, 0x..3 = On.
    for (shift, name) in [(10, "sramecc"), (8, "xnack")] {
        match (e_flags >> shift) & 0x3 {
            2 => id.push_str(&format!(":{name}-")),
            3 => id.push_str(&format!(":{name}+")),
            _ => {}
        }
    }
    Some(id)
}

/// An error for a file in which nothing could be recognised.
pub fn not_a_container(kind: ImageKind) -> Error {
    Error::Syntax {
        what: "input",
        text: kind.name().to_owned(),
        reason: "not an offload container or device image".into(),
    }
}

/// Pick the image to load on a device whose triple is `device_triple` and whose
/// processor and features are `device` (`None` for targets without target IDs, such as
/// x86_64). Only images of the same architecture (first triple component) qualify.
/// With a device target ID, an image qualifies when its arch is a compatible target ID
/// (same processor; every feature it specifies set the same way on the device) or when
/// it names no arch; the image specifying the most features wins, then the earliest
/// (the one tie-break, [`crate::target_id::best_index`]).
pub fn best_for_device<'i, 'a>(
    images: &'i [DeviceImage<'a>],
    device_triple: &str,
    device: Option<&crate::target_id::TargetId>,
) -> Option<&'i DeviceImage<'a>> {
    use crate::target_id::{best_index, TargetId};
    let arch = crate::triple::arch(device_triple);
    let rank = |img: &DeviceImage<'_>| -> Option<i64> {
        if crate::triple::arch(&img.triple) != arch {
            return None;
        }
        match (img.arch.as_deref(), device) {
            (None, _) => Some(-1),
            (Some(_), None) => Some(0),
            (Some(a), Some(dev)) => crate::target_id::rank(&TargetId::parse(a).ok()?, dev),
        }
    };
    best_index(images, rank).map(|at| &images[at])
}
