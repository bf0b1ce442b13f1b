//! The GPU side of LLVM 17 and 18 checked without a GPU (a part of
//! `cargo xtask debian13-programs --llvm N`): `tests/fixtures/debian13/gpu_image.c`, a
//! plain target region, a teams reduction and a `declare target indirect` function, is
//! built for sm_90 by clang-N in its Debian 13 root, and its cubin must have what the
//! cuda plugin reads of it (`host-plugin`'s `device_env` and `resolve`):
//! - the device environment in LLVM N's layout (17: 24 bytes, 18: 48 bytes);
//! - for every kernel, its mode: clang 17's `<kernel>_exec_mode` (1 byte), clang 18's
//!   `<kernel>_kernel_environment` (48 bytes), whose configuration also says which kernel
//!   needs a reduction buffer (the teams reduction, and only it);
//! - clang 18: its own 8-byte holder of the indirect function.
//!
//! The cubin is not run: no GPU. This is how real clang 17/18 images meet the layouts
//! the plugin assumes (offload_formats::device_runtime).

use crate::{debian_root, nvptx_program, util};
use anyhow::{bail, ensure, Context, Result};
use object::{Object, ObjectSection, ObjectSymbol};
use offload_formats::device_runtime::{
    kernel_environment, DeviceEnvironmentLayout, DEVICE_ENVIRONMENT_NAMES,
};
use std::fs;
use std::path::{Path, PathBuf};

const SM: &str = "sm_90";
const FIXTURE: &str = "tests/fixtures/debian13/gpu_image.c";

/// The folders the root must see for clang to build for NVIDIA GPUs: the `--cuda-path`
/// folder (under target/) and the CUDA installation its links point into.
pub fn cuda_binds() -> Result<(PathBuf, PathBuf)> {
    let folder = release::cuda::cuda_path_for_clang16()?;
    let ptxas = fs::canonicalize(folder.join("bin/ptxas"))?;
    let installation = test_support::tools::installation_of(&ptxas)
        .with_context(|| format!("{} is not in a bin/ folder", ptxas.display()))?
        .to_path_buf();
    Ok((folder, installation))
}

