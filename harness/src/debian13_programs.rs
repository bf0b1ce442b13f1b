//! `cargo xtask debian13-programs --llvm N` (and a step of `cargo xtask test`): LLVM 17 or
//! 18 used as a new user of Debian 13 would, in the cached Debian 13 root of that version
//! ([`debian13`]):
//!
//! 1. `cargo xtask install --prefix P --llvm N` runs **inside** the root: the project is
//!    built there, against the root's LLVM N (the compiler plugin for clang N, the plugin
//!    file, the x86_64 device RTL), with this machine's Rust toolchain (its cargo and
//!    rustup homes and the workspace are bind-mounted at their own paths), offline, from
//!    the crates fetched on this machine first ([`crate::root_cargo`]), and a cargo
//!    target folder of the Debian 13 roots, `target/debian13-build/cargo/`, which never
//!    mixes with this machine's builds (and stays cached there between runs). LLVM 17
//!    and 18 share it: the same toolchain builds the same plugin file and dependencies
//!    for both, so the second version compiles only what depends on its LLVM (the
//!    compiler plugin); what is per version (install, programs) lives in
//!    `target/debian13-build/llvmN/`;
//!    then `cargo xtask dist --llvm N` the same way: the packages a Debian 13 user
//!    installs, built there and checked by this machine's lintian;
//! 2. the compiler plugin's own tests (`cargo test -p compiler-plugin --features llvmN`)
//!    run there too, against LLVM N;
//! 3. a clang-N GPU image is built for sm_90 and checked for what the cuda plugin reads
//!    of it ([`debian13_gpu_image`]; not run: no GPU), and the installed GPU device RTL
//!    is checked ([`debian13_gpu_install`]: its LLVM N bitcode, written with the root's
//!    tools before the install, linked by clang-N; a program built through the nvptx64
//!    config);
//! 4. the standard `declare target indirect` programs that `indirect_programs` builds for
//!    GPUs with clang 16 (the same sources: C, C++ virtual calls in two units, OpenMP_VV)
//!    are built with clang-N through P's x86_64 config at -O0 and -O2, and run with
//!    `LD_LIBRARY_PATH=P/lib`: each must print its success line, and the loader's own log
//!    (`LD_DEBUG=libs`) and our load marker must show that our x86_64 plugin from P/lib
//!    ran it, and no LLVM plugin file was loaded. Each program must have exactly one
//!    host entry per indirect function: clang 18 registers the functions marked with a
//!    bare `indirect` itself, and the compiler plugin must not register them again.
//!
//! Needs root (debootstrap, chroot, mount).

use crate::root_cargo::RootCargo;
use crate::{
    debian13, debian13_gpu_image, debian13_gpu_install, debian_root, dist, indirect_programs, util,
};
use anyhow::{bail, ensure, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// The LLVM version: 17 or 18.
    #[arg(long)]
    pub llvm: u32,
}

pub fn main(args: Args) -> Result<()> {
    let report = check(args.llvm)?;
    println!("{}", report.summary());
    Ok(())
}

/// One standard program: its sources (below tests/fixtures), the line a passing run
/// prints on the x86_64 host device, and how it is built and what it prints for the
/// isolated host device.
struct Program {
    name: &'static str,
    sources: &'static [&'static str],
    expect: &'static str,
    isolated: Isolated,
}

/// A program's build and success line for the isolated host device, where (as on a GPU)
/// a host address reaching device code faults.
struct Isolated {
    defines: &'static [&'static str],
    expect: &'static str,
}

/// Both modes run the same build and print the same line.
const SAME_ON_BOTH: Isolated = Isolated {
    defines: &[],
    expect: "",
};

/// On the in-process host device every case runs, `indirect(0)` and typeid included.
const PROGRAMS: &[Program] = &[
    Program {
        name: "indirect_standard_c",
        sources: &["compiler/indirect_standard.c"],
        expect: "indirect cases: 14 ok, 0 wrong",
        // Leaves out the call through a pointer that is not indirect: a host address,
        // which faults where the device has its own address space.
        isolated: Isolated {
            defines: &["-DINDIRECT_GPU"],
            expect: "indirect cases: 13 ok, 0 wrong",
        },
    },
    Program {
        name: "indirect_standard_cxx",
        sources: &["compiler/indirect_standard.cpp"],
        expect: "indirect cases: 6 ok, 0 wrong",
        isolated: SAME_ON_BOTH,
    },
    Program {
        name: "virtual_calls",
        sources: &[
            "virtual/virtual_calls.cpp",
            "virtual/virtual_other_unit.cpp",
        ],
        expect: "virtual cases: 24 ok, 0 wrong",
        isolated: SAME_ON_BOTH,
    },
    Program {
        name: "test_target_declare_indirect",
        sources: &["third_party/openmp_vv/test_target_declare_indirect.c"],
        expect: indirect_programs::OPENMP_VV_EXPECT,
        isolated: SAME_ON_BOTH,
    },
];

