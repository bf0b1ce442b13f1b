//! Standard `declare target indirect` programs for GPUs, built with the stock clang-16
//! through the *installed* config files (`cargo xtask install`): checked here on the
//! final device image, run where a GPU is.
//!
//! Contract for the GPU kit (`cargo xtask indirect-gpu-programs --out DIR [--sm sm_90]`
//! does the same from the command line):
//! - `build_gpu_programs(prefix, out_dir, sm)` installs nothing; it compiles, with
//!   `<prefix>/share/omptarget-indirect/nvptx64-nvidia-cuda.cfg --offload-arch=<sm>`,
//!   each [`GpuProgram`] into `out_dir` and checks its cubin (see [`check_cubin`]).
//!   Run each on the GPU as `LD_LIBRARY_PATH=<dir holding our libomptarget.rtl.cuda*.so
//!   copies and libomptarget 16> ./<program>`: it passes when it exits 0 and its stdout
//!   contains [`GpuProgram::expect`].
//! - `check_gfx90a(prefix, scratch)`: the same program for gfx90a through the amdgcn
//!   config, its code object checked (no AMD GPU exists to run it).
use crate::{install, nvptx_program, util};
use anyhow::{ensure, Context, Result};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable};
use offload_formats::entries::holder;
use offload_formats::image::find_images;
use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use xshell::Shell;

#[derive(clap::Args)]
pub struct Args {
    /// Folder to build the programs into (created).
    #[arg(long)]
    pub out: PathBuf,
    /// The NVIDIA GPU architecture (clang 16 targets at most sm_90).
    #[arg(long, default_value = "sm_90")]
    pub sm: String,
    /// An existing install prefix; by default target/install, (re)installed first.
    #[arg(long)]
    pub prefix: Option<PathBuf>,
}

/// One program for the GPU step.
pub struct GpuProgram {
    /// The executable.
    pub path: PathBuf,
    /// What a passing run prints (with exit status 0).
    pub expect: &'static str,
    /// What a passing run prints on libomptarget's host fallback (no GPU).
    pub expect_fallback: &'static str,
}

/// The standard program's cases on a GPU (indirect_standard.c with -DINDIRECT_GPU: all
/// but the host-device-only indirect(0) call).
pub const STANDARD_GPU_EXPECT: &str = "indirect cases: 13 ok, 0 wrong";
/// tests/fixtures/virtual's C++ virtual calls on a GPU (-DVIRTUAL_GPU: all but typeid,
/// which has no runtime there); without a GPU the regions run on the host and say so.
pub const VIRTUAL_GPU_EXPECT: &str = "virtual cases: 23 ok, 0 wrong";
/// OpenMP_VV's success line.
pub const OPENMP_VV_EXPECT: &str = "Test passed on the device.";
/// OpenMP_VV's success line when the region ran on the host (no GPU).
pub const OPENMP_VV_EXPECT_FALLBACK: &str = "Test passed on the host.";

/// The indirect functions of indirect_standard.c with external linkage, whose holder
/// globals every device image must define (f_static's name carries the file identity).
const STANDARD_INDIRECT_FUNCTIONS: &[&str] = &[
    "f_block",
    "f_begin",
    "f_to_after",
    "f_to_before",
    "f_one",
    "f_expr",
];

pub fn main(args: Args) -> Result<()> {
    let prefix = match args.prefix {
        Some(p) => p,
        None => install::install(&util::target_dir().join("install"))?,
    };
    let programs = build_gpu_programs(&prefix, &args.out, &args.sm)?;
    for p in programs {
        println!(
            "{}  (passes: exit 0, prints {:?})",
            p.path.display(),
            p.expect
        );
    }
    Ok(())
}

/// `xtask test`'s step: the gfx90a program built through the installed amdgcn config
/// under target/install, its code object checked (the sm_90 programs are built, and
/// checked, by the step that builds all the GPU programs: [`crate::gpu_programs`]).
pub fn build_and_check_gfx90a(prefix: &Path) -> Result<()> {
    let out = util::target_dir().join("indirect-gpu-programs");
    check_gfx90a(prefix, &out.join("gfx90a"))
}

pub fn build_gpu_programs(prefix: &Path, out_dir: &Path, sm: &str) -> Result<Vec<GpuProgram>> {
    fs::create_dir_all(out_dir)?;
    let config = install_layout::Prefix::new(prefix).config(install_layout::NVPTX_TRIPLE);
    ensure!(
        config.is_file(),
        "{} is missing: run `cargo xtask install --prefix {}`",
        config.display(),
        prefix.display()
    );
    STANDARD_GPU_PROGRAMS
        .iter()
        .map(|p| p.build(Clang::Here16, &config, sm, out_dir))
        .collect()
}

