//! `cargo xtask demo`: build and install everything (target/install), then
//! 1. compile examples/standard_indirect.cpp, standard OpenMP 5.1 C++ with no project
//!    header (`declare target indirect` functions and virtual calls on objects built on
//!    the host), with the stock clang-16 through the installed config file, and run it;
//! 2. compile examples/indirect_calls.c, the macro example for compilers without our
//!    compiler plugin (host-plugin/include/omp_indirect.h), and run it.
//!
//! Both run through the real libomptarget 16 with our plugins, on the best offload
//! device present: an NVIDIA GPU when `nvidia-smi` reports one (compiled for nvptx64 at
//! the GPU's SM, run through our cuda plugin), else the isolated host device (an x86_64
//! offload image, our x86_64 plugin with `OMPTARGET_RS_ISOLATED=1`: the device in a
//! process of its own, where a host address faults as on a GPU). There the demo also
//! runs the standard program with the translation turned off
//! (`OMPTARGET_RS_TRANSLATE=0`) and shows the fault report it gets.
//! `--backend` forces one (`host`: the in-process host device); `--build-only` compiles
//! and checks the device images without running (what CI does for CUDA here, on a
//! machine without a GPU).
use crate::nvptx_program::{check_image, NvptxBuild};
use crate::{install, plugin, util};
use anyhow::{bail, ensure, Context, Result};
use offload_formats::entries::holder;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use xshell::{cmd, Shell};

/// The standard example's indirect functions and vtable groups, whose holders its nvptx
/// image must define: the host entries name them.
const STANDARD_INDIRECT_SYMBOLS: &[&str] =
    &["_Z7add_onei", "_Z5twicei", "_ZTV9Rectangle", "_ZTV6Square"];
/// What the standard example prints when every call reached the device version.
const STANDARD_EXPECT: &str = "standard example: 4 ok, 0 wrong";

/// The macro example's indirect functions (`OMP_DECLARE_INDIRECT`), whose holders its
/// nvptx image must define.
const EXAMPLE_INDIRECT_FUNCTIONS: &[&str] = &["add_one", "twice", "square"];

#[derive(clap::Args, Default)]
pub struct Args {
    /// The offload device to run on: `auto` takes an NVIDIA GPU when nvidia-smi reports
    /// one, else the isolated host device; `host` is the host device in the program's
    /// own process.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// Compile the program and check its device image, but do not run it.
    #[arg(long)]
    pub build_only: bool,
    /// The GPU architecture to compile for with `--backend cuda --build-only` on a
    /// machine without a GPU (with a GPU, its own is used).
    #[arg(long, default_value = "sm_90")]
    pub sm: String,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    #[default]
    Auto,
    Host,
    Isolated,
    Cuda,
}

/// What the demo compiled for.
enum Target {
    /// The host CPU; `isolated`: in a process of its own.
    Host { isolated: bool },
    /// An NVIDIA GPU architecture, e.g. `sm_90`.
    Cuda { sm: String },
}

pub fn main(args: Args) -> Result<()> {
    let gpu = nvidia_gpu_sm()?;
    let target = match (args.backend, gpu) {
        (Backend::Host, _) => Target::Host { isolated: false },
        (Backend::Isolated, _) | (Backend::Auto, None) => Target::Host { isolated: true },
        (Backend::Auto, Some(sm)) => match device_build::ptx::rtl_family_of(&sm) {
            Ok(_) => Target::Cuda { sm },
            Err(why) => {
                eprintln!(
                    "demo: the GPU is {sm}: {why:#}; running on the isolated host device instead"
                );
                Target::Host { isolated: true }
            }
        },
        (Backend::Cuda, Some(sm)) => Target::Cuda { sm },
        (Backend::Cuda, None) if args.build_only => Target::Cuda {
            sm: args.sm.clone(),
        },
        (Backend::Cuda, None) => bail!(
            "--backend cuda: nvidia-smi reports no NVIDIA GPU here (use --build-only to only \
             compile, or --backend host)"
        ),
    };
    let prefix = install::install(&util::target_dir().join("install"))?;
    let installed_lib = prefix.join("lib");
    let plugins = plugin::build_plugins()?;
    let out_dir = util::target_dir().join("demo");
    fs::create_dir_all(&out_dir)?;
    let (standard, kind) = build_standard(&prefix, &target, &out_dir)?;
    let macro_example = build_macro_example(&target, &out_dir)?;
    if args.build_only {
        println!(
            "demo built (not run): {} and {}",
            standard.display(),
            macro_example.display()
        );
        return Ok(());
    }
    util::section("demo: run examples/standard_indirect.cpp (standard source)");
    let stdout = run(&standard, &installed_lib, &out_dir, kind, &target)?;
    ensure!(
        stdout.contains(STANDARD_EXPECT),
        "the standard example did not print {STANDARD_EXPECT:?}"
    );
    if let Target::Host { isolated: true } = target {
        show_untranslated_fault(&standard, &installed_lib)?;
    }
    util::section("demo: run examples/indirect_calls.c (the macro form, for any clang)");
    run(&macro_example, &plugins, &out_dir, kind, &target)?;
    Ok(())
}