/// The two x86_64 host devices a program runs on: in this process, and isolated (its
/// own process, `OMPTARGET_RS_ISOLATED=1`).
#[derive(Clone, Copy)]
enum HostMode {
    InProcess,
    Isolated,
}

impl HostMode {
    const ALL: [HostMode; 2] = [HostMode::InProcess, HostMode::Isolated];

    fn label(self) -> &'static str {
        match self {
            HostMode::InProcess => "in-process",
            HostMode::Isolated => "isolated",
        }
    }

    /// The defines and success line of `program` in this mode.
    fn build_of(self, program: &Program) -> (&'static [&'static str], &'static str) {
        match self {
            HostMode::Isolated if !program.isolated.expect.is_empty() => {
                (program.isolated.defines, program.isolated.expect)
            }
            _ => (&[], program.expect),
        }
    }
}

const OPT_LEVELS: [&str; 2] = ["-O0", "-O2"];

/// What one run found.
pub struct Report {
    pub major: u32,
    /// Seconds the root took to make now (None: cached).
    pub root_secs: Option<f64>,
    /// Seconds `cargo xtask install` took inside the root.
    pub install_secs: f64,
    /// The packages `cargo xtask dist` built inside the root (lintian-checked here).
    pub package: dist::Built,
    /// What the check of a clang-N GPU image found.
    pub gpu_image: String,
    /// What the checks of the installed GPU device RTL found.
    pub gpu_install: [String; 2],
    /// Each program and opt level that passed.
    pub passed: Vec<String>,
    /// Each one that did not, with why.
    pub failed: Vec<String>,
    pub programs_secs: f64,
}

impl Report {
    pub fn summary(&self) -> String {
        let mut text = format!(
            "LLVM {} in Debian 13: root {}, install inside it {:.0} s, programs {:.0} s: \
             {} passed, {} failed",
            self.major,
            match self.root_secs {
                Some(s) => format!("made in {s:.0} s"),
                None => "cached".into(),
            },
            self.install_secs,
            self.programs_secs,
            self.passed.len(),
            self.failed.len()
        );
        text.push_str(&format!("\n  {}", self.gpu_image));
        for line in &self.gpu_install {
            text.push_str(&format!("\n  {line}"));
        }
        for p in &self.passed {
            text.push_str(&format!("\n  ok      {p}"));
        }
        for f in &self.failed {
            text.push_str(&format!("\n  FAILED  {f}"));
        }
        text
    }
}

/// `cargo xtask dist --llvm N` inside the root (as a Debian 13 user builds the
/// packages; of the install just made there, when `from_install` names it), then
/// lintian here on its .deb; returns what it built (below the roots' cargo target
/// folder `cargo_target`).
fn dist_inside(
    sh: &xshell::Shell,
    root: &Path,
    cargo: &RootCargo,
    major: u32,
    cargo_target: &Path,
    from_install: Option<&Path>,
) -> Result<dist::Built> {
    util::section(&format!(
        "LLVM {major} in Debian 13: cargo xtask dist --llvm {major} (inside the root)"
    ));
    let workspace = util::root();
    let llvm_arg = major.to_string();
    let mut args = vec!["xtask", "dist", "--llvm", &llvm_arg, "--skip-lintian"];
    let install_arg = from_install.map(|p| p.display().to_string());
    if let Some(install) = &install_arg {
        args.extend(["--from-install", install.as_str()]);
    }
    let command = cargo.command(
        &workspace,
        cargo_target,
        &[debian13_gpu_install::install_env()],
        &args,
    );
    debian_root::chroot_cmd(sh, root, &as_strs(&command))
        .run()
        .with_context(|| format!("cargo xtask dist --llvm {major} inside {}", root.display()))?;
    let release = dist::Release { major };
    let out = cargo_target.join("dist");
    let built = dist::Built {
        deb: out.join(release.deb_file()),
        tarball: out.join(release.tarball_file()),
    };
    dist::lintian(&built.deb)?;
    Ok(built)
}

