//! Which AMDGPU code object runs on which device: target IDs read from the code objects
//! themselves (ELF `e_flags`, code object v4+ xnack/sramecc bits) and matched with the
//! xnack/sramecc rules of offload-formats' `target_id` (Any matches On and Off; On and
//! Off match only themselves; the most specific compatible build wins).

use offload_formats::image::{find_images, ImageKind};
use offload_formats::target_id::{best_index, rank, TargetId};
use std::borrow::Cow;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SelectError {
    #[error("no AMDGPU code object found in the image ({0})")]
    NoCodeObject(String),
    #[error("no code object compatible with the device's {device} (the image has: {found})")]
    Incompatible { device: String, found: String },
}

/// One AMDGPU code object found in an image, with the target ID its ELF header states.
#[derive(Debug, Clone)]
pub struct CodeObject<'a> {
    pub target_id: TargetId,
    pub bytes: Cow<'a, [u8]>,
}

/// The target ID of one bare AMDGPU code object, from its ELF header; None if the bytes
/// are not an AMDGPU ELF file or name a processor we do not know.
pub fn target_id_of(code_object: &[u8]) -> Option<TargetId> {
    let images = find_images(code_object).ok()?;
    let [image] = images.as_slice() else {
        return None;
    };
    if !matches!(
        image.kind,
        ImageKind::Elf {
            machine: object::elf::EM_AMDGPU,
            ..
        }
    ) {
        return None;
    }
    TargetId::parse(image.arch.as_deref()?).ok()
}

/// Every AMDGPU code object in `image`: the image itself when it is one, or each one
/// inside a clang offload bundle / OffloadBinary.
pub fn code_objects(image: &[u8]) -> Result<Vec<CodeObject<'_>>, SelectError> {
    let found = find_images(image).map_err(|e| SelectError::NoCodeObject(e.to_string()))?;
    let objects: Vec<CodeObject<'_>> = found
        .into_iter()
        .filter_map(|img| {
            let target_id = target_id_of(&img.data)?;
            Some(CodeObject {
                target_id,
                bytes: img.data,
            })
        })
        .collect();
    if objects.is_empty() {
        return Err(SelectError::NoCodeObject(format!(
            "{} bytes, none of them an AMDGPU ELF code object",
            image.len()
        )));
    }
    Ok(objects)
}

