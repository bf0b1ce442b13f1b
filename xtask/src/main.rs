//! Project automation: `cargo xtask <command>`. See README.md. Orchestration only: each
//! command calls the product's build (device-build, release) or the test harness.

mod device;
mod dist;
mod install;
mod test;

use anyhow::Result;
use clap::{Parser, Subcommand};
use harness::{
    bench, debian13_programs, demo, fuzz, gpu_kit, gpu_programs, indirect_programs, lit,
    reliability,
};

#[derive(Parser)]
#[command(
    name = "xtask",
    about = "Build, demo and test the declare-target-indirect runtime"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build device-rtl for nvptx64 / amdgcn (bitcode) and x86_64 (static library).
    BuildDevice(device::Args),
    /// Build the libomptarget 16 plugins (x86_64, cuda, amdgpu) into target/plugin/.
    BuildPlugin,
    /// Build the packages a user installs into target/dist/: a .deb and a relocatable
    /// tarball per LLVM version (`--llvm N`; default: every one this release packages).
    Dist(dist::Args),
    /// Build everything and run the indirect-call example through libomptarget 16 on
    /// the best device present (an NVIDIA GPU, else the host CPU).
    Demo(demo::Args),
    /// Install plugins, device RTL, compiler plugin, header, tools and clang config
    /// files under --prefix (then `clang-N --config=P/share/omptarget-indirect/<triple>.cfg`);
    /// `--llvm 17|18` for Debian 13's clang-17/18 (the GPU bitcode rewritten for them).
    Install(install::Args),
    /// In the Debian 13 root of LLVM 17 or 18: `cargo xtask install --llvm N` inside it,
    /// its GPU device RTL checked, then the standard indirect programs built with clang-N
    /// and run through our plugin.
    Debian13Programs(debian13_programs::Args),
    /// Build the standard indirect-call programs for an NVIDIA GPU through the installed
    /// nvptx64 config into --out (the GPU kit runs them), checking each cubin.
    IndirectGpuPrograms(indirect_programs::Args),
    /// Build all the GPU kit's programs for one NVIDIA GPU (default sm_90), their images
    /// checked, into target/gpu-programs/<sm>/ with a manifest.json (the kit copies them;
    /// tests/tests/cuda_standin_load.rs loads them through the CUDA driver stand-in).
    GpuPrograms(gpu_programs::Args),
    /// Run LLVM 16's libomptarget lit suite through our plugin (or LLVM's, to compare);
    /// `--llvm 17` / `--llvm 18`: that LLVM's, in a cached Debian 13 root, through both,
    /// compared.
    Lit(lit::Args),
    /// Bounded cargo-fuzz runs of every parser target.
    Fuzz(fuzz::Args),
    /// Benchmarks (docs/BENCHMARKS.md): `bench cpu` (the lookup), `bench plugin` (ours vs
    /// LLVM 16 plugin through libomptarget), `bench load` (load_binary, 10 to 1M entries).
    Bench(bench::Args),
    /// The GPU kit: everything a GPU machine without Rust or LLVM needs, in
    /// target/gpu-bundle/ (run there: `bash run.sh --results DIR`); `--llvm 18` the LLVM
    /// 18 kit in target/gpu-bundle-llvm18/.
    GpuBundle(gpu_kit::Args),
    /// Endurance, stress and dlopen cycles through libomptarget 16; --valgrind; --asan.
    Reliability(reliability::Args),
    /// Everything CI runs: prerequisites, builds, unit, link, end-to-end and lit tests.
    Test(test::Args),
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::BuildDevice(a) => device::main(a),
        Cmd::BuildPlugin => {
            let dir = release::plugin::build_plugins()?;
            println!("plugins in {}", dir.display());
            Ok(())
        }
        Cmd::Dist(a) => dist::main(a),
        Cmd::Demo(a) => demo::main(a),
        Cmd::Install(a) => install::main(a),
        Cmd::Debian13Programs(a) => debian13_programs::main(a),
        Cmd::IndirectGpuPrograms(a) => indirect_programs::main(a),
        Cmd::GpuPrograms(a) => gpu_programs::main(a),
        Cmd::Lit(a) => lit::main(a),
        Cmd::Fuzz(a) => fuzz::main(a),
        Cmd::Test(a) => test::main(a),
        Cmd::Reliability(a) => reliability::main(a),
        Cmd::GpuBundle(a) => gpu_kit::main(a),
        Cmd::Bench(a) => bench::main(a),
    }
}
