//! Host offload entries of real clang programs: clang-22 (56-byte `llvm_offload_entries`)
//! as object, PIE and non-PIE executable; clang-16 (32-byte `omp_offloading_entries`).

mod common;
use common::*;
use offload_formats::entries::{read_host_entries, EntryLayout, EntryRole, OffloadEntry};
use offload_formats::image::find_images;
use std::collections::BTreeMap;
use std::process::Command;

fn clang(major: u32) -> std::path::PathBuf {
    find_llvm(major, "clang").unwrap_or_else(|e| panic!("{e}"))
}

/// Compile the test program with clang-`major`; `-c` objects, or linked executables.
fn build(dir: &std::path::Path, major: u32, source: &str, extra: &[&str]) -> String {
    let out = format!("out{}", extra.join("_"));
    compile_openmp_x86(&clang(major), dir, source, &out, extra)
}

/// Symbol -> address, from llvm-nm (an independent reader).
fn nm(path: &str) -> BTreeMap<String, u64> {
    let out = run_ok(Command::new(llvm22("llvm-nm")).args(["--defined-only", path]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            // Bitcode symbols have no address ("----------------").
            let addr = u64::from_str_radix(it.next()?, 16).unwrap_or(0);
            let _kind = it.next()?;
            Some((it.next()?.to_owned(), addr))
        })
        .collect()
}

fn check_clang22(path: &str, linked: bool) -> Vec<OffloadEntry> {
    let bytes = std::fs::read(path).unwrap();
    let entries = read_host_entries(&bytes).unwrap();
    assert!(entries
        .iter()
        .all(|e| e.layout == EntryLayout::Llvm56 && e.version == 1));
    let indirect: Vec<&OffloadEntry> = entries
        .iter()
        .filter(|e| e.role() == EntryRole::IndirectFunction)
        .collect();
    let mut hosts: Vec<&str> = indirect
        .iter()
        .map(|e| e.host_symbol.as_deref().unwrap_or("?"))
        .collect();
    hosts.sort();
    // Exactly the functions declared indirect: not `not_indirect`, not `main`.
    assert_eq!(hosts, ["add_one", "twice"], "{entries:#?}");
    for e in &indirect {
        let host = e.host_symbol.as_deref().unwrap();
        assert_eq!(e.flags, 0x08);
        assert_eq!(e.size, 8);
        assert!(
            e.name.starts_with("__omp_offloading_") && e.name.contains(&format!("_{host}_l")),
            "device symbol {} for {host}",
            e.name
        );
    }
    let symbols = nm(path);
    if linked {
        for e in &indirect {
            assert_eq!(
                Some(&e.addr),
                symbols.get(e.host_symbol.as_deref().unwrap()),
                "{e:?}"
            );
        }
    }
    let global = entries
        .iter()
        .find(|e| e.name == "counter")
        .expect("the `counter` global entry");
    assert_eq!((global.role(), global.size), (EntryRole::Global, 4));
    if linked {
        assert_eq!(Some(&global.addr), symbols.get("counter"));
    }
    assert_eq!(
        entries
            .iter()
            .filter(|e| e.role() == EntryRole::Kernel)
            .count(),
        1
    );
    entries
}

#[test]
fn clang22_object() {
    let dir = scratch("entries_obj22");
    check_clang22(&build(&dir, 22, INDIRECT_PROGRAM, &["-c"]), false);
}

#[test]
fn clang22_pie_executable_and_device_symbols() {
    let dir = scratch("entries_pie22");
    let exe = build(&dir, 22, INDIRECT_PROGRAM, &["-fPIE", "-pie"]);
    let entries = check_clang22(&exe, true);
    // Every indirect entry's name is a symbol of the embedded device image.
    let bytes = std::fs::read(&exe).unwrap();
    let images = find_images(&bytes).unwrap();
    assert_eq!(images.len(), 1);
    let device = file(&dir, "device.elf", &images[0].data);
    let device_symbols = nm(&device);
    for e in entries.iter().filter(|e| e.is_indirect()) {
        assert!(
            device_symbols.contains_key(&e.name),
            "{} not in the device image",
            e.name
        );
    }
    // The CLI marks them, in text and JSON.
    let text = run_ok(Command::new(ours()).args(["entries", &exe]));
    let text = String::from_utf8_lossy(&text.stdout);
    for e in entries.iter().filter(|e| e.is_indirect()) {
        assert!(
            text.contains(&format!(
                "{} -> device {}",
                e.host_symbol.as_deref().unwrap(),
                e.name
            )),
            "{text}"
        );
    }
    let json = run_ok(Command::new(ours()).args(["entries", "--json", &exe]));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let n = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "IndirectFunction")
        .count();
    assert_eq!(n, 2);
}

