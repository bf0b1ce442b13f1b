//! `cargo xtask build-device`: the device RTL for every target, under target/device/.
//!
//! Contract used by other xtask modules:
//! - `build_all()` builds every device artifact listed in docs/USER_GUIDE.md ("What gets installed") under target/device/.
//! - `host_staticlib()` builds (if needed) and returns
//!   target/device/x86_64-unknown-linux-gnu/libdevice_rtl.a.
//!
//! Files written (see [`outputs`]):
//! - nvptx64-nvidia-cuda/device_rtl.bc, and device_rtl.sm_{70,80,90}.{ptx,cubin}
//!   (PTX from llc-22, assembled by ptxas to prove it is valid),
//! - the same under nvptx64-nvidia-cuda/warp-cooperative/: the variant with the
//!   warp-uniform fast path (`--cfg device_rtl_warp_cooperative`), opt-in until measured
//!   on a GPU,
//! - amdgcn-amd-amdhsa/{gfx90a,gfx942,gfx1100}/device_rtl.bc,
//! - x86_64-unknown-linux-gnu/libdevice_rtl.a,
//! - beside each GPU bitcode, `device_rtl.llvmN.bc` for every older LLVM N (16, 17, 18)
//!   whose tools the machine has: the same IR, rewritten for that LLVM ([`ir_compat`]).
//!
//! GPU targets need `core` built from source (`-Zbuild-std=core`), so the build picks a
//! toolchain that has the library source: a rustup toolchain with `rust-src`, else
//! Debian's rustc-web + rust-web-src (installed when running as root). Each target gets
//! its own CARGO_TARGET_DIR under target/device-build/, so the host build's fingerprints
//! are never disturbed and each target rebuilds incrementally.
use crate::{ir_compat, util};
use anyhow::{bail, ensure, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};
use xshell::{cmd, Shell};

#[derive(clap::Args, Default)]
pub struct Args {
    /// Rebuild even when every output is newer than its inputs.
    #[arg(long)]
    pub force: bool,
}

pub fn main(args: Args) -> Result<()> {
    build(args.force)
}

pub fn build_all() -> Result<()> {
    build(false)
}

/// Builds (if needed) and returns target/device/x86_64-unknown-linux-gnu/libdevice_rtl.a.
pub fn host_staticlib() -> Result<PathBuf> {
    let target = HOST_TARGET;
    let out = output_of(&target);
    if !is_fresh(std::slice::from_ref(&out))? {
        let toolchain = Toolchain::select()?;
        build_target(&toolchain, &target)?;
    }
    Ok(out)
}

/// The AMD GPUs we build bitcode for (one `core` build each).
pub const AMDGPU_ARCHES: &[&str] = &["gfx90a", "gfx942", "gfx1100"];
/// The NVIDIA GPUs the PTX is assembled for.
pub const NVPTX_ARCHES: &[&str] = &["sm_70", "sm_80", "sm_90"];
/// PTX ISA version used for all of them (covers sm_70..sm_90; ptxas 12+ reads it).
const PTX_FEATURE: &str = "+ptx80";

const NVPTX_TRIPLE: &str = "nvptx64-nvidia-cuda";
const AMDGCN_TRIPLE: &str = "amdgcn-amd-amdhsa";
const HOST_TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// The symbols every artifact must define.
pub const EXPORTED_SYMBOLS: &[&str] = &device_rtl::symbols::EXPORTED;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Artifact {
    Bitcode,
    StaticLib,
}

/// The nvptx64 variant with the warp-uniform fast path: its subdirectory and cfg.
pub const WARP_COOPERATIVE: &str = "warp-cooperative";
const WARP_COOPERATIVE_CFG: &str = "device_rtl_warp_cooperative";

/// One thing `cargo rustc` builds: a triple, maybe a CPU, bitcode or a static library,
/// maybe a variant (a subdirectory of the triple's and a `--cfg`).
#[derive(Clone, Copy)]
struct DeviceTarget {
    triple: &'static str,
    cpu: Option<&'static str>,
    artifact: Artifact,
    variant: Option<(&'static str, &'static str)>,
}

const HOST_TARGET: DeviceTarget = DeviceTarget {
    triple: HOST_TRIPLE,
    cpu: None,
    artifact: Artifact::StaticLib,
    variant: None,
};

