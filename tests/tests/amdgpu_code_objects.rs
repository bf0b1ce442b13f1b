//! Real AMDGPU code objects (tests/fixtures/amdgpu/indirect_kernel.c + device-rtl, built
//! with clang-22 and ld.lld-22 for several target IDs): the HIP backend reads their
//! target IDs from the ELF header and picks the right one for a device's target ID.

mod amdgpu_support;

use amdgpu_support::*;
use host_plugin::backend::hip::code_object::{code_objects, select, target_id_of, CodeObject};
use host_plugin::backend::AllocKind;
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

/// What LLVM 16's own compiler emits for AMDGPU OpenMP kernels is what the HIP backend
/// reads: clang 16 gives each kernel a 1-byte `<kernel>_exec_mode` in the code object's
/// dynamic symbol table (where the backend looks it up), and the backend, through the
/// stand-in HIP, launches each region with the geometry its mode calls for.
#[test]
fn clang16_openmp_kernels_are_launched_by_their_exec_mode() {
    use host_plugin::backend::hip::HipBackend;
    use host_plugin::backend::LaunchRequest;
    use host_plugin::support::launch_shape::ExecMode;
    use host_plugin::{Plugin, PluginKind};
    use std::process::Command;

    let dir = scratch("clang16-openmp");
    let source = dir.join("prog.c");
    std::fs::write(
        &source,
        // The call to a function clang cannot see keeps the plain target region in
        // generic mode (OpenMPOpt would otherwise turn it into generic-SPMD).
        "int opaque(void);\n#pragma omp declare target to(opaque)\n\
         int main(void) {\n  int x[256], generic = 1;\n\
         #pragma omp target teams distribute parallel for map(from: x)\n\
         for (int i = 0; i < 256; ++i) x[i] = 2 * i;\n\
         #pragma omp target map(from: generic)\n  { generic = opaque(); }\n\
         return x[255] != 510 || generic;\n}\n",
    )
    .unwrap();
    // The device half as clang 16 compiles it (bitcode, as its offload driver hands it
    // to the linker), then code generation and an ld.lld shared object. The device
    // runtime is left out: only the kernels' own symbols matter here.
    let bitcode = dir.join("device.bc");
    let object = dir.join("device.o");
    let image = dir.join("device.hsaco");
    e2e_tests::process::run_ok(
        Command::new(e2e_tests::tools::clang16())
            .args(["-O2", "-fopenmp", "--offload-arch=gfx90a", "-nogpulib"])
            .args(["--offload-device-only", "-c"])
            .arg(&source)
            .arg("-o")
            .arg(&bitcode),
    );
    e2e_tests::process::run_ok(
        Command::new(e2e_tests::tools::clang16())
            .args(["--target=amdgcn-amd-amdhsa", "-mcpu=gfx90a", "-nogpulib"])
            .args(["-O2", "-Wno-everything", "-c"])
            .arg(&bitcode)
            .arg("-o")
            .arg(&object),
    );
    e2e_tests::process::run_ok(
        Command::new(e2e_tests::tools::llvm22("ld.lld"))
            .arg("-shared")
            .arg(&object)
            .arg("-o")
            .arg(&image),
    );
    let co = std::fs::read(&image).unwrap();

    // The kernels are the symbols with a kernel descriptor.
    let file = object::File::parse(&*co).unwrap();
    let kernels: Vec<String> = file
        .dynamic_symbols()
        .filter_map(|s| Some(s.name().ok()?.strip_suffix(".kd")?.to_string()))
        .collect();
    assert_eq!(kernels.len(), 2, "two target regions: {kernels:?}");
    let modes: Vec<ExecMode> = kernels
        .iter()
        .map(|k| {
            let bytes = symbol_bytes(&co, &format!("{k}_exec_mode"));
            assert_eq!(bytes.len(), 1, "{k}_exec_mode is an i8");
            ExecMode::from_raw(bytes[0]).expect("an LLVM 16 execution mode")
        })
        .collect();
    // The combined construct is SPMD, the plain target region generic.
    let mut sorted = modes.clone();
    sorted.sort_by_key(|m| *m == ExecMode::Spmd);
    assert_eq!(sorted, [ExecMode::Generic, ExecMode::Spmd], "{kernels:?}");

    let fake = FakeHip::new("clang16-openmp", "gfx90a:sramecc+:xnack-");
    for k in &kernels {
        let global = format!("{k}_exec_mode");
        fake.seed_global(&global, u64::from(symbol_bytes(&co, &global)[0]));
    }
    let backend = HipBackend::from_library(fake.path_str()).unwrap();
    assert!(backend.accepts_image(&co));
    // Through the plugin core, which reads each kernel's mode and shapes its launches.
    let plugin = Plugin::with_backend(PluginKind::Amdgpu, Box::new(backend));
    let entries: Vec<_> = (0u64..)
        .zip(&kernels)
        .map(|(i, k)| e2e_tests::plugin::entry(k, 0x100 + i, 0, 0))
        .collect();
    let handles = plugin
        .device(0)
        .and_then(|on| on.load_binary(1, &co, &entries))
        .unwrap();
    let out_buffer = plugin
        .device(0)
        .and_then(|on| on.alloc(4, AllocKind::Device))
        .unwrap();
    let out = out_buffer.addr();
    for ((kernel, mode), handle) in kernels.iter().zip(&modes).zip(&handles) {
        let handle = handle.addr;
        fake.clear_log();
        let request = LaunchRequest {
            num_teams: 0,
            thread_limit: 128,
            tripcount: 0,
            dynamic_shared_memory: 0,
        };
        // SAFETY: the stand-in runs nothing; `out` is a live allocation.
        unsafe {
            plugin
                .device(0)
                .and_then(|on| on.launch_teams(handle, &[out], request))
        }
        .unwrap();
        // thread_limit(128) on wave64: a generic kernel's main thread adds a wavefront;
        // no num_teams: the default of 4 teams per compute unit (the stand-in has 104).
        let threads = if *mode == ExecMode::Generic {
            128 + 64
        } else {
            128
        };
        assert_eq!(
            launch_geometry(&fake.log()),
            (416, threads),
            "{kernel} ({mode:?})"
        );
    }
}
