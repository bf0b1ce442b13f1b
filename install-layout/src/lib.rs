//! An install's layout: which file goes where below its prefix P, per LLVM version N.
//! `cargo xtask install` and `dist` write it; the doctor, the plugin (the isolated
//! device's executable) and the tests read it; each fact is defined here once.
//!
//! ```text
//! P/bin/omptarget-indirect-doctor, P/bin/offload-inspect
//! P/include/omp_indirect.h
//! P/include/omptarget-indirect/glibc-compat/bits/floatn.h
//! P/lib/libomptarget.rtl.{x86_64,cuda,amdgpu}[.nextgen].so   the plugin copies
//! P/lib/libomptarget-indirect-clangN.so                       the compiler plugin
//! P/lib/omptarget-indirect/<target>/...                       the device runtime
//! P/lib/omptarget-indirect/libomptarget.devicertl.a           LLVM N's, plus ours
//! P/libexec/omptarget-indirect/omptarget-rs-device            the isolated device
//! P/libexec/omptarget-indirect/self-test/standard_indirect.<triple>[.<arch>]
//! P/share/omptarget-indirect/<triple>.cfg                     clang config files
//! P/share/omptarget-indirect/examples/standard_indirect.cpp
//! ```
//! (each of bin/, lib/ and libexec/omptarget-indirect/ has a `.debug/` folder with
//! the debug info of its files).

use std::path::{Path, PathBuf};

/// The offload target of the host CPU.
pub const HOST_TRIPLE: &str = "x86_64-pc-linux-gnu";
/// The offload target of NVIDIA GPUs.
pub const NVPTX_TRIPLE: &str = "nvptx64-nvidia-cuda";
/// The offload target of AMD GPUs.
pub const AMDGCN_TRIPLE: &str = "amdgcn-amd-amdhsa";
/// The offload targets a config file is installed for.
pub const CONFIG_TRIPLES: [&str; 3] = [HOST_TRIPLE, NVPTX_TRIPLE, AMDGCN_TRIPLE];

/// The device kinds libomptarget loads a plugin for, as its file names say them.
pub const PLUGIN_KINDS: [&str; 3] = ["x86_64", "cuda", "amdgpu"];
/// The doctor's executable, in `bin/`.
pub const DOCTOR: &str = "omptarget-indirect-doctor";
/// The image inspector's executable, in `bin/`.
pub const OFFLOAD_INSPECT: &str = "offload-inspect";
/// The isolated host device's executable, in [`LIBEXEC_DIR`] (or beside the plugin).
pub const DEVICE_EXECUTABLE: &str = "omptarget-rs-device";
/// Our programs that are not commands, below the prefix.
pub const LIBEXEC_DIR: &str = "libexec/omptarget-indirect";
/// The self-test programs' folder below the prefix, and their name before
/// `.<triple>[.<arch>]`.
pub const SELF_TEST_DIR: &str = "libexec/omptarget-indirect/self-test";
pub const SELF_TEST_NAME: &str = "standard_indirect";
/// The config files' folder below the prefix.
pub const CONFIG_DIR: &str = "share/omptarget-indirect";
/// The self-tests' source, installed for users to read and build.
pub const EXAMPLE: &str = "share/omptarget-indirect/examples/standard_indirect.cpp";
/// The device runtime's folder below the prefix.
pub const DEVICE_RTL_DIR: &str = "lib/omptarget-indirect";
/// The device runtime archive (LLVM N's own plus ours), in [`DEVICE_RTL_DIR`].
pub const DEVICERTL_ARCHIVE: &str = "libomptarget.devicertl.a";
/// The header for compilers without the compiler plugin.
pub const HEADER: &str = "include/omp_indirect.h";
/// What GPU compiles by clang 17 and 18 read instead of glibc's `bits/floatn.h`.
pub const GLIBC_COMPAT_DIR: &str = "include/omptarget-indirect/glibc-compat";

/// The plugin's installed file names for `kind`: libomptarget 17 and 18 load
/// `libomptarget.rtl.<kind>.so`, 16 its `.nextgen.so` first; one file serves all three,
/// so both names are installed.
pub fn plugin_file_names(kind: &str) -> [String; 2] {
    [
        format!("libomptarget.rtl.{kind}.so"),
        format!("libomptarget.rtl.{kind}.nextgen.so"),
    ]
}

