//! Side by side with clang-offload-bundler 22: same bytes out, same listing, same exit
//! codes, and each reads what the other writes (compressed too).

mod common;
use common::*;
use offload_formats::bundle::Bundle;
use offload_formats::compressed::{self, CompressedBundle, Method};
use std::process::Command;

/// Target sets exercising normalization: missing env, AMDHSA, features, dropped IDs.
const TARGET_SETS: &[&[&str]] = &[
    &[
        "host-x86_64-unknown-linux-gnu",
        "openmp-nvptx64-nvidia-cuda-sm_90",
    ],
    &[
        "host-x86_64-unknown-linux-gnu",
        "openmp-nvptx64-nvidia-cuda--sm_90",
        "hip-amdgcn-amd-amdhsa--gfx90a:xnack+",
        "hipv4-amdgcn-amd-amdhsa--gfx908:sramecc-:xnack+",
        "openmp-amdgcn-amd-amdhsa-gfx1030",
        "openmp-x86_64-pc-linux-gnu",
    ],
    &[
        "openmp-amdgcn--amdhsa-gfx906",
        "host-x86_64-pc-linux-gnu",
        "hip-amdgcn-amd-amdhsa--gfx90A",
    ],
];

/// Many targets, so the bundler's StringMap grows (13+ keys) during -list.
fn many_targets() -> Vec<String> {
    let mut t = vec!["host-x86_64-unknown-linux-gnu".to_owned()];
    for sm in [
        "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90",
    ] {
        t.push(format!("openmp-nvptx64-nvidia-cuda--{sm}"));
    }
    for gfx in [
        "gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1201",
    ] {
        t.push(format!("hip-amdgcn-amd-amdhsa--{gfx}"));
        t.push(format!("hipv4-amdgcn-amd-amdhsa--{gfx}:xnack-"));
    }
    t
}

fn inputs(dir: &std::path::Path, n: usize, seed: u64) -> Vec<String> {
    (0..n)
        .map(|i| file(dir, &format!("in{i}"), &bytes(seed + i as u64, 50 + 97 * i)))
        .collect()
}

fn bundle_cmd(tool: &std::path::Path, ours_cmd: bool, args: &[String]) -> Command {
    let mut c = Command::new(tool);
    if ours_cmd {
        c.arg("bundle");
    }
    c.args(args);
    c
}