/// Of several code objects, the one to load on a device with target ID `device`:
/// offload-formats' rank and its one tie-break (the earliest of equals).
pub fn select<'a, 'b>(
    objects: &'b [CodeObject<'a>],
    device: &TargetId,
) -> Result<&'b CodeObject<'a>, SelectError> {
    let at = best_index(objects, |o| rank(&o.target_id, device)).ok_or_else(|| {
        SelectError::Incompatible {
            device: device.to_string(),
            found: objects
                .iter()
                .map(|o| o.target_id.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }
    })?;
    Ok(&objects[at])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header-only ELF64 little-endian shared object for `machine` with `e_flags`.
    fn elf_header(machine: u16, e_flags: u32) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2; // ELFCLASS64
        h[5] = 1; // little-endian
        h[6] = 1; // EV_CURRENT
        h[16..18].copy_from_slice(&object::elf::ET_DYN.to_le_bytes());
        h[18..20].copy_from_slice(&machine.to_le_bytes());
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        h[48..52].copy_from_slice(&e_flags.to_le_bytes());
        h[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
        h
    }

    fn id(s: &str) -> TargetId {
        TargetId::parse(s).unwrap()
    }

    #[test]
    fn target_id_from_e_flags() {
        let amd = |flags| target_id_of(&elf_header(object::elf::EM_AMDGPU, flags));
        // Processor in the low byte; xnack in bits 8-9, sramecc in bits 10-11
        // (1 = Any, 2 = Off, 3 = On; 0 = the processor has no such setting).
        assert_eq!(amd(0x53f), Some(id("gfx90a")));
        assert_eq!(amd(0x73f), Some(id("gfx90a:xnack+")));
        assert_eq!(amd(0xe3f), Some(id("gfx90a:sramecc+:xnack-")));
        assert_eq!(amd(0x54c), Some(id("gfx942")));
        assert_eq!(amd(0x041), Some(id("gfx1100")));
        // Unknown processor, another machine, not ELF.
        assert_eq!(amd(0x0ff), None);
        assert_eq!(
            target_id_of(&elf_header(object::elf::EM_X86_64, 0x73f)),
            None
        );
        assert_eq!(target_id_of(b"\x7fELF"), None);
    }

    #[test]
    fn selection_follows_the_xnack_and_sramecc_rules() {
        let images: Vec<Vec<u8>> = [0x53f, 0x73f, 0x63f, 0x041]
            .iter()
            .map(|&f| elf_header(object::elf::EM_AMDGPU, f))
            .collect();
        let objects: Vec<CodeObject> = images
            .iter()
            .flat_map(|i| code_objects(i).unwrap())
            .collect();
        let pick = |device: &str| select(&objects, &id(device)).map(|o| o.target_id.to_string());
        assert_eq!(pick("gfx90a:sramecc+:xnack+").unwrap(), "gfx90a:xnack+");
        assert_eq!(pick("gfx90a:sramecc+:xnack-").unwrap(), "gfx90a:xnack-");
        assert_eq!(pick("gfx1100").unwrap(), "gfx1100");
        assert!(matches!(
            pick("gfx942:sramecc+:xnack-"),
            Err(SelectError::Incompatible { .. })
        ));
        assert!(matches!(
            code_objects(b"no code object here"),
            Err(SelectError::NoCodeObject(_))
        ));
    }

    #[test]
    fn equally_good_builds_go_to_the_earliest() {
        // Two xnack+ builds told apart only by an extra byte after the header.
        let mut first = elf_header(object::elf::EM_AMDGPU, 0x73f);
        let mut second = first.clone();
        first.push(1);
        second.push(2);
        let objects: Vec<CodeObject> = [&first, &second]
            .iter()
            .flat_map(|i| code_objects(i).unwrap())
            .collect();
        let chosen = select(&objects, &id("gfx90a:sramecc+:xnack+")).unwrap();
        assert_eq!(chosen.bytes.last(), Some(&1));
    }

    mod properties {
        use super::*;
        use offload_formats::target_id::{is_compatible, FeatureSetting};
        use proptest::prelude::*;

        fn setting() -> impl Strategy<Value = Option<FeatureSetting>> {
            prop_oneof![
                Just(None),
                Just(Some(FeatureSetting::On)),
                Just(Some(FeatureSetting::Off))
            ]
        }

        fn target_id() -> impl Strategy<Value = TargetId> {
            (
                prop_oneof![Just("gfx90a"), Just("gfx942"), Just("gfx1100")],
                setting(),
                setting(),
            )
                .prop_map(|(processor, sramecc, xnack)| TargetId {
                    processor: processor.to_string(),
                    features: [("sramecc", sramecc), ("xnack", xnack)]
                        .into_iter()
                        .filter_map(|(n, s)| s.map(|s| (n.to_string(), s)))
                        .collect(),
                })
        }

        proptest! {
            /// The choice is compatible, as specific as any compatible candidate, and
            /// there is one whenever any candidate is compatible.
            #[test]
            fn selection_is_compatible_and_most_specific(
                candidates in proptest::collection::vec(target_id(), 1..6),
                device in target_id(),
            ) {
                let objects: Vec<CodeObject> = candidates
                    .iter()
                    .map(|t| CodeObject { target_id: t.clone(), bytes: Cow::Borrowed(&[]) })
                    .collect();
                let compatible: Vec<&TargetId> =
                    candidates.iter().filter(|c| is_compatible(c, &device)).collect();
                match select(&objects, &device) {
                    Ok(chosen) => {
                        prop_assert!(is_compatible(&chosen.target_id, &device));
                        let most = compatible.iter().map(|c| c.features.len()).max();
                        prop_assert_eq!(Some(chosen.target_id.features.len()), most);
                    }
                    Err(_) => prop_assert!(compatible.is_empty()),
                }
            }
        }
    }
}
