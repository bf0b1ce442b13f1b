//! Real AMDGPU code objects (tests/fixtures/amdgpu/indirect_kernel.c + device-rtl, built
//! with clang-22 and ld.lld-22 for several target IDs): the HIP backend reads their
//! target IDs from the ELF header and picks the right one for a device's target ID.

mod amdgpu_support;

use amdgpu_support::*;
use host_plugin::backend::hip::code_object::{code_objects, select, target_id_of, CodeObject};
use object::{Object, ObjectSymbol};
use offload_formats::target_id::TargetId;

/// What each build's ELF header must say (canonical target IDs: a feature left out is
/// "Any"; gfx1100 has no xnack/sramecc setting at all).
const BUILDS: [(&str, &str); 7] = [
    ("gfx90a", "gfx90a"),
    ("gfx90a:xnack+", "gfx90a:xnack+"),
    ("gfx90a:xnack-", "gfx90a:xnack-"),
    ("gfx90a:xnack-:sramecc+", "gfx90a:sramecc+:xnack-"),
    ("gfx942", "gfx942"),
    ("gfx942:xnack+", "gfx942:xnack+"),
    ("gfx1100", "gfx1100"),
];

#[test]
fn target_ids_come_from_the_code_objects_themselves() {
    for (mcpu, expected) in BUILDS {
        let co = code_object(mcpu);
        let id = target_id_of(&co).unwrap_or_else(|| panic!("no target ID read for {mcpu}"));
        assert_eq!(id.to_string(), expected, "built with -mcpu={mcpu}");

        // What the plugin core needs from every build: the device runtime's two table
        // globals exported, 8 bytes each, and the kernel with its descriptor.
        let file = object::File::parse(&*co).unwrap();
        let size_of = |name: &str| {
            file.dynamic_symbols()
                .find(|s| s.name() == Ok(name))
                .map(|s| s.size())
        };
        assert_eq!(size_of("__omp_offloading_fptr_map_p"), Some(8), "{mcpu}");
        assert_eq!(size_of("__omp_offloading_fptr_map_size"), Some(8), "{mcpu}");
        assert!(size_of("call_indirect.kd").is_some(), "{mcpu}");
        assert!(size_of("add_one").is_some(), "{mcpu}");
    }
    // Not code objects: no target ID.
    assert!(target_id_of(b"not an ELF file").is_none());
    assert!(target_id_of(&[]).is_none());
}

#[test]
fn the_compatible_and_most_specific_code_object_is_chosen() {
    // A clang offload bundle: the bundler itself refuses to mix "Any" and fixed
    // settings of one processor, so a bundle holds e.g. both xnack builds.
    let built = bundle(&["gfx90a:xnack+", "gfx90a:xnack-", "gfx942", "gfx1100"]);
    let objects = code_objects(&built).expect("the bundle's code objects");
    let found: Vec<String> = objects.iter().map(|o| o.target_id.to_string()).collect();
    assert_eq!(
        found,
        ["gfx90a:xnack+", "gfx90a:xnack-", "gfx942", "gfx1100"]
    );
    let pick = |objects: &[CodeObject], device: &str| {
        select(objects, &TargetId::parse(device).unwrap())
            .map(|o| {
                // The bytes handed to HIP are that code object's: their own header agrees.
                let id = target_id_of(&o.bytes).unwrap();
                assert_eq!(id, o.target_id);
                id.to_string()
            })
            .ok()
    };
    // A device reports both settings; a code object that fixes one must agree with it.
    assert_eq!(
        pick(&objects, "gfx90a:sramecc+:xnack-").as_deref(),
        Some("gfx90a:xnack-")
    );
    assert_eq!(
        pick(&objects, "gfx90a:sramecc-:xnack+").as_deref(),
        Some("gfx90a:xnack+")
    );
    assert_eq!(
        pick(&objects, "gfx942:sramecc+:xnack-").as_deref(),
        Some("gfx942")
    );
    assert_eq!(pick(&objects, "gfx1100").as_deref(), Some("gfx1100"));
    assert_eq!(pick(&objects, "gfx908:sramecc+:xnack-"), None);

    // Separate images (several device images in one program) may mix Any and fixed
    // builds: the most specific compatible one wins, Any is the fallback.
    let separate: Vec<Vec<u8>> = ["gfx90a", "gfx90a:xnack-", "gfx90a:xnack-:sramecc+"]
        .iter()
        .map(|id| code_object(id))
        .collect();
    let objects: Vec<CodeObject> = separate
        .iter()
        .flat_map(|bytes| code_objects(bytes).unwrap())
        .collect();
    assert_eq!(
        pick(&objects, "gfx90a:sramecc+:xnack-").as_deref(),
        Some("gfx90a:sramecc+:xnack-")
    );
    assert_eq!(
        pick(&objects, "gfx90a:sramecc-:xnack-").as_deref(),
        Some("gfx90a:xnack-")
    );
    assert_eq!(
        pick(&objects, "gfx90a:sramecc-:xnack+").as_deref(),
        Some("gfx90a")
    );

    // Only a fixed build: a device with the other setting is refused, with a message
    // listing what the image has.
    let fixed = bundle(&["gfx90a:xnack+"]);
    let objects = code_objects(&fixed).unwrap();
    let refused = select(
        &objects,
        &TargetId::parse("gfx90a:sramecc+:xnack-").unwrap(),
    )
    .expect_err("xnack+ code cannot run with xnack off");
    assert!(
        refused.to_string().contains("gfx90a:xnack+"),
        "the error lists what the image has: {refused}"
    );
}
