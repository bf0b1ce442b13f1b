//! `cargo xtask build-plugin` and `cargo xtask demo`.
//!
//! Contract used by other xtask modules:
//! - `build_plugins()` builds and returns target/plugin/, holding
//!   libomptarget.rtl.{x86_64,cuda,amdgpu}.so and their .nextgen.so names.
//!
//! One cdylib serves every kind: it reads its kind from the name libomptarget loaded it by,
//! so the build compiles once and copies the library six times (copies, not links: one
//! inode would be one dlopen handle, i.e. one plugin for all kinds).
use crate::{device, util};
use anyhow::{bail, ensure, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args, Default)]
pub struct BuildArgs {}
#[derive(clap::Args, Default)]
pub struct DemoArgs {}

/// The plugin kinds libomptarget 16 looks for, by their file-name part.
pub const PLUGIN_KINDS: &[&str] = &["x86_64", "cuda", "amdgpu"];

pub fn build_main(_args: BuildArgs) -> Result<()> {
    let dir = build_plugins()?;
    println!("plugins in {}", dir.display());
    Ok(())
}

/// target/plugin/
pub fn plugin_dir() -> PathBuf {
    util::target_dir().join("plugin")
}

/// The file names libomptarget 16 dlopens for one kind (nextgen first).
pub fn plugin_file_names(kind: &str) -> [String; 2] {
    [
        format!("libomptarget.rtl.{kind}.so"),
        format!("libomptarget.rtl.{kind}.nextgen.so"),
    ]
}

pub fn build_plugins() -> Result<PathBuf> {
    util::section("build-plugin: host-plugin (libomptarget 16 plugins)");
    // The host backend calls kernels through the system libffi; libomptarget 16 and
    // clang 16 (what the plugins plug into, and what their tests compile with) come
    // with util::llvm16's packages.
    util::ensure_debian_packages(&["libffi-dev"])?;
    util::llvm16("clang")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    util::run(Command::new(cargo).current_dir(util::root()).args([
        "build",
        "--release",
        "-p",
        "host-plugin",
        "--lib",
    ]))?;
    let built = util::target_dir().join("release/libhost_plugin.so");
    ensure!(built.is_file(), "cargo did not produce {}", built.display());

    let dir = plugin_dir();
    fs::create_dir_all(&dir)?;
    for kind in PLUGIN_KINDS {
        for name in plugin_file_names(kind) {
            install_copy(&built, &dir.join(name))?;
        }
    }
    eprintln!(
        "installed {} plugins in {}",
        PLUGIN_KINDS.len() * 2,
        dir.display()
    );
    Ok(dir)
}

/// Copy through a temporary name and rename: a program that has the old file mapped
/// keeps its (unchanged) pages, and the new file is never seen half-written.
fn install_copy(from: &Path, to: &Path) -> Result<()> {
    let tmp = to.with_extension("so.tmp");
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
    let rtl = device::host_staticlib()?;
    let x = "-Xoffload-linker-x86_64-pc-linux-gnu";
    util::run(
        Command::new(clang)
            .args(["-O1", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu"])
            .arg("-I")
            .arg(util::root().join("host-plugin/include"))
            .args([x, "--undefined=__kmpc_target_translate_fptr", x])
            .arg(&rtl)
            .arg(source)
            .arg("-o")
            .arg(output),
    )
}

pub fn demo_main(_args: DemoArgs) -> Result<()> {
    let plugins = build_plugins()?;
    util::section("demo: compile examples/indirect_calls.c with clang 16");
    let out_dir = util::target_dir().join("demo");
    fs::create_dir_all(&out_dir)?;
    let exe = out_dir.join("indirect_calls");
    compile_offload_program(&util::root().join("examples/indirect_calls.c"), &exe)?;

    util::section("demo: run it through libomptarget 16 and our plugin");
    let marker = out_dir.join("load-marker.txt");
    let _ = fs::remove_file(&marker);
    eprintln!(
        "+ LD_LIBRARY_PATH={} LIBOMPTARGET_INFO=16 OMPTARGET_RS_LOAD_MARKER={} {}",
        plugins.display(),
        marker.display(),
        exe.display()
    );
    let child = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &plugins)
        // Bit 0x10 (plugin information): our plugin prints the table it installed.
        .env("LIBOMPTARGET_INFO", "16")
        .env("OMPTARGET_RS_LOAD_MARKER", &marker)
        .spawn()
        .with_context(|| format!("running {}", exe.display()))?;
    let pid = child.id();
    let out = child.wait_with_output()?;

    let loaded = fs::read_to_string(&marker).unwrap_or_default();
    // Every plugin of ours that libomptarget initialised in that process, in order.
    let kinds: Vec<&str> = loaded
        .lines()
        .filter_map(|l| l.strip_suffix(&format!(" {pid}")))
        .collect();
    println!();
    println!(
        "plugins of ours loaded by process {pid}: {} (from {})",
        kinds.join(", "),
        plugins.display()
    );
    println!(
        "device that ran it: offload device 0 of the omptarget-rs x86_64 plugin = the host \
         CPU (dlopen + libffi backend); this program's image is x86_64 only, so the cuda and \
         amdgpu plugins, loaded alongside, had nothing to run"
    );
    if !out.status.success() {
        bail!("the demo program failed: {}", out.status);
    }
    ensure!(
        kinds.contains(&"x86_64"),
        "the program ran, but not through our x86_64 plugin (load marker: {loaded:?})"
    );
    Ok(())
}
