//! `cargo xtask gpu-bundle --llvm 18`: the GPU kit for LLVM 18, target/gpu-bundle-llvm18/,
//! of the LLVM 16 kit's shape (one `run.sh`, parts 1 and 2, the same runner and summary),
//! built in the Debian 13 root of LLVM 18 that `cargo xtask test` makes ([`debian13`]).
//!
//! What it holds:
//! - `programs/`: clang-18's sm_90 programs, built inside the root through the LLVM 18
//!   install's nvptx64 config (`install --llvm 18`, made by `cargo xtask
//!   debian13-programs --llvm 18`, which this runs first): the standard C program, the
//!   C++ virtual-call fixture (two units) at -O0 and -O2, OpenMP_VV's declare target
//!   indirect test, and the kit's four macro programs (the README's example, virtual
//!   calls through the macros, a table handed over through `__tgt_rtl_set_function_ptr_map`,
//!   the stress program). Each image must define our lookup, both table globals and a
//!   kernel's call of the lookup ([`indirect_programs::check_cubin`]). run.sh runs each
//!   through ours and through LLVM 18's cuda plugin under libomptarget 18, side by side;
//! - `plugins/`: our plugin file (the one every libomptarget version loads);
//! - `lit.tar.xz`: LLVM 18's libomptarget lit suite for nvptx64-nvidia-cuda, compiled in
//!   the root by clang-18 for sm_90 ([`lit::add_suite`]), replayed and checked there
//!   through ours and LLVM 18's plugin with the LLVM 16 kit's rerun rule;
//! - `closure/`: libomptarget 18, libomp, LLVM 18's cuda plugin, FileCheck and `not` and
//!   what they load beyond glibc, from the root, and the check that no file needs a glibc
//!   symbol newer than the GPU machines' ([`closure::GPU_MACHINE_GLIBC`]);
//! - run.sh and the runner. Part 1: the libraries, the plugin's device count, the
//!   programs, lit; part 2: the programs through ours under compute-sanitizer.
//!
//! [`prove`] runs it in a bare Debian 13 root (glibc 2.41; the version check above is
//! what covers the GPU machines' 2.39).

use super::{bare_root, build_dir, closure, cuda_tests, lit, relative, script, Kit, SM};
use crate::{debian13, debian13_gpu_image, debian13_programs, debian_root, gpu_programs};
use crate::{indirect_programs, install, plugin, util};
use anyhow::{Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The LLVM this kit carries.
const LLVM: u32 = 18;
/// LLVM 18's own cuda plugin, which libomptarget 18 dlopens by this name.
const LLVM_CUDA_PLUGIN: (&str, &str) = (
    "libomptarget.rtl.cuda.so",
    "/usr/lib/llvm-18/lib/libomptarget.rtl.cuda.so",
);
/// The tools the lit check runs.
const TOOLS: &[(&str, &str)] = &[
    ("FileCheck", "/usr/lib/llvm-18/bin/FileCheck"),
    ("not", "/usr/lib/llvm-18/bin/not"),
];

/// target/gpu-bundle-llvm18/
pub fn kit_dir() -> PathBuf {
    util::target_dir().join("gpu-bundle-llvm18")
}

/// One standard program: its name, sources (below tests/fixtures), the options beyond
/// the config's, and the lines a passing run prints on a GPU and on the host fallback.
struct Standard {
    name: &'static str,
    sources: &'static [&'static str],
    options: &'static [&'static str],
    expect: (&'static str, &'static str),
}

const VIRTUAL_SOURCES: &[&str] = &[
    "virtual/virtual_calls.cpp",
    "virtual/virtual_other_unit.cpp",
];
const VIRTUAL_EXPECT: (&str, &str) = (
    indirect_programs::VIRTUAL_GPU_EXPECT,
    indirect_programs::VIRTUAL_GPU_EXPECT,
);

/// The standard programs, as the LLVM 16 kit builds them
/// ([`indirect_programs::build_gpu_programs`]).
const STANDARD: &[Standard] = &[
    Standard {
        name: "indirect_standard",
        sources: &["compiler/indirect_standard.c"],
        options: &["-O2", "-DINDIRECT_GPU"],
        expect: (
            indirect_programs::STANDARD_GPU_EXPECT,
            indirect_programs::STANDARD_GPU_EXPECT,
        ),
    },
    Standard {
        name: "test_target_declare_indirect",
        sources: &["third_party/openmp_vv/test_target_declare_indirect.c"],
        options: &["-O2"],
        expect: (
            indirect_programs::OPENMP_VV_EXPECT,
            indirect_programs::OPENMP_VV_EXPECT_FALLBACK,
        ),
    },
    Standard {
        name: "virtual_calls-O0",
        sources: VIRTUAL_SOURCES,
        options: &["-O0", "-DVIRTUAL_GPU"],
        expect: VIRTUAL_EXPECT,
    },
    Standard {
        name: "virtual_calls-O2",
        sources: VIRTUAL_SOURCES,
        options: &["-O2", "-DVIRTUAL_GPU"],
        expect: VIRTUAL_EXPECT,
    },
];

