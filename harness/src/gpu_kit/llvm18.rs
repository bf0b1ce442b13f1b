//! `cargo xtask gpu-bundle --llvm 18`: the GPU kit for LLVM 18, target/gpu-bundle-llvm18/,
//! of the LLVM 16 kit's shape (one `run.sh`, parts 1 and 2, the same runner and summary),
//! built in the Debian 13 root of LLVM 18 that `cargo xtask test` makes ([`debian13`]).
//!
//! What it holds:
//! - `programs/`: clang-18's sm_90 programs, built inside the root through the LLVM 18
//!   install's nvptx64 config (`install --llvm 18`, made and checked by `cargo xtask
//!   debian13-programs --llvm 18`, which this runs first unless the same process did): the standard C program, the
//!   C++ virtual-call fixture (two units) at -O0 and -O2, OpenMP_VV's declare target
//!   indirect test, and the kit's four macro programs (examples/indirect_calls.c, virtual
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
use crate::indirect_programs::{self, Clang};
use crate::{debian13, debian13_gpu_image, debian13_programs, debian_root, gpu_programs};
use crate::{install, plugin, util};
use anyhow::Result;
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

/// Builds the kit; returns its folder.
pub fn build_kit() -> Result<PathBuf> {
    let start = Instant::now();
    // The LLVM 18 install inside the root (and its checks), which the programs build
    // through.
    debian13_programs::ensure_checked(LLVM)?;
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
        let clang = Clang::InRoot {
            major: LLVM,
            root: &root,
        };
        let config = install_layout::Prefix::new(&prefix).config(install_layout::NVPTX_TRIPLE);
        add_programs(&mut kit, clang, &config)?;
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
    let mut flags = crate::nvptx_program::offload_flags(SM, cuda_path);
    flags.extend([
        "-Xarch_device".to_owned(),
        format!("-isystem{}", install::glibc_compat_dir().display()),
    ]);
    flags
}

/// The programs into `programs/`, with their manifest entries: the LLVM 16 kit's
/// standard programs ([`indirect_programs::STANDARD_GPU_PROGRAMS`]) and macro programs,
/// each image checked ([`indirect_programs::check_cubin`]).
fn add_programs(kit: &mut Kit, clang: Clang, config: &Path) -> Result<()> {
    util::section(&format!(
        "gpu-bundle --llvm {LLVM}: clang-{LLVM} programs for {SM} (the installed config, in the Debian 13 root)"
    ));
    let folder = kit.dir.join("programs");
    std::fs::create_dir_all(&folder)?;
    let mut programs = Vec::new();
    for p in indirect_programs::STANDARD_GPU_PROGRAMS {
        let built = p.build(clang, config, SM, &folder)?;
        programs.push(json!({
            "name": p.name,
            "exe": relative(kit, &built.path)?,
            "source": p.sources.join(" "),
            "checks": format!("standard OpenMP 5.1 declare target indirect (clang-{LLVM}, compiler plugin)"),
            "expect": built.expect,
            "expect_fallback": built.expect_fallback,
        }));
    }
    for p in gpu_programs::MACRO_PROGRAMS {
        let exe = folder.join(format!("{}.{SM}", p.name));
        let mut args = release::cuda::cuda_args(SM)?;
        args.push("-O2".into());
        indirect_programs::compile_with(
            clang,
            config,
            &args,
            &[util::root().join(p.source)],
            &exe,
        )?;
        indirect_programs::check_cubin(&exe, SM)?;
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