/// The step: install inside the root of LLVM `major`, then build and run every program
/// at every opt level. Fails when the install fails or any program does.
pub fn check(major: u32) -> Result<Report> {
    let report = run(major)?;
    eprintln!("{}", report.summary());
    ensure!(
        report.failed.is_empty(),
        "LLVM {major}: {} of {} programs failed",
        report.failed.len(),
        report.failed.len() + report.passed.len()
    );
    CHECKED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(major);
    Ok(report)
}

/// The LLVM versions whose [`check`] passed in this process.
static CHECKED: std::sync::Mutex<std::collections::BTreeSet<u32>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// LLVM `major`'s install in its root, made and checked ([`check`]) unless this process
/// already did: `cargo xtask test`'s LLVM 18 kit step builds through the install its
/// Debian 13 step made and checked, instead of making and checking it again.
pub fn ensure_checked(major: u32) -> Result<()> {
    if CHECKED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&major)
    {
        eprintln!("LLVM {major} in Debian 13: install made and checked earlier in this run");
        return Ok(());
    }
    check(major).map(|_| ())
}

/// The root of LLVM `major` made ready for cargo runs inside it: this machine's
/// toolchain and the workspace bind-mounted, the crates fetched, the LLVM N bitcode of
/// the device RTL written. Unmounted when dropped.
struct Session {
    root: PathBuf,
    root_secs: Option<f64>,
    workspace: PathBuf,
    /// target/debian13-build/llvmN/: this version's install and programs.
    build: PathBuf,
    /// The cargo target folder of every Debian 13 root ([`cargo_target_dir`]).
    cargo_target: PathBuf,
    cargo: RootCargo,
    cuda_path: PathBuf,
    _mounts: debian_root::Mounts,
}

impl Session {
    fn open(major: u32) -> Result<Self> {
        ensure!(
            util::is_root(),
            "building LLVM {major} in a Debian 13 root needs root (debootstrap, chroot, mount)"
        );
        let (root, root_secs) = debian13::root(major)?;
        let workspace = util::root();
        let target = util::target_dir();
        let cargo = RootCargo::prepare()?;
        let (cuda_path, cuda_installation) = debian13_gpu_image::cuda_binds()?;
        let mut binds: Vec<&Path> = vec![&workspace, &cuda_installation];
        binds.extend(cargo.binds());
        if !target.starts_with(&workspace) {
            binds.push(&target);
        }
        let mounts = debian_root::Mounts::new(&root, &binds)?;
        debian13_gpu_install::write_bitcode(major, &root)?;
        Ok(Session {
            root,
            root_secs,
            workspace,
            build: build_dir(major),
            cargo_target: cargo_target_dir(),
            cargo,
            cuda_path,
            _mounts: mounts,
        })
    }
}

/// `cargo xtask dist --llvm N` for a Debian 13 LLVM, from a Debian 12 machine: built in
/// the root of that LLVM, lintian here.
pub fn dist(major: u32) -> Result<dist::Built> {
    let session = Session::open(major)?;
    let sh = xshell::Shell::new()?;
    dist_inside(
        &sh,
        &session.root,
        &session.cargo,
        major,
        &session.cargo_target,
        None,
    )
}

