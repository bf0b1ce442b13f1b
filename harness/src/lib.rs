//! The test harness: everything `cargo xtask test` and the other xtask commands run to
//! prove the product, apart from making it (release, device-build):
//! - the GPU kits and their runner ([`gpu_kit`], kit/), the programs they carry
//!   ([`gpu_programs`], [`indirect_programs`], [`nvptx_program`]) and the demo ([`demo`]);
//! - libomptarget's lit suites, in-process and isolated, for LLVM 16, 17 and 18 ([`lit`]);
//! - the Debian roots: bare ones for the kits and packages ([`debian_root`]), Debian 13's
//!   for LLVM 17 and 18 ([`debian13`], [`debian13_programs`], [`debian13_gpu_image`],
//!   [`debian13_gpu_install`]), cargo inside them offline ([`root_cargo`]);
//! - the packages as a user meets them ([`package_check`]);
//! - reliability runs and bounded fuzzing ([`reliability`], [`fuzz`]);
//! - the benchmarks ([`bench`]).

pub mod bench;
pub mod cache_lock;
pub mod debian13;
pub mod debian13_gpu_image;
pub mod debian13_gpu_install;
pub mod debian13_programs;
pub mod debian_root;
pub mod demo;
pub mod fuzz;
pub mod gpu_kit;
pub mod gpu_programs;
pub mod indirect_programs;
pub mod lit;
pub mod nvptx_program;
pub mod package_check;
pub mod prefetch;
pub mod reliability;
pub mod root_cargo;

// The product's build, under the names the harness's modules use.
pub use release::{compiler_plugin, dist, install, llvm_release, plugin, util};

/// A scratch folder for a unit test, under target/ (no tempfile dependency),
/// emptied.
#[cfg(test)]
pub(crate) fn test_scratch(name: &str) -> std::path::PathBuf {
    let d = util::target_dir()
        .join("harness-test-scratch")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
