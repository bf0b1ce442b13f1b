//! `cargo xtask fuzz`: bounded cargo-fuzz runs of every parser target in `fuzz/`, each
//! seeded with a corpus made by the real LLVM 22 tools (bundles plain, text and
//! compressed, OffloadBinaries, clang host objects with offload entries), and of the
//! plugin's image loading: validation of mutated clang-16 / clang-22 device images,
//! entries -> fptr table, and `load_binary` on the host backend (real dlopen) with
//! fuzzed entries against a real clang-16 device image.

use crate::util::{llvm16, llvm22, read, root, section, target_dir, which};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use xshell::{cmd, Cmd, Shell};

/// The fuzz targets of `fuzz/Cargo.toml`: one per parser, then the plugin's image loading.
pub const TARGETS: &[&str] = &[
    "bundle",
    "compressed_bundle",
    "offload_binary",
    "host_entries",
    "find_images",
    "target_id",
    "image_inspect",
    "fptr_table",
    "load_binary",
];

/// The environment variable naming the device image the `load_binary` target loads.
const LOAD_IMAGE_VAR: &str = "OMPTARGET_RS_FUZZ_IMAGE";

#[derive(clap::Args)]
pub struct Args {
    /// Seconds of fuzzing per target.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Only these targets (default: all).
    #[arg(long = "target")]
    pub targets: Vec<String>,
    /// Mutated images the dlopen sweep (run with `load_binary`) loads, each in a child.
    #[arg(long, default_value_t = SWEEP_IMAGES)]
    pub sweep_images: u64,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            seconds: 20,
            targets: Vec::new(),
            sweep_images: SWEEP_IMAGES,
        }
    }
}

/// What one bounded run did.
pub struct FuzzResult {
    pub target: String,
    pub execs: u64,
    pub seconds: u64,
    pub corpus_files: usize,
}

pub fn main(args: Args) -> Result<()> {
    run_with(args.seconds, &args.targets, args.sweep_images)?;
    Ok(())
}

/// Run every target (or those in `only`) for `seconds` each; fails on the first crash,
/// naming the reproducer libFuzzer wrote.
pub fn run_all(seconds: u64, only: &[String]) -> Result<Vec<FuzzResult>> {
    run_with(seconds, only, SWEEP_IMAGES)
}

fn run_with(seconds: u64, only: &[String], sweep_images: u64) -> Result<Vec<FuzzResult>> {
    for t in only {
        if !TARGETS.contains(&t.as_str()) {
            bail!("unknown fuzz target `{t}`; targets: {}", TARGETS.join(", "));
        }
    }
    ensure_cargo_fuzz()?;
    let fuzz_dir = root().join("fuzz");
    let build_dir = target_dir().join("fuzz");
    let sh = Shell::new()?;
    sh.change_dir(&fuzz_dir);
    section("fuzz: building targets");
    cargo_fuzz(&sh, &build_dir).args(["build", "-O"]).run()?;
    section("fuzz: seed corpus from the LLVM 22 tools and clang 16");
    let corpus_root = target_dir().join("fuzz-corpus");
    let seeds = make_seeds(&corpus_root.join("seeds"))?;
    let mut results = Vec::new();
    for &target in TARGETS {
        if !only.is_empty() && !only.iter().any(|t| t == target) {
            continue;
        }
        section(&format!("fuzz: {target} for {seconds} s"));
        let corpus = corpus_root.join(target);
        std::fs::create_dir_all(&corpus)?;
        for seed in seeds_for(target, &seeds) {
            let name = seed.file_name().context("seed without a name")?;
            std::fs::copy(&seed, corpus.join(name))?;
        }
        let artifacts = corpus_root.join("artifacts").join(target);
        std::fs::create_dir_all(&artifacts)?;
        let out = cargo_fuzz(&sh, &build_dir)
            .args(["run", "-O", target])
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg("-rss_limit_mb=2048")
            .arg("-max_len=1048576")
            .arg("-timeout=10")
            .arg("-print_final_stats=1")
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .env(LOAD_IMAGE_VAR, &seeds.load_image)
            .quiet()
            .ignore_status()
            .output()
            .context("could not run cargo fuzz")?;
        let log = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!(
                "fuzz target `{target}` failed ({}); reproducer under {}:\n{}",
                out.status,
                artifacts.display(),
                tail.join("\n")
            );
        }
        let execs = final_stat(&log, "stat::number_of_executed_units")
            .with_context(|| format!("no final stats from libFuzzer for `{target}`:\n{log}"))?;
        let corpus_files = std::fs::read_dir(&corpus)?.count();
        eprintln!("{target}: {execs} executions in {seconds} s, corpus {corpus_files} files");
        results.push(FuzzResult {
            target: target.to_owned(),
            execs,
            seconds,
            corpus_files,
        });
    }
    if only.is_empty() || only.iter().any(|t| t == "load_binary") {
        let binary = build_dir.join("x86_64-unknown-linux-gnu/release/load_binary");
        let dir = corpus_root.join("dlopen-sweep");
        dlopen_sweep(&binary, &seeds.load_image, &dir, sweep_images)?;
    }
    section("fuzz: summary");
    for r in &results {
        eprintln!(
            "{:<20} {:>12} execs {:>10} execs/s  corpus {}",
            r.target,
            r.execs,
            r.execs / r.seconds.max(1),
            r.corpus_files
        );
    }
    Ok(results)
}

