//! Bundling and unbundling stream (issue 26): peak memory does not grow with the input,
//! the bytes stay the bundler's at the sizes where buffers and alignment change, and a
//! failed run leaves no output behind.

mod common;
use common::*;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use offload_formats::compressed::zstd_library::STREAMED_EQUALS_ONE_SHOT;

const TARGETS: &str = "host-x86_64-unknown-linux-gnu,openmp-nvptx64-nvidia-cuda--sm_90";

/// A sparse file of `len` bytes, with a few non-zero bytes (from `seed`) at its start,
/// middle and end so a misplaced copy is seen.
fn sparse(dir: &Path, name: &str, len: u64, seed: u8) -> String {
    let path = dir.join(name);
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(len).unwrap();
    for at in [0, len / 2, len.saturating_sub(3)] {
        if len >= 3 {
            f.write_all_at(&[seed, seed ^ 0x5a, seed.wrapping_add(1)], at)
                .unwrap();
        }
    }
    path.to_str().unwrap().to_owned()
}

/// Do two files hold the same bytes? Compared 1 MiB at a time, never whole.
fn same_bytes(a: &str, b: &str) -> bool {
    let (mut fa, mut fb) = (
        std::fs::File::open(a).unwrap(),
        std::fs::File::open(b).unwrap(),
    );
    if fa.metadata().unwrap().len() != fb.metadata().unwrap().len() {
        return false;
    }
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = fa.read(&mut ba).unwrap();
        if n == 0 {
            return true;
        }
        fb.read_exact(&mut bb[..n]).unwrap();
        if ba[..n] != bb[..n] {
            return false;
        }
    }
}

/// Run `cmd` under GNU time and return its peak RSS in KiB (`VmHWM` at exit, as
/// `wait4` reports it), failing the test if the command fails.
fn peak_kib(dir: &Path, cmd: &mut Command) -> u64 {
    let time = Path::new("/usr/bin/time");
    assert!(
        time.exists(),
        "/usr/bin/time is missing: `apt-get install -y time`"
    );
    let report = dir.join("time.txt");
    let mut timed = Command::new(time);
    timed
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&report)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    run_ok(&mut timed);
    let text = std::fs::read_to_string(&report).unwrap();
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("GNU time wrote {text:?}, not a size in KiB"))
}

fn bundle_cmd(
    tool: &Path,
    ours_cmd: bool,
    ty: &str,
    ins: &[&str],
    out: &str,
    align: u64,
) -> Command {
    let mut c = Command::new(tool);
    if ours_cmd {
        c.arg("bundle");
    }
    c.arg(format!("-type={ty}"))
        .arg(format!("-targets={TARGETS}"))
        .args(ins.iter().map(|i| format!("-input={i}")))
        .arg(format!("-output={out}"))
        .arg(format!("-bundle-align={align}"));
    c
}

fn unbundle_cmd(tool: &Path, ours_cmd: bool, ty: &str, input: &str, outs: &[&str]) -> Command {
    let mut c = Command::new(tool);
    c.arg(if ours_cmd { "unbundle" } else { "-unbundle" })
        .arg(format!("-type={ty}"))
        .arg(format!("-targets={TARGETS}"))
        .arg(format!("-input={input}"))
        .args(outs.iter().map(|o| format!("-output={o}")));
    c
}

