//! CPU-side checks of the CUDA backend that run on any machine: without a driver or GPU
//! it has no devices and says why, quietly; the fixture kernels are valid cubins whose
//! table globals, indirect-entry globals and kernels survived the link.

mod cuda_support;

use cuda_support::{build_fixture, ARCHES, VARIANTS};
use e2e_tests::compile::{compile_nvptx_program, compile_offload_program};
use e2e_tests::paths::{root, scratch, target_dir};
use e2e_tests::plugin::built_plugin_dir;
use host_plugin::backend::cuda::image::{classify, CudaImage, DefinedSymbols};
use host_plugin::backend::cuda::CudaBackend;
use host_plugin::backend::AllocKind;
use host_plugin::{Backend, Plugin, PluginKind};
use object::read::{Object, ObjectSymbol};
use object::SymbolKind;
use std::process::Command;

#[test]
fn backend_reports_a_reason_exactly_when_it_has_no_devices() {
    let backend = CudaBackend::new();
    match backend.unavailable_reason() {
        Some(reason) => {
            assert_eq!(backend.device_count(), 0, "{reason}");
            println!("no CUDA devices here: {reason}");
        }
        None => assert!(backend.device_count() > 0),
    }
    // The plugin core over it agrees and never panics asking.
    let plugin = Plugin::new(PluginKind::Cuda);
    assert_eq!(plugin.device_count(), backend.device_count());
    if plugin.device_count() == 0 {
        assert!(plugin.device(0).and_then(|on| on.init_device()).is_err());
        assert!(plugin
            .device(0)
            .and_then(|on| on.alloc(8, AllocKind::Device))
            .is_err());
    }
    // A cubin is a valid binary exactly when some device can run its SM.
    if let Ok(dir) = std::env::var(cuda_support::FIXTURES_ENV) {
        for variant in VARIANTS {
            for sm in ARCHES {
                let path = std::path::Path::new(&dir).join(cuda_support::cubin_name(variant, sm));
                let cubin = std::fs::read(&path).expect("the bundled fixture");
                let runs = (0..backend.device_count()).any(|d| {
                    let ((major, minor), _) = backend.describe(d).unwrap();
                    host_plugin::backend::cuda::image::cubin_runs_on(sm, major, minor)
                });
                assert_eq!(plugin.is_valid_binary(&cubin), runs, "{variant:?} sm_{sm}");
            }
        }
    }
}

#[test]
fn fixture_cubins_keep_every_global_and_kernel() {
    for (variant, sm) in VARIANTS.into_iter().flat_map(|v| ARCHES.map(|sm| (v, sm))) {
        let (ptx, cubin) = build_fixture(variant, sm);
        let ptx = std::fs::read_to_string(&ptx).unwrap();
        assert!(ptx.contains(&format!(".target sm_{sm}")), "PTX for sm_{sm}");
        let bytes = std::fs::read(&cubin).unwrap();
        assert_eq!(
            classify(&bytes),
            Some(CudaImage::Cubin { sm }),
            "cubin header"
        );
        let cuda = Plugin::new(PluginKind::Cuda);
        if cuda.device_count() == 0 {
            assert!(
                !cuda.is_valid_binary(&bytes),
                "no device here can run sm_{sm}"
            );
        }
        assert!(!Plugin::new(PluginKind::X86_64).is_valid_binary(&bytes));
        let file = object::File::parse(&*bytes).expect("the cubin is ELF");
        let symbol = |name: &str| {
            file.symbols()
                .find(|s| s.name() == Ok(name))
                .unwrap_or_else(|| panic!("sm_{sm}: {name} is not in the cubin"))
        };
        for g in [
            "__omp_offloading_fptr_map_p",
            "__omp_offloading_fptr_map_size",
            "__omp_offloading_fn_add_one",
            "__omp_offloading_fn_times_three",
            "__omp_offloading_fn_square_minus_seven",
        ] {
            let s = symbol(g);
            assert_eq!(s.kind(), SymbolKind::Data, "{g}");
            assert_eq!(s.size(), 8, "{g}");
            assert!(s.is_global(), "{g} must be visible to cuModuleGetGlobal");
        }
        for k in [
            "call_through_host_pointers",
            "translate_all",
            "translate_in_groups",
        ] {
            let s = symbol(k);
            assert_eq!(s.kind(), SymbolKind::Text, "{k}");
            assert!(s.size() > 0, "{k} has code");
        }
        // The lookup was not folded away: the kernel still calls through what it read.
        assert!(
            ptx.contains("__omp_offloading_fptr_map_p"),
            "the PTX still reads the table pointer"
        );
        // Each variant is the one linked: only the warp-cooperative one votes.
        assert_eq!(
            ptx.contains("vote.sync.ballot"),
            variant == cuda_support::RtlVariant::WarpCooperative,
            "{variant:?} sm_{sm}: warp votes in the kernels"
        );
    }
}