/// examples/standard_indirect.cpp through the installed config file for the target;
/// returns the program and the kind of plugin that must run it.
fn build_standard(
    prefix: &Path,
    target: &Target,
    out_dir: &Path,
) -> Result<(PathBuf, &'static str)> {
    let source = util::root().join("examples/standard_indirect.cpp");
    let clang = util::llvm16("clang++")?;
    let sh = Shell::new()?;
    match target {
        Target::Host { .. } => {
            util::section(
                "demo: compile examples/standard_indirect.cpp (standard OpenMP C++, no project \
                 header) with clang++-16 through the installed x86_64 config",
            );
            let config = install_layout::Prefix::new(prefix).config(install_layout::HOST_TRIPLE);
            let exe = out_dir.join("standard_indirect");
            cmd!(sh, "{clang} --config={config} -O2 {source} -o {exe}").run()?;
            Ok((exe, "x86_64"))
        }
        Target::Cuda { sm } => {
            util::section(&format!(
                "demo: compile examples/standard_indirect.cpp (standard OpenMP C++, no project \
                 header) with clang++-16 through the installed nvptx64 config for {sm}"
            ));
            let config = install_layout::Prefix::new(prefix).config(install_layout::NVPTX_TRIPLE);
            let cuda = release::cuda::cuda_path_for_clang16()?;
            let exe = out_dir.join(format!("standard_indirect.{sm}"));
            cmd!(
                sh,
                "{clang} --config={config} --offload-arch={sm} --cuda-path={cuda} -Wno-unknown-cuda-version -O2 {source} -o {exe}"
            )
            .run()?;
            let holders: Vec<String> = STANDARD_INDIRECT_SYMBOLS
                .iter()
                .map(|symbol| holder::name(symbol, None))
                .collect();
            let holders: Vec<&str> = holders.iter().map(String::as_str).collect();
            check_image(&exe, sm, &holders)?;
            Ok((exe, "cuda"))
        }
    }
}

/// examples/indirect_calls.c, the macro form, as before the compiler plugin existed.
fn build_macro_example(target: &Target, out_dir: &Path) -> Result<PathBuf> {
    let source = util::root().join("examples/indirect_calls.c");
    match target {
        Target::Host { .. } => {
            util::section("demo: compile examples/indirect_calls.c with clang 16 (x86_64)");
            let exe = out_dir.join("indirect_calls");
            plugin::compile_offload_program(&source, &exe)?;
            Ok(exe)
        }
        Target::Cuda { sm } => {
            util::section(&format!(
                "demo: compile examples/indirect_calls.c with clang 16 for {sm}"
            ));
            let exe = out_dir.join(format!("indirect_calls.{sm}"));
            NvptxBuild::prepare(sm, out_dir)?.compile(&source, &exe)?;
            let holders: Vec<String> = EXAMPLE_INDIRECT_FUNCTIONS
                .iter()
                .map(|function| holder::macro_name(function))
                .collect();
            let holders: Vec<&str> = holders.iter().map(String::as_str).collect();
            check_image(&exe, sm, &holders)?;
            Ok(exe)
        }
    }
}

/// The same program with the plugin's translation off, on the isolated device: its
/// first call through a host function address must fault there, with the report.
fn show_untranslated_fault(exe: &Path, plugins: &Path) -> Result<()> {
    util::section("demo: the same program with the translation off (OMPTARGET_RS_TRANSLATE=0)");
    let sh = Shell::new()?;
    let program = cmd!(sh, "{exe}")
        .env("LD_LIBRARY_PATH", plugins)
        .env("OMPTARGET_RS_ISOLATED", "1")
        .env("OMPTARGET_RS_TRANSLATE", "0")
        .env_remove("LIBOMPTARGET_INFO");
    eprintln!(
        "$ LD_LIBRARY_PATH={} OMPTARGET_RS_ISOLATED=1 OMPTARGET_RS_TRANSLATE=0 {program}",
        plugins.display()
    );
    let out = Command::from(program)
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprint!("{}{stderr}", String::from_utf8_lossy(&out.stdout));
    ensure!(
        !out.status.success()
            && stderr.contains("faulted on the device:")
            && stderr.contains("a host address"),
        "without the translation the device used a host address and the isolated device \
         did not report it ({}): isolation is broken",
        out.status
    );
    println!(
        "\nwithout the translation, the device used the host address of a function (or of \
         a vtable), and the isolated host device stopped it as a GPU would, naming what \
         the address is in the host and where the device used it ({}).",
        out.status
    );
    Ok(())
}

