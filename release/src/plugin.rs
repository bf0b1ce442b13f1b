//! `cargo xtask build-plugin`, and compiling host-device (x86_64) offload programs.
//!
//! Contract used by other xtask modules:
//! - `build_plugins()` builds and returns target/plugin/, holding
//!   libomptarget.rtl.{x86_64,cuda,amdgpu}.so and their .nextgen.so names;
//!   `build_plugins_for(major)` the same without LLVM 16's packages for 17 and 18.
//! - For libomptarget 16 they also build the CUDA driver stand-in (cuda-standin/, a
//!   test tool) into target/cuda-standin/ as `libcuda.so` and `libcuda.so.1`
//!   ([`standin_dir`]): give it to a program with
//!   `LD_LIBRARY_PATH=target/cuda-standin:...`. Nothing installs or ships it (not
//!   `install`, not the GPU kit): it never leaves target/.
//!
//! One cdylib serves every kind: it reads its kind from the name libomptarget loaded it by,
//! so the build compiles once and copies the library six times (copies, not links: one
//! inode would be one dlopen handle, i.e. one plugin for all kinds).
use crate::util;
use anyhow::{Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// target/plugin/
pub fn plugin_dir() -> PathBuf {
    util::target_dir().join("plugin")
}

pub fn build_plugins() -> Result<PathBuf> {
    build_plugins_for(16)
}

/// The same plugin file serves libomptarget 16, 17 and 18; `major` only says which
/// LLVM's packages come with it: for 16, libomptarget 16 and clang 16 (what the plugins
/// plug into on Debian 12, and what their tests compile with, util::llvm16's packages);
/// for 17 and 18 the caller brings its LLVM (`install --llvm N` on Debian 13).
pub fn build_plugins_for(major: u32) -> Result<PathBuf> {
    util::section(&format!(
        "build-plugin: host-plugin (libomptarget {major} plugins)"
    ));
    // The host backend calls kernels through the system libffi.
    util::ensure_debian_packages(&["libffi-dev"])?;
    if major == 16 {
        util::llvm16("clang")?;
    }
    let sh = Shell::new()?;
    let built = util::build_release(&sh, "host-plugin", &["--lib"], "libhost_plugin.so")?;
    let device = build_device_executable(&sh)?;
    if major == 16 {
        // The tests that use it run here, under libomptarget 16.
        build_standin(&sh)?;
    }

    let dir = plugin_dir();
    fs::create_dir_all(&dir)?;
    for kind in install_layout::PLUGIN_KINDS {
        for name in install_layout::plugin_file_names(kind) {
            install_copy(&built, &dir.join(name))?;
        }
    }
    // The isolated host device's process, where the x86_64 plugin looks for it: beside
    // the plugin file.
    install_copy(&device, &dir.join(install_layout::DEVICE_EXECUTABLE))?;
    eprintln!(
        "installed {} plugins and {} in {}",
        install_layout::PLUGIN_KINDS.len() * 2,
        install_layout::DEVICE_EXECUTABLE,
        dir.display()
    );
    Ok(dir)
}

/// target/cuda-standin/: the CUDA driver stand-in under the names cudarc opens.
pub fn standin_dir() -> PathBuf {
    util::target_dir().join("cuda-standin")
}

/// Build the CUDA driver stand-in (release, like the plugin) and install it in
/// [`standin_dir`] only. Cargo writes it as libcuda_standin.so: a file named libcuda.so
/// in target/release/ (whose deps/ is on every `cargo test`'s LD_LIBRARY_PATH) would be
/// found by the real plugin.
fn build_standin(sh: &Shell) -> Result<PathBuf> {
    let built = util::build_release(sh, "cuda-standin", &["--lib"], "libcuda_standin.so")?;
    let dir = standin_dir();
    fs::create_dir_all(&dir)?;
    install_copy(&built, &dir.join("libcuda.so"))?;
    // A link, not a copy: a process that opens both names gets one driver (one file),
    // not two with separate state.
    let link = dir.join("libcuda.so.1");
    let tmp = link.with_extension("tmp");
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink("libcuda.so", &tmp)
        .with_context(|| format!("linking {}", tmp.display()))?;
    fs::rename(&tmp, &link).with_context(|| format!("renaming to {}", link.display()))?;
    eprintln!(
        "installed the CUDA driver stand-in in {} (libcuda.so, libcuda.so.1)",
        dir.display()
    );
    Ok(dir)
}

/// Build the isolated device's executable (host-plugin's one binary).
pub fn build_device_executable(sh: &Shell) -> Result<PathBuf> {
    util::build_release(
        sh,
        "host-plugin",
        &["--bin", install_layout::DEVICE_EXECUTABLE],
        install_layout::DEVICE_EXECUTABLE,
    )
}

/// Copy through a temporary name and rename: a program that has the old file mapped
/// keeps its (unchanged) pages, and the new file is never seen half-written.
fn install_copy(from: &Path, to: &Path) -> Result<()> {
    // Renamed into place: a process running the old file keeps it. The temporary name
    // is this process's own, for `cargo xtask test` runs two processes that install.
    let tmp = to.with_extension(format!("tmp.{}", std::process::id()));
    fs::copy(from, &tmp).with_context(|| format!("copying to {}", tmp.display()))?;
    fs::rename(&tmp, to).with_context(|| format!("renaming to {}", to.display()))?;
    Ok(())
}

/// Compile a C OpenMP program for the x86_64 offload device with clang 16, the device
/// image linked against device-rtl's static library.
///
/// clang 16's new offload driver links the x86_64 device image with
/// `clang -shared ... -Wl,<-Xoffload-linker args> <device objects>`: the archive comes
/// before the objects, so `--undefined` makes the linker take the lookup from it.
pub fn compile_offload_program(source: &Path, output: &Path) -> Result<()> {
    let clang = util::llvm16("clang")?;
    let rtl = device_build::host_staticlib()?;
    let include = util::root().join("host-plugin/include");
    let x = "-Xoffload-linker-x86_64-pc-linux-gnu";
    let sh = Shell::new()?;
    cmd!(
        sh,
        "{clang} -O1 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -I {include} {x} --undefined=__kmpc_target_translate_fptr {x} {rtl} {source} -o {output}"
    )
    .run()?;
    Ok(())
}