fn run(major: u32) -> Result<Report> {
    let session = Session::open(major)?;
    let Session {
        root,
        root_secs,
        workspace,
        build,
        cargo_target,
        cargo,
        cuda_path,
        ..
    } = &session;
    let root_secs = *root_secs;
    let prefix = install_prefix(major);
    let out = build.join("programs");
    fs::create_dir_all(&out)?;
    let sh = xshell::Shell::new()?;

    util::section(&format!(
        "LLVM {major} in Debian 13: cargo xtask install --prefix {} --llvm {major} (inside the root)",
        prefix.display()
    ));
    let start = Instant::now();
    let (prefix_arg, llvm_arg) = (prefix.display().to_string(), major.to_string());
    let install = cargo.command(
        workspace,
        cargo_target,
        &[debian13_gpu_install::install_env()],
        &[
            "xtask",
            "install",
            "--prefix",
            &prefix_arg,
            "--llvm",
            &llvm_arg,
        ],
    );
    debian_root::chroot_cmd(&sh, root, &as_strs(&install))
        .run()
        .with_context(|| {
            format!(
                "cargo xtask install --llvm {major} inside {}",
                root.display()
            )
        })?;
    let install_secs = start.elapsed().as_secs_f64();
    let package = dist_inside(&sh, root, cargo, major, cargo_target, Some(&prefix))?;

    // In the release profile: the install just built the compiler plugin's dependencies
    // (llvm-sys, inkwell) that way for LLVM `major`, and the tests reuse them instead of
    // compiling them again for the test profile.
    util::section(&format!(
        "LLVM {major} in Debian 13: the compiler plugin's tests (inside the root, release)"
    ));
    let llvm_sys_prefix = format!(
        "LLVM_SYS_{major}0_PREFIX={}",
        debian13::llvm_prefix(major).display()
    );
    let features = format!("llvm{major}");
    let unit_tests = cargo.command(
        workspace,
        cargo_target,
        &[llvm_sys_prefix],
        &[
            "test",
            "--release",
            "-p",
            "compiler-plugin",
            "--no-default-features",
            "--features",
            &features,
        ],
    );
    debian_root::chroot_cmd(&sh, root, &as_strs(&unit_tests))
        .run()
        .with_context(|| format!("the compiler plugin's tests for LLVM {major}"))?;

    util::section(&format!(
        "LLVM {major} in Debian 13: a clang-{major} GPU image, checked for what the cuda plugin reads"
    ));
    let gpu_image = debian13_gpu_image::check(&sh, root, major, cuda_path, &out)?;
    eprintln!("{gpu_image}");

    util::section(&format!(
        "LLVM {major} in Debian 13: the installed GPU device RTL (clang-{major} links it; a program through the nvptx64 config)"
    ));
    let gpu_install = [
        debian13_gpu_install::device_link_test(&sh, root, major, build)?,
        debian13_gpu_install::config_program(root, major, &prefix, &out)?,
    ];
    eprintln!("{}", gpu_install.join("\n"));

    util::section(&format!(
        "LLVM {major} in Debian 13: the standard programs through the installed config"
    ));
    let start = Instant::now();
    let config = install_layout::Prefix::new(&prefix).config(install_layout::HOST_TRIPLE);
    let (mut passed, mut failed) = (Vec::new(), Vec::new());
    for program in PROGRAMS {
        for opt in OPT_LEVELS {
            for mode in HostMode::ALL {
                let label = format!("{} {opt} {}", program.name, mode.label());
                let run = Run { program, opt, mode };
                match build_and_run(&sh, root, major, &config, &prefix, &out, &run) {
                    Ok(entries) => passed.push(format!("{label} ({entries})")),
                    Err(e) => {
                        eprintln!("{label}: FAILED: {e:#}");
                        failed.push(format!("{label}: {e:#}"));
                    }
                }
            }
        }
    }
    Ok(Report {
        major,
        root_secs,
        install_secs,
        package,
        gpu_image,
        gpu_install,
        passed,
        failed,
        programs_secs: start.elapsed().as_secs_f64(),
    })
}

/// target/debian13-build/llvmN/: what the step makes for LLVM `major` (its install,
/// its programs).
fn build_dir(major: u32) -> PathBuf {
    util::target_dir().join(format!("debian13-build/llvm{major}"))
}

/// target/debian13-build/cargo/: the `CARGO_TARGET_DIR` of cargo inside every Debian 13
/// root (one toolchain, one glibc: what does not depend on the LLVM version is built
/// once for 17 and 18).
fn cargo_target_dir() -> PathBuf {
    util::target_dir().join("debian13-build/cargo")
}

/// Where the step installs for LLVM `major` (inside the root, at this path).
pub fn install_prefix(major: u32) -> PathBuf {
    build_dir(major).join("install")
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Build `program` with clang-N through `config` at `opt`, check its indirect entries,
/// run it with P/lib on the library path, and check its output and which plugin ran it.
/// Returns what the entry check found.
#[allow(clippy::too_many_arguments)]
/// One program at one opt level on one host device.
struct Run<'a> {
    program: &'a Program,
    opt: &'a str,
    mode: HostMode,
}