/// The SM of the first NVIDIA GPU (`sm_90` for compute capability 9.0), or None when
/// nvidia-smi is missing or lists no GPU.
fn nvidia_gpu_sm() -> Result<Option<String>> {
    let Some(smi) = util::which("nvidia-smi") else {
        return Ok(None);
    };
    let sh = Shell::new()?;
    let out = cmd!(sh, "{smi} --query-gpu=compute_cap --format=csv,noheader")
        .quiet()
        .ignore_status()
        .output()
        .context("running nvidia-smi")?;
    if !out.status.success() {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(first) = text.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return Ok(None);
    };
    let (major, minor) = first
        .split_once('.')
        .with_context(|| format!("nvidia-smi reported compute capability {first:?}"))?;
    Ok(Some(format!("sm_{major}{minor}")))
}

/// Run the program through libomptarget 16 with our plugins first on the library path,
/// report which of our plugins the process loaded and which device ran it, and return
/// what the program printed.
fn run(exe: &Path, plugins: &Path, out_dir: &Path, kind: &str, target: &Target) -> Result<String> {
    let marker = out_dir.join("load-marker.txt");
    let _ = fs::remove_file(&marker);
    let sh = Shell::new()?;
    let program = cmd!(sh, "{exe}")
        .env("LD_LIBRARY_PATH", plugins)
        // Bit 0x10 (plugin information): our plugin prints the table it installed and,
        // as LLVM's plugins do, each kernel launch.
        .env("LIBOMPTARGET_INFO", "16")
        .env("OMPTARGET_RS_LOAD_MARKER", &marker);
    let isolated = matches!(target, Target::Host { isolated: true });
    let program = if isolated {
        program.env("OMPTARGET_RS_ISOLATED", "1")
    } else {
        program.env_remove("OMPTARGET_RS_ISOLATED")
    };
    eprintln!(
        "$ LD_LIBRARY_PATH={} LIBOMPTARGET_INFO=16 OMPTARGET_RS_LOAD_MARKER={}{} {program}",
        plugins.display(),
        marker.display(),
        if isolated {
            " OMPTARGET_RS_ISOLATED=1"
        } else {
            ""
        },
    );
    // Spawned through std: the marker's lines are told apart by the process's pid.
    let child = Command::from(program)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", exe.display()))?;
    let pid = child.id();
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{stdout}");

    let loaded = fs::read_to_string(&marker).unwrap_or_default();
    // Every plugin of ours that libomptarget initialised in that process, in order.
    let kinds: Vec<&str> = loaded
        .lines()
        .filter_map(|l| l.strip_suffix(&format!(" {pid}")))
        .collect();
    println!();
    println!(
        "plugins of ours loaded by process {pid}: {} (from {})",
        kinds.join(", "),
        plugins.display()
    );
    match target {
        Target::Host { isolated: false } => println!(
            "device that ran it: offload device 0 of the omptarget-rs x86_64 plugin = the \
             host CPU in this process (dlopen + libffi backend); this program's image is \
             x86_64 only, so the cuda and amdgpu plugins, loaded alongside, had nothing to run"
        ),
        Target::Host { isolated: true } => println!(
            "device that ran it: offload device 0 of the omptarget-rs x86_64 plugin = the \
             isolated host device: the host CPU in a process of its own, where every host \
             address faults as on a GPU (no GPU here); this program's image is x86_64 only, \
             so the cuda and amdgpu plugins, loaded alongside, had nothing to run"
        ),
        Target::Cuda { sm } => println!(
            "device that ran it: offload device 0 of the omptarget-rs cuda plugin = the \
             NVIDIA GPU ({sm}, CUDA driver through cudarc); this program's image is nvptx64 \
             only, so no other plugin had anything to run"
        ),
    }
    if !out.status.success() {
        bail!("the demo program failed: {}", out.status);
    }
    ensure!(
        kinds.contains(&kind),
        "the program ran, but not through our {kind} plugin (load marker: {loaded:?})"
    );
    Ok(stdout)
}