/// With lld the pointer fields of a PIE hold 0 in the file: only the dynamic
/// `R_X86_64_RELATIVE` relocations give the addresses, so this proves we apply them.
#[test]
fn clang22_pie_linked_by_lld_needs_relocations() {
    use object::{Object, ObjectSection};
    let dir = scratch("entries_lld22");
    let exe = build(
        &dir,
        22,
        INDIRECT_PROGRAM,
        &["-fPIE", "-pie", "-fuse-ld=lld"],
    );
    let bytes = std::fs::read(&exe).unwrap();
    let elf = object::File::parse(&*bytes).unwrap();
    let section = elf.section_by_name("llvm_offload_entries").unwrap();
    let raw = section.data().unwrap();
    for entry in raw.chunks(56) {
        assert_eq!(
            &entry[16..32],
            &[0u8; 16],
            "addr/name already filled in: the test proves nothing"
        );
    }
    check_clang22(&exe, true);
}

#[test]
fn clang22_non_pie_executable() {
    let dir = scratch("entries_nopie22");
    check_clang22(
        &build(&dir, 22, INDIRECT_PROGRAM, &["-fno-pie", "-no-pie"]),
        true,
    );
}

/// clang-16 has no `declare target indirect`: plain declare target, 32-byte entries.
#[test]
fn clang16_legacy_entries() {
    let dir = scratch("entries16");
    let source = INDIRECT_PROGRAM.replace(
        "#pragma omp begin declare target indirect",
        "#pragma omp begin declare target",
    );
    for extra in [&["-c"][..], &[][..]] {
        let path = build(&dir, 16, &source, extra);
        let entries = read_host_entries(&std::fs::read(&path).unwrap()).unwrap();
        assert!(
            entries.iter().all(|e| e.layout == EntryLayout::Legacy32),
            "{entries:#?}"
        );
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert!(names.contains(&"counter"), "{names:?}");
        assert_eq!(entries.iter().filter(|e| e.is_indirect()).count(), 0);
        assert_eq!(
            entries
                .iter()
                .filter(|e| e.role() == EntryRole::Kernel)
                .count(),
            1,
            "{entries:#?}"
        );
        if extra.is_empty() {
            let symbols = nm(&path);
            let g = entries.iter().find(|e| e.name == "counter").unwrap();
            assert_eq!(Some(&g.addr), symbols.get("counter"));
        }
    }
}

/// A host object compiled for real GPUs (sm_90 and gfx90a:xnack+): the indirect entries
/// are the declared functions, the `.llvm.offloading` section holds one image per GPU,
/// and every indirect entry's name is a symbol of each device image.
#[test]
fn clang22_gpu_host_object() {
    let dir = scratch("entries_gpu22");
    let cuda = test_support::cuda::folder_for_clang(&ptxas(), &dir.join("cuda")).unwrap();
    let src = file(&dir, "indirect.c", INDIRECT_PROGRAM.as_bytes());
    let obj = dir.join("gpu.o").to_str().unwrap().to_owned();
    let path = format!(
        "{}:{}",
        cuda.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    run_ok(
        Command::new(clang(22))
            .args([
                "-fopenmp",
                "--offload-arch=sm_90,gfx90a:xnack+",
                "-nogpulib",
                "-nogpuinc",
                "-c",
            ])
            .arg(format!("--cuda-path={}", cuda.display()))
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .env("PATH", path),
    );
    let entries = check_clang22(&obj, false);
    let bytes = std::fs::read(&obj).unwrap();
    let mut images = find_images(&bytes).unwrap();
    images.sort_by(|a, b| a.triple.cmp(&b.triple));
    let found: Vec<(&str, Option<&str>)> = images
        .iter()
        .map(|i| (i.triple.as_str(), i.arch.as_deref()))
        .collect();
    assert_eq!(
        found,
        [
            ("amdgcn-amd-amdhsa", Some("gfx90a:xnack+")),
            ("nvptx64-nvidia-cuda", Some("sm_90"))
        ]
    );
    for (i, img) in images.iter().enumerate() {
        let device = file(&dir, &format!("device{i}"), &img.data);
        let symbols = nm(&device);
        for e in entries.iter().filter(|e| e.is_indirect()) {
            assert!(
                symbols.contains_key(&e.name),
                "{} not in the {} image",
                e.name,
                img.triple
            );
        }
    }
}