impl DeviceTarget {
    fn label(&self) -> String {
        match (self.cpu, self.variant) {
            (_, Some((dir, _))) => format!("{}/{dir}", self.triple),
            (Some(cpu), None) if self.triple == AMDGCN_TRIPLE => format!("{}/{cpu}", self.triple),
            _ => self.triple.to_string(),
        }
    }
}

/// The nvptx64 builds: the default, then the warp-cooperative variant.
fn nvptx_targets() -> [DeviceTarget; 2] {
    let default = DeviceTarget {
        triple: NVPTX_TRIPLE,
        // The oldest GPU we support; clang re-targets the functions when it links them.
        // sm_70 is also the first with the `.sync` warp operations the variant uses.
        cpu: Some("sm_70"),
        artifact: Artifact::Bitcode,
        variant: None,
    };
    let warp_cooperative = DeviceTarget {
        variant: Some((WARP_COOPERATIVE, WARP_COOPERATIVE_CFG)),
        ..default
    };
    [default, warp_cooperative]
}

fn all_targets() -> Vec<DeviceTarget> {
    let mut targets = nvptx_targets().to_vec();
    targets.extend(AMDGPU_ARCHES.iter().map(|&gfx| DeviceTarget {
        triple: AMDGCN_TRIPLE,
        cpu: Some(gfx),
        artifact: Artifact::Bitcode,
        variant: None,
    }));
    targets.push(HOST_TARGET);
    targets
}

/// Names the folder of a device RTL built elsewhere, used instead of target/device/ (a
/// Debian 13 root's install takes the GPU builds of the machine around it, which has the
/// Rust and LLVM 22 they need).
pub const DEVICE_DIR_ENV: &str = "OMPTARGET_RS_DEVICE_DIR";

/// target/device/ (or [`DEVICE_DIR_ENV`]'s folder)
pub fn device_dir() -> PathBuf {
    std::env::var_os(DEVICE_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| util::target_dir().join("device"))
}

/// The file `cargo xtask build-device` delivers for one target.
fn output_of(target: &DeviceTarget) -> PathBuf {
    let dir = device_dir().join(target.label());
    match target.artifact {
        Artifact::Bitcode => dir.join("device_rtl.bc"),
        Artifact::StaticLib => dir.join("libdevice_rtl.a"),
    }
}

/// The default build's PTX and relocatable cubin for one of [`NVPTX_ARCHES`].
pub fn nvptx_outputs_of(sm: &str) -> (PathBuf, PathBuf) {
    nvptx_outputs(&nvptx_targets()[0], sm)
}

/// The PTX and cubin made from one nvptx bitcode for one GPU.
fn nvptx_outputs(target: &DeviceTarget, sm: &str) -> (PathBuf, PathBuf) {
    let dir = device_dir().join(target.label());
    (
        dir.join(format!("device_rtl.{sm}.ptx")),
        dir.join(format!("device_rtl.{sm}.cubin")),
    )
}

/// Every file build-device writes.
pub fn outputs() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = all_targets().iter().map(output_of).collect();
    for target in all_targets()
        .iter()
        .filter(|t| t.artifact == Artifact::Bitcode)
    {
        files.extend(
            older_llvms()
                .into_iter()
                .map(|n| older_output_of(target, n)),
        );
    }
    for target in nvptx_targets() {
        for sm in NVPTX_ARCHES {
            let (ptx, cubin) = nvptx_outputs(&target, sm);
            files.extend([ptx, cubin]);
        }
    }
    files
}

fn build(force: bool) -> Result<()> {
    util::section("build-device");
    let all = outputs();
    if let Some(elsewhere) = std::env::var_os(DEVICE_DIR_ENV) {
        // Never build into a folder another machine's build owns.
        ensure!(
            !force && is_fresh(&all)?,
            "{DEVICE_DIR_ENV} names {}, a device RTL built elsewhere, which lacks an output \
             or is older than device-rtl's sources: rebuild it there",
            Path::new(&elsewhere).display()
        );
    }
    if !force && is_fresh(&all)? {
        eprintln!("device RTL: all outputs are newer than device-rtl's sources, nothing to do");
        list_outputs(&all);
        return Ok(());
    }
    let toolchain = Toolchain::select()?;
    let mut timings = Vec::new();
    for target in all_targets() {
        let start = Instant::now();
        build_target(&toolchain, &target)?;
        timings.push((target.label(), start.elapsed().as_secs_f64()));
    }
    let start = Instant::now();
    assemble_ptx()?;
    timings.push((
        "ptxas sm_70/sm_80/sm_90".into(),
        start.elapsed().as_secs_f64(),
    ));
    eprintln!("device RTL build times:");
    for (label, secs) in timings {
        eprintln!("  {label:<32} {secs:7.1} s");
    }
    list_outputs(&all);
    Ok(())
}

