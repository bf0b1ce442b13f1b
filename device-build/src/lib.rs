//! The device runtime's shipped artifacts, made and checked: what users link. xtask's
//! `build-device`, `install` and `dist` call this crate; nothing here is orchestration.
//!
//! Files written under target/device/ ([`targets::outputs`]):
//! - nvptx64-nvidia-cuda/device_rtl.bc, and device_rtl.sm_{70,80,90}.{ptx,cubin}
//!   (PTX from llc-22, assembled by ptxas to prove it is valid: [`ptx`]),
//! - the same under nvptx64-nvidia-cuda/warp-cooperative/: the variant with the
//!   warp-uniform fast path (`--cfg device_rtl_warp_cooperative`), opt-in until measured
//!   on a GPU,
//! - amdgcn-amd-amdhsa/{gfx90a,gfx942,gfx1100}/device_rtl.bc,
//! - x86_64-unknown-linux-gnu/libdevice_rtl.a,
//! - beside each GPU bitcode, `device_rtl.llvmN.bc` for every older LLVM N (16, 17, 18)
//!   whose tools the machine has: the same IR, rewritten for that LLVM ([`older_llvm`]).
//!
//! The rules of an artifact, each a module with its unit tests: the plugin-written
//! globals are `constant` in GPU bitcode ([`read_only_globals`]); every artifact defines
//! the exported symbols and references nothing it should not ([`symbols`]); older
//! LLVMs get IR they read ([`older_llvm`]).
//!
//! GPU targets need `core` built from source (`-Zbuild-std=core`), so the build picks a
//! toolchain that has the library source ([`toolchain`]). Each target gets its own
//! CARGO_TARGET_DIR under target/device-build/, so the host build's fingerprints are
//! never disturbed and each target rebuilds incrementally ([`compile`]).

pub mod compile;
pub mod freshness;
pub mod older_llvm;
pub mod ptx;
pub mod read_only_globals;
pub mod symbols;
pub mod targets;
pub mod toolchain;
pub mod tools;

pub use older_llvm::{older_llvms, write_older_bitcode_in, OlderLlvm, ToolPlace};
pub use targets::{
    device_dir, nvptx_outputs_of, older_bitcode_name, outputs, AMDGPU_ARCHES, DEVICE_DIR_ENV,
    EXPORTED_SYMBOLS, NVPTX_ARCHES, WARP_COOPERATIVE,
};

use anyhow::{ensure, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;
use toolchain::Toolchain;

/// Every artifact, rebuilt when `force` or when one is older than its inputs
/// ([`freshness`]).
pub fn build(force: bool) -> Result<()> {
    tools::section("build-device");
    let all = outputs();
    if let Some(elsewhere) = std::env::var_os(DEVICE_DIR_ENV) {
        // Never build into a folder another machine's build owns.
        ensure!(
            !force && freshness::is_fresh(&all)?,
            "{DEVICE_DIR_ENV} names {}, a device RTL built elsewhere, which lacks an output \
             or is older than device-rtl's sources: rebuild it there",
            Path::new(&elsewhere).display()
        );
    }
    if !force && freshness::is_fresh(&all)? {
        eprintln!("device RTL: all outputs are newer than device-rtl's sources, nothing to do");
        list_outputs(&all);
        return Ok(());
    }
    let toolchain = Toolchain::select()?;
    let mut timings = compile_all(&toolchain, &targets::all_targets())?;
    let start = Instant::now();
    ptx::assemble_all()?;
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

/// Builds every target, as many at a time as the machine has cores: each has its own
/// target folder and outputs, and much of a build is rustc's single-threaded front end
/// on `core`. Returns each target's seconds, in the targets' order; the first error
/// (after every started build ends).
fn compile_all(toolchain: &Toolchain, all: &[targets::DeviceTarget]) -> Result<Vec<(String, f64)>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<f64>>>> =
        all.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers.min(all.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(target) = all.get(i) else { break };
                let start = Instant::now();
                let result = compile::build_target(toolchain, target)
                    .map(|()| start.elapsed().as_secs_f64());
                *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
            });
        }
    });
    all.iter()
        .zip(results)
        .map(|(target, result)| {
            let result = result.into_inner().unwrap_or_else(|e| e.into_inner());
            let secs = result.unwrap_or_else(|| Err(anyhow::anyhow!("not built")))?;
            Ok((target.label(), secs))
        })
        .collect()
}

/// Every artifact, rebuilt only where one is older than its inputs.
pub fn build_all() -> Result<()> {
    build(false)
}

/// Builds (if needed) and returns target/device/x86_64-unknown-linux-gnu/libdevice_rtl.a.
pub fn host_staticlib() -> Result<PathBuf> {
    let target = targets::HOST_TARGET;
    let out = targets::output_of(&target);
    if !freshness::is_fresh(std::slice::from_ref(&out))? {
        let toolchain = Toolchain::select()?;
        compile::build_target(&toolchain, &target)?;
    }
    Ok(out)
}

fn list_outputs(files: &[PathBuf]) {
    eprintln!("device RTL outputs:");
    for f in files {
        eprintln!("  {}", f.display());
    }
}
