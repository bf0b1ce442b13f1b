//! Shared helpers of the CUDA tests: the kernel fixtures (built here with clang-22 and
//! ptxas, or read prebuilt from `OMPTARGET_RS_CUDA_FIXTURES` on a GPU machine that has
//! no clang), and the one-line skip where there is no driver or GPU.
#![allow(dead_code)]

use e2e_tests::paths::{fixture, require_file, target_dir};
use e2e_tests::process::run_ok;
use e2e_tests::tools::{llvm22, ptxas};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The SM architectures the fixtures are built for.
pub const ARCHES: [u32; 2] = [90, 80];
pub const FIXTURE: &str = "indirect_calls";

/// Which nvptx device RTL build the fixture links (`cargo xtask build-device` writes both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RtlVariant {
    /// device_rtl.bc: the scalar branchless search.
    Default,
    /// warp-cooperative/device_rtl.bc: lanes with the same pointer search together.
    WarpCooperative,
}

pub const VARIANTS: [RtlVariant; 2] = [RtlVariant::Default, RtlVariant::WarpCooperative];

impl RtlVariant {
    /// The bitcode under target/device/.
    fn bitcode(self) -> &'static str {
        match self {
            RtlVariant::Default => "device/nvptx64-nvidia-cuda/device_rtl.bc",
            RtlVariant::WarpCooperative => {
                "device/nvptx64-nvidia-cuda/warp-cooperative/device_rtl.bc"
            }
        }
    }

    /// The part of the fixture's file names that tells the variants apart.
    fn infix(self) -> &'static str {
        match self {
            RtlVariant::Default => "",
            RtlVariant::WarpCooperative => ".warp-cooperative",
        }
    }
}
/// Where gpu-bundle's run.sh points the tests at the prebuilt cubins.
pub const FIXTURES_ENV: &str = "OMPTARGET_RS_CUDA_FIXTURES";

/// Where the fixture cubins are built: target/cuda-fixtures/ (gpu-bundle copies them).
pub fn fixture_dir() -> PathBuf {
    target_dir().join("cuda-fixtures")
}

pub fn cubin_name(variant: RtlVariant, sm: u32) -> String {
    format!("{FIXTURE}{}.sm_{sm}.cubin", variant.infix())
}

/// The one line a GPU test prints when it cannot run here; the test then passes.
pub fn skip(test: &str, reason: &str) {
    println!("SKIPPED: {test}: no CUDA driver/GPU ({reason})");
}

/// Build the fixture for one SM: clang-22 links the variant's device_rtl.bc into the C
/// kernels and writes PTX, ptxas assembles the cubin. Returns (ptx, cubin) paths.
pub fn build_fixture(variant: RtlVariant, sm: u32) -> (PathBuf, PathBuf) {
    static BUILDS: AtomicUsize = AtomicUsize::new(0);
    let bc = require_file(
        target_dir().join(variant.bitcode()),
        "`cargo xtask build-device`",
    );
    let dir = fixture_dir();
    std::fs::create_dir_all(&dir).expect("create target/cuda-fixtures");
    let cubin_name = cubin_name(variant, sm);
    // Build under names no other build uses (test processes and the threads of one run
    // in parallel), then rename the cubin into place.
    let unique = format!(
        "{}.{}",
        std::process::id(),
        BUILDS.fetch_add(1, Ordering::Relaxed)
    );
    let ptx = dir.join(format!("{FIXTURE}{}.sm_{sm}.{unique}.ptx", variant.infix()));
    let cubin = dir.join(&cubin_name);
    let tmp = dir.join(format!("{cubin_name}.{unique}.tmp"));
    run_ok(
        Command::new(llvm22("clang"))
            .arg("--target=nvptx64-nvidia-cuda")
            .arg(format!("-march=sm_{sm}"))
            .args(["-Xclang", "-target-feature", "-Xclang", "+ptx80"])
            .args(["-nogpulib", "-O2", "-S"])
            .arg(fixture(&format!("cuda/{FIXTURE}.c")))
            .args(["-Xclang", "-mlink-builtin-bitcode", "-Xclang"])
            .arg(&bc)
            .arg("-o")
            .arg(&ptx),
    );
    run_ok(
        Command::new(ptxas())
            .arg(format!("-arch=sm_{sm}"))
            .arg(&ptx)
            .arg("-o")
            .arg(&tmp),
    );
    std::fs::rename(&tmp, &cubin).expect("move the cubin into place");
    let final_ptx = dir.join(format!("{FIXTURE}{}.sm_{sm}.ptx", variant.infix()));
    std::fs::rename(&ptx, &final_ptx).expect("move the PTX into place");
    (final_ptx, cubin)
}

/// The cubin for one variant and SM: prebuilt from `OMPTARGET_RS_CUDA_FIXTURES`, else
/// built now.
pub fn fixture_cubin(variant: RtlVariant, sm: u32) -> Vec<u8> {
    let path = match std::env::var_os(FIXTURES_ENV) {
        Some(dir) => PathBuf::from(dir).join(cubin_name(variant, sm)),
        None => build_fixture(variant, sm).1,
    };
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (build the fixtures with `cargo xtask gpu-bundle` or run where \
             clang-22 and ptxas are)",
            path.display()
        )
    })
}
