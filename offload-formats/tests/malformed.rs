//! Malformed input: every truncation of real tool outputs is an error naming a field and
//! an offset (never a panic), and random corruption never panics or over-allocates.

mod common;
use common::*;
use offload_formats::bundle::{text, Bundle, BundleEntryId};
use offload_formats::compressed::CompressedBundle;
use offload_formats::entries::read_host_entries;
use offload_formats::image::find_images;
use offload_formats::offload_binary::{self, OffloadBinary};
use offload_formats::target_id::TargetId;
use proptest::prelude::*;
use std::process::Command;
use std::sync::OnceLock;

/// Real outputs of the LLVM 22 tools, made once per test binary.
struct Samples {
    bundle: Vec<u8>,
    compressed_v2: Vec<u8>,
    compressed_v3: Vec<u8>,
    offload_binary: Vec<u8>,
    text_bundle: Vec<u8>,
}

fn samples() -> &'static Samples {
    static S: OnceLock<Samples> = OnceLock::new();
    S.get_or_init(|| {
        let dir = scratch("malformed_samples");
        let ins: Vec<String> = (0..3).map(|i| file(&dir, &format!("in{i}"), &bytes(i, 40 + 30 * i as usize))).collect();
        let targets = "-targets=host-x86_64-unknown-linux-gnu,openmp-nvptx64-nvidia-cuda--sm_90,hip-amdgcn-amd-amdhsa--gfx90a:xnack+";
        let make = |ty: &str, name: &str, version: Option<&str>| -> Vec<u8> {
            let out = dir.join(name);
            let mut c = Command::new(bundler());
            c.arg(format!("-type={ty}")).arg(targets);
            for i in &ins {
                c.arg(format!("-input={i}"));
            }
            c.arg(format!("-output={}", out.display()));
            if let Some(v) = version {
                c.arg("-compress").env("COMPRESSED_BUNDLE_FORMAT_VERSION", v);
            }
            run_ok(&mut c);
            std::fs::read(out).unwrap()
        };
        let ob = dir.join("ob");
        run_ok(
            Command::new(llvm22("llvm-offload-binary"))
                .arg("-o")
                .arg(&ob)
                .arg(format!("--image=file={},triple=nvptx64-nvidia-cuda,arch=sm_90,kind=openmp", ins[1]))
                .arg(format!("--image=file={},triple=amdgcn-amd-amdhsa,arch=gfx90a,kind=hip", ins[2])),
        );
        Samples {
            bundle: make("bc", "plain", None),
            compressed_v2: make("bc", "v2", Some("2")),
            compressed_v3: make("bc", "v3", Some("3")),
            offload_binary: std::fs::read(ob).unwrap(),
            text_bundle: make("ll", "text", None),
        }
    })
}

/// The error names a field or the container and gives an offset.
fn assert_descriptive(e: &offload_formats::Error) {
    let s = e.to_string();
    assert!(
        s.contains("offset") || s.contains("ELF"),
        "error without offset: {s}"
    );
}

#[test]
fn every_truncation_of_a_real_bundle_is_an_error() {
    let s = samples();
    for len in 0..s.bundle.len() {
        let e = Bundle::parse(&s.bundle[..len]).unwrap_err();
        assert_descriptive(&e);
    }
    assert_eq!(Bundle::parse(&s.bundle).unwrap().entries.len(), 3);
}

#[test]
fn every_truncation_of_a_real_compressed_bundle_is_an_error() {
    let s = samples();
    for data in [&s.compressed_v2, &s.compressed_v3] {
        for len in 0..data.len() {
            let result = CompressedBundle::parse(&data[..len]).and_then(|c| c.decompress());
            assert_descriptive(&result.unwrap_err());
        }
        assert_eq!(
            CompressedBundle::parse(data).unwrap().decompress().unwrap(),
            s.bundle
        );
    }
}

#[test]
fn every_truncation_of_a_real_offload_binary_is_an_error() {
    let s = samples();
    let first = OffloadBinary::parse(&s.offload_binary).unwrap().size as usize;
    for len in 0..first {
        assert_descriptive(&OffloadBinary::parse(&s.offload_binary[..len]).unwrap_err());
    }
    // Cut inside the second binary: parse_all fails with an offset past the first one.
    for len in first + 1..s.offload_binary.len() {
        let e = offload_binary::parse_all(&s.offload_binary[..len]).unwrap_err();
        assert_descriptive(&e);
    }
    assert_eq!(
        offload_binary::parse_all(&s.offload_binary).unwrap().len(),
        2
    );
}