fn list_outputs(files: &[PathBuf]) {
    eprintln!("device RTL outputs:");
    for f in files {
        eprintln!("  {}", f.display());
    }
}

/// A Rust toolchain that can build `core` for the GPU targets.
struct Toolchain {
    description: String,
    cargo: PathBuf,
    rustc: PathBuf,
}

impl Toolchain {
    fn select() -> Result<Toolchain> {
        let toolchain = match Self::rustup_with_rust_src()? {
            Some(t) => t,
            None => Self::debian()?,
        };
        eprintln!(
            "device toolchain: {} (cargo {}, rustc {})",
            toolchain.description,
            toolchain.cargo.display(),
            toolchain.rustc.display()
        );
        Ok(toolchain)
    }

    /// A rustup toolchain whose sysroot holds the library source and which knows the GPU
    /// targets; nightlies first (the usual way to build `core` for a GPU).
    fn rustup_with_rust_src() -> Result<Option<Toolchain>> {
        let Some(rustup) = util::which("rustup").or_else(home_rustup) else {
            return Ok(None);
        };
        let sh = Shell::new()?;
        let Ok(list) = util::read(cmd!(sh, "{rustup} toolchain list")) else {
            return Ok(None);
        };
        let mut names: Vec<String> = list
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect();
        names.sort_by_key(|n| !n.starts_with("nightly"));
        for name in names {
            let which = |tool: &str| {
                util::read(cmd!(sh, "{rustup} which --toolchain {name} {tool}"))
                    .map(|s| PathBuf::from(s.trim()))
            };
            let (Ok(rustc), Ok(cargo)) = (which("rustc"), which("cargo")) else {
                continue;
            };
            if has_library_source(&rustc)? && knows_gpu_targets(&rustc)? {
                return Ok(Some(Toolchain {
                    description: format!("rustup toolchain {name} with rust-src"),
                    cargo,
                    rustc,
                }));
            }
        }
        Ok(None)
    }

    /// Debian's rustc-web / cargo-web / rust-web-src, installed when missing.
    fn debian() -> Result<Toolchain> {
        util::ensure_debian_packages(&["rustc-web", "cargo-web", "rust-web-src"]).context(
            "no Rust toolchain can build `core` for the GPU targets: install a nightly with \
             the rust-src component, or Debian's rustc-web cargo-web rust-web-src",
        )?;
        let rustc = PathBuf::from("/usr/bin/rustc");
        let cargo = PathBuf::from("/usr/bin/cargo");
        ensure!(
            rustc.is_file() && cargo.is_file(),
            "Debian's rustc-web/cargo-web are installed but /usr/bin/rustc or /usr/bin/cargo is missing"
        );
        ensure!(
            has_library_source(&rustc)?,
            "{} has no library source (rust-web-src) in its sysroot",
            rustc.display()
        );
        ensure!(
            knows_gpu_targets(&rustc)?,
            "{} does not list {NVPTX_TRIPLE} and {AMDGCN_TRIPLE}",
            rustc.display()
        );
        let sh = Shell::new()?;
        let version = util::read(cmd!(sh, "{rustc} --version"))?;
        Ok(Toolchain {
            description: format!("Debian rustc-web + rust-web-src, {}", version.trim()),
            cargo,
            rustc,
        })
    }
}

fn home_rustup() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let p = home.join("bin/rustup");
    p.is_file().then_some(p)
}

fn has_library_source(rustc: &Path) -> Result<bool> {
    let sh = Shell::new()?;
    let sysroot = util::read(cmd!(sh, "{rustc} --print sysroot"))?;
    Ok(Path::new(sysroot.trim())
        .join("lib/rustlib/src/rust/library/core/Cargo.toml")
        .is_file())
}

fn knows_gpu_targets(rustc: &Path) -> Result<bool> {
    let sh = Shell::new()?;
    let list = util::read(cmd!(sh, "{rustc} --print target-list"))?;
    Ok([NVPTX_TRIPLE, AMDGCN_TRIPLE]
        .iter()
        .all(|t| list.lines().any(|l| l.trim() == *t)))
}