/// Builds the kit; returns its folder.
pub fn build_kit() -> Result<PathBuf> {
    let start = Instant::now();
    // The LLVM 18 install inside the root (and its checks), which the programs build
    // through.
    debian13_programs::check(LLVM)?;
    let prefix = debian13_programs::install_prefix(LLVM);
    let plugins = plugin::build_plugins()?;
    let (root, _) = debian13::root(LLVM)?;
    let lit_tests = crate::lit::debian13_suites::tests(&root, LLVM)?;
    let (cuda_path, cuda_installation) = debian13_gpu_image::cuda_binds()?;
    let workspace = util::root();
    let target = util::target_dir();
    let mut binds: Vec<&Path> = vec![&workspace, &cuda_installation];
    if !target.starts_with(&workspace) {
        binds.push(&target);
    }

    let mut kit = Kit::start(kit_dir(), LLVM)?;
    {
        let _mounts = debian_root::Mounts::new(&root, &binds)?;
        let build = Build {
            root: &root,
            config: install::config_path(&prefix, install::NVPTX_TRIPLE),
            cuda_path: &cuda_path,
        };
        add_programs(&mut kit, &build)?;
        lit::add_suite(
            &mut kit,
            &lit::Suite {
                major: LLVM,
                prefix: debian13::llvm_prefix(LLVM),
                sysroot: Some(&root),
                tests: lit_tests,
                offload_flags: lit_offload_flags(&cuda_path),
                work: lit_work(),
            },
        )?;
    }
    let plugin = kit.path("plugins/libomptarget.rtl.cuda.so")?;
    cuda_tests::strip(&plugins.join("libomptarget.rtl.cuda.so"), &plugin)?;
    kit.set("plugin", json!(relative(&kit, &plugin)?));
    closure::add_from(
        &mut kit,
        &closure::Sources {
            sysroot: Some(&root),
            dlopened: &[LLVM_CUDA_PLUGIN],
            tools: TOOLS,
            // The lit tests' programs, as the kit stores them.
            more_roots: vec![lit_work().join("store")],
        },
    )?;
    script::add(&mut kit)?;
    kit.finish(start)
}

/// Builds the kit and runs it in a bare Debian 13 root (both parts): every GPU step
/// SKIPPED, the programs on libomptarget 18's host fallback.
pub fn prove() -> Result<bare_root::Proof> {
    bare_root::ensure_can_prove()?;
    let kit = build_kit()?;
    bare_root::run_in_bare_root(&kit, debian13::CODENAME)
}

/// Where the LLVM 18 lit build keeps its work.
fn lit_work() -> PathBuf {
    build_dir().join("lit-llvm18")
}

/// What makes a lit compile for nvptx64 target the kit's GPU with clang-18 in the root:
/// the GPU, the CUDA folder, and glibc 2.41's headers as a GPU compile by clang 18 can
/// read them (the installed configs' glibc-compat folder; without it every test that
/// includes stdio.h fails to compile).
fn lit_offload_flags(cuda_path: &Path) -> Vec<String> {
    vec![
        "-Xopenmp-target=nvptx64-nvidia-cuda".to_owned(),
        format!("-march={SM}"),
        format!("--cuda-path={}", cuda_path.display()),
        "-Wno-unknown-cuda-version".to_owned(),
        "-Xarch_device".to_owned(),
        format!("-isystem{}", install::glibc_compat_dir().display()),
    ]
}

/// How the programs are built: clang-18 inside `root` through `config`.
struct Build<'a> {
    root: &'a Path,
    config: PathBuf,
    cuda_path: &'a Path,
}

impl Build<'_> {
    /// `sources` (absolute) into `exe` with `options`, then the image check.
    fn compile(&self, sources: &[PathBuf], options: &[&str], exe: &Path) -> Result<()> {
        let cxx = sources
            .iter()
            .any(|s| s.extension().is_some_and(|e| e == "cpp"));
        let mut args = vec![
            format!("{}-{LLVM}", if cxx { "clang++" } else { "clang" }),
            format!("--config={}", self.config.display()),
            format!("--offload-arch={SM}"),
            format!("--cuda-path={}", self.cuda_path.display()),
            "-Wno-unknown-cuda-version".into(),
            format!(
                "-I{}",
                util::root()
                    .join("tests/fixtures/third_party/openmp_vv")
                    .display()
            ),
        ];
        args.extend(options.iter().map(|o| o.to_string()));
        args.extend(sources.iter().map(|s| s.display().to_string()));
        args.extend(["-o".into(), exe.display().to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let sh = xshell::Shell::new()?;
        debian_root::chroot_cmd(&sh, self.root, &args)
            .run()
            .with_context(|| format!("clang-{LLVM} building {}", exe.display()))?;
        indirect_programs::check_cubin(exe, SM)?;
        Ok(())
    }
}

/// The programs into `programs/`, with their manifest entries.
fn add_programs(kit: &mut Kit, build: &Build) -> Result<()> {
    util::section(&format!(
        "gpu-bundle --llvm {LLVM}: clang-{LLVM} programs for {SM} (the installed config, in the Debian 13 root)"
    ));
    let fixtures = util::root().join("tests/fixtures");
    let mut programs = Vec::new();
    for p in STANDARD {
        let exe = kit.path(&format!("programs/{}.{SM}", p.name))?;
        let sources: Vec<PathBuf> = p.sources.iter().map(|s| fixtures.join(s)).collect();
        build.compile(&sources, p.options, &exe)?;
        programs.push(json!({
            "name": p.name,
            "exe": relative(kit, &exe)?,
            "source": p.sources.join(" "),
            "checks": format!("standard OpenMP 5.1 declare target indirect (clang-{LLVM}, compiler plugin)"),
            "expect": p.expect.0,
            "expect_fallback": p.expect.1,
        }));
    }
    for p in gpu_programs::MACRO_PROGRAMS {
        let exe = kit.path(&format!("programs/{}.{SM}", p.name))?;
        build.compile(&[util::root().join(p.source)], &["-O2"], &exe)?;
        programs.push(json!({
            "name": p.name,
            "exe": relative(kit, &exe)?,
            "source": p.source,
            "checks": p.checks,
        }));
    }
    eprintln!("{} programs built and checked", programs.len());
    kit.set("programs", json!(programs));
    Ok(())
}