/// The clang that builds a program through an installed config file.
#[derive(Clone, Copy)]
pub enum Clang<'a> {
    /// Debian 12's clang-16 on this machine.
    Here16,
    /// clang-`major` inside a Debian 13 root whose binds show the workspace, the install
    /// and the CUDA folder at their own paths.
    InRoot { major: u32, root: &'a Path },
}

/// The holders clang 16's compiler plugin makes in a program's device image, which the
/// image check requires.
#[derive(Clone, Copy)]
enum Holders {
    /// indirect_standard.c's indirect functions ([`check_holders`]).
    StandardFunctions,
    /// OpenMP_VV's three indirect functions.
    OpenmpVv,
    /// tests/fixtures/virtual's vtable groups ([`check_vtable_holders`]).
    Vtables,
}

/// A standard-source `declare target indirect` program for a GPU, as the GPU kits build
/// it through an installed nvptx64 config.
pub struct StandardGpuProgram {
    /// Also its executable's name, with `.<sm>` after it.
    pub name: &'static str,
    /// Below tests/fixtures.
    pub sources: &'static [&'static str],
    /// Beyond the config's and the GPU's.
    pub options: &'static [&'static str],
    /// What a passing run prints on a GPU, and on libomptarget's host fallback.
    pub expect: &'static str,
    pub expect_fallback: &'static str,
    holders: Holders,
}

const VIRTUAL_SOURCES: &[&str] = &[
    "virtual/virtual_calls.cpp",
    "virtual/virtual_other_unit.cpp",
];

/// The standard programs of both GPU kits, in the order they run.
pub const STANDARD_GPU_PROGRAMS: &[StandardGpuProgram] = &[
    StandardGpuProgram {
        name: "virtual_calls-O0",
        sources: VIRTUAL_SOURCES,
        options: &["-O0", "-DVIRTUAL_GPU"],
        expect: VIRTUAL_GPU_EXPECT,
        expect_fallback: VIRTUAL_GPU_EXPECT,
        holders: Holders::Vtables,
    },
    StandardGpuProgram {
        name: "virtual_calls-O2",
        sources: VIRTUAL_SOURCES,
        options: &["-O2", "-DVIRTUAL_GPU"],
        expect: VIRTUAL_GPU_EXPECT,
        expect_fallback: VIRTUAL_GPU_EXPECT,
        holders: Holders::Vtables,
    },
    StandardGpuProgram {
        name: "indirect_standard",
        sources: &["compiler/indirect_standard.c"],
        options: &["-O2", "-DINDIRECT_GPU"],
        expect: STANDARD_GPU_EXPECT,
        expect_fallback: STANDARD_GPU_EXPECT,
        holders: Holders::StandardFunctions,
    },
    StandardGpuProgram {
        name: "test_target_declare_indirect",
        sources: &["third_party/openmp_vv/test_target_declare_indirect.c"],
        options: &["-O2"],
        expect: OPENMP_VV_EXPECT,
        expect_fallback: OPENMP_VV_EXPECT_FALLBACK,
        holders: Holders::OpenmpVv,
    },
];

impl StandardGpuProgram {
    /// Built by `clang` through `config` for `sm` into `<out_dir>/<name>.<sm>`, its cubin
    /// checked ([`check_cubin`]) and, from clang 16, its holders (clang 18 registers the
    /// functions marked with a bare `indirect` itself, under its own names).
    pub fn build(
        &self,
        clang: Clang,
        config: &Path,
        sm: &str,
        out_dir: &Path,
    ) -> Result<GpuProgram> {
        let fixtures = util::root().join("tests/fixtures");
        let exe = out_dir.join(format!("{}.{sm}", self.name));
        let mut args = release::cuda::cuda_args(sm)?;
        args.push(format!(
            "-I{}",
            fixtures.join("third_party/openmp_vv").display()
        ));
        args.extend(self.options.iter().map(|o| o.to_string()));
        let sources: Vec<PathBuf> = self.sources.iter().map(|s| fixtures.join(s)).collect();
        compile_with(clang, config, &args, &sources, &exe)?;
        let cubin = check_cubin(&exe, sm)?;
        if let Clang::Here16 = clang {
            match self.holders {
                Holders::StandardFunctions => check_holders(&cubin.defined, &exe)?,
                Holders::Vtables => check_vtable_holders(&cubin.defined, &exe)?,
                Holders::OpenmpVv => {
                    for f in ["fun1", "fun2", "fun3"] {
                        let holder = holder::name(f, None);
                        ensure!(
                            cubin.defined.contains(&holder),
                            "{}: the cubin lacks {holder}",
                            exe.display()
                        );
                    }
                }
            }
        }
        Ok(GpuProgram {
            path: exe,
            expect: self.expect,
            expect_fallback: self.expect_fallback,
        })
    }
}