/// `cargo +nightly fuzz` in `sh`'s folder (fuzz/), building into `build_dir`.
fn cargo_fuzz<'a>(sh: &'a Shell, build_dir: &Path) -> Cmd<'a> {
    cmd!(sh, "cargo +nightly fuzz").env("CARGO_TARGET_DIR", build_dir)
}

/// cargo-fuzz needs a nightly toolchain and the cargo-fuzz subcommand; install the
/// subcommand from the registry when it is missing.
fn ensure_cargo_fuzz() -> Result<()> {
    let sh = Shell::new()?;
    let succeeds = |cmd: Cmd<'_>| cmd.quiet().ignore_stdout().ignore_stderr().run().is_ok();
    if !succeeds(cmd!(sh, "cargo +nightly --version")) {
        eprintln!("no nightly toolchain: trying `rustup toolchain install nightly`");
        cmd!(sh, "rustup toolchain install nightly --profile minimal")
            .run()
            .context("cargo-fuzz needs a nightly Rust toolchain")?;
    }
    if !succeeds(cmd!(sh, "cargo +nightly fuzz --version")) {
        section("fuzz: installing cargo-fuzz");
        cmd!(sh, "cargo install --locked cargo-fuzz").run()?;
    }
    if which("c++").is_none() {
        crate::util::ensure_debian_packages(&["g++"])?;
    }
    Ok(())
}

/// The last value of a libFuzzer final-stats line such as
/// `stat::number_of_executed_units: 123456`.
fn final_stat(log: &str, name: &str) -> Option<u64> {
    log.lines().rev().find_map(|l| {
        l.strip_prefix(name)?
            .trim_start_matches(':')
            .trim()
            .parse()
            .ok()
    })
}

/// Seed files grouped by what they are.
struct Seeds {
    bundles: Vec<PathBuf>,
    text_bundles: Vec<PathBuf>,
    compressed: Vec<PathBuf>,
    offload_binaries: Vec<PathBuf>,
    elf: Vec<PathBuf>,
    ids: Vec<PathBuf>,
    /// x86-64 device images (ET_DYN): clang-16 and clang-22 shared objects, and the one
    /// clang-16 embeds in an offload program.
    shared_objects: Vec<PathBuf>,
    /// Encoded entry lists for the structured targets (fptr_table, load_binary).
    entry_bytes: Vec<PathBuf>,
    /// The real clang-16 image (device_image.c + device-rtl) `load_binary` loads.
    load_image: PathBuf,
}

fn seeds_for(target: &str, s: &Seeds) -> Vec<PathBuf> {
    let all = |groups: &[&Vec<PathBuf>]| groups.iter().flat_map(|g| g.iter().cloned()).collect();
    match target {
        "bundle" => all(&[&s.bundles, &s.text_bundles]),
        "compressed_bundle" => all(&[&s.compressed]),
        "offload_binary" => all(&[&s.offload_binaries]),
        "host_entries" => all(&[&s.elf]),
        "find_images" => all(&[&s.bundles, &s.compressed, &s.offload_binaries, &s.elf]),
        "target_id" => all(&[&s.ids]),
        "image_inspect" => all(&[&s.shared_objects, &s.elf]),
        "fptr_table" | "load_binary" => all(&[&s.entry_bytes]),
        _ => Vec::new(),
    }
}

