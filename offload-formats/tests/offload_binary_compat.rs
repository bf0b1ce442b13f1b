//! OffloadBinary side by side with llvm-offload-binary 22 / clang-offload-packager 22.

mod common;
use common::*;
use offload_formats::image::{find_images, ImageKind as FileKind};
use offload_formats::offload_binary::{
    self, ImageKind, OffloadBinary, OffloadKind, OffloadingImage,
};
use offload_formats::string_map_order::dense_map_order;
use std::process::Command;

/// (file name, --image key=value list without file=) for the packer.
fn images() -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
    vec![
        (
            "k.cubin",
            vec![
                ("triple", "nvptx64-nvidia-cuda"),
                ("arch", "sm_90"),
                ("kind", "openmp"),
            ],
        ),
        (
            "k.bc",
            vec![
                ("triple", "amdgcn-amd-amdhsa"),
                ("arch", "gfx90a:xnack+"),
                ("kind", "hip"),
                ("feature", "+ptx80"),
            ],
        ),
        (
            "k.o",
            vec![
                ("triple", "x86_64-pc-linux-gnu"),
                ("kind", "openmp"),
                ("zeta", "1"),
                ("alpha", "a-longer-value"),
            ],
        ),
        (
            "k.s",
            vec![
                ("triple", "nvptx64-nvidia-cuda"),
                ("arch", "sm_70"),
                ("kind", "cuda"),
            ],
        ),
        (
            "k.fatbin",
            vec![
                ("triple", "nvptx64-nvidia-cuda"),
                ("arch", "sm_80"),
                ("kind", "sycl"),
            ],
        ),
        (
            "k.bin",
            vec![("triple", "spirv64-intel"), ("kind", "openmp")],
        ),
    ]
}

fn image_kind_for(file: &str) -> ImageKind {
    match file.rsplit('.').next() {
        Some("o") => ImageKind::Object,
        Some("bc") => ImageKind::Bitcode,
        Some("cubin") => ImageKind::Cubin,
        Some("fatbin") => ImageKind::Fatbinary,
        Some("s") => ImageKind::Ptx,
        _ => ImageKind::None,
    }
}

fn pack_with_llvm(tool: &str, dir: &std::path::Path, out: &str) -> Vec<Vec<u8>> {
    let mut cmd = Command::new(llvm22(tool));
    cmd.arg("-o").arg(out);
    let mut payloads = Vec::new();
    for (i, (name, kv)) in images().into_iter().enumerate() {
        let data = bytes(i as u64 + 40, 100 + 333 * i);
        let path = file(dir, name, &data);
        payloads.push(data);
        let mut arg = format!("--image=file={path}");
        for (k, v) in kv {
            arg.push_str(&format!(",{k}={v}"));
        }
        cmd.arg(arg);
    }
    run_ok(&mut cmd);
    payloads
}

#[test]
fn theirs_read_by_ours_and_ours_byte_identical() {
    for tool in ["llvm-offload-binary", "clang-offload-packager"] {
        let dir = scratch(&format!("ob_{tool}"));
        let out = dir.join("packed").to_str().unwrap().to_owned();
        let payloads = pack_with_llvm(tool, &dir, &out);
        let theirs = std::fs::read(&out).unwrap();
        let all = offload_binary::parse_all(&theirs).unwrap();
        assert_eq!(all.len(), images().len());
        let mut rebuilt = Vec::new();
        for ((at, bin), ((name, kv), payload)) in
            all.iter().zip(images().into_iter().zip(&payloads))
        {
            assert_eq!(bin.image, &payload[..], "{name}");
            assert_eq!(bin.image_kind, image_kind_for(name), "{name}");
            let kind = kv.iter().find(|(k, _)| *k == "kind").unwrap().1;
            assert_eq!(
                bin.offload_kind,
                OffloadKind::from_name(kind).unwrap(),
                "{name}"
            );
            // Every key but `kind` becomes a string; `file` never does.
            let mut want: Vec<(&str, &str)> =
                kv.iter().copied().filter(|(k, _)| *k != "kind").collect();
            let mut got = bin.strings.clone();
            want.sort();
            got.sort();
            assert_eq!(got, want, "{name} at {at}");
            // The tool keeps the --image keys (file and kind included) in a DenseMap:
            // write ours in that order and compare every byte.
            let mut keys = vec!["file"];
            keys.extend(kv.iter().map(|(k, _)| *k));
            let order: Vec<(&str, &str)> = dense_map_order(&keys)
                .expect("short keys")
                .into_iter()
                .map(|i| keys[i])
                .filter(|k| *k != "file" && *k != "kind")
                .map(|k| (k, bin.string(k).unwrap()))
                .collect();
            let ours = offload_binary::write(&OffloadingImage {
                image_kind: bin.image_kind,
                offload_kind: bin.offload_kind,
                flags: bin.flags,
                strings: order.clone(),
                image: bin.image,
            });
            let start = *at as usize;
            assert!(
                ours[..] == theirs[start..start + bin.size as usize],
                "{tool} {name}: bytes differ; our string order {order:?}, theirs {:?}",
                bin.strings
            );
            rebuilt.extend(ours);
        }
        assert!(rebuilt == theirs, "{tool}: our OffloadBinary bytes differ");
    }
}