/// Under the real libomptarget 16, our CUDA plugin copy is loaded, finds no devices
/// without a driver, stays silent, and the program offloads to our x86_64 plugin.
#[test]
fn libomptarget_16_loads_the_cuda_plugin_and_carries_on_without_a_driver() {
    if CudaBackend::new().unavailable_reason().is_none() {
        println!("SKIPPED: this machine has a CUDA GPU; the no-driver path is not testable");
        return;
    }
    let target = target_dir();
    let plugins = built_plugin_dir();
    assert!(
        plugins.join("libomptarget.rtl.cuda.so").is_file(),
        "{} has no plugins: run `cargo xtask build-plugin` first",
        plugins.display()
    );
    let lib = target.join("device/x86_64-unknown-linux-gnu/libdevice_rtl.a");
    assert!(lib.is_file(), "run `cargo xtask build-device` first");
    let dir = scratch("cuda-tests", "no-driver");
    let exe = dir.join("indirect_calls");
    compile_offload_program(&root().join("examples/indirect_calls.c"), &exe, Some(&lib));
    let marker = dir.join("marker");
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &plugins)
        .env("OMPTARGET_RS_LOAD_MARKER", &marker)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("ran on offload device 0"), "{stdout}");
    let marker = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(
        marker.lines().any(|l| l.starts_with("cuda ")),
        "libomptarget did not load our CUDA plugin: {marker:?}"
    );
    assert!(
        !stderr.to_lowercase().contains("cuda"),
        "the CUDA plugin made noise without a driver:\n{stderr}"
    );
}

/// The ELF cubin embedded in a clang-16 OpenMP program (the first EM_CUDA ELF in it).
fn embedded_cubin(program: &[u8]) -> Option<Vec<u8>> {
    let mut at = 0;
    while let Some(i) = program[at..].windows(4).position(|w| w == b"\x7fELF") {
        let start = at + i;
        let header = program.get(start..start + 64)?;
        let machine = u16::from_le_bytes([header[18], header[19]]);
        if machine == object::elf::EM_CUDA {
            // The ELF ends with its section or its program header table, whichever is
            // last (nvlink writes the program headers after the sections).
            let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().unwrap());
            let half = |at: usize| u16::from_le_bytes([header[at], header[at + 1]]) as u64;
            let sections_end = word(40) + half(58) * half(60);
            let segments_end = word(32) + half(54) * half(56);
            let end = start + sections_end.max(segments_end) as usize;
            return program.get(start..end).map(<[u8]>::to_vec);
        }
        at = start + 1;
    }
    None
}

