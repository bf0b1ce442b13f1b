//! Real device code objects made by clang-22 (PTX, AMDGPU) and ptxas (cubin): `images`
//! reads triple and arch from them, and `best_for_device` picks by target ID.

mod common;
use common::*;
use offload_formats::bundle;
use offload_formats::image::{best_for_device, find_images};
use offload_formats::target_id::TargetId;
use std::process::Command;

const KERNEL: &[u8] = b"int k(int x) { return x + 1; }\n";

fn amdgpu_object(dir: &std::path::Path, mcpu: &str) -> Vec<u8> {
    let src = file(dir, "k.c", KERNEL);
    let obj = dir.join("k.o");
    let so = dir.join(format!("k_{}.hsaco", mcpu.replace(':', "_")));
    run_ok(
        Command::new(llvm22("clang"))
            .args([
                "--target=amdgcn-amd-amdhsa",
                &format!("-mcpu={mcpu}"),
                "-nogpulib",
                "-O2",
                "-c",
                &src,
                "-o",
            ])
            .arg(&obj),
    );
    run_ok(
        Command::new(llvm22("ld.lld"))
            .arg("-shared")
            .arg(&obj)
            .arg("-o")
            .arg(&so),
    );
    std::fs::read(so).unwrap()
}

/// Compile a HIP source to an object with clang-22 (no device libraries or headers).
fn compile_hip_object(src: &str, flags: &[&str], obj: &std::path::Path) {
    run_ok(
        Command::new(llvm22("clang"))
            .args(["-x", "hip", "-nogpulib", "-nogpuinc", "-c"])
            .args(flags)
            .arg(src)
            .arg("-o")
            .arg(obj),
    );
}

#[test]
fn amdgpu_target_ids_from_code_objects() {
    let dir = scratch("amdgpu_objects");
    for (mcpu, want) in [
        ("gfx90a", "gfx90a"),
        ("gfx90a:xnack+", "gfx90a:xnack+"),
        ("gfx90a:xnack-:sramecc+", "gfx90a:sramecc+:xnack-"),
        ("gfx942:sramecc-", "gfx942:sramecc-"),
        ("gfx1030", "gfx1030"),
        ("gfx908:xnack-", "gfx908:xnack-"),
    ] {
        let bytes = amdgpu_object(&dir, mcpu);
        let images = find_images(&bytes).unwrap();
        assert_eq!(images.len(), 1);
        assert_eq!(images[0].triple, "amdgcn-amd-amdhsa");
        assert_eq!(images[0].arch.as_deref(), Some(want), "-mcpu={mcpu}");
    }
}

#[test]
fn cubin_and_ptx() {
    let dir = scratch("cubin");
    let src = file(&dir, "k.c", KERNEL);
    let ptx = dir.join("k.ptx");
    run_ok(
        Command::new(llvm22("clang"))
            .args([
                "--target=nvptx64-nvidia-cuda",
                "-march=sm_75",
                "-Xclang",
                "-target-feature",
                "-Xclang",
                "+ptx80",
                "-nogpulib",
                "-O2",
                "-S",
                &src,
                "-o",
            ])
            .arg(&ptx),
    );
    let ptx_bytes = std::fs::read(&ptx).unwrap();
    let images = find_images(&ptx_bytes).unwrap();
    assert_eq!(images[0].arch.as_deref(), Some("sm_75"));
    for sm in ["sm_75", "sm_80", "sm_90", "sm_100", "sm_120"] {
        let cubin = dir.join(format!("k_{sm}.cubin"));
        run_ok(
            Command::new(ptxas())
                .arg(format!("-arch={sm}"))
                .arg(&ptx)
                .arg("-o")
                .arg(&cubin),
        );
        let bytes = std::fs::read(&cubin).unwrap();
        let images = find_images(&bytes).unwrap();
        assert_eq!(images[0].triple, "nvptx64-nvidia-cuda");
        assert_eq!(images[0].arch.as_deref(), Some(sm), "{}", cubin.display());
    }
}