#[test]
fn ours_read_by_theirs() {
    let dir = scratch("ob_ours_by_theirs");
    let mut packed = Vec::new();
    let mut payloads = Vec::new();
    for (i, (name, kv)) in images().into_iter().enumerate() {
        let data = bytes(i as u64 + 900, 64 + 129 * i);
        let strings: Vec<(&str, &str)> = kv.iter().copied().filter(|(k, _)| *k != "kind").collect();
        let kind =
            OffloadKind::from_name(kv.iter().find(|(k, _)| *k == "kind").unwrap().1).unwrap();
        packed.extend(offload_binary::write(&OffloadingImage {
            image_kind: image_kind_for(name),
            offload_kind: kind,
            flags: 0,
            strings,
            image: &data,
        }));
        payloads.push((kv, data));
    }
    let input = file(&dir, "ours.bin", &packed);
    // Ask llvm-offload-binary to extract each image by its triple and arch.
    for (i, (kv, data)) in payloads.iter().enumerate() {
        let out = dir.join(format!("x{i}")).to_str().unwrap().to_owned();
        let mut sel = format!("--image=file={out}");
        for (k, v) in kv
            .iter()
            .filter(|(k, _)| *k == "triple" || *k == "arch" || *k == "kind")
        {
            sel.push_str(&format!(",{k}={v}"));
        }
        run_ok(
            Command::new(llvm22("llvm-offload-binary"))
                .arg(&input)
                .arg(&sel),
        );
        assert_eq!(&std::fs::read(&out).unwrap(), data, "image {i}");
    }
}

/// `images` on a clang-22 OpenMP executable finds the embedded x86_64 device image and
/// reads the same bytes llvm-offload-binary extracts.
#[test]
fn images_in_clang22_executable() {
    let dir = scratch("images_exe");
    let exe = compile_clang22(&dir, &[]);
    let bytes = std::fs::read(&exe).unwrap();
    let found = find_images(&bytes).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    let img = &found[0];
    assert_eq!(img.triple, "x86_64-pc-linux-gnu");
    assert_eq!(img.offload_kind, "openmp");
    assert_eq!(img.section.as_deref(), Some(".llvm.offloading"));
    assert!(
        matches!(img.kind, FileKind::Elf { machine: 62, .. }),
        "{:?}",
        img.kind
    );
    // Cross-check with LLVM's own extraction.
    let out = dir.join("extracted").to_str().unwrap().to_owned();
    run_ok(
        Command::new(llvm22("llvm-offload-binary"))
            .arg(&exe)
            .arg(format!("--image=file={out},triple=x86_64-pc-linux-gnu")),
    );
    assert_eq!(std::fs::read(&out).unwrap(), img.data.as_ref());
    let range = img.range.clone().unwrap();
    assert_eq!(
        &bytes[range.start as usize..range.end as usize],
        img.data.as_ref()
    );
    // And the CLI agrees, in JSON.
    let json = run_ok(Command::new(ours()).args(["images", &exe, "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v[0]["triple"], "x86_64-pc-linux-gnu");
    assert_eq!(v[0]["size"], img.data.len());
    let _ = OffloadBinary::parse; // the library entry point used by find_images
}

/// Build `tests/data/indirect.c` with clang-22 for the x86_64 offload target.
fn compile_clang22(dir: &std::path::Path, extra: &[&str]) -> String {
    compile_openmp_x86(&llvm22("clang"), dir, INDIRECT_PROGRAM, "indirect", extra)
}