/// `cargo rustc` for one target with the chosen toolchain, then copy the artifact to
/// target/device/ and check it defines the exported symbols and needs nothing it
/// should not.
fn build_target(toolchain: &Toolchain, target: &DeviceTarget) -> Result<()> {
    util::section(&format!("device-rtl for {}", target.label()));
    let build_dir = util::target_dir()
        .join("device-build")
        .join(target.label().replace('/', "-"));
    // RUSTFLAGS reach `core` too; the cfg and --emit below only device-rtl itself.
    let mut rustflags = Vec::new();
    if let Some(cpu) = target.cpu {
        // amdgcn cannot generate code without a CPU, so `core` gets it too.
        rustflags.push(format!("-Ctarget-cpu={cpu}"));
    }
    if target.artifact == Artifact::StaticLib {
        // The library goes into shared objects (offload device images).
        rustflags.push("-Crelocation-model=pic".into());
    }
    let crate_type: &[&str] = match target.artifact {
        Artifact::StaticLib => &["--crate-type", "staticlib"],
        Artifact::Bitcode => &[],
    };
    let variant_cfg: Vec<&str> = target
        .variant
        .iter()
        .flat_map(|&(_, cfg)| ["--cfg", cfg])
        .collect();
    let emit: &[&str] = match target.artifact {
        Artifact::Bitcode => &["--emit=llvm-bc,link"],
        Artifact::StaticLib => &[],
    };
    let (cargo, triple, panic) = (
        &toolchain.cargo,
        target.triple,
        "profile.release.panic=\"abort\"",
    );
    let sh = Shell::new()?;
    sh.change_dir(util::root());
    // No DWARF in device bitcode: it only gets in the way of the kernels' own.
    let mut cmd = cmd!(
        sh,
        "{cargo} rustc -p device-rtl --release --target {triple} -Zbuild-std=core --config {panic} --config profile.release.debug=false {crate_type...} -- --cfg device_rtl_artifact {variant_cfg...} {emit...}"
    );
    // Only what we set: the calling cargo's (rustup's) settings must not leak in.
    for var in [
        "RUSTUP_TOOLCHAIN",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTDOC",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
    ] {
        cmd = cmd.env_remove(var);
    }
    cmd.env("RUSTC", &toolchain.rustc)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_TARGET_DIR", &build_dir)
        .env("RUSTFLAGS", rustflags.join(" "))
        .run()?;

    let release = build_dir.join(target.triple).join("release");
    let built = match target.artifact {
        Artifact::Bitcode => newest_with_prefix(&release.join("deps"), "device_rtl-", ".bc")?,
        Artifact::StaticLib => release.join("libdevice_rtl.a"),
    };
    let out = output_of(target);
    fs::create_dir_all(out.parent().expect("outputs live in a directory"))?;
    fs::copy(&built, &out)
        .with_context(|| format!("copying {} to {}", built.display(), out.display()))?;
    if target.artifact == Artifact::Bitcode {
        mark_read_only_globals(&out)?;
    }
    check_symbols(&out, target.artifact)?;
    eprintln!("wrote {}", out.display());
    if target.artifact == Artifact::Bitcode {
        for major in older_llvms() {
            let older = older_output_of(target, major);
            ir_compat::to_older_bitcode(
                &out,
                &older,
                ir_compat::OlderLlvm::Here(major),
                target.triple,
            )?;
            eprintln!("wrote {} (LLVM {major})", older.display());
        }
    }
    Ok(())
}

/// The older LLVMs whose tools this machine has (as Debian installs them), for which the GPU
/// bitcode is also written in their own IR ([`ir_compat`]): clang 16 everywhere
/// `cargo xtask test` runs; 17 and 18 inside their Debian 13 roots.
pub fn older_llvms() -> Vec<u32> {
    [16, 17, 18]
        .into_iter()
        .filter(|&n| {
            ["llvm-as", "clang"]
                .iter()
                .all(|t| test_support::tools::find_llvm(n, t).is_ok())
        })
        .collect()
}