/// Make the seed corpus with the real tools: clang-offload-bundler 22 (binary, text,
/// compressed v2 and v3), llvm-offload-binary 22, and clang-22 / clang-16 host objects
/// with offload entries (LLVM 20+ and legacy layouts).
fn make_seeds(dir: &Path) -> Result<Seeds> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let p = |name: &str| dir.join(name);
    // Small, distinct code objects: the fuzzer mutates structure, not payload.
    let inputs: Vec<PathBuf> = (0..3)
        .map(|i| {
            let path = p(&format!("code{i}.bin"));
            let data: Vec<u8> = (0..(24 + 40 * i)).map(|b| (b * 7 + i) as u8).collect();
            std::fs::write(&path, data).map(|_| path)
        })
        .collect::<std::io::Result<_>>()?;
    let bundler = llvm22("clang-offload-bundler")?;
    let targets = "-targets=host-x86_64-unknown-linux-gnu,openmp-nvptx64-nvidia-cuda--sm_90,hip-amdgcn-amd-amdhsa--gfx90a:xnack+";
    let input_args: &Vec<String> = &inputs
        .iter()
        .map(|i| format!("-input={}", i.display()))
        .collect();
    let sh = Shell::new()?;
    let bundle = |ty: &str, out: &Path, version: Option<&str>| -> Result<()> {
        let c = cmd!(
            sh,
            "{bundler} -type={ty} {targets} {input_args...} -output={out}"
        );
        match version {
            Some(v) => c
                .arg("-compress")
                .env("COMPRESSED_BUNDLE_FORMAT_VERSION", v)
                .run()?,
            None => c.run()?,
        }
        Ok(())
    };
    let mut s = Seeds {
        bundles: vec![p("bundle.bc"), p("bundle_aligned.bc")],
        text_bundles: vec![p("bundle.ll"), p("bundle.s")],
        compressed: vec![p("bundle_v2.ccob"), p("bundle_v3.ccob")],
        offload_binaries: vec![p("images.offload")],
        elf: vec![p("host22.o"), p("host16.o")],
        ids: Vec::new(),
        shared_objects: Vec::new(),
        entry_bytes: Vec::new(),
        load_image: p("device16_rtl.so"),
    };
    bundle("bc", &s.bundles[0], None)?;
    let aligned = &s.bundles[1];
    cmd!(
        sh,
        "{bundler} -type=bc {targets} -bundle-align=64 {input_args...} -output={aligned}"
    )
    .run()?;
    bundle("ll", &s.text_bundles[0], None)?;
    bundle("s", &s.text_bundles[1], None)?;
    bundle("bc", &s.compressed[0], Some("2"))?;
    bundle("bc", &s.compressed[1], Some("3"))?;
    let offload_binary = llvm22("llvm-offload-binary")?;
    let (images, nvptx, amdgcn) = (&s.offload_binaries[0], &inputs[1], &inputs[2]);
    cmd!(
        sh,
        "{offload_binary} -o {images} --image=file={nvptx},triple=nvptx64-nvidia-cuda,arch=sm_90,kind=openmp --image=file={amdgcn},triple=amdgcn-amd-amdhsa,arch=gfx90a:xnack+,kind=hip"
    )
    .run()?;
    let program = root().join("offload-formats/tests/data/indirect.c");
    let (clang22, host22, host16) = (llvm22("clang")?, &s.elf[0], &s.elf[1]);
    cmd!(
        sh,
        "{clang22} -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -c {program} -o {host22}"
    )
    .run()?;
    // clang-16 has no `declare target indirect`: compile a copy without it.
    let legacy_src = p("legacy.c");
    let text = std::fs::read_to_string(&program)?.replace(
        "#pragma omp begin declare target indirect",
        "#pragma omp begin declare target",
    );
    std::fs::write(&legacy_src, text)?;
    let clang16 = llvm16("clang")?;
    let _ = read(cmd!(sh, "{clang16} --version"))?;
    cmd!(
        sh,
        "{clang16} -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -c {legacy_src} -o {host16}"
    )
    .run()?;
    device_image_seeds(dir, &clang16, &legacy_src, &mut s)?;
    for (i, id) in [
        "gfx90a:sramecc+:xnack-|gfx90a:xnack-",
        "fiji:xnack+|gfx803:sramecc-:xnack+",
        "hip-amdgcn-amd-amdhsa--gfx90a:xnack+",
        "openmp-nvptx64-nvidia-cuda--sm_90",
        "host-x86_64-unknown-linux-gnu-",
    ]
    .iter()
    .enumerate()
    {
        let path = p(&format!("id{i}.txt"));
        std::fs::write(&path, id)?;
        s.ids.push(path);
    }
    Ok(s)
}

