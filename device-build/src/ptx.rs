//! PTX for each NVIDIA GPU from each nvptx bitcode (llc-22), assembled by ptxas into a
//! relocatable cubin: the proof that the PTX is valid for that GPU.

use crate::targets::{
    nvptx_outputs, nvptx_targets, output_of, DeviceTarget, NVPTX_ARCHES, NVPTX_TRIPLE, PTX_FEATURE,
};
use anyhow::{ensure, Context, Result};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// PTX for each NVIDIA GPU from each nvptx bitcode, assembled by ptxas into a
/// relocatable cubin that must define the lookup.
pub fn assemble_all() -> Result<()> {
    for target in nvptx_targets() {
        for sm in NVPTX_ARCHES {
            assemble_one(&target, sm)?;
        }
    }
    Ok(())
}

fn assemble_one(target: &DeviceTarget, sm: &str) -> Result<()> {
    let bc = output_of(target);
    let llc = crate::tools::llvm22("llc")?;
    let nm = crate::tools::llvm22("llvm-nm")?;
    let ptxas = crate::tools::ptxas()?;
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
    let syms = crate::tools::read(cmd!(sh, "{nm} --defined-only {cubin}"))?;
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
    crate::tools::wheel_tool("nvidia-cuda-nvcc-cu12", "cuda_nvcc/bin/ptxas")
}

/// A relocatable device RTL cubin for exactly `sm` (nvlink links objects of one
/// architecture): build-device's own for sm_70/80/90, else its PTX of the same major
/// version (minor at most `sm`'s) assembled for `sm` by ptxas.
pub fn device_rtl_cubin_for(sm: &str, scratch: &Path) -> Result<PathBuf> {
    let built_sm = rtl_family_of(sm)?;
    let (ptx, cubin) = crate::targets::nvptx_outputs_of(built_sm);
    if built_sm == sm {
        return Ok(cubin);
    }
    let out = scratch.join(format!("device_rtl.{sm}.cubin"));
    let ptxas = crate::tools::ptxas()?;
    let sh = Shell::new()?;
    cmd!(sh, "{ptxas} --compile-only -arch {sm} {ptx} -o {out}").run()?;
    Ok(out)
}

/// The build-device architecture whose PTX serves `sm`: the same major version, the
/// highest minor at most `sm`'s. Fails for GPUs clang 16 cannot target.
pub fn rtl_family_of(sm: &str) -> Result<&'static str> {
    let number = |s: &str| -> Option<u32> { s.strip_prefix("sm_")?.parse().ok() };
    let want = number(sm).with_context(|| format!("{sm} is not an sm_XY architecture"))?;
    ensure!(
        want <= 90,
        "clang 16, the compiler libomptarget 16 goes with, targets at most sm_90"
    );
    crate::targets::NVPTX_ARCHES
        .iter()
        .filter_map(|s| Some((number(s)?, *s)))
        .filter(|&(n, _)| n / 10 == want / 10 && n <= want)
        .max()
        .map(|(_, s)| s)
        .with_context(|| {
            format!(
                "no device RTL build runs on {sm} (built: {})",
                crate::targets::NVPTX_ARCHES.join(", ")
            )
        })
}