/// Every GPU bitcode (as build-device left it) rewritten for LLVM `major`, whose tools
/// are in `root` ([`ir_compat::OlderLlvm::InRoot`]), beside it as `device_rtl.llvmN.bc`:
/// how this machine, which lacks LLVM 17 and 18, makes their bitcode with their own
/// clang's data layout and llvm-as. Rewritten every time (cheap), so never stale.
pub fn write_older_bitcode_in_root(major: u32, root: &Path) -> Result<()> {
    for target in all_targets()
        .iter()
        .filter(|t| t.artifact == Artifact::Bitcode)
    {
        let (bitcode, older) = (output_of(target), older_output_of(target, major));
        ensure!(
            bitcode.is_file(),
            "{} is missing: run `cargo xtask build-device`",
            bitcode.display()
        );
        ir_compat::to_older_bitcode(
            &bitcode,
            &older,
            ir_compat::OlderLlvm::InRoot(major, root),
            target.triple,
        )?;
        eprintln!("wrote {} (LLVM {major}, in its root)", older.display());
    }
    Ok(())
}

/// `device_rtl.llvmN.bc` beside a GPU target's bitcode.
fn older_output_of(target: &DeviceTarget, major: u32) -> PathBuf {
    output_of(target).with_file_name(older_bitcode_name(major))
}

/// The file name of a GPU bitcode rewritten for LLVM `major`.
pub fn older_bitcode_name(major: u32) -> String {
    format!("device_rtl.llvm{major}.bc")
}

/// The globals the plugin writes and device code only reads (device-rtl's lib.rs).
const READ_ONLY_GLOBALS: [&str; 4] = [
    device_rtl::symbols::TABLE,
    device_rtl::symbols::TABLE_SIZE,
    device_rtl::symbols::INDEX,
    device_rtl::symbols::HEAD,
];

/// Mark the plugin-written globals `constant` in GPU bitcode, so that the compiler may
/// load them once per kernel and hoist the loads out of its loops, over indirect calls
/// too (which may write any writable memory). Rust cannot say this itself: an immutable
/// `static`'s reads are folded to its initializer by rustc, so they are `static mut`
/// there. The rule, on the bitcode's text (llvm-dis-22, then llvm-as-22, which checks the
/// result): each of [`READ_ONLY_GLOBALS`] has exactly one definition line, and it must
/// read `@<name> = weak global ...`; it becomes `@<name> = weak constant ...`. Weak keeps
/// the initializer from ever being taken for the value (the plugin writes it before any
/// kernel runs). Anything else about those lines stops the build, naming it.
pub fn mark_read_only_globals(bitcode: &Path) -> Result<()> {
    let sh = Shell::new()?;
    let (dis, asm) = (util::llvm22("llvm-dis")?, util::llvm22("llvm-as")?);
    let text = cmd!(sh, "{dis} {bitcode} -o -").read()?;
    let marked = mark_read_only_text(&text)
        .with_context(|| format!("marking the read-only globals of {}", bitcode.display()))?;
    let tmp = bitcode.with_extension("constant.ll");
    fs::write(&tmp, marked)?;
    cmd!(sh, "{asm} {tmp} -o {bitcode}").run()?;
    fs::remove_file(&tmp)?;
    Ok(())
}

/// One definition line `@<name> = weak [addrspace(N) ]global ...` as `... constant ...`
/// (amdgcn puts its globals in address space 1; nvptx64 names none).
fn mark_definition(name: &str, line: &str) -> Result<String> {
    let shape = || {
        format!(
            "the definition of {name} is not `@{name} = weak [addrspace(N) ]global ...`: {line}"
        )
    };
    let rest = line
        .strip_prefix(&format!("@{name} = weak "))
        .with_context(shape)?;
    let (space, rest) = match rest.strip_prefix("addrspace(") {
        Some(after) => {
            let (n, rest) = after.split_once(") ").with_context(shape)?;
            ensure!(
                n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty(),
                shape()
            );
            (format!("addrspace({n}) "), rest)
        }
        None => (String::new(), rest),
    };
    let rest = rest.strip_prefix("global ").with_context(shape)?;
    Ok(format!("@{name} = weak {space}constant {rest}"))
}