/// The compiler plugin's installed file name for clang `major`.
pub fn compiler_plugin_file(major: u32) -> String {
    format!("libomptarget-indirect-clang{major}.so")
}

/// N of `libomptarget-indirect-clangN.so`.
pub fn major_of_compiler_plugin(file_name: &str) -> Option<u32> {
    file_name
        .strip_prefix("libomptarget-indirect-clang")?
        .strip_suffix(".so")?
        .parse()
        .ok()
}

/// The file name of a self-test program: `standard_indirect.<triple>[.<arch>]`.
pub fn self_test_name(triple: &str, arch: Option<&str>) -> String {
    match arch {
        Some(arch) => format!("{SELF_TEST_NAME}.{triple}.{arch}"),
        None => format!("{SELF_TEST_NAME}.{triple}"),
    }
}

/// The paths of an install at one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prefix(pub PathBuf);

impl Prefix {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Prefix(path.into())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `P/lib`: the plugins and the compiler plugin (what `LD_LIBRARY_PATH` names).
    pub fn lib(&self) -> PathBuf {
        self.0.join("lib")
    }

    /// `P/bin/<name>`
    pub fn bin(&self, name: &str) -> PathBuf {
        self.0.join("bin").join(name)
    }

    /// `P/share/omptarget-indirect/<triple>.cfg`
    pub fn config(&self, triple: &str) -> PathBuf {
        self.0.join(CONFIG_DIR).join(format!("{triple}.cfg"))
    }

    /// `P/lib/omptarget-indirect`
    pub fn device_rtl_dir(&self) -> PathBuf {
        self.0.join(DEVICE_RTL_DIR)
    }

    /// `P/lib/omptarget-indirect/libomptarget.devicertl.a`
    pub fn devicertl_archive(&self) -> PathBuf {
        self.device_rtl_dir().join(DEVICERTL_ARCHIVE)
    }

    /// `P/lib/libomptarget-indirect-clangN.so`
    pub fn compiler_plugin(&self, major: u32) -> PathBuf {
        self.lib().join(compiler_plugin_file(major))
    }

    /// `P/libexec/omptarget-indirect/omptarget-rs-device`
    pub fn device_executable(&self) -> PathBuf {
        self.0.join(LIBEXEC_DIR).join(DEVICE_EXECUTABLE)
    }

    /// `P/libexec/omptarget-indirect/self-test/standard_indirect.<triple>[.<arch>]`
    pub fn self_test_program(&self, triple: &str, arch: Option<&str>) -> PathBuf {
        self.0
            .join(SELF_TEST_DIR)
            .join(self_test_name(triple, arch))
    }

    /// The prefix of an executable installed as `P/bin/<name>`.
    pub fn of_executable(exe: &Path) -> Option<Prefix> {
        Some(Prefix(exe.parent()?.parent()?.to_path_buf()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiler_plugins_name_carries_its_llvm() {
        for major in [16, 17, 18] {
            assert_eq!(
                major_of_compiler_plugin(&compiler_plugin_file(major)),
                Some(major)
            );
        }
        assert_eq!(major_of_compiler_plugin("libomptarget.rtl.cuda.so"), None);
        assert_eq!(
            major_of_compiler_plugin("libomptarget-indirect-clangX.so"),
            None
        );
    }

    #[test]
    fn every_path_is_below_the_prefix_where_the_layout_says() {
        let p = Prefix::new("/p");
        assert_eq!(
            p.config(NVPTX_TRIPLE),
            Path::new("/p/share/omptarget-indirect/nvptx64-nvidia-cuda.cfg")
        );
        assert_eq!(
            p.self_test_program(NVPTX_TRIPLE, Some("sm_90")),
            Path::new("/p/libexec/omptarget-indirect/self-test/standard_indirect.nvptx64-nvidia-cuda.sm_90")
        );
        assert_eq!(
            p.devicertl_archive(),
            Path::new("/p/lib/omptarget-indirect/libomptarget.devicertl.a")
        );
        assert_eq!(
            p.device_executable().parent(),
            Some(p.0.join(LIBEXEC_DIR).as_path())
        );
        assert!(SELF_TEST_DIR.starts_with(LIBEXEC_DIR));
        assert!(EXAMPLE.starts_with(CONFIG_DIR));
        assert_eq!(
            Prefix::of_executable(&p.bin(DOCTOR)),
            Some(Prefix::new("/p"))
        );
    }
}