fn build_and_run(
    sh: &xshell::Shell,
    root: &Path,
    major: u32,
    config: &Path,
    prefix: &Path,
    out: &Path,
    run: &Run,
) -> Result<String> {
    let Run { program, opt, mode } = *run;
    let (defines, expect) = mode.build_of(program);
    let fixtures = util::root().join("tests/fixtures");
    let sources: Vec<String> = program
        .sources
        .iter()
        .map(|s| fixtures.join(s).display().to_string())
        .collect();
    let cxx = sources.iter().any(|s| s.ends_with(".cpp"));
    let driver = format!("{}-{major}", if cxx { "clang++" } else { "clang" });
    let exe = out.join(format!("{}{opt}-{}", program.name, mode.label()));
    let vv = fixtures.join("third_party/openmp_vv");
    let mut compile = vec![
        driver,
        format!("--config={}", config.display()),
        opt.to_owned(),
        format!("-I{}", vv.display()),
    ];
    compile.extend(defines.iter().map(|d| d.to_string()));
    compile.extend(sources);
    compile.extend(["-o".into(), exe.display().to_string()]);
    debian_root::chroot_cmd(sh, root, &as_strs(&compile)).run()?;
    let entries = one_entry_per_indirect_function(&exe)?;

    let ld_debug = out.join(format!("{}{opt}-{}.ld-debug", program.name, mode.label()));
    let _ = fs::remove_dir_all(&ld_debug);
    fs::create_dir_all(&ld_debug)?;
    let marker = out.join(format!(
        "{}{opt}-{}.load-marker",
        program.name,
        mode.label()
    ));
    let _ = fs::remove_file(&marker);
    let lib = prefix.join("lib");
    let run = [
        "env".to_owned(),
        format!("LD_LIBRARY_PATH={}", lib.display()),
        format!("OMPTARGET_RS_LOAD_MARKER={}", marker.display()),
        format!(
            "OMPTARGET_RS_ISOLATED={}",
            match mode {
                HostMode::InProcess => "0",
                HostMode::Isolated => "1",
            }
        ),
        "LD_DEBUG=libs".to_owned(),
        format!("LD_DEBUG_OUTPUT={}", ld_debug.join("pid").display()),
        exe.display().to_string(),
    ];
    let output = debian_root::chroot_cmd(sh, root, &as_strs(&run))
        .ignore_status()
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() || !stdout.contains(expect) {
        bail!(
            "{} exited with {} without printing {:?}:\n{stdout}\n{stderr}",
            exe.display(),
            output.status,
            expect
        );
    }
    let marker_text = fs::read_to_string(&marker).unwrap_or_default();
    ensure!(
        marker_text.lines().any(|l| l.starts_with("x86_64 ")),
        "our x86_64 plugin did not run {} (load marker: {marker_text:?})",
        exe.display()
    );
    prove_plugin_files(&ld_debug, &lib, major)?;
    Ok(entries)
}

/// No two indirect-function entries of the program's host entries share a host
/// address; says how many there are, and how many clang made itself (named by clang's
/// rule, not ours).
fn one_entry_per_indirect_function(exe: &Path) -> Result<String> {
    let bytes = fs::read(exe).with_context(|| format!("reading {}", exe.display()))?;
    let entries = offload_formats::entries::read_host_entries(&bytes)?;
    let functions: Vec<_> = entries
        .iter()
        .filter(|e| e.role() == offload_formats::entries::EntryRole::IndirectFunction)
        .collect();
    let mut addresses: Vec<u64> = functions.iter().map(|e| e.addr).collect();
    addresses.sort_unstable();
    addresses.dedup();
    if addresses.len() != functions.len() {
        let listed: Vec<String> = functions
            .iter()
            .map(|e| format!("{:#x} {}", e.addr, e.name))
            .collect();
        bail!(
            "{}: a function has more than one indirect entry: {listed:?}",
            exe.display()
        );
    }
    let clang_made = functions
        .iter()
        .filter(|e| !e.name.starts_with(offload_formats::entries::holder::PREFIX))
        .count();
    Ok(format!(
        "{} indirect function entries, {clang_made} of them clang's",
        functions.len()
    ))
}

/// From the loader's log of every process: the x86_64 plugin initialized from P/lib, and
/// no plugin file from LLVM N's own folder.
fn prove_plugin_files(ld_debug: &Path, lib: &Path, major: u32) -> Result<()> {
    let ours = lib.join("libomptarget.rtl.x86_64.so");
    let llvm = format!("/usr/lib/llvm-{major}/lib/libomptarget.rtl.");
    let mut ours_seen = false;
    for entry in fs::read_dir(ld_debug)? {
        let text = fs::read_to_string(entry?.path())?;
        for line in text.lines() {
            let Some(path) = line.split("calling init: ").nth(1) else {
                continue;
            };
            let path = path.trim();
            ensure!(
                !path.starts_with(&llvm),
                "LLVM {major}'s plugin {path} was loaded"
            );
            ours_seen |= Path::new(path) == ours;
        }
    }
    ensure!(
        ours_seen,
        "the loader's log (LD_DEBUG=libs in {}) shows no initialization of {}",
        ld_debug.display(),
        ours.display()
    );
    Ok(())
}