/// What the CUDA backend assumes about LLVM 16's device images, checked on a real one:
/// clang-16 `-fopenmp-targets=nvptx64-nvidia-cuda -march=sm_90` (ptxas and nvlink from
/// the nvidia-cuda-nvcc wheel behind a minimal --cuda-path) embeds an sm_90 cubin whose
/// kernels have 1-byte `<kernel>_exec_mode` globals holding LLVM 16 modes (SPMD for a
/// combined construct, generic for a plain target region) and whose device environment
/// has the name and size the backend writes.
#[test]
fn clang16_nvptx_images_have_what_the_backend_reads() {
    use host_plugin::backend::cuda::{device_environment_names, DeviceEnvironmentLayout};
    use host_plugin::support::launch_shape::ExecMode;
    use object::read::{ObjectSection, ObjectSymbol};

    let dir = scratch("cuda-tests", "clang16-nvptx");
    let source = dir.join("prog.c");
    std::fs::write(
        &source,
        "int main(void) {\n  int x[256], generic = 1;\n\
         #pragma omp target teams distribute parallel for map(from: x)\n\
         for (int i = 0; i < 256; ++i) x[i] = 2 * i;\n\
         #pragma omp target map(from: generic)\n  { generic = 0; }\n\
         return x[255] != 510 || generic;\n}\n",
    )
    .unwrap();
    let exe = dir.join("prog");
    compile_nvptx_program(&source, &exe, "sm_90", &[]);

    let cubin = embedded_cubin(&std::fs::read(&exe).unwrap()).expect("an sm_90 cubin inside");
    assert_eq!(classify(&cubin), Some(CudaImage::Cubin { sm: 90 }));
    let file = object::File::parse(&*cubin).expect("the cubin is ELF");
    let value = |name: &str| -> (u64, Vec<u8>) {
        let sym = file
            .symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("{name} is not in the clang-16 image"));
        let section = file.section_by_index(sym.section_index().unwrap()).unwrap();
        let data = section.data().unwrap();
        let at = sym.address() as usize;
        (sym.size(), data[at..at + sym.size() as usize].to_vec())
    };
    let kernels: Vec<String> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.name().is_ok_and(|n| n.contains("_main_l")))
        .map(|s| s.name().unwrap().to_string())
        .collect();
    assert_eq!(kernels.len(), 2, "two target regions: {kernels:?}");
    let mut modes: Vec<ExecMode> = kernels
        .iter()
        .map(|k| {
            let (size, bytes) = value(&format!("{k}_exec_mode"));
            assert_eq!(size, 1, "{k}_exec_mode is an i8");
            ExecMode::from_raw(bytes[0]).expect("an LLVM 16 execution mode")
        })
        .collect();
    modes.sort_by_key(|m| *m as u8);
    assert!(modes.contains(&ExecMode::Spmd), "{modes:?}");
    let env = device_environment_names()
        .iter()
        .find_map(|n| {
            file.symbols()
                .find(|s| s.name() == Ok(n.to_str().unwrap()))
                .map(|s| s.size())
        })
        .expect("the image has a device environment global the backend knows");
    assert_eq!(
        DeviceEnvironmentLayout::of_size(env),
        Some(DeviceEnvironmentLayout::Llvm16)
    );

    // What the backend asks the driver for is only what the cubin defines: its kernels,
    // their modes and the device environment, not the environment's other name or clang
    // 18's kernel environments (each of which the driver would answer
    // CUDA_ERROR_NOT_FOUND, an API error under compute-sanitizer).
    let defined = DefinedSymbols::of_image(&cubin).expect("a cubin's symbol table");
    for k in &kernels {
        assert!(defined.may_define(k.as_bytes()), "{k}");
        assert!(
            defined.may_define(format!("{k}_exec_mode").as_bytes()),
            "{k}"
        );
        assert!(
            !defined.may_define(format!("{k}_kernel_environment").as_bytes()),
            "{k}"
        );
    }
    assert!(defined.may_define(b"__omp_rtl_device_environment"));
    assert!(!defined.may_define(b"omptarget_device_environment"));
    assert!(!defined.may_define(b"__omptarget_rs_fptr_index"));
    assert!(DefinedSymbols::of_image(b"not a cubin").is_none());
}