/// 1 GiB in (two 512 MiB images): bundling, listing and unbundling stay under 64 MiB
/// of peak RSS, for a binary and a text type, and the bundle unbundles back to the
/// inputs.
#[test]
fn peak_memory_stays_under_64_mib() {
    const LIMIT_KIB: u64 = 64 << 10;
    let dir = scratch("stream_peak");
    let host = sparse(&dir, "host", 512 << 20, 1);
    let dev = sparse(&dir, "dev", 512 << 20, 2);
    for ty in ["bc", "ll"] {
        let bundled = dir.join("bundle").to_str().unwrap().to_owned();
        let peak = peak_kib(
            &dir,
            &mut bundle_cmd(&ours(), true, ty, &[&host, &dev], &bundled, 1),
        );
        assert!(peak < LIMIT_KIB, "{ty}: bundle peak RSS {peak} KiB");
        let list = || {
            let mut c = Command::new(ours());
            c.args(["list", &format!("-type={ty}"), &format!("-input={bundled}")]);
            c
        };
        let peak = peak_kib(&dir, &mut list());
        assert!(peak < LIMIT_KIB, "{ty}: list peak RSS {peak} KiB");
        let listed = run_ok(&mut list()).stdout;
        assert_eq!(
            String::from_utf8_lossy(&listed).lines().count(),
            2,
            "{ty}: {listed:?}"
        );
        let outs = [
            dir.join("host.out").to_str().unwrap().to_owned(),
            dir.join("dev.out").to_str().unwrap().to_owned(),
        ];
        let peak = peak_kib(
            &dir,
            &mut unbundle_cmd(&ours(), true, ty, &bundled, &[&outs[0], &outs[1]]),
        );
        assert!(peak < LIMIT_KIB, "{ty}: unbundle peak RSS {peak} KiB");
        assert!(same_bytes(&outs[0], &host), "{ty}: host image differs");
        assert!(same_bytes(&outs[1], &dev), "{ty}: device image differs");
        for f in [&bundled, &outs[0], &outs[1]] {
            std::fs::remove_file(f).unwrap();
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Byte-identical to clang-offload-bundler 22, bundling and unbundling, at 0 and 1 byte
/// and on either side of the sizes where something changes: the 4 KiB zero buffer that
/// pads, the 8 KiB buffers of `std::io::copy`'s fallback and of the entry-table reader,
/// and a 4096-byte alignment.
#[test]
fn byte_identical_at_buffer_boundaries() {
    let dir = scratch("stream_boundaries");
    let sizes: [u64; 10] = [0, 1, 4095, 4096, 4097, 8191, 8192, 8193, 65537, 1 << 20];
    let mut compared = 0;
    for (i, &size) in sizes.iter().enumerate() {
        let other = sizes[(i + 3) % sizes.len()];
        let host = file(&dir, "host", &bytes(size, size as usize));
        let dev = file(&dir, "dev", &bytes(other + 7, other as usize));
        for ty in ["bc", "o", "ll"] {
            for align in [1, 4096] {
                let case = format!("type {ty} sizes {size}/{other} align {align}");
                let theirs = dir.join("theirs").to_str().unwrap().to_owned();
                let mine = dir.join("ours").to_str().unwrap().to_owned();
                run_ok(&mut bundle_cmd(
                    &bundler(),
                    false,
                    ty,
                    &[&host, &dev],
                    &theirs,
                    align,
                ));
                run_ok(&mut bundle_cmd(
                    &ours(),
                    true,
                    ty,
                    &[&host, &dev],
                    &mine,
                    align,
                ));
                assert!(same_bytes(&theirs, &mine), "bundle: {case}");
                let mut outs = Vec::new();
                for (who, tool) in [("t", bundler()), ("o", ours())] {
                    let names = [format!("{who}_host"), format!("{who}_dev")];
                    let paths: Vec<String> = names
                        .iter()
                        .map(|n| dir.join(n).to_str().unwrap().to_owned())
                        .collect();
                    run_ok(&mut unbundle_cmd(
                        &tool,
                        who == "o",
                        ty,
                        &theirs,
                        &[&paths[0], &paths[1]],
                    ));
                    outs.push(paths);
                }
                assert!(
                    same_bytes(&outs[0][0], &outs[1][0]),
                    "unbundle host: {case}"
                );
                assert!(
                    same_bytes(&outs[0][1], &outs[1][1]),
                    "unbundle device: {case}"
                );
                assert!(same_bytes(&outs[1][0], &host), "host round trip: {case}");
                compared += 1;
            }
        }
    }
    assert_eq!(compared, sizes.len() * 3 * 2);
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A failed run leaves the outputs as they were and no temporary file beside them; a
/// successful one replaces an existing output and keeps its mode, and writes through a
/// symbolic link.
#[test]
fn failures_leave_outputs_untouched() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("stream_atomic");
    let host = file(&dir, "host", &bytes(1, 5000));
    let dev = file(&dir, "dev", &bytes(2, 3000));
    let good = dir.join("good.bc").to_str().unwrap().to_owned();
    run_ok(&mut bundle_cmd(
        &bundler(),
        false,
        "bc",
        &[&host, &dev],
        &good,
        1,
    ));
    let good_bytes = std::fs::read(&good).unwrap();
    let truncated = file(&dir, "truncated.bc", &good_bytes[..good_bytes.len() - 1]);
    // A compressed bundle with one payload byte changed: decompressed, its MD5 no
    // longer matches the header (or zstd finds the frame corrupt first).
    let compressed = dir.join("compressed.bc").to_str().unwrap().to_owned();
    let mut c = bundle_cmd(&ours(), true, "bc", &[&host, &dev], &compressed, 1);
    run_ok(c.arg("-compress"));
    let mut corrupt_bytes = std::fs::read(&compressed).unwrap();
    std::fs::remove_file(&compressed).unwrap();
    let middle = corrupt_bytes.len() / 2;
    corrupt_bytes[middle] ^= 0x40;
    let corrupt = file(&dir, "corrupt.bc", &corrupt_bytes);
    let outs = [file(&dir, "out0", b"old 0"), file(&dir, "out1", b"old 1")];
    let not_a_file = dir.join("subdir");
    std::fs::create_dir(&not_a_file).unwrap();
    let not_a_file = not_a_file.to_str().unwrap().to_owned();
    let before = listing(&dir);
    // (what, theirs when it fails cleanly, ours). On a truncated bundle
    // clang-offload-bundler 22 crashes (SIGSEGV), and it does not check a compressed
    // bundle's hash (it unbundles the changed bytes, exit status 0), so there only ours
    // is held to exit status 1.
    let cases: Vec<(&str, Option<Command>, Command)> = vec![
        (
            "unbundle a truncated bundle",
            None,
            unbundle_cmd(&ours(), true, "bc", &truncated, &[&outs[0], &outs[1]]),
        ),
        (
            "unbundle a compressed bundle with a changed byte",
            None,
            unbundle_cmd(&ours(), true, "bc", &corrupt, &[&outs[0], &outs[1]]),
        ),
        (
            "bundle a folder",
            Some(bundle_cmd(
                &bundler(),
                false,
                "bc",
                &[&host, &not_a_file],
                &outs[0],
                1,
            )),
            bundle_cmd(&ours(), true, "bc", &[&host, &not_a_file], &outs[0], 1),
        ),
    ];
    for (what, theirs, mut mine) in cases {
        let theirs = theirs.map(|mut c| run(&mut c));
        // Theirs may have written: put the old contents back before running ours.
        for (i, o) in outs.iter().enumerate() {
            std::fs::write(o, format!("old {i}")).unwrap();
        }
        let mine = run(&mut mine);
        assert_eq!(mine.status.code(), Some(1), "{what}");
        if let Some(theirs) = theirs {
            assert_eq!(mine.status.code(), theirs.status.code(), "{what}");
            assert_eq!(error_text(&mine), error_text(&theirs), "{what}");
        }
        for (i, o) in outs.iter().enumerate() {
            assert_eq!(
                std::fs::read(o).unwrap(),
                format!("old {i}").as_bytes(),
                "{what}"
            );
        }
        assert_eq!(listing(&dir), before, "{what}: files left behind");
    }
    // An output that is a symbolic link is written through it, as the bundler does.
    let link = dir.join("link").to_str().unwrap().to_owned();
    std::os::unix::fs::symlink("out1", &link).unwrap();
    run_ok(&mut bundle_cmd(
        &ours(),
        true,
        "bc",
        &[&host, &dev],
        &link,
        1,
    ));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&outs[1]).unwrap(), good_bytes);
    std::fs::remove_file(&link).unwrap();
    std::fs::set_permissions(&outs[0], std::fs::Permissions::from_mode(0o600)).unwrap();
    run_ok(&mut bundle_cmd(
        &ours(),
        true,
        "bc",
        &[&host, &dev],
        &outs[0],
        1,
    ));
    assert_eq!(std::fs::read(&outs[0]).unwrap(), good_bytes);
    let mode = std::fs::metadata(&outs[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(listing(&dir), before);
}

/// Above 4 GiB (offsets past 32 bits, several 1 GiB `copy_file_range` chunks): a
/// 4 GiB + 1 byte sparse host image and a small device image after it. Bundling it with
/// clang-offload-bundler-22 would take about three times the input in memory, so this
/// checks that clang-offload-bundler-22 reads our bundle: it lists the same IDs and
/// unbundles the device image past 4 GiB to the same bytes as ours; the host range of
/// the bundle equals the input, compared 1 MiB at a time. It writes a 4 GiB bundle
/// (removed at the end).
#[test]
fn above_4_gib() {
    let dir = scratch("stream_4gib");
    let host_len = (4u64 << 30) + 1;
    let host = sparse(&dir, "host", host_len, 3);
    let dev = file(&dir, "dev", &bytes(4, 4097));
    let bundled = dir.join("bundle").to_str().unwrap().to_owned();
    run_ok(&mut bundle_cmd(
        &ours(),
        true,
        "bc",
        &[&host, &dev],
        &bundled,
        1,
    ));
    let f = std::fs::File::open(&bundled).unwrap();
    let table = offload_formats::bundle::read_entry_table(
        &mut std::io::BufReader::new(&f),
        f.metadata().unwrap().len(),
    )
    .unwrap()
    .unwrap();
    assert_eq!(table.len(), 2);
    assert_eq!(table[0].size, host_len);
    assert!(table[1].offset > u32::MAX as u64, "{table:?}");
    // The host range, streamed against the input.
    let (mut a, mut b) = (std::fs::File::open(&host).unwrap(), f.try_clone().unwrap());
    std::io::Seek::seek(&mut b, std::io::SeekFrom::Start(table[0].offset)).unwrap();
    let mut b = b.take(host_len);
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut left = host_len;
    while left > 0 {
        let n = (left as usize).min(ba.len());
        a.read_exact(&mut ba[..n]).unwrap();
        b.read_exact(&mut bb[..n]).unwrap();
        assert!(
            ba[..n] == bb[..n],
            "host range differs before byte {}",
            host_len - left + n as u64
        );
        left -= n as u64;
    }
    let list = |tool: &Path, ours_cmd: bool| {
        let mut c = Command::new(tool);
        c.arg(if ours_cmd { "list" } else { "-list" })
            .arg("-type=bc")
            .arg(format!("-input={bundled}"));
        run_ok(&mut c).stdout
    };
    assert_eq!(list(&ours(), true), list(&bundler(), false));
    let device_only = |tool: &Path, ours_cmd: bool, out: &str| {
        let mut c = Command::new(tool);
        c.arg(if ours_cmd { "unbundle" } else { "-unbundle" })
            .arg("-type=bc")
            .arg("-targets=openmp-nvptx64-nvidia-cuda--sm_90")
            .arg(format!("-input={bundled}"))
            .arg(format!("-output={out}"));
        run_ok(&mut c);
    };
    let (theirs, mine) = (
        dir.join("dev.theirs").to_str().unwrap().to_owned(),
        dir.join("dev.ours").to_str().unwrap().to_owned(),
    );
    device_only(&bundler(), false, &theirs);
    device_only(&ours(), true, &mine);
    assert!(
        same_bytes(&theirs, &dev),
        "clang-offload-bundler-22's device image"
    );
    assert!(same_bytes(&mine, &dev), "our device image");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `-compress`ed, at the sizes where zstd or our buffers change (0, 1, a zstd block of
/// 128 KiB, the 1 MiB copy buffer): our streamed bundle is clang-offload-bundler-22's
/// byte for byte (v3 and v2 headers). Above zstd's 128 MiB window a streamed frame may
/// differ from the bundler's one-shot frame (zstd_library's doc says why): there ours
/// must unbundle back to the inputs with the bundler, and with
/// `OFFLOAD_INSPECT_EXACT_COMPRESSION=1` be its bytes. Unbundling and listing the
/// bundler's bundle give the inputs and its listing.
#[test]
fn compressed_byte_identical_to_the_bundler() {
    let dir = scratch("stream_compressed");
    let block = 128 << 10;
    let sizes: [u64; 8] = [
        0,
        1,
        block - 1,
        block,
        block + 1,
        (1 << 20) - 1,
        1 << 20,
        1 << 20 | 1,
    ];
    let mut cases: Vec<(u64, u64)> = sizes.iter().map(|&s| (s, s / 3 + 5)).collect();
    // Past the window: a repeated 1 MiB pattern, so long-distance matching has work.
    cases.push((150 << 20, 3 << 20));
    for (host_len, dev_len) in cases {
        let pattern = bytes(host_len, (host_len as usize).min(1 << 20));
        let host_bytes: Vec<u8> = pattern
            .iter()
            .cycle()
            .take(host_len as usize)
            .copied()
            .collect();
        let host = file(&dir, "host", &host_bytes);
        let dev = file(&dir, "dev", &bytes(dev_len, dev_len as usize));
        for version in ["3", "2"] {
            if version == "2" && host_len > 2 << 20 {
                continue;
            }
            let case = format!("sizes {host_len}/{dev_len}, v{version}");
            let theirs = dir.join("theirs").to_str().unwrap().to_owned();
            let mine = dir.join("ours").to_str().unwrap().to_owned();
            let outs = [
                dir.join("h").to_str().unwrap().to_owned(),
                dir.join("d").to_str().unwrap().to_owned(),
            ];
            let past_window = host_len + dev_len > STREAMED_EQUALS_ONE_SHOT;
            for exact in [false, true] {
                if exact && !past_window {
                    continue;
                }
                for (tool, ours_cmd, out) in [(bundler(), false, &theirs), (ours(), true, &mine)] {
                    let mut c = bundle_cmd(&tool, ours_cmd, "bc", &[&host, &dev], out, 1);
                    c.arg("-compress")
                        .env("COMPRESSED_BUNDLE_FORMAT_VERSION", version)
                        .env(
                            "OFFLOAD_INSPECT_EXACT_COMPRESSION",
                            if exact { "1" } else { "0" },
                        );
                    run_ok(&mut c);
                }
                if past_window && !exact {
                    run_ok(&mut unbundle_cmd(
                        &bundler(),
                        false,
                        "bc",
                        &mine,
                        &[&outs[0], &outs[1]],
                    ));
                    assert!(same_bytes(&outs[0], &host), "theirs unbundles ours: {case}");
                    assert!(same_bytes(&outs[1], &dev), "theirs unbundles ours: {case}");
                } else {
                    assert!(same_bytes(&theirs, &mine), "bundle: {case}, exact {exact}");
                }
            }
            run_ok(&mut unbundle_cmd(
                &ours(),
                true,
                "bc",
                &theirs,
                &[&outs[0], &outs[1]],
            ));
            assert!(same_bytes(&outs[0], &host), "unbundle host: {case}");
            assert!(same_bytes(&outs[1], &dev), "unbundle device: {case}");
            let list = |tool: &Path, ours_cmd: bool| {
                let mut c = Command::new(tool);
                c.arg(if ours_cmd { "list" } else { "-list" })
                    .arg("-type=bc")
                    .arg(format!("-input={theirs}"));
                run_ok(&mut c).stdout
            };
            assert_eq!(list(&ours(), true), list(&bundler(), false), "list: {case}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `-compress` on 1 GiB in (two 512 MiB images): bundling, listing and unbundling hold
/// zstd's window, not the input. The 64 MiB of plain bundles cannot hold here: for
/// clang-offload-bundler's bytes the compressor needs the 128 MiB window that
/// long-distance matching sets (window log 27), and the decompressor the same window.
#[test]
fn compressed_peak_memory_is_the_zstd_window() {
    const LIMIT_KIB: u64 = 160 << 10;
    let dir = scratch("stream_compressed_peak");
    let host = sparse(&dir, "host", 512 << 20, 5);
    let dev = sparse(&dir, "dev", 512 << 20, 6);
    let bundled = dir.join("bundle").to_str().unwrap().to_owned();
    let mut bundle = bundle_cmd(&ours(), true, "bc", &[&host, &dev], &bundled, 1);
    bundle.arg("-compress");
    let peak = peak_kib(&dir, &mut bundle);
    assert!(peak < LIMIT_KIB, "bundle peak RSS {peak} KiB");
    let mut list = Command::new(ours());
    list.args(["list", "-type=bc", &format!("-input={bundled}")]);
    let peak = peak_kib(&dir, &mut list);
    assert!(peak < LIMIT_KIB, "list peak RSS {peak} KiB");
    let outs = [
        dir.join("host.out").to_str().unwrap().to_owned(),
        dir.join("dev.out").to_str().unwrap().to_owned(),
    ];
    let peak = peak_kib(
        &dir,
        &mut unbundle_cmd(&ours(), true, "bc", &bundled, &[&outs[0], &outs[1]]),
    );
    assert!(peak < LIMIT_KIB, "unbundle peak RSS {peak} KiB");
    assert!(same_bytes(&outs[0], &host), "host image differs");
    assert!(same_bytes(&outs[1], &dev), "device image differs");
    std::fs::remove_dir_all(&dir).unwrap();
}
