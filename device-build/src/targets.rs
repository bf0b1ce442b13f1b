//! What the device build makes: its targets (triple, CPU, artifact, variant) and the
//! file each delivers under target/device/ (or [`DEVICE_DIR_ENV`]'s folder).

use crate::older_llvm::older_llvms;
use std::path::PathBuf;

/// The AMD GPUs we build bitcode for (one `core` build each).
pub const AMDGPU_ARCHES: &[&str] = &["gfx90a", "gfx942", "gfx1100"];
/// The NVIDIA GPUs the PTX is assembled for.
pub const NVPTX_ARCHES: &[&str] = &["sm_70", "sm_80", "sm_90"];
/// PTX ISA version used for all of them (covers sm_70..sm_90; ptxas 12+ reads it).
pub(crate) const PTX_FEATURE: &str = "+ptx80";

pub const NVPTX_TRIPLE: &str = "nvptx64-nvidia-cuda";
pub const AMDGCN_TRIPLE: &str = "amdgcn-amd-amdhsa";
pub const HOST_TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// The symbols every artifact must define.
pub const EXPORTED_SYMBOLS: &[&str] = &device_rtl::symbols::EXPORTED;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Artifact {
    Bitcode,
    StaticLib,
}

/// The nvptx64 variant with the warp-uniform fast path: its subdirectory and cfg.
pub const WARP_COOPERATIVE: &str = "warp-cooperative";
const WARP_COOPERATIVE_CFG: &str = "device_rtl_warp_cooperative";

/// One thing `cargo rustc` builds: a triple, maybe a CPU, bitcode or a static library,
/// maybe a variant (a subdirectory of the triple's and a `--cfg`).
#[derive(Clone, Copy)]
pub struct DeviceTarget {
    pub triple: &'static str,
    pub cpu: Option<&'static str>,
    pub artifact: Artifact,
    pub variant: Option<(&'static str, &'static str)>,
}

pub const HOST_TARGET: DeviceTarget = DeviceTarget {
    triple: HOST_TRIPLE,
    cpu: None,
    artifact: Artifact::StaticLib,
    variant: None,
};

impl DeviceTarget {
    pub fn label(&self) -> String {
        match (self.cpu, self.variant) {
            (_, Some((dir, _))) => format!("{}/{dir}", self.triple),
            (Some(cpu), None) if self.triple == AMDGCN_TRIPLE => format!("{}/{cpu}", self.triple),
            _ => self.triple.to_string(),
        }
    }
}

/// The nvptx64 builds: the default, then the warp-cooperative variant.
pub fn nvptx_targets() -> [DeviceTarget; 2] {
    let default = DeviceTarget {
        triple: NVPTX_TRIPLE,
        // The oldest GPU we support; clang re-targets the functions when it links them.
        // sm_70 is also the first with the `.sync` warp operations the variant uses.
        cpu: Some("sm_70"),
        artifact: Artifact::Bitcode,
        variant: None,
    };
    let warp_cooperative = DeviceTarget {
        variant: Some((WARP_COOPERATIVE, WARP_COOPERATIVE_CFG)),
        ..default
    };
    [default, warp_cooperative]
}

pub fn all_targets() -> Vec<DeviceTarget> {
    let mut targets = nvptx_targets().to_vec();
    targets.extend(AMDGPU_ARCHES.iter().map(|&gfx| DeviceTarget {
        triple: AMDGCN_TRIPLE,
        cpu: Some(gfx),
        artifact: Artifact::Bitcode,
        variant: None,
    }));
    targets.push(HOST_TARGET);
    targets
}

/// Names the folder of a device RTL built elsewhere, used instead of target/device/ (a
/// Debian 13 root's install takes the GPU builds of the machine around it, which has the
/// Rust and LLVM 22 they need).
pub const DEVICE_DIR_ENV: &str = "OMPTARGET_RS_DEVICE_DIR";

/// target/device/ (or [`DEVICE_DIR_ENV`]'s folder)
pub fn device_dir() -> PathBuf {
    std::env::var_os(DEVICE_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| test_support::workspace::target_dir().join("device"))
}

/// The file `cargo xtask build-device` delivers for one target.
pub fn output_of(target: &DeviceTarget) -> PathBuf {
    let dir = device_dir().join(target.label());
    match target.artifact {
        Artifact::Bitcode => dir.join("device_rtl.bc"),
        Artifact::StaticLib => dir.join("libdevice_rtl.a"),
    }
}

/// The default build's PTX and relocatable cubin for one of [`NVPTX_ARCHES`].
pub fn nvptx_outputs_of(sm: &str) -> (PathBuf, PathBuf) {
    nvptx_outputs(&nvptx_targets()[0], sm)
}

/// The PTX and cubin made from one nvptx bitcode for one GPU.
pub fn nvptx_outputs(target: &DeviceTarget, sm: &str) -> (PathBuf, PathBuf) {
    let dir = device_dir().join(target.label());
    (
        dir.join(format!("device_rtl.{sm}.ptx")),
        dir.join(format!("device_rtl.{sm}.cubin")),
    )
}

/// Every file build-device writes.
pub fn outputs() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = all_targets().iter().map(output_of).collect();
    for target in all_targets()
        .iter()
        .filter(|t| t.artifact == Artifact::Bitcode)
    {
        files.extend(
            older_llvms()
                .into_iter()
                .map(|n| older_output_of(target, n)),
        );
    }
    for target in nvptx_targets() {
        for sm in NVPTX_ARCHES {
            let (ptx, cubin) = nvptx_outputs(&target, sm);
            files.extend([ptx, cubin]);
        }
    }
    files
}

/// `device_rtl.llvmN.bc` beside a GPU target's bitcode.
pub fn older_output_of(target: &DeviceTarget, major: u32) -> PathBuf {
    output_of(target).with_file_name(older_bitcode_name(major))
}

/// The file name of a GPU bitcode rewritten for LLVM `major`.
pub fn older_bitcode_name(major: u32) -> String {
    format!("device_rtl.llvm{major}.bc")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every target delivers its own file, and every bitcode its rewrites for the older
    /// LLVMs this machine has, and every nvptx build its PTX and cubin per GPU.
    #[test]
    fn each_target_delivers_its_own_files() {
        let targets = all_targets();
        let files: BTreeSet<PathBuf> = targets.iter().map(output_of).collect();
        assert_eq!(files.len(), targets.len(), "two targets share an output");
        let bitcode = targets
            .iter()
            .filter(|t| t.artifact == Artifact::Bitcode)
            .count();
        assert_eq!(bitcode, 2 + AMDGPU_ARCHES.len());
        let all = outputs();
        let unique: BTreeSet<&PathBuf> = all.iter().collect();
        assert_eq!(unique.len(), all.len(), "an output is listed twice");
        assert_eq!(
            all.len(),
            targets.len() + bitcode * older_llvms().len() + 2 * 2 * NVPTX_ARCHES.len()
        );
        for target in targets.iter().filter(|t| t.artifact == Artifact::Bitcode) {
            for major in older_llvms() {
                assert!(all.contains(&older_output_of(target, major)));
            }
        }
        assert!(output_of(&HOST_TARGET).ends_with("x86_64-unknown-linux-gnu/libdevice_rtl.a"));
    }
}
