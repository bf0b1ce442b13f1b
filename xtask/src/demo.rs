//! `cargo xtask demo`: build the device RTL and the plugins, compile
//! examples/indirect_calls.c with clang 16 for the best offload device present, run it
//! through the real libomptarget 16 with our plugins, and say which device ran it.
//!
//! Backends: an NVIDIA GPU when `nvidia-smi` reports one (the program is compiled for
//! nvptx64 at the GPU's SM and runs through our cuda plugin), else the host CPU (an
//! x86_64 offload image, our x86_64 plugin). `--backend` forces one; `--build-only`
//! compiles and checks the device image without running (what CI does for CUDA here, on
//! a machine without a GPU).
use crate::{device, plugin, util};
use anyhow::{bail, ensure, Context, Result};
use offload_formats::image::{find_images, ImageKind};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args, Default)]
pub struct Args {
    /// The offload device to run on: `auto` takes an NVIDIA GPU when nvidia-smi reports
    /// one, else the host CPU.
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
    Cuda,
}

/// What the demo compiled for.
enum Target {
    Host,
    /// An NVIDIA GPU architecture, e.g. `sm_90`.
    Cuda {
        sm: String,
    },
}

pub fn main(args: Args) -> Result<()> {
    let gpu = nvidia_gpu_sm()?;
    let target = match (args.backend, gpu) {
        (Backend::Host, _) | (Backend::Auto, None) => Target::Host,
        (Backend::Auto, Some(sm)) => match rtl_family_of(&sm) {
            Ok(_) => Target::Cuda { sm },
            Err(why) => {
                eprintln!("demo: the GPU is {sm}: {why:#}; running on the host CPU instead");
                Target::Host
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
    let plugins = plugin::build_plugins()?;
    let out_dir = util::target_dir().join("demo");
    fs::create_dir_all(&out_dir)?;
    let source = util::root().join("examples/indirect_calls.c");
    let (exe, kind) = match &target {
        Target::Host => {
            util::section("demo: compile examples/indirect_calls.c with clang 16 (x86_64)");
            let exe = out_dir.join("indirect_calls");
            plugin::compile_offload_program(&source, &exe)?;
            (exe, "x86_64")
        }
        Target::Cuda { sm } => {
            util::section(&format!(
                "demo: compile examples/indirect_calls.c with clang 16 for {sm}"
            ));
            let exe = out_dir.join(format!("indirect_calls.{sm}"));
            compile_nvptx_program(&source, &exe, sm)?;
            check_nvptx_image(&exe, sm)?;
            (exe, "cuda")
        }
    };
    if args.build_only {
        println!("demo built (not run): {}", exe.display());
        return Ok(());
    }
    run(&exe, &plugins, &out_dir, kind, &target)
}

/// The SM of the first NVIDIA GPU (`sm_90` for compute capability 9.0), or None when
/// nvidia-smi is missing or lists no GPU.
fn nvidia_gpu_sm() -> Result<Option<String>> {
    let Some(smi) = util::which("nvidia-smi") else {
        return Ok(None);
    };
    let out = Command::new(smi)
        .args(["--query-gpu=compute_cap", "--format=csv,noheader"])
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

/// A relocatable device RTL cubin for exactly `sm` (nvlink links objects of one
/// architecture): build-device's own for sm_70/80/90, else its PTX of the same major
/// version (minor at most `sm`'s) assembled for `sm` by ptxas.
pub fn device_rtl_cubin_for(sm: &str, scratch: &Path) -> Result<PathBuf> {
    let built_sm = rtl_family_of(sm)?;
    let (ptx, cubin) = device::nvptx_outputs_of(built_sm);
    if built_sm == sm {
        return Ok(cubin);
    }
    let out = scratch.join(format!("device_rtl.{sm}.cubin"));
    util::run(
        Command::new(util::ptxas()?)
            .args(["--compile-only", "-arch", sm])
            .arg(&ptx)
            .arg("-o")
            .arg(&out),
    )?;
    Ok(out)
}

/// The build-device architecture whose PTX serves `sm`: the same major version, the
/// highest minor at most `sm`'s. Fails for GPUs clang 16 cannot target.
fn rtl_family_of(sm: &str) -> Result<&'static str> {
    let number = |s: &str| -> Option<u32> { s.strip_prefix("sm_")?.parse().ok() };
    let want = number(sm).with_context(|| format!("{sm} is not an sm_XY architecture"))?;
    ensure!(
        want <= 90,
        "clang 16, the compiler libomptarget 16 goes with, targets at most sm_90"
    );
    device::NVPTX_ARCHES
        .iter()
        .filter_map(|s| Some((number(s)?, *s)))
        .filter(|&(n, _)| n / 10 == want / 10 && n <= want)
        .max()
        .map(|(_, s)| s)
        .with_context(|| {
            format!(
                "no device RTL build runs on {sm} (built: {})",
                device::NVPTX_ARCHES.join(", ")
            )
        })
}

/// A `--cuda-path` for clang 16: the CUDA installation ptxas comes from when it has
/// `include/cuda.h`, else a folder of links into the `nvidia-cuda-nvcc` wheel (ptxas,
/// nvlink, libdevice) with a `cuda.h` that states a version clang 16 accepts.
pub fn cuda_path_for_clang16() -> Result<PathBuf> {
    let ptxas = util::ptxas()?;
    let root = ptxas
        .parent()
        .and_then(Path::parent)
        .context("ptxas has no bin/ parent")?
        .to_path_buf();
    if root.join("include/cuda.h").is_file() && root.join("nvvm/libdevice").is_dir() {
        return Ok(root);
    }
    let dir = util::target_dir().join("demo/cuda-for-clang16");
    let _ = fs::remove_dir_all(&dir);
    for sub in ["bin", "include", "nvvm"] {
        fs::create_dir_all(dir.join(sub))?;
    }
    let link = |from: PathBuf, to: PathBuf| -> Result<()> {
        ensure!(from.exists(), "{} is missing", from.display());
        std::os::unix::fs::symlink(&from, &to)
            .with_context(|| format!("linking {} to {}", to.display(), from.display()))
    };
    link(root.join("bin/ptxas"), dir.join("bin/ptxas"))?;
    link(root.join("bin/nvlink"), dir.join("bin/nvlink"))?;
    link(root.join("nvvm/libdevice"), dir.join("nvvm/libdevice"))?;
    // clang 16 reads the version from cuda.h; 12.8 is past what it knows (a warning,
    // silenced below), and it then uses its newest PTX ISA.
    fs::write(dir.join("include/cuda.h"), "#define CUDA_VERSION 12080\n")?;
    Ok(dir)
}

/// Compile a C OpenMP program for an NVIDIA GPU with clang 16, its device image linked
/// with the device RTL.
///
/// clang 16 links nvptx device images with nvlink and passes it no
/// `-Xoffload-linker` arguments, so the device RTL goes in the way offload libraries
/// do with the new driver: its cubin packed as an OffloadBinary
/// (clang-offload-packager) and embedded in a host object that is linked with the
/// program; the linker wrapper extracts it and nvlink resolves
/// `__kmpc_target_translate_fptr` from it.
pub fn compile_nvptx_program(source: &Path, output: &Path, sm: &str) -> Result<()> {
    let clang = util::llvm16("clang")?;
    let packager = util::llvm16("clang-offload-packager")?;
    device::build_all()?;
    let dir = output.parent().context("output has no folder")?;
    let rtl_cubin = device_rtl_cubin_for(sm, dir)?;
    let cuda = cuda_path_for_clang16()?;
    let packed = dir.join(format!("device_rtl.{sm}.offload"));
    util::run(Command::new(&packager).arg("-o").arg(&packed).arg(format!(
        "--image=file={},triple=nvptx64-nvidia-cuda,arch={sm},kind=openmp",
        rtl_cubin.display()
    )))?;
    let empty = dir.join("device_rtl_holder.c");
    fs::write(&empty, "/* holds the device RTL's offload image */\n")?;
    let holder = dir.join(format!("device_rtl.{sm}.o"));
    util::run(
        Command::new(&clang)
            .arg("-c")
            .arg(&empty)
            .arg(format!(
                "-Xclang=-fembed-offload-object={}",
                packed.display()
            ))
            .arg("-o")
            .arg(&holder),
    )?;
    util::run(
        Command::new(&clang)
            .args(["-O1", "-fopenmp", "-fopenmp-targets=nvptx64-nvidia-cuda"])
            .args(["-Xopenmp-target", &format!("-march={sm}")])
            .arg("-Wno-unknown-cuda-version")
            .arg(format!("--cuda-path={}", cuda.display()))
            .arg("-I")
            .arg(util::root().join("host-plugin/include"))
            .arg(source)
            .arg(&holder)
            .arg("-o")
            .arg(output),
    )
}

/// The program carries one cubin for `sm` that defines the lookup and both table
/// globals (nvlink took them from the device RTL) and the example's indirect-function
/// pointers (`__omp_indirect_fn_*`): what the cuda plugin will look up.
fn check_nvptx_image(exe: &Path, sm: &str) -> Result<()> {
    use object::{Object, ObjectSymbol};
    let bytes = fs::read(exe)?;
    let images = find_images(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", exe.display()))?;
    let cubins: Vec<_> = images
        .iter()
        .filter(|i| {
            i.kind
                == ImageKind::Elf {
                    machine: object::elf::EM_CUDA,
                    relocatable: false,
                }
                && i.arch.as_deref() == Some(sm)
        })
        .collect();
    ensure!(
        cubins.len() == 1,
        "{}: expected one {sm} cubin, found {} device images",
        exe.display(),
        images.len()
    );
    let cubin = object::File::parse(&*cubins[0].data).context("the cubin is not ELF")?;
    let defined: Vec<String> = cubin
        .symbols()
        .filter(|s| s.is_definition())
        .filter_map(|s| s.name().ok().map(str::to_string))
        .collect();
    let mut wanted: Vec<&str> = device::EXPORTED_SYMBOLS.to_vec();
    wanted.extend([
        "__omp_indirect_fn_add_one",
        "__omp_indirect_fn_twice",
        "__omp_indirect_fn_square",
    ]);
    let missing: Vec<&&str> = wanted
        .iter()
        .filter(|w| !defined.iter().any(|d| d == *w))
        .collect();
    ensure!(
        missing.is_empty(),
        "the {sm} image does not define {missing:?}"
    );
    eprintln!(
        "device image: one {sm} cubin ({} bytes) defining {}",
        cubins[0].data.len(),
        wanted.join(", ")
    );
    Ok(())
}

/// Run the program through libomptarget 16 with our plugins first on the library path,
/// and report which of our plugins the process loaded and which device ran it.
fn run(exe: &Path, plugins: &Path, out_dir: &Path, kind: &str, target: &Target) -> Result<()> {
    util::section("demo: run it through libomptarget 16 and our plugin");
    let marker = out_dir.join("load-marker.txt");
    let _ = fs::remove_file(&marker);
    eprintln!(
        "+ LD_LIBRARY_PATH={} LIBOMPTARGET_INFO=16 OMPTARGET_RS_LOAD_MARKER={} {}",
        plugins.display(),
        marker.display(),
        exe.display()
    );
    let child = Command::new(exe)
        .env("LD_LIBRARY_PATH", plugins)
        // Bit 0x10 (plugin information): our plugin prints the table it installed.
        .env("LIBOMPTARGET_INFO", "16")
        .env("OMPTARGET_RS_LOAD_MARKER", &marker)
        .spawn()
        .with_context(|| format!("running {}", exe.display()))?;
    let pid = child.id();
    let out = child.wait_with_output()?;

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
        Target::Host => println!(
            "device that ran it: offload device 0 of the omptarget-rs x86_64 plugin = the \
             host CPU (dlopen + libffi backend); this program's image is x86_64 only, so the \
             cuda and amdgpu plugins, loaded alongside, had nothing to run"
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
    Ok(())
}