/// x86-64 device images for `image_inspect` and `load_binary`: the plugin tests' fixture
/// (every kind of offload entry, linked with device-rtl as the tests do) built by
/// clang-16 and clang-22, with and without device-rtl, and the device image clang-16
/// embeds in a real `-fopenmp-targets=x86_64-pc-linux-gnu` program.
fn device_image_seeds(dir: &Path, clang16: &Path, program: &Path, s: &mut Seeds) -> Result<()> {
    let fixture = root().join("tests/fixtures/plugin/device_image.c");
    let rtl = device_build::host_staticlib()?;
    let clang22 = llvm22("clang")?;
    let sh = Shell::new()?;
    for (clang, tag) in [(clang16, "16"), (clang22.as_path(), "22")] {
        for with_rtl in [true, false] {
            let out = dir.join(format!(
                "device{tag}{}.so",
                if with_rtl { "_rtl" } else { "" }
            ));
            let rtl_args: &[&Path] = if with_rtl {
                &[
                    Path::new("-Wl,--undefined=__kmpc_target_translate_fptr"),
                    &rtl,
                ]
            } else {
                &[]
            };
            cmd!(
                sh,
                "{clang} -O1 -shared -fPIC {fixture} {rtl_args...} -o {out}"
            )
            .run()?;
            s.shared_objects.push(out);
        }
    }
    let exe = dir.join("offload16");
    crate::plugin::compile_offload_program(program, &exe)?;
    let host = std::fs::read(&exe)?;
    let image = embedded_device_image(&host)
        .with_context(|| format!("no embedded x86-64 device image in {}", exe.display()))?;
    let out = dir.join("offload16_device.so");
    std::fs::write(&out, image)?;
    s.shared_objects.push(out);
    // Structured targets decode entries from bytes; a few varied starting points.
    for i in 0..4u8 {
        let out = dir.join(format!("entries{i}.bin"));
        let bytes: Vec<u8> = (0..(64 + 96 * usize::from(i)))
            .map(|b| (b as u8).wrapping_mul(31).wrapping_add(i * 17))
            .collect();
        std::fs::write(&out, bytes)?;
        s.entry_bytes.push(out);
    }
    Ok(())
}

/// The x86-64 device image clang 16's offload wrapper embeds in a host program: the
/// first ELF64 shared object after the host file's own header, cut at the end of its
/// section header table (the last thing a linker writes).
fn embedded_device_image(host: &[u8]) -> Option<&[u8]> {
    const MAGIC: &[u8] = b"\x7fELF\x02\x01\x01";
    let u16_at = |b: &[u8], o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u64_at = |b: &[u8], o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let mut from = 1;
    while let Some(pos) = host
        .get(from..)?
        .windows(MAGIC.len())
        .position(|w| w == MAGIC)
    {
        let start = from + pos;
        let elf = &host[start..];
        if u16_at(elf, 16)? == 3 {
            // ET_DYN: e_shoff + e_shnum * e_shentsize.
            let end = u64_at(elf, 40)?
                .checked_add(u64::from(u16_at(elf, 60)?) * u64::from(u16_at(elf, 58)?))?;
            return elf.get(..usize::try_from(end).ok()?);
        }
        from = start + 1;
    }
    None
}

/// How many mutated images the dlopen sweep loads by default (≈15 s here).
const SWEEP_IMAGES: u64 = 300;