/// Build the fixture with clang-`major` inside `root` (where `cuda_path` and the
/// workspace are mounted) into `out`, and check its cubin. Returns a one-line summary.
pub fn check(
    sh: &xshell::Shell,
    root: &Path,
    major: u32,
    cuda_path: &Path,
    out: &Path,
) -> Result<String> {
    let exe = out.join(format!("gpu_image_{SM}"));
    let source = util::root().join(FIXTURE);
    let args = [
        format!("clang-{major}"),
        "-fopenmp".into(),
        format!("--offload-arch={SM}"),
        format!("--cuda-path={}", cuda_path.display()),
        "-Wno-unknown-cuda-version".into(),
        "-O1".into(),
        source.display().to_string(),
        "-o".into(),
        exe.display().to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    debian_root::chroot_cmd(sh, root, &args)
        .run()
        .with_context(|| format!("clang-{major} building {FIXTURE} for {SM}"))?;
    let (images, cubins) = nvptx_program::cubins_of(&exe, SM)?;
    let cubin = cubins
        .first()
        .with_context(|| format!("{}: no {SM} cubin among {images} images", exe.display()))?;
    let file = object::File::parse(&**cubin).context("the cubin is not ELF")?;
    let facts = ImageFacts::read(&file)?;
    facts.expect_llvm(major)?;
    Ok(facts.summary(major))
}

/// What the check reads of a cubin.
struct ImageFacts {
    layout: DeviceEnvironmentLayout,
    /// Each kernel: its name, mode byte and reduction buffer bytes (0 from `_exec_mode`).
    kernels: Vec<(String, u8, u64)>,
    /// How many of the kernels' modes came from a kernel environment.
    from_kernel_environment: usize,
    /// clang's own 8-byte holders of indirect functions.
    holders: usize,
}

impl ImageFacts {
    fn read(file: &object::File) -> Result<Self> {
        let symbol = |name: &str| file.symbols().find(|s| s.name() == Ok(name));
        let env = DEVICE_ENVIRONMENT_NAMES
            .iter()
            .find_map(|n| symbol(n.to_str().ok()?))
            .context("no device environment global")?;
        let layout = DeviceEnvironmentLayout::of_size(env.size())
            .with_context(|| format!("a device environment of {} bytes", env.size()))?;
        let kernel_names: Vec<String> = file
            .symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text && s.is_definition())
            .filter_map(|s| s.name().ok().map(str::to_owned))
            .filter(|n| n.starts_with("__omp_offloading_"))
            .collect();
        let mut kernels = Vec::new();
        let mut from_kernel_environment = 0;
        for name in kernel_names {
            let env_name = format!(
                "{name}{}",
                std::str::from_utf8(kernel_environment::SUFFIX).expect("ASCII")
            );
            if let Some(env) = symbol(&env_name) {
                ensure!(
                    env.size() == kernel_environment::SIZE,
                    "{env_name} is {} bytes",
                    env.size()
                );
                let bytes = data_of(file, &env, kernel_environment::CONFIGURATION_BYTES)?;
                let configuration = bytes.try_into().expect("the configuration's length");
                let (mode, buffer) = kernel_environment::parse(&configuration);
                kernels.push((name, mode, buffer));
                from_kernel_environment += 1;
            } else if let Some(exec_mode) = symbol(&format!("{name}_exec_mode")) {
                ensure!(
                    exec_mode.size() == 1,
                    "{name}_exec_mode is {} bytes",
                    exec_mode.size()
                );
                let mode = data_of(file, &exec_mode, 1)?[0];
                kernels.push((name, mode, 0));
            } else {
                bail!("kernel {name} has neither an exec mode nor a kernel environment");
            }
        }
        let holders = file
            .symbols()
            .filter(|s| s.is_definition() && s.size() == 8)
            .filter_map(|s| s.name().ok())
            .filter(|n| n.starts_with("__omp_offloading_") && n.contains("_twice_l"))
            .count();
        Ok(ImageFacts {
            layout,
            kernels,
            from_kernel_environment,
            holders,
        })
    }

    /// What clang `major` must have built.
    fn expect_llvm(&self, major: u32) -> Result<()> {
        let (layout, holders) = match major {
            17 => (DeviceEnvironmentLayout::Llvm17, 0),
            18 => (DeviceEnvironmentLayout::Llvm18, 1),
            _ => bail!("no GPU image expectations for LLVM {major}"),
        };
        ensure!(
            self.layout == layout,
            "LLVM {major}'s device environment should be {layout:?}, is {:?}",
            self.layout
        );
        ensure!(
            self.kernels.len() == 2,
            "two kernels expected: {:?}",
            self.kernels
        );
        for (name, mode, _) in &self.kernels {
            ensure!(
                (1..=3).contains(mode),
                "{name}: exec mode {mode} is no LLVM mode"
            );
        }
        let with_buffer: Vec<&str> = self
            .kernels
            .iter()
            .filter(|k| k.2 != 0)
            .map(|k| k.0.as_str())
            .collect();
        let (kernel_envs, reductions) = if major >= 18 { (2, 1) } else { (0, 0) };
        ensure!(
            self.from_kernel_environment == kernel_envs && with_buffer.len() == reductions,
            "LLVM {major}: {} kernel environments and reduction buffers for {with_buffer:?}; \
             expected {kernel_envs} and {reductions} (the teams reduction)",
            self.from_kernel_environment
        );
        ensure!(
            self.holders == holders,
            "LLVM {major}: {} holders of `twice` by clang, expected {holders}",
            self.holders
        );
        Ok(())
    }

    fn summary(&self, major: u32) -> String {
        let kernels: Vec<String> = self
            .kernels
            .iter()
            .map(|(_, mode, buffer)| match buffer {
                0 => format!("mode {mode}"),
                b => format!("mode {mode} with a {b}-byte reduction buffer"),
            })
            .collect();
        format!(
            "clang-{major} {SM} image: device environment {:?} ({} bytes); kernels: {}; \
             clang's holders of `twice`: {}",
            self.layout,
            self.layout.size(),
            kernels.join(", "),
            self.holders
        )
    }
}

/// The first `len` bytes of a symbol's initial value.
fn data_of<'a>(file: &'a object::File, symbol: &object::Symbol, len: usize) -> Result<&'a [u8]> {
    let name = symbol.name().unwrap_or("?");
    let index = symbol
        .section_index()
        .with_context(|| format!("{name} is in no section"))?;
    let section = file.section_by_index(index)?;
    section
        .data_range(symbol.address(), len as u64)?
        .with_context(|| {
            format!(
                "{name}: no initial bytes in {}",
                section.name().unwrap_or("?")
            )
        })
}