/// A bundle of several builds of one kernel: the image picked for each device is the
/// compatible one with the most specific target ID, as the AMDGPU rules require.
#[test]
fn best_image_for_a_device() {
    let dir = scratch("best_image");
    let builds = ["gfx90a", "gfx90a:xnack+", "gfx90a:xnack-", "gfx942"];
    let objects: Vec<Vec<u8>> = builds.iter().map(|b| amdgpu_object(&dir, b)).collect();
    let ids: Vec<String> = builds
        .iter()
        .map(|b| format!("hipv4-amdgcn-amd-amdhsa--{b}"))
        .collect();
    let mut entries: Vec<(&str, &[u8])> = vec![("host-x86_64-unknown-linux-gnu-", b"")];
    entries.extend(
        ids.iter()
            .map(String::as_str)
            .zip(objects.iter().map(Vec::as_slice)),
    );
    let data = bundle::write(&entries, 4096);
    let images = find_images(&data).unwrap();
    assert_eq!(images.len(), 4);
    let pick = |device: &str| {
        best_for_device(
            &images,
            "amdgcn-amd-amdhsa",
            Some(&TargetId::parse(device).unwrap()),
        )
        .map(|i| i.arch.clone().unwrap())
    };
    assert_eq!(
        pick("gfx90a:sramecc+:xnack+").as_deref(),
        Some("gfx90a:xnack+")
    );
    assert_eq!(
        pick("gfx90a:sramecc+:xnack-").as_deref(),
        Some("gfx90a:xnack-")
    );
    assert_eq!(pick("gfx90a").as_deref(), Some("gfx90a"));
    assert_eq!(pick("gfx942:sramecc+:xnack-").as_deref(), Some("gfx942"));
    assert_eq!(pick("gfx1030:xnack-"), None);
    // Each picked image really is the code object built for that target ID.
    let chosen = best_for_device(
        &images,
        "amdgcn-amd-amdhsa",
        Some(&TargetId::parse("gfx90a:sramecc-:xnack-").unwrap()),
    )
    .unwrap();
    let own = find_images(&chosen.data).unwrap();
    assert_eq!(own[0].arch.as_deref(), Some("gfx90a:xnack-"));
    assert!(best_for_device(&images, "nvptx64-nvidia-cuda", None).is_none());
}

/// HIP host objects made by clang-22: `.hip_fatbin` with a bundle (plain and
/// `--offload-compress`), and `-fgpu-rdc` object bundles; each image's target ID in the
/// container agrees with the one in the code object's own ELF header.
#[test]
fn hip_host_objects() {
    let dir = scratch("hip_objects");
    // Declarations clang's HIP host codegen needs, instead of the HIP headers.
    let src = file(
        &dir,
        "k.hip",
        b"typedef struct { unsigned x, y, z; } dim3;\n\
          extern \"C\" int hipLaunchKernel(const void *, dim3, dim3, void **, unsigned long, void *);\n\
          extern \"C\" int __hipPushCallConfiguration(dim3, dim3, unsigned long, void *);\n\
          extern \"C\" __attribute__((global)) void k(int *p) { *p = 1; }\n",
    );
    let cases: [(&[&str], &[&str], &str); 3] = [
        (
            &["--offload-arch=gfx90a:xnack+", "--offload-arch=gfx942"],
            &["gfx90a:xnack+", "gfx942"],
            "bundle",
        ),
        (
            &["--offload-arch=gfx90a", "--offload-compress"],
            &["gfx90a"],
            "compressed bundle",
        ),
        (
            &["--offload-arch=gfx1030", "-fgpu-rdc"],
            &["gfx1030"],
            "object bundle section",
        ),
    ];
    for (i, (flags, archs, container)) in cases.iter().enumerate() {
        let obj = dir.join(format!("k{i}.o"));
        compile_hip_object(&src, flags, &obj);
        let bytes = std::fs::read(&obj).unwrap();
        let images = find_images(&bytes).unwrap();
        let found: Vec<&str> = images
            .iter()
            .map(|i| i.arch.as_deref().unwrap_or(""))
            .collect();
        assert_eq!(&found, archs, "{flags:?}");
        for img in &images {
            assert_eq!(img.container, *container);
            assert_eq!(img.triple, "amdgcn-amd-amdhsa");
            if let offload_formats::image::ImageKind::Elf { .. } = img.kind {
                let own = find_images(&img.data).unwrap();
                assert_eq!(own[0].arch, img.arch, "{flags:?}");
            }
        }
    }
}

/// A relocatable link of two HIP objects concatenates their `.hip_fatbin` sections:
/// every bundle in it is found.
#[test]
fn linked_hip_fatbin_holds_every_bundle() {
    let dir = scratch("hip_linked");
    let mut objects = Vec::new();
    for (i, flags) in [
        &["--offload-arch=gfx90a"][..],
        &["--offload-arch=gfx942", "--offload-compress"][..],
        &["--offload-arch=gfx1030"][..],
    ]
    .iter()
    .enumerate()
    {
        let src = file(
            &dir,
            &format!("k{i}.hip"),
            format!(
                "typedef struct {{ unsigned x, y, z; }} dim3;\n\
                 extern \"C\" int hipLaunchKernel(const void *, dim3, dim3, void **, unsigned long, void *);\n\
                 extern \"C\" int __hipPushCallConfiguration(dim3, dim3, unsigned long, void *);\n\
                 extern \"C\" __attribute__((global)) void k{i}(int *p) {{ *p = {i}; }}\n"
            )
            .as_bytes(),
        );
        let obj = dir.join(format!("k{i}.o"));
        compile_hip_object(&src, flags, &obj);
        objects.push(obj);
    }
    let linked = dir.join("linked.o");
    run_ok(
        Command::new(llvm22("ld.lld"))
            .arg("-r")
            .args(&objects)
            .arg("-o")
            .arg(&linked),
    );
    let bytes = std::fs::read(&linked).unwrap();
    let archs: Vec<String> = find_images(&bytes)
        .unwrap()
        .into_iter()
        .filter_map(|i| i.arch)
        .collect();
    assert_eq!(archs, ["gfx90a", "gfx942", "gfx1030"]);
}