/// Mutated-but-accepted images through the real dlopen, each in its own process: the
/// clang-16 image with 1-4 bytes changed outside its executable segments (changed code is
/// code the user asked to run; changed structure must be caught by our validation). The
/// `load_binary` fuzz binary runs each file once (`OMPTARGET_RS_FUZZ_DLOPEN_MUTATED`):
/// validation, then `Device::load_binary` if accepted. A process that dies is an image our
/// validation let through to a crash: a validator gap, so the sweep fails and keeps it.
fn dlopen_sweep(binary: &Path, image_path: &Path, dir: &Path, images: u64) -> Result<()> {
    section(&format!("fuzz: dlopen sweep of {images} mutated images"));
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let image = std::fs::read(image_path)?;
    let layout =
        ImageLayout::of(&image).context("the sweep image is not an ELF64 with segments")?;
    let (mut rejected, mut loaded, mut failed) = (0, 0, 0);
    let mut crashes = Vec::new();
    let sh = Shell::new()?;
    let mut verdicts = Vec::new();
    for n in 0..images {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15 ^ (n + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
        let mut mutant = image.clone();
        let mut changed = Vec::new();
        for _ in 0..1 + rng.below(4) {
            let Some(at) = layout.pick(&mut rng) else {
                continue;
            };
            let old = mutant[at];
            mutant[at] = match rng.below(4) {
                0 => rng.next() as u8,
                1 => old ^ (1 << rng.below(8)),
                2 => 0,
                _ => 0xff,
            };
            changed.push(at);
        }
        let path = dir.join(format!("mutant{n:03}.so"));
        std::fs::write(&path, &mutant)?;
        let out = cmd!(sh, "{binary} {path}")
            .env("OMPTARGET_RS_FUZZ_DLOPEN_MUTATED", "1")
            // A child that dies inside dlopen leaves its image file: keep it here.
            .env("TMPDIR", dir)
            .env(LOAD_IMAGE_VAR, image_path)
            .quiet()
            .ignore_status()
            .output()
            .with_context(|| format!("could not run {}", binary.display()))?;
        let log = String::from_utf8_lossy(&out.stderr);
        let verdict = log.lines().find_map(|l| l.strip_prefix("sweep: "));
        verdicts.push(format!(
            "mutant{n:03} bytes {changed:x?}: {}",
            verdict.unwrap_or("CRASHED")
        ));
        match (out.status.success(), verdict) {
            (true, Some(v)) if v.starts_with("rejected") => rejected += 1,
            (true, Some("loaded")) => loaded += 1,
            (true, Some(v)) if v.starts_with("load failed") => failed += 1,
            _ => {
                let tail: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains("ERROR") || l.contains("#"))
                    .take(8)
                    .collect();
                crashes.push(format!(
                    "{} (bytes {changed:x?} changed; {}):\n{}",
                    path.display(),
                    out.status,
                    tail.join("\n")
                ));
                continue;
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    let verdict_file = dir.join("verdicts.txt");
    std::fs::write(&verdict_file, verdicts.join("\n") + "\n")?;
    eprintln!("each mutant's verdict: {}", verdict_file.display());
    eprintln!(
        "dlopen sweep: {images} mutated images: {rejected} rejected by validation, \
         {loaded} loaded, {failed} refused by dlopen or entry resolution, {} crashed",
        crashes.len()
    );
    if !crashes.is_empty() {
        bail!(
            "{} accepted images crashed the loader (validator gaps):\n{}",
            crashes.len(),
            crashes.join("\n\n")
        );
    }
    Ok(())
}

/// Where an ELF64 image's bytes lie: its headers, and which file ranges are loaded
/// segments (executable or not).
struct ImageLayout {
    len: usize,
    /// ELF header and program headers.
    headers: std::ops::Range<usize>,
    loaded_data: Vec<std::ops::Range<usize>>,
    code: Vec<std::ops::Range<usize>>,
}

impl ImageLayout {
    fn of(elf: &[u8]) -> Option<Self> {
        let u16_at = |o: usize| Some(u16::from_le_bytes(elf.get(o..o + 2)?.try_into().ok()?));
        let u32_at = |o: usize| Some(u32::from_le_bytes(elf.get(o..o + 4)?.try_into().ok()?));
        let u64_at = |o: usize| Some(u64::from_le_bytes(elf.get(o..o + 8)?.try_into().ok()?));
        let phoff = usize::try_from(u64_at(32)?).ok()?;
        let phnum = usize::from(u16_at(56)?);
        let mut layout = ImageLayout {
            len: elf.len(),
            headers: 0..phoff + phnum * 56,
            loaded_data: Vec::new(),
            code: Vec::new(),
        };
        for i in 0..phnum {
            let ph = phoff + i * 56;
            const PT_LOAD: u32 = 1;
            const PF_X: u32 = 1;
            if u32_at(ph)? != PT_LOAD {
                continue;
            }
            let start = usize::try_from(u64_at(ph + 8)?).ok()?;
            let end = start + usize::try_from(u64_at(ph + 32)?).ok()?;
            if u32_at(ph + 4)? & PF_X != 0 {
                layout.code.push(start..end);
            } else {
                layout.loaded_data.push(start..end);
            }
        }
        Some(layout)
    }

    /// A byte to mutate, never one of code: a third in the headers, a third in loaded
    /// data (dynamic section, symbol and hash tables, relocations), a third anywhere.
    fn pick(&self, rng: &mut XorShift) -> Option<usize> {
        for _ in 0..64 {
            let at = match rng.below(3) {
                0 => self.headers.start + rng.below(self.headers.len() as u64) as usize,
                1 if !self.loaded_data.is_empty() => {
                    let r = &self.loaded_data[rng.below(self.loaded_data.len() as u64) as usize];
                    r.start + rng.below(r.len().max(1) as u64) as usize
                }
                _ => rng.below(self.len as u64) as usize,
            };
            if at < self.len && !self.code.iter().any(|c| c.contains(&at)) {
                return Some(at);
            }
        }
        None
    }
}

/// A small deterministic generator: the sweep's mutants are the same on every run.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