/// The vtable groups of tests/fixtures/virtual's classes that host-built objects use,
/// whose holders the device image must define (their host entries name them).
const VIRTUAL_VTABLES: &[&str] = &[
    "_ZTV6Square",
    "_ZTV4Five",
    "_ZTV7Diamond",
    "_ZTV10DoubledBoxIiE",
    "_ZTV5Keyed",
];

fn check_vtable_holders(defined: &HashSet<String>, exe: &Path) -> Result<()> {
    let missing: Vec<String> = VIRTUAL_VTABLES
        .iter()
        .map(|vtable| holder::name(vtable, None))
        .filter(|h| !defined.contains(h))
        .collect();
    ensure!(
        missing.is_empty(),
        "{}: the device image lacks the vtable holders {missing:?}",
        exe.display()
    );
    Ok(())
}

/// clang-16 (clang++-16 for C++) through the config file `config`.
pub fn compile(config: &Path, args: &[String], sources: &[PathBuf], out: &Path) -> Result<()> {
    compile_with(Clang::Here16, config, args, sources, out)
}

/// `clang` (its C++ driver for C++) through the config file `config`.
pub fn compile_with(
    clang: Clang,
    config: &Path,
    args: &[String],
    sources: &[PathBuf],
    out: &Path,
) -> Result<()> {
    // C++ links the C++ library through the C++ driver.
    let cxx = sources
        .iter()
        .any(|s| s.extension().is_some_and(|e| e == "cpp"));
    let driver = if cxx { "clang++" } else { "clang" };
    let (program, root) = match clang {
        Clang::Here16 => (util::llvm16(driver)?.display().to_string(), None),
        Clang::InRoot { major, root } => (format!("{driver}-{major}"), Some(root)),
    };
    let mut all = vec![program, format!("--config={}", config.display())];
    all.extend(args.iter().cloned());
    all.extend(sources.iter().map(|s| s.display().to_string()));
    all.extend(["-o".to_owned(), out.display().to_string()]);
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let sh = Shell::new()?;
    crate::debian_root::cmd_in(&sh, root, &all)
        .run()
        .with_context(|| format!("{} building {}", all[0], out.display()))?;
    Ok(())
}

/// What a final device image holds.
pub struct ImageFacts {
    /// The symbols it defines.
    pub defined: HashSet<String>,
}

/// The program carries exactly one cubin for `sm`, which defines and exports the lookup
/// and its globals (taken from our archive by the link), and in which a kernel calls the
/// lookup (a caller -> callee pair of `.nv.callgraph`, the linked cubin's call graph).
pub fn check_cubin(exe: &Path, sm: &str) -> Result<ImageFacts> {
    let (images, cubins) = nvptx_program::cubins_of(exe, sm)?;
    ensure!(
        cubins.len() == 1 && images == 1,
        "{}: expected exactly one {sm} cubin, found {images} device images",
        exe.display(),
    );
    let file = object::File::parse(&*cubins[0]).context("the cubin is not ELF")?;
    let facts = defined_symbols(&file);
    require_rtl(&facts, exe)?;
    // The plugin finds them by name in the loaded image (cuModuleGetGlobal).
    for name in device_build::EXPORTED_SYMBOLS {
        let exported = file
            .symbols()
            .any(|s| s.name() == Ok(name) && (s.is_global() || s.is_weak()));
        ensure!(
            exported,
            "{}: {name} is not exported from the {sm} image",
            exe.display()
        );
    }
    let lookup = file
        .symbols()
        .find(|s| s.name() == Ok(LOOKUP))
        .context("no lookup symbol")?
        .index()
        .0 as u32;
    let kernels: HashSet<u32> = file
        .symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text)
        .filter(|s| s.name().is_ok_and(|n| n.starts_with("__omp_offloading_")))
        .map(|s| s.index().0 as u32)
        .collect();
    let graph = file
        .section_by_name(".nv.callgraph")
        .context("the cubin has no .nv.callgraph")?
        .data()?;
    let calls = graph
        .chunks_exact(8)
        .map(|p| {
            let word = |i: usize| u32::from_le_bytes(p[i..i + 4].try_into().expect("4 bytes"));
            (word(0), word(4))
        })
        .any(|(caller, callee)| callee == lookup && kernels.contains(&caller));
    ensure!(
        calls,
        "{}: no kernel of the {sm} cubin calls {LOOKUP}",
        exe.display()
    );
    eprintln!(
        "{}: one {sm} cubin ({} bytes): defines and exports {LOOKUP} and the table globals, a kernel calls it",
        exe.display(),
        cubins[0].len()
    );
    Ok(facts)
}