fn bundle_args(
    ty: &str,
    targets: &[String],
    ins: &[String],
    out: &str,
    extra: &[&str],
) -> Vec<String> {
    let mut a = vec![
        format!("-type={ty}"),
        format!("-targets={}", targets.join(",")),
    ];
    a.extend(ins.iter().map(|i| format!("-input={i}")));
    a.push(format!("-output={out}"));
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

#[test]
fn uncompressed_bundles_are_byte_identical() {
    let dir = scratch("identical");
    let mut sets: Vec<Vec<String>> = TARGET_SETS
        .iter()
        .map(|s| s.iter().map(|t| t.to_string()).collect())
        .collect();
    sets.push(many_targets());
    let mut compared = 0;
    for (si, targets) in sets.iter().enumerate() {
        let ins = inputs(&dir, targets.len(), si as u64 * 100);
        for ty in ["bc", "o", "gch", "ll", "s", "i", "hipi", "d"] {
            for extra in [
                &[][..],
                &["-bundle-align=4096"][..],
                &["--bundle-align=16"][..],
            ] {
                let theirs = dir.join("theirs").to_str().unwrap().to_owned();
                let mine = dir.join("ours").to_str().unwrap().to_owned();
                run_ok(&mut bundle_cmd(
                    &bundler(),
                    false,
                    &bundle_args(ty, targets, &ins, &theirs, extra),
                ));
                run_ok(&mut bundle_cmd(
                    &ours(),
                    true,
                    &bundle_args(ty, targets, &ins, &mine, extra),
                ));
                let (t, o) = (
                    std::fs::read(&theirs).unwrap(),
                    std::fs::read(&mine).unwrap(),
                );
                assert!(
                    t == o,
                    "type {ty} targets {targets:?} {extra:?}: bytes differ"
                );
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 4 * 8 * 3);
}

/// `list` prints the same lines as the bundler, for plain, compressed (v2, v3) and text
/// bundles written by the bundler.
#[test]
fn list_output_is_identical() {
    let dir = scratch("list");
    let mut sets: Vec<Vec<String>> = TARGET_SETS
        .iter()
        .map(|s| s.iter().map(|t| t.to_string()).collect())
        .collect();
    sets.push(many_targets());
    for (si, targets) in sets.iter().enumerate() {
        let ins = inputs(&dir, targets.len(), si as u64);
        for (ty, version) in [
            ("bc", None),
            ("bc", Some("2")),
            ("bc", Some("3")),
            ("ll", None),
            ("s", Some("3")),
        ] {
            let out = dir.join("b").to_str().unwrap().to_owned();
            let extra: &[&str] = if version.is_some() {
                &["-compress"]
            } else {
                &[]
            };
            let mut c = bundle_cmd(
                &bundler(),
                false,
                &bundle_args(ty, targets, &ins, &out, extra),
            );
            if let Some(v) = version {
                c.env("COMPRESSED_BUNDLE_FORMAT_VERSION", v);
            }
            run_ok(&mut c);
            let theirs = run_ok(Command::new(bundler()).args([
                "-list",
                &format!("-type={ty}"),
                &format!("-input={out}"),
            ]));
            let mine = run_ok(Command::new(ours()).args([
                "list",
                &format!("-type={ty}"),
                &format!("-input={out}"),
            ]));
            assert_eq!(
                String::from_utf8_lossy(&mine.stdout),
                String::from_utf8_lossy(&theirs.stdout),
                "type {ty} compressed {version:?} targets {targets:?}"
            );
            assert_eq!(
                String::from_utf8_lossy(&mine.stdout).lines().count(),
                targets.len()
            );
        }
    }
}

/// Bundles compressed by the bundler (v2 and v3) decompress to exactly the plain bundle
/// the bundler writes, and unbundle to exactly the inputs.
#[test]
fn theirs_compressed_read_by_ours() {
    let dir = scratch("theirs_compressed");
    let targets: Vec<String> = TARGET_SETS[1].iter().map(|t| t.to_string()).collect();
    let mut ins = inputs(&dir, targets.len(), 7);
    // One large, compressible input so the payload is more than one zstd block.
    let big: Vec<u8> = (0..400_000u32)
        .flat_map(|i| (i % 251).to_le_bytes())
        .collect();
    ins[1] = file(&dir, "big", &big);
    let plain = dir.join("plain").to_str().unwrap().to_owned();
    run_ok(&mut bundle_cmd(
        &bundler(),
        false,
        &bundle_args("bc", &targets, &ins, &plain, &[]),
    ));
    let plain_bytes = std::fs::read(&plain).unwrap();
    for version in ["2", "3"] {
        let packed = dir
            .join(format!("packed{version}"))
            .to_str()
            .unwrap()
            .to_owned();
        run_ok(
            bundle_cmd(
                &bundler(),
                false,
                &bundle_args("bc", &targets, &ins, &packed, &["-compress"]),
            )
            .env("COMPRESSED_BUNDLE_FORMAT_VERSION", version),
        );
        let data = std::fs::read(&packed).unwrap();
        let header = CompressedBundle::parse(&data).unwrap();
        assert_eq!(header.version.to_string(), version);
        assert_eq!(header.method, Method::Zstd);
        assert_eq!(header.total_size, Some(data.len() as u64));
        assert_eq!(header.decompress().unwrap(), plain_bytes);
        // Unbundle with our CLI; every output equals its input.
        let outs: Vec<String> = (0..targets.len())
            .map(|i| {
                dir.join(format!("out{version}_{i}"))
                    .to_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        let mut args = vec![
            "unbundle".to_owned(),
            "-type=bc".into(),
            format!("-targets={}", targets.join(",")),
        ];
        args.push(format!("-input={packed}"));
        args.extend(outs.iter().map(|o| format!("-output={o}")));
        run_ok(Command::new(ours()).args(&args));
        for (i, o) in outs.iter().enumerate() {
            let want = std::fs::read(&ins[i]).unwrap();
            let target = &targets[i];
            // The bundler drops unknown target IDs (gfx90A) but keeps the entry.
            assert_eq!(std::fs::read(o).unwrap(), want, "{target}");
        }
    }
}

/// What we write, compressed or not, the bundler unbundles to exactly the inputs.
#[test]
fn ours_read_by_theirs() {
    let dir = scratch("ours_by_theirs");
    let targets: Vec<String> = TARGET_SETS[1].iter().map(|t| t.to_string()).collect();
    let ins = inputs(&dir, targets.len(), 11);
    let plain = dir.join("plain").to_str().unwrap().to_owned();
    run_ok(&mut bundle_cmd(
        &ours(),
        true,
        &bundle_args("bc", &targets, &ins, &plain, &[]),
    ));
    let plain_bytes = std::fs::read(&plain).unwrap();
    let mut variants = vec![("plain".to_owned(), plain.clone())];
    for (version, method) in [
        (2, Method::Zstd),
        (3, Method::Zstd),
        (3, Method::Zlib),
        (2, Method::Zlib),
    ] {
        let packed = compressed::compress(&plain_bytes, version, method, 6).unwrap();
        let name = format!("v{version}_{method:?}");
        variants.push((name.clone(), file(&dir, &name, &packed)));
    }
    // Also through the CLI's -compress (v3 zstd, the bundler's defaults).
    let cli = dir.join("cli").to_str().unwrap().to_owned();
    run_ok(&mut bundle_cmd(
        &ours(),
        true,
        &bundle_args("bc", &targets, &ins, &cli, &["-compress"]),
    ));
    variants.push(("cli".into(), cli));
    for (name, path) in &variants {
        let outs: Vec<String> = (0..targets.len())
            .map(|i| {
                dir.join(format!("{name}_out{i}"))
                    .to_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        let mut args = vec![
            "-unbundle".to_owned(),
            "-type=bc".into(),
            format!("-targets={}", targets.join(",")),
        ];
        args.push(format!("-input={path}"));
        args.extend(outs.iter().map(|o| format!("-output={o}")));
        run_ok(Command::new(bundler()).args(&args));
        for (i, o) in outs.iter().enumerate() {
            assert_eq!(
                std::fs::read(o).unwrap(),
                std::fs::read(&ins[i]).unwrap(),
                "{name} {}",
                targets[i]
            );
        }
    }
    // And the library's parse of our bundle sees every entry.
    assert_eq!(
        Bundle::parse(&plain_bytes).unwrap().entries.len(),
        targets.len()
    );
}

/// Good and bad invocations: same exit status and the same error text.
#[test]
fn same_exit_codes_and_messages() {
    let dir = scratch("exit_codes");
    let ins = inputs(&dir, 3, 3);
    let bundle = dir.join("bundle").to_str().unwrap().to_owned();
    let targets3 = "host-x86_64-unknown-linux-gnu,openmp-nvptx64-nvidia-cuda-sm_90,hip-amdgcn-amd-amdhsa--gfx90a:xnack+";
    run_ok(Command::new(bundler()).args([
        "-type=bc",
        &format!("-targets={targets3}"),
        &format!("-input={}", ins[0]),
        &format!("-input={}", ins[1]),
        &format!("-input={}", ins[2]),
        &format!("-output={bundle}"),
    ]));
    let o = |n: &str| format!("-output={}", dir.join(n).display());
    let i = |p: &str| format!("-input={p}");
    // (mode, args) — mode "" means bundling.
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("unbundle", vec!["-type=bc".into(), "-targets=openmp-nvptx64-nvidia-cuda-sm_80".into(), i(&bundle), o("x")]),
        ("unbundle", vec!["-type=bc".into(), "-targets=hip-amdgcn-amd-amdhsa--gfx90a".into(), i(&bundle), o("x")]),
        ("unbundle", vec!["-type=bc".into(), "-targets=hip-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack+".into(), i(&bundle), o("x")]),
        ("unbundle", vec!["-type=bc".into(), "-targets=hip-amdgcn-amd-amdhsa--gfx1030,openmp-x86_64-pc-linux-gnu,host-x86_64-unknown-linux-gnu".into(), i(&bundle), o("x"), o("y"), o("z")]),
        ("unbundle", vec!["-type=bc".into(), "-allow-missing-bundles".into(), "-targets=hip-amdgcn-amd-amdhsa--gfx1030".into(), i(&bundle), o("x")]),
        ("unbundle", vec!["-type=bc".into(), "-targets=host-x86_64-unknown-linux-gnu,openmp-nvptx64-nvidia-cuda-sm_80".into(), i(&ins[0]), o("x"), o("y")]),
        ("unbundle", vec!["-type=bc".into(), "-targets=openmp-nvptx64-nvidia-cuda-sm_90".into(), i(&bundle), o("x"), o("y")]),
        ("list", vec!["-type=bc".into(), i(&ins[0])]),
        ("list", vec!["-type=bc".into(), i(&ins[0]), i(&bundle)]),
        ("list", vec!["-type=bc".into(), i(&bundle), "-bogus".into()]),
        ("unbundle", vec!["-type=bc".into(), "-targets=host-x86_64-unknown-linux-gnu".into(), i(&bundle)]),
        ("unbundle", vec!["-type=bc".into(), "-targets=host-x86_64-unknown-linux-gnu".into(), i(&bundle), i(&bundle), o("x")]),
        ("unbundle", vec!["-type=bc".into(), "-targets=bogus,host-x86_64-unknown-linux-gnu".into(), i(&bundle), o("x")]),
        ("", vec!["-type=bc".into(), "-targets=host-x86_64-unknown-linux-gnu".into(), i(&ins[0])]),
        ("", vec!["-type=bc".into(), "-targets=host-x86_64-unknown-linux-gnu".into(), i(&ins[0]), o("x"), o("y")]),
        ("", vec!["-type=zz".into(), "-targets=host-x86_64-unknown-linux-gnu".into(), i(&ins[0]), o("x")]),
        ("", vec!["-type=bc".into(), "-targets=openmp-x86_64-unknown-linux-gnu,openmp-x86_64-unknown-linux-gnu".into(), i(&ins[0]), i(&ins[1]), o("x")]),
        ("list", vec!["-type=bc".into(), i(&dir.join("missing").display().to_string())]),
        ("list", vec!["-type=c".into(), i(&bundle)]),
        ("", vec!["-type=bc".into(), "-targets=openmp-nvptx64-nvidia-cuda-sm_90".into(), i(&ins[0]), o("x")]),
        ("", vec!["-type=bc".into(), "-targets=host-x86_64-unknown-linux-gnu,host-x86_64-unknown-linux-gnu".into(), i(&ins[0]), i(&ins[1]), o("x")]),
        ("", vec!["-type=bc".into(), "-targets=host-x86_64-unknown-linux-gnu".into(), i(&ins[0]), i(&ins[1]), o("x")]),
        ("", vec!["-type=bc".into(), "-targets=host-x86_64-unknown-linux-gnu,cuda-nvptx64-nvidia-cuda-sm_70".into(), i(&ins[0]), i(&ins[1]), o("x")]),
        ("", vec!["-type=bc".into(), "-targets=host-x86_64-unknown-linux-gnu,openmp-nvptx64".into(), i(&ins[0]), i(&ins[1]), o("x")]),
        ("", vec!["-type=bc".into(), i(&ins[0]), o("x")]),
        ("", vec!["-type=bc".into(), "-targets=host-x86_64-unknown-linux-gnu,hip-amdgcn-amd-amdhsa--gfx90a:xnack+,hip-amdgcn-amd-amdhsa--gfx90a:sramecc-".into(), i(&ins[0]), i(&ins[1]), i(&ins[2]), o("x")]),
        ("", vec!["-type=bc".into(), "-targets=host-x86_64-unknown-linux-gnu,hip-amdgcn-amd-amdhsa--gfx90a,hip-amdgcn-amd-amdhsa--gfx90a:xnack-".into(), i(&ins[0]), i(&ins[1]), i(&ins[2]), o("x")]),
        ("", vec!["-type=a".into(), "-targets=host-x86_64-unknown-linux-gnu".into(), i(&ins[0]), o("x")]),
    ];
    for (mode, args) in &cases {
        let mut theirs_cmd = Command::new(bundler());
        match *mode {
            "unbundle" => theirs_cmd.arg("-unbundle"),
            "list" => theirs_cmd.arg("-list"),
            _ => &mut theirs_cmd,
        };
        let theirs = run(theirs_cmd.args(args));
        let mine = run(Command::new(ours())
            .arg(if mode.is_empty() { "bundle" } else { mode })
            .args(args));
        assert_eq!(
            mine.status.code(),
            theirs.status.code(),
            "{mode} {args:?}\n{}",
            String::from_utf8_lossy(&theirs.stderr)
        );
        // LLVM's command-line library words its own errors differently ("Try: --help").
        if !args.iter().any(|a| a == "-bogus") {
            assert_eq!(error_text(&mine), error_text(&theirs), "{mode} {args:?}");
        }
        assert_eq!(mine.stdout, theirs.stdout, "{mode} {args:?}");
    }
}

/// Object-file bundles (`-type=o` with an object host input): the bundler stores code
/// objects in ELF sections through llvm-objcopy. With the same llvm-objcopy, ours writes
/// the bundler's object byte for byte, and `list` and `unbundle` (device sections, and
/// the host object stripped of them) give its output; with no llvm-objcopy, the
/// bundler's message and no output.
#[test]
fn object_bundles() {
    let dir = scratch("object_bundles");
    // The bundler runs the llvm-objcopy beside the path it was started by (so
    // /usr/bin/clang-offload-bundler-22 runs /usr/bin/llvm-objcopy, whatever its
    // version): started from LLVM 22's folder, it runs LLVM 22's, and so does ours.
    let bundler = std::fs::canonicalize(bundler()).unwrap();
    let objcopy = bundler.with_file_name("llvm-objcopy");
    let src = file(&dir, "h.c", b"int host_fn(void) { return 1; }\n");
    let obj = dir.join("h.o").to_str().unwrap().to_owned();
    run_ok(Command::new(llvm22("clang")).args(["-c", &src, "-o", &obj]));
    let ins = inputs(&dir, 3, 21);
    let targets = "host-x86_64-unknown-linux-gnu,openmp-nvptx64-nvidia-cuda--sm_90,hip-amdgcn-amd-amdhsa--gfx90a";
    let bundled = dir.join("b.o").to_str().unwrap().to_owned();
    run_ok(Command::new(&bundler).args([
        "-type=o",
        &format!("-targets={targets}"),
        &format!("-input={obj}"),
        &format!("-input={}", ins[1]),
        &format!("-input={}", ins[2]),
        &format!("-output={bundled}"),
    ]));
    let theirs =
        run_ok(Command::new(&bundler).args(["-list", "-type=o", &format!("-input={bundled}")]));
    let mine = run_ok(Command::new(ours()).args(["list", "-type=o", &format!("-input={bundled}")]));
    assert_eq!(mine.stdout, theirs.stdout);
    assert_eq!(String::from_utf8_lossy(&mine.stdout).lines().count(), 3);
    // With another -type the same file is not an object bundle, for both tools.
    for ty in ["-type=bc", "-type=ll"] {
        let theirs = run(Command::new(&bundler).args(["-list", ty, &format!("-input={bundled}")]));
        let mine = run(Command::new(ours()).args(["list", ty, &format!("-input={bundled}")]));
        assert_eq!(
            (mine.status.code(), mine.stdout),
            (theirs.status.code(), theirs.stdout),
            "{ty}"
        );
    }
    let out = dir.join("dev").to_str().unwrap().to_owned();
    run_ok(Command::new(ours()).args([
        "unbundle",
        "-type=o",
        "-targets=hip-amdgcn-amd-amdhsa--gfx90a",
        &format!("-input={bundled}"),
        &format!("-output={out}"),
    ]));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(&ins[2]).unwrap()
    );
    let with_objcopy = |c: &mut Command| -> Command {
        let mut c2 = Command::new(c.get_program());
        c2.args(c.get_args())
            .env("OFFLOAD_INSPECT_OBJCOPY", &objcopy);
        c2
    };
    let two = "host-x86_64-unknown-linux-gnu,openmp-nvptx64-nvidia-cuda--sm_90";
    let outs: Vec<String> = ["th", "td", "oh", "od"]
        .iter()
        .map(|n| dir.join(n).to_str().unwrap().to_owned())
        .collect();
    run_ok(Command::new(&bundler).args([
        "-unbundle",
        "-type=o",
        &format!("-targets={two}"),
        &format!("-input={bundled}"),
        &format!("-output={}", outs[0]),
        &format!("-output={}", outs[1]),
    ]));
    run_ok(&mut with_objcopy(Command::new(ours()).args([
        "unbundle",
        "-type=o",
        &format!("-targets={two}"),
        &format!("-input={bundled}"),
        &format!("-output={}", outs[2]),
        &format!("-output={}", outs[3]),
    ])));
    for (t, o) in [(0, 2), (1, 3)] {
        assert_eq!(
            std::fs::read(&outs[t]).unwrap(),
            std::fs::read(&outs[o]).unwrap(),
            "unbundled {}",
            ["host", "device"][t]
        );
    }
    // The host object keeps its code and loses every bundle section.
    let host_obj = std::fs::read(&outs[2]).unwrap();
    assert!(host_obj.starts_with(b"\x7fELF"));
    assert!(!host_obj
        .windows(24)
        .any(|w| w == b"__CLANG_OFFLOAD_BUNDLE__"));
    let mine = dir.join("mine.o").to_str().unwrap().to_owned();
    run_ok(&mut with_objcopy(Command::new(ours()).args([
        "bundle",
        "-type=o",
        &format!("-targets={targets}"),
        &format!("-input={obj}"),
        &format!("-input={}", ins[1]),
        &format!("-input={}", ins[2]),
        &format!("-output={mine}"),
    ])));
    assert_eq!(
        std::fs::read(&mine).unwrap(),
        std::fs::read(&bundled).unwrap()
    );
    let missing = dir.join("missing.o").to_str().unwrap().to_owned();
    let no_objcopy = run(Command::new(ours())
        .args([
            "bundle",
            "-type=o",
            &format!("-targets={two}"),
            &format!("-input={obj}"),
            &format!("-input={}", ins[1]),
            &format!("-output={missing}"),
        ])
        .env("OFFLOAD_INSPECT_OBJCOPY", dir.join("no-such-objcopy")));
    assert_eq!(no_objcopy.status.code(), Some(1));
    assert!(
        error_text(&no_objcopy).contains("no-such-objcopy"),
        "{no_objcopy:?}"
    );
    assert!(!std::path::Path::new(&missing).exists());
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
/// `unbundle` writes the same files as the bundler: binary, compressed and text bundles,
/// target-ID matching, missing bundles allowed, and a non-bundle input (host copy).
#[test]
fn unbundle_outputs_are_identical() {
    let dir = scratch("unbundle_same");
    let targets: Vec<String> = TARGET_SETS[1].iter().map(|t| t.to_string()).collect();
    let ins = inputs(&dir, targets.len(), 31);
    let mut sources = Vec::new();
    for (ty, extra) in [
        ("bc", None),
        ("bc", Some("-compress")),
        ("ll", None),
        ("s", Some("-compress")),
    ] {
        let out = dir
            .join(format!("src_{ty}_{}", extra.is_some()))
            .to_str()
            .unwrap()
            .to_owned();
        let extra: Vec<&str> = extra.into_iter().collect();
        run_ok(&mut bundle_cmd(
            &bundler(),
            false,
            &bundle_args(ty, &targets, &ins, &out, &extra),
        ));
        sources.push((ty, out));
    }
    sources.push(("bc", ins[0].clone()));
    let requests: &[&[&str]] = &[
        &[
            "host-x86_64-unknown-linux-gnu",
            "openmp-nvptx64-nvidia-cuda--sm_90",
        ],
        &[
            "hip-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack+",
            "openmp-x86_64-pc-linux-gnu",
        ],
        &[
            "hipv4-amdgcn-amd-amdhsa--gfx908:sramecc-:xnack+",
            "hip-amdgcn-amd-amdhsa--gfx1030",
        ],
        &[
            "host-x86_64-unknown-linux-gnu",
            "openmp-amdgcn-amd-amdhsa--gfx90a",
        ],
    ];
    let mut compared = 0;
    for (ty, src) in &sources {
        for req in requests {
            for allow in [false, true] {
                let mut results = Vec::new();
                for who in ["theirs", "ours"] {
                    let outs: Vec<String> = (0..req.len())
                        .map(|i| dir.join(format!("{who}_{i}")).to_str().unwrap().to_owned())
                        .collect();
                    for o in &outs {
                        let _ = std::fs::remove_file(o);
                    }
                    let mut args = vec![
                        format!("-type={ty}"),
                        format!("-targets={}", req.join(",")),
                        format!("-input={src}"),
                    ];
                    args.extend(outs.iter().map(|o| format!("-output={o}")));
                    if allow {
                        args.push("-allow-missing-bundles".into());
                    }
                    let mut c = if who == "theirs" {
                        let mut c = Command::new(bundler());
                        c.arg("-unbundle");
                        c
                    } else {
                        let mut c = Command::new(ours());
                        c.arg("unbundle");
                        c
                    };
                    let status = run(c.args(&args)).status.code();
                    let files: Vec<Option<Vec<u8>>> =
                        outs.iter().map(|o| std::fs::read(o).ok()).collect();
                    results.push((status, files));
                }
                assert_eq!(
                    results[0], results[1],
                    "type {ty} input {src} targets {req:?} allow-missing {allow}"
                );
                compared += 1;
            }
        }
    }
    assert_eq!(compared, sources.len() * requests.len() * 2);
}
