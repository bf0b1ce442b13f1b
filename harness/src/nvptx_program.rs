//! Building clang-16 OpenMP programs for an NVIDIA GPU with the device RTL linked into
//! their device image: what `cargo xtask demo` runs on a GPU and what the GPU kit
//! carries to one.
//!
//! clang 16 links nvptx device images with nvlink and passes it no `-Xoffload-linker`
//! arguments, so the device RTL goes in the way offload libraries do with the new
//! driver: its relocatable cubin packed as an OffloadBinary (clang-offload-packager) and
//! embedded in a host object that is linked with the program; the linker wrapper
//! extracts it and nvlink resolves `__kmpc_target_translate_fptr` from it.
use crate::util;
use anyhow::{ensure, Context, Result};
use offload_formats::image::{find_images, ImageKind};
use std::fs;
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// What every program built for one GPU architecture shares: the compilers, a CUDA
/// folder clang 16 accepts, and the host object that carries the device RTL.
pub struct NvptxBuild {
    sm: String,
    cuda_path: PathBuf,
    rtl_holder: PathBuf,
}

impl NvptxBuild {
    /// Builds the device RTL (if needed) and packs its cubin for `sm` into `scratch`.
    pub fn prepare(sm: &str, scratch: &Path) -> Result<Self> {
        let clang = util::llvm16("clang")?;
        let packager = util::llvm16("clang-offload-packager")?;
        device_build::build_all()?;
        fs::create_dir_all(scratch)?;
        let rtl_cubin = device_build::ptx::device_rtl_cubin_for(sm, scratch)?;
        let packed = scratch.join(format!("device_rtl.{sm}.offload"));
        let sh = Shell::new()?;
        cmd!(
            sh,
            "{packager} -o {packed} --image=file={rtl_cubin},triple=nvptx64-nvidia-cuda,arch={sm},kind=openmp"
        )
        .run()?;
        let empty = scratch.join("device_rtl_holder.c");
        fs::write(&empty, "/* holds the device RTL's offload image */\n")?;
        let rtl_holder = scratch.join(format!("device_rtl.{sm}.o"));
        cmd!(
            sh,
            "{clang} -c {empty} -Xclang=-fembed-offload-object={packed} -o {rtl_holder}"
        )
        .run()?;
        Ok(NvptxBuild {
            sm: sm.to_owned(),
            cuda_path: release::cuda::cuda_path_for_clang16()?,
            rtl_holder,
        })
    }

    /// The flags that make a clang-16 OpenMP compile target this GPU (for compiles that
    /// do not link the device RTL, such as LLVM's own lit tests).
    pub fn offload_flags(&self) -> Vec<String> {
        offload_flags(&self.sm, &self.cuda_path)
    }

    /// Compile a C or C++ (`.cpp`) OpenMP program with its device image linked with the
    /// device RTL.
    pub fn compile(&self, source: &Path, output: &Path) -> Result<()> {
        let is_cxx = source.extension().is_some_and(|e| e == "cpp");
        let compiler = util::llvm16(if is_cxx { "clang++" } else { "clang" })?;
        let (offload_flags, rtl_holder) = (self.offload_flags(), &self.rtl_holder);
        let include = util::root().join("host-plugin/include");
        let sh = Shell::new()?;
        cmd!(
            sh,
            "{compiler} -O1 -fopenmp -fopenmp-targets=nvptx64-nvidia-cuda {offload_flags...} -I {include} {source} {rtl_holder} -o {output}"
        )
        .run()?;
        Ok(())
    }
}

/// The flags that make an OpenMP compile for nvptx64 target `sm`, with the CUDA folder
/// `cuda_path`.
pub fn offload_flags(sm: &str, cuda_path: &Path) -> Vec<String> {
    vec![
        "-Xopenmp-target=nvptx64-nvidia-cuda".to_owned(),
        format!("-march={sm}"),
        format!("--cuda-path={}", cuda_path.display()),
        // clang reads the version from cuda.h; the wheel's is newer than it knows.
        "-Wno-unknown-cuda-version".to_owned(),
    ]
}

/// The program's device images: how many it carries, and the cubins for `sm` among
/// them (linked CUDA ELF: what the cuda plugin loads).
pub fn cubins_of(exe: &Path, sm: &str) -> Result<(usize, Vec<Vec<u8>>)> {
    let bytes = fs::read(exe).with_context(|| format!("reading {}", exe.display()))?;
    let images = find_images(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", exe.display()))?;
    let cubin = ImageKind::Elf {
        machine: object::elf::EM_CUDA,
        relocatable: false,
    };
    let cubins = images
        .iter()
        .filter(|i| i.kind == cubin && i.arch.as_deref() == Some(sm))
        .map(|i| i.data.to_vec())
        .collect();
    Ok((images.len(), cubins))
}

/// The program carries one cubin for `sm` that defines the lookup, both table globals
/// (nvlink took them from the device RTL) and every name in `also`: what the cuda
/// plugin will look up. Returns the cubin's size.
pub fn check_image(exe: &Path, sm: &str, also: &[&str]) -> Result<usize> {
    use object::{Object, ObjectSymbol};
    let (images, cubins) = cubins_of(exe, sm)?;
    ensure!(
        cubins.len() == 1,
        "{}: expected one {sm} cubin, found {images} device images",
        exe.display(),
    );
    let cubin = object::File::parse(&*cubins[0]).context("the cubin is not ELF")?;
    let defined: Vec<String> = cubin
        .symbols()
        .filter(|s| s.is_definition())
        .filter_map(|s| s.name().ok().map(str::to_string))
        .collect();
    let mut wanted: Vec<&str> = device_build::EXPORTED_SYMBOLS.to_vec();
    wanted.extend(also);
    let missing: Vec<&&str> = wanted
        .iter()
        .filter(|w| !defined.iter().any(|d| d == *w))
        .collect();
    ensure!(
        missing.is_empty(),
        "{}: the {sm} image does not define {missing:?}",
        exe.display()
    );
    eprintln!(
        "{}: one {sm} cubin ({} bytes) defining {}",
        exe.display(),
        cubins[0].len(),
        wanted.join(", ")
    );
    Ok(cubins[0].len())
}