#[test]
fn truncated_text_bundles_never_panic() {
    let s = samples();
    let full = text::parse(&s.text_bundle, ";").unwrap();
    assert_eq!(full.len(), 3);
    for len in 0..s.text_bundle.len() {
        // A cut inside an entry is an error or drops that entry; never more entries.
        if let Ok(e) = text::parse(&s.text_bundle[..len], ";") {
            assert!(e.len() <= 3);
        }
    }
}

#[test]
fn errors_name_the_field_and_offset() {
    let s = samples();
    let mut b = s.bundle.clone();
    // Corrupt the second entry's code object size (offset 32 + 24 + id0 len + 8).
    let id0 = u64::from_le_bytes(b[48..56].try_into().unwrap()) as usize;
    let at = 32 + 24 + id0 + 8;
    b[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = Bundle::parse(&b).unwrap_err().to_string();
    assert!(
        e.contains("code object") && e.contains(&format!("{:#x}", at - 8)),
        "{e}"
    );

    let mut o = s.offload_binary.clone();
    o[4] = 9;
    let e = OffloadBinary::parse(&o).unwrap_err().to_string();
    assert!(e.contains("`version`") && e.contains("0x4"), "{e}");

    let mut c = s.compressed_v3.clone();
    c[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = CompressedBundle::parse(&c).unwrap_err().to_string();
    assert!(e.contains("uncompressed size"), "{e}");
}

fn corrupt(data: &[u8], edits: &[(usize, u8)]) -> Vec<u8> {
    let mut d = data.to_vec();
    if d.is_empty() {
        return d;
    }
    for (at, v) in edits {
        let i = at % d.len();
        d[i] = *v;
    }
    d
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

    #[test]
    fn corrupted_containers_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let s = samples();
        let b = corrupt(&s.bundle, &edits);
        let _ = Bundle::parse(&b);
        let _ = find_images(&b);
        for c in [&s.compressed_v2, &s.compressed_v3] {
            let c = corrupt(c, &edits);
            if let Ok(h) = CompressedBundle::parse(&c) {
                let _ = h.decompress();
            }
        }
        let o = corrupt(&s.offload_binary, &edits);
        let _ = offload_binary::parse_all(&o);
        let _ = find_images(&o);
        let t = corrupt(&s.text_bundle, &edits);
        let _ = text::parse(&t, ";");
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512), magic in 0usize..5) {
        let prefix: &[u8] = match magic {
            0 => b"__CLANG_OFFLOAD_BUNDLE__",
            1 => b"CCOB",
            2 => &[0x10, 0xFF, 0x10, 0xAD],
            3 => b"\x7fELF\x02\x01\x01",
            _ => b"",
        };
        let mut d = prefix.to_vec();
        d.extend_from_slice(&data);
        let _ = find_images(&d);
        let _ = read_host_entries(&d);
        let _ = Bundle::parse(&d);
        if let Ok(h) = CompressedBundle::parse(&d) {
            let _ = h.decompress();
        }
    }

    #[test]
    fn ids_and_target_ids_never_panic(s in "[-a-z0-9_:+]{0,40}") {
        let _ = TargetId::parse(&s).map(|t| t.canonical().to_string());
        if let Ok(id) = BundleEntryId::parse(&s) {
            let _ = id.to_bundler_string();
            let _ = id.is_code_object_compatible(&id, true);
        }
    }
}

/// Truncations of a real clang-22 host executable: the entry reader errors or returns
/// entries, never panics.
#[test]
fn truncated_host_elf_never_panics() {
    let dir = scratch("malformed_elf");
    let src = file(&dir, "p.c", include_str!("data/indirect.c").as_bytes());
    let obj = dir.join("p.o");
    run_ok(
        Command::new(llvm22("clang"))
            .args(["-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(&obj),
    );
    let bytes = std::fs::read(obj).unwrap();
    assert_eq!(read_host_entries(&bytes).unwrap().len(), 4);
    for len in (0..bytes.len()).step_by(7) {
        let _ = read_host_entries(&bytes[..len]);
        let _ = find_images(&bytes[..len]);
    }
}