const LOOKUP: &str = device_rtl::symbols::LOOKUP;

fn defined_symbols(file: &object::File) -> ImageFacts {
    ImageFacts {
        defined: file
            .symbols()
            .filter(|s| s.is_definition())
            .filter_map(|s| s.name().ok().map(str::to_string))
            .collect(),
    }
}

fn require_rtl(facts: &ImageFacts, exe: &Path) -> Result<()> {
    for sym in device_build::EXPORTED_SYMBOLS {
        ensure!(
            facts.defined.contains(*sym),
            "{}: the device image does not define {sym}",
            exe.display()
        );
    }
    Ok(())
}

/// The holder global of each indirect function of indirect_standard.c.
fn check_holders(defined: &HashSet<String>, exe: &Path) -> Result<()> {
    for f in STANDARD_INDIRECT_FUNCTIONS {
        let holder = holder::name(f, None);
        ensure!(
            defined.contains(&holder),
            "{}: the device image lacks {holder}",
            exe.display()
        );
    }
    ensure!(
        defined
            .iter()
            .any(|d| d.starts_with(holder::PREFIX) && d.ends_with("_f_static")),
        "{}: the device image lacks the holder of static f_static",
        exe.display()
    );
    Ok(())
}

/// indirect_standard.c for gfx90a through the installed amdgcn config: one code object
/// for gfx90a that defines the lookup, both table globals and every holder, and whose
/// code refers to the lookup (its GOT slot's dynamic relocation names it).
pub fn check_gfx90a(prefix: &Path, out_dir: &Path) -> Result<()> {
    fs::create_dir_all(out_dir)?;
    let config = install_layout::Prefix::new(prefix).config(install_layout::AMDGCN_TRIPLE);
    let exe = out_dir.join("indirect_standard.gfx90a");
    let args = vec![
        "--offload-arch=gfx90a".to_string(),
        format!("--rocm-device-lib-path={ROCM_DEVICE_LIBS}"),
        "-O2".into(),
        "-DINDIRECT_GPU".into(),
    ];
    compile(
        &config,
        &args,
        &[util::root().join("tests/fixtures/compiler/indirect_standard.c")],
        &exe,
    )?;
    let bytes = fs::read(&exe)?;
    let images = find_images(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", exe.display()))?;
    ensure!(
        images.len() == 1 && images[0].arch.as_deref() == Some("gfx90a"),
        "{}: expected one gfx90a image, found {}",
        exe.display(),
        images.len()
    );
    let file = object::File::parse(&*images[0].data).context("the code object is not ELF")?;
    let facts = defined_symbols(&file);
    require_rtl(&facts, &exe)?;
    check_holders(&facts.defined, &exe)?;
    let dynsyms = file.dynamic_symbol_table().context("no .dynsym")?;
    let refers = file
        .dynamic_relocations()
        .into_iter()
        .flatten()
        .filter_map(|(_, r)| match r.target() {
            object::RelocationTarget::Symbol(i) => dynsyms.symbol_by_index(i).ok(),
            _ => None,
        })
        .any(|s| s.name() == Ok(LOOKUP));
    ensure!(
        refers,
        "{}: the gfx90a code object does not refer to {LOOKUP}",
        exe.display()
    );
    eprintln!(
        "{}: one gfx90a code object ({} bytes): defines {LOOKUP}, the table globals and the holders; its code refers to the lookup",
        exe.display(),
        images[0].data.len()
    );
    Ok(())
}

/// Debian's rocm-device-libs (clang 16 wants the ROCm device libraries for amdgcn).
pub const ROCM_DEVICE_LIBS: &str = "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode";