/// [`mark_read_only_globals`]'s rule on the text of a module.
fn mark_read_only_text(text: &str) -> Result<String> {
    let mut out = String::with_capacity(text.len() + 64);
    let mut marked = [0usize; READ_ONLY_GLOBALS.len()];
    for line in text.lines() {
        let which = READ_ONLY_GLOBALS
            .iter()
            .position(|name| line.starts_with(&format!("@{name} = ")));
        match which {
            Some(i) => {
                out.push_str(&mark_definition(READ_ONLY_GLOBALS[i], line)?);
                out.push('\n');
                marked[i] += 1;
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    for (name, count) in READ_ONLY_GLOBALS.iter().zip(marked) {
        ensure!(count == 1, "{name} is defined {count} times, not once");
    }
    Ok(out)
}

/// rustc names the bitcode `device_rtl-<hash>.bc`; take the most recent one.
fn newest_with_prefix(dir: &Path, prefix: &str, suffix: &str) -> Result<PathBuf> {
    let mut best: Option<(SystemTime, PathBuf)> = None;
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with(prefix) && name.ends_with(suffix) {
            let mtime = fs::metadata(&path)?.modified()?;
            if best.as_ref().is_none_or(|(t, _)| mtime > *t) {
                best = Some((mtime, path));
            }
        }
    }
    best.map(|(_, p)| p)
        .with_context(|| format!("no {prefix}*{suffix} in {}", dir.display()))
}

/// Symbols the x86_64 library may leave to the C library.
const LIBC_SYMBOLS: &[&str] = &["memcpy", "memmove", "memset", "memcmp", "bcmp", "strlen"];

/// The artifact defines the three exported symbols; bitcode references nothing
/// outside itself (a leftover call into `core`, e.g. a panic, would be unresolved on
/// the device); the static library needs at most a few libc functions.
fn check_symbols(path: &Path, artifact: Artifact) -> Result<()> {
    let nm = util::llvm22("llvm-nm")?;
    let sh = Shell::new()?;
    let defined = util::read(cmd!(sh, "{nm} --defined-only --format=just-symbols {path}"))?;
    for sym in EXPORTED_SYMBOLS {
        ensure!(
            defined.lines().any(|l| l.trim() == *sym),
            "{} does not define {sym}",
            path.display()
        );
    }
    let undefined = util::read(cmd!(
        sh,
        "{nm} --undefined-only --format=just-symbols {path}"
    ))?;
    let defined: std::collections::HashSet<&str> = defined.lines().map(str::trim).collect();
    let unresolved: Vec<&str> = undefined
        .lines()
        .map(str::trim)
        .filter(|s| !s.is_empty() && !s.ends_with(':') && !defined.contains(s))
        .filter(|s| artifact == Artifact::Bitcode || !LIBC_SYMBOLS.contains(s))
        .collect();
    if !unresolved.is_empty() {
        bail!(
            "{} has unresolved references: {}",
            path.display(),
            unresolved.join(", ")
        );
    }
    Ok(())
}

/// PTX for each NVIDIA GPU from each nvptx bitcode, assembled by ptxas into a
/// relocatable cubin that must define the lookup.
fn assemble_ptx() -> Result<()> {
    for target in nvptx_targets() {
        for sm in NVPTX_ARCHES {
            assemble_one(&target, sm)?;
        }
    }
    Ok(())
}

fn assemble_one(target: &DeviceTarget, sm: &str) -> Result<()> {
    let bc = output_of(target);
    let llc = util::llvm22("llc")?;
    let nm = util::llvm22("llvm-nm")?;
    let ptxas = util::ptxas()?;
    let (ptx, cubin) = nvptx_outputs(target, sm);
    let sh = Shell::new()?;
    cmd!(
        sh,
        "{llc} -O2 -mtriple {NVPTX_TRIPLE} -mcpu {sm} -mattr {PTX_FEATURE} {bc} -o {ptx}"
    )
    .run()?;
    // Its stderr is looked at: a ptxas that cannot target `sm` is retried with CUDA 12's.
    let assemble = |ptxas: &Path| {
        let cmd = cmd!(sh, "{ptxas} --compile-only -arch {sm} {ptx} -o {cubin}");
        eprintln!("$ {cmd}");
        cmd.quiet().ignore_status().output()
    };
    let mut result = assemble(&ptxas)?;
    let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
    if !result.status.success() && stderr.contains("is not defined for option 'gpu-name'") {
        // CUDA 13 dropped sm_70 (Volta); CUDA 12's ptxas still assembles for it.
        eprintln!(
            "{} cannot target {sm}; using CUDA 12's ptxas",
            ptxas.display()
        );
        result = assemble(&cuda12_ptxas()?)?;
    }
    ensure!(
        result.status.success(),
        "ptxas failed for {sm} ({}):\n{}",
        bc.display(),
        String::from_utf8_lossy(&result.stderr)
    );
    let syms = util::read(cmd!(sh, "{nm} --defined-only {cubin}"))?;
    ensure!(
        syms.contains(device_rtl::symbols::LOOKUP),
        "ptxas output {} lacks __kmpc_target_translate_fptr",
        cubin.display()
    );
    Ok(())
}

/// ptxas from CUDA 12 (the PyPI wheel `nvidia-cuda-nvcc-cu12`), for GPUs CUDA 13 no
/// longer supports (sm_70).
fn cuda12_ptxas() -> Result<PathBuf> {
    util::wheel_tool("nvidia-cuda-nvcc-cu12", "cuda_nvcc/bin/ptxas")
}

/// True when every output exists and is newer than every input of the device build:
/// device-rtl's sources and manifest, the workspace manifest and lock file, and this
/// file (a change to how we build must rebuild).
fn is_fresh(outputs: &[PathBuf]) -> Result<bool> {
    let root = util::root();
    let mut inputs = vec![
        root.join("Cargo.toml"),
        root.join("Cargo.lock"),
        root.join("device-rtl/Cargo.toml"),
        root.join("xtask/src/device.rs"),
        root.join("xtask/src/ir_compat.rs"),
    ];
    collect_files(&root.join("device-rtl/src"), &mut inputs)?;
    let mut newest_input = SystemTime::UNIX_EPOCH;
    for input in &inputs {
        if let Ok(meta) = fs::metadata(input) {
            newest_input = newest_input.max(meta.modified()?);
        }
    }
    for output in outputs {
        match fs::metadata(output) {
            Ok(meta) if meta.modified()? > newest_input => {}
            _ => return Ok(false),
        }
    }
    Ok(true)
}

fn collect_files(dir: &Path, into: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(&path, into)?;
        } else {
            into.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod read_only_globals_tests {
    use super::*;

    fn module(definitions: &[&str]) -> String {
        let mut text = String::from("; ModuleID = 'device_rtl'\n");
        for d in definitions {
            text.push_str(d);
            text.push('\n');
        }
        text.push_str("define ptr @__kmpc_target_translate_fptr(ptr %p) {\n  ret ptr %p\n}\n");
        text
    }

    fn weak_global(name: &str, bytes: usize) -> String {
        format!("@{name} = weak global [{bytes} x i8] zeroinitializer, align 8")
    }

    #[test]
    fn each_plugin_written_global_becomes_constant_and_nothing_else_changes() {
        let defs: Vec<String> = READ_ONLY_GLOBALS
            .iter()
            .map(|n| weak_global(n, 8))
            .collect();
        let refs: Vec<&str> = defs.iter().map(String::as_str).collect();
        let text = module(&refs);
        let marked = mark_read_only_text(&text).unwrap();
        for name in READ_ONLY_GLOBALS {
            assert!(
                marked.contains(&format!(
                    "@{name} = weak constant [8 x i8] zeroinitializer, align 8"
                )),
                "{marked}"
            );
        }
        assert_eq!(marked.lines().count(), text.lines().count());
        // amdgcn's globals live in address space 1.
        assert_eq!(
            mark_definition(
                "g",
                "@g = weak addrspace(1) global [8 x i8] zeroinitializer, align 8"
            )
            .unwrap(),
            "@g = weak addrspace(1) constant [8 x i8] zeroinitializer, align 8"
        );
        assert!(mark_definition("g", "@g = weak addrspace(x) global i64 0").is_err());
        assert!(marked.contains("define ptr @__kmpc_target_translate_fptr(ptr %p) {"));
        assert!(!marked.contains("weak global"));
    }

    #[test]
    fn a_definition_of_another_shape_or_a_missing_one_stops_the_build() {
        let mut defs: Vec<String> = READ_ONLY_GLOBALS
            .iter()
            .map(|n| weak_global(n, 8))
            .collect();
        defs[0] = format!("@{} = internal global ptr null", READ_ONLY_GLOBALS[0]);
        let refs: Vec<&str> = defs.iter().map(String::as_str).collect();
        let err = format!("{:#}", mark_read_only_text(&module(&refs)).unwrap_err());
        assert!(
            err.contains(READ_ONLY_GLOBALS[0]) && err.contains("internal global"),
            "{err}"
        );
        let refs: Vec<&str> = defs[1..].iter().map(String::as_str).collect();
        let err = format!("{:#}", mark_read_only_text(&module(&refs)).unwrap_err());
        assert!(err.contains("defined 0 times"), "{err}");
    }
}
