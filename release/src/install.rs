//! `cargo xtask install --prefix P [--llvm N]`: install the runtime and the compiler
//! plugin the way a toolchain component installs, so that
//!
//! ```text
//! clang-N --config=P/share/omptarget-indirect/x86_64-pc-linux-gnu.cfg prog.c -o prog
//! LD_LIBRARY_PATH=P/lib ./prog
//! ```
//! builds a standard OpenMP 5.1 program (`declare target indirect`, no project header)
//! and runs it through our libomptarget plugin. N is 16 (the default; Debian 12), 17 or
//! 18 (Debian 13: [`llvm_release`] says which release packages which).
//!
//! For 17 and 18 the layout is the same: the compiler plugin is built for clang N, the
//! configs name clang N, and the device runtime archive is LLVM N's with our lookup as
//! LLVM N bitcode (`device_rtl.llvmN.bc`, see [`archive_image`]). The plugin file is the
//! same for every version. The GPU bitcode comes from `cargo xtask build-device` (Rust
//! for the GPU targets and LLVM 22; [`device_build::DEVICE_DIR_ENV`] names one built
//! elsewhere), rewritten for LLVM N by LLVM N's own tools.
//!
//! The layout (which file goes where below P) is the install-layout crate's, which the
//! doctor, the plugin and the tests read too. What this writes there:
//! - the plugin copies, debug info stripped (one `lib/.debug/libomptarget-rs.debug` that
//!   each copy's `.gnu_debuglink` names; gdb looks in `.debug/` beside the library);
//! - the compiler plugin, the isolated device's process, `offload-inspect` and the
//!   doctor (the same debug-info split);
//! - the device RTL for every target, and LLVM N's own device runtime archive plus our
//!   device RTL packed as offload objects, one per GPU architecture (see
//!   [`OffloadTools::devicertl_archive`] for why, [`archive_image`] for what);
//! - the self-test programs: examples/standard_indirect.cpp built by clang-N through the
//!   installed configs ([`install_self_tests`]): for the host always, for each of
//!   [`NVPTX_INSTALL_ARCHES`] the CUDA folder clang gets can target (CUDA 13's ptxas has
//!   no sm_70; none without ptxas); the doctor runs them on every device;
//! - `glibc-compat/bits/floatn.h`: what GPU compiles by clang 17 and 18 read of glibc's
//!   header of that name (see the file for why);
//! - the clang config files (see [`config_text_for`]) and the self-tests' source.
use crate::{compiler_plugin, llvm_release, plugin, util};
use anyhow::{ensure, Context, Result};
use install_layout::{
    Prefix, AMDGCN_TRIPLE, CONFIG_DIR, CONFIG_TRIPLES, DEVICERTL_ARCHIVE, DEVICE_EXECUTABLE,
    DOCTOR, EXAMPLE, GLIBC_COMPAT_DIR, HEADER, HOST_TRIPLE, LIBEXEC_DIR, NVPTX_TRIPLE,
    OFFLOAD_INSPECT, SELF_TEST_DIR,
};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use xshell::{cmd, Shell};

/// Each installed plugin copy must stay below this (issue 17).
pub const MAX_PLUGIN_COPY_BYTES: u64 = 4 << 20;
/// The header GPU compiles by clang 17 and 18 read instead of glibc's: its include
/// folder, in compiler-plugin/include/ and installed in include/omptarget-indirect/.
const GLIBC_COMPAT: &str = "glibc-compat";
const GLIBC_COMPAT_FLOATN: &str = "bits/floatn.h";
/// The folder whose `bits/floatn.h` GPU compiles by clang 17 and 18 read first (the
/// source of the installed one).
pub fn glibc_compat_dir() -> PathBuf {
    util::root()
        .join("compiler-plugin/include")
        .join(GLIBC_COMPAT)
}

/// NVIDIA GPUs the device RTL is installed for (clang 16 targets at most sm_90).
pub const NVPTX_INSTALL_ARCHES: &[&str] = &["sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90"];
/// The debug file every plugin copy points to.
const PLUGIN_DEBUG_FILE: &str = "libomptarget-rs.debug";
/// The self-tests' source, below the workspace root; installed in
/// `share/omptarget-indirect/examples/`.
const SELF_TEST_SOURCE: &str = "examples/standard_indirect.cpp";

/// Build everything and install it under `prefix` for clang 16; returns the absolute
/// prefix.
pub fn install(prefix: &Path) -> Result<PathBuf> {
    install_for(prefix, 16)
}

/// Build everything clang `major` needs and install it under `prefix`; returns the
/// absolute prefix.
pub fn install_for(prefix: &Path, major: u32) -> Result<PathBuf> {
    let key = (prefix.to_path_buf(), major);
    if let Some((_, done)) = lock(&INSTALLED).iter().find(|(k, _)| *k == key) {
        eprintln!(
            "install: {} for LLVM {major} was made by this process already",
            done.display()
        );
        return Ok(done.clone());
    }
    let done = install_now(prefix, major)?;
    lock(&INSTALLED).push((key, done.clone()));
    Ok(done)
}

/// The installs this process made, (requested prefix, LLVM) to the absolute prefix. The
/// sources cannot change while one `cargo xtask test` runs, and its build step, the demo
/// and the GPU kit all install into target/install: the later ones take the first.
static INSTALLED: Mutex<Vec<((PathBuf, u32), PathBuf)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn install_now(prefix: &Path, major: u32) -> Result<PathBuf> {
    llvm_release::ensure_packaged_here(major)?;
    // clang-N, libomptarget N and LLVM N's tools (the config's compiler, what it links,
    // llvm-objcopy-N for the debug-info split), before the device RTL is built: its
    // bitcode is rewritten for every LLVM whose tools are here (`device_build::older_llvms`),
    // and a fresh machine has none yet.
    let packages = llvm_release::packages(major);
    util::ensure_debian_packages(&packages.iter().map(String::as_str).collect::<Vec<_>>())?;
    device_build::build_all()?;
    let plugins = plugin::build_plugins_for(major)?;
    let compiler_plugin = compiler_plugin::build_for(major)?;
    let inspect = build_offload_inspect()?;
    let doctor = build_doctor()?;
    let objcopy = objcopy(major)?;

    util::section(&format!("install into {}", prefix.display()));
    fs::create_dir_all(prefix)?;
    let prefix = prefix
        .canonicalize()
        .with_context(|| format!("resolving {}", prefix.display()))?;
    let layout = Prefix::new(&prefix);
    let lib = layout.lib();
    for dir in [
        lib.join(".debug"),
        prefix.join("bin/.debug"),
        prefix.join(LIBEXEC_DIR).join(".debug"),
        prefix.join(CONFIG_DIR),
    ] {
        fs::create_dir_all(dir)?;
    }
    install_plugins(&objcopy, &plugins, &lib)?;
    // The isolated host device's process: the x86_64 plugin finds it from its own file,
    // in ../libexec/omptarget-indirect/.
    let stripped = [
        (plugins.join(DEVICE_EXECUTABLE), layout.device_executable()),
        (compiler_plugin, layout.compiler_plugin(major)),
        (inspect, layout.bin(OFFLOAD_INSPECT)),
        (doctor, layout.bin(DOCTOR)),
    ];
    for (from, to) in stripped {
        let debug_name = format!("{}.debug", to.file_name().unwrap().to_string_lossy());
        install_stripped(&objcopy, &from, &to, &debug_name)?;
    }
    copy(
        &util::root().join("host-plugin/include/omp_indirect.h"),
        &prefix.join(HEADER),
    )?;
    copy(
        &glibc_compat_dir().join(GLIBC_COMPAT_FLOATN),
        &prefix.join(GLIBC_COMPAT_DIR).join(GLIBC_COMPAT_FLOATN),
    )?;
    install_device_rtl(&layout.device_rtl_dir(), major)?;
    for triple in CONFIG_TRIPLES {
        let path = layout.config(triple);
        fs::write(&path, config_text_for(triple, major))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    copy(&util::root().join(SELF_TEST_SOURCE), &prefix.join(EXAMPLE))?;
    install_self_tests(&prefix, major)?;
    Ok(prefix)
}

/// The llvm-objcopy that splits debug info: LLVM 22's on Debian 12 (as always), LLVM
/// N's own where LLVM N is installed (Debian 13 packages no LLVM 22).
fn objcopy(major: u32) -> Result<PathBuf> {
    if major == 16 {
        util::llvm22("llvm-objcopy")
    } else {
        Ok(test_support::tools::find_llvm(major, "llvm-objcopy")?)
    }
}

fn build_offload_inspect() -> Result<PathBuf> {
    let sh = Shell::new()?;
    util::build_release(
        &sh,
        "offload-formats",
        &["--bin", "offload-inspect"],
        "offload-inspect",
    )
}

fn build_doctor() -> Result<PathBuf> {
    let sh = Shell::new()?;
    util::build_release(&sh, "doctor", &["--bin", DOCTOR], DOCTOR)
}

/// The doctor's self-test programs: [`SELF_TEST_SOURCE`] built by clang-`major` through
/// the configs just installed under `prefix`, for the x86_64 host device (always) and
/// for every [`NVPTX_INSTALL_ARCHES`] that the CUDA folder clang is given can target
/// (all skipped, saying why, without one: no ptxas here).
fn install_self_tests(prefix: &Path, major: u32) -> Result<()> {
    util::section(&format!(
        "install: self-test programs (clang-{major} through the installed configs)"
    ));
    let dir = prefix.join(SELF_TEST_DIR);
    if dir.exists() {
        // Programs of an earlier install (another clang, arches no longer built) go.
        fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    fs::create_dir_all(&dir)?;
    let host = Prefix::new(prefix).self_test_program(HOST_TRIPLE, None);
    ensure!(
        build_self_test(major, &Prefix::new(prefix).config(HOST_TRIPLE), &[], &host)?,
        "{} was not built",
        host.display()
    );
    if let Err(missing) = test_support::tools::find_ptxas() {
        eprintln!(
            "install: no nvptx64 self-test programs: no ptxas for clang's --cuda-path ({missing})"
        );
        return Ok(());
    }
    for sm in NVPTX_INSTALL_ARCHES {
        let args = match crate::cuda::cuda_args(sm) {
            Ok(args) => args,
            Err(e) => {
                eprintln!("install: no nvptx64 self-test programs: no CUDA folder for clang-{major}: {e:#}");
                return Ok(());
            }
        };
        build_self_test(
            major,
            &Prefix::new(prefix).config(NVPTX_TRIPLE),
            &args,
            &Prefix::new(prefix).self_test_program(NVPTX_TRIPLE, Some(sm)),
        )?;
    }
    Ok(())
}

/// `clang++-N --config=<config> <args> -O2 <SELF_TEST_SOURCE> -o <out>`. Ok(false): the
/// CUDA folder's ptxas cannot target the architecture (CUDA 13's has no sm_70), said
/// on stderr; any other failure is an error.
fn build_self_test(major: u32, config: &Path, args: &[String], out: &Path) -> Result<bool> {
    let clangxx = if major == 16 {
        util::llvm16("clang++")?
    } else {
        test_support::tools::find_llvm(major, "clang++")?
    };
    let config = format!("--config={}", config.display());
    let source = util::root().join(SELF_TEST_SOURCE);
    // clang 16 leaves folders in its temporary folder after offloading compiles: they
    // go into one of ours, emptied after each build.
    let tmp = util::target_dir().join("install-build/self-test-tmp");
    fs::create_dir_all(&tmp)?;
    let sh = Shell::new()?;
    // No reproducer files for a ptxas that cannot target the architecture.
    let build = cmd!(
        sh,
        "{clangxx} {config} {args...} -O2 -fno-crash-diagnostics {source} -o {out}"
    )
    .env("TMPDIR", &tmp);
    eprintln!("$ {build}");
    let output = build.quiet().ignore_status().output();
    let _ = fs::remove_dir_all(&tmp);
    let output = output?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprint!("{stderr}");
    if output.status.success() {
        return Ok(true);
    }
    if stderr.contains("is not defined for option 'gpu-name'") {
        eprintln!(
            "install: no self-test {}: the CUDA folder's ptxas cannot target its architecture",
            out.display()
        );
        return Ok(false);
    }
    anyhow::bail!(
        "building the self-test {} failed with {}",
        out.display(),
        output.status
    )
}

/// The six plugin copies, each stripped of debug info and linked to one debug file.
fn install_plugins(objcopy: &Path, plugins: &Path, lib: &Path) -> Result<()> {
    let built = plugins
        .join(install_layout::plugin_file_names(install_layout::PLUGIN_KINDS[0])[0].as_str());
    let debug = lib.join(".debug").join(PLUGIN_DEBUG_FILE);
    let sh = Shell::new()?;
    cmd!(sh, "{objcopy} --only-keep-debug {built} {debug}").run()?;
    for kind in install_layout::PLUGIN_KINDS {
        for name in install_layout::plugin_file_names(kind) {
            let to = lib.join(&name);
            strip_with_debuglink(objcopy, &built, &to, &debug)?;
            let size = fs::metadata(&to)?.len();
            ensure!(
                size <= MAX_PLUGIN_COPY_BYTES,
                "{} is {size} bytes, more than the {MAX_PLUGIN_COPY_BYTES} allowed",
                to.display()
            );
        }
    }
    Ok(())
}

/// `from` without debug info at `to`, its debug info in `.debug/<debug_name>` beside it.
fn install_stripped(objcopy: &Path, from: &Path, to: &Path, debug_name: &str) -> Result<()> {
    let debug = to
        .parent()
        .context("an installed file lives in a folder")?
        .join(".debug")
        .join(debug_name);
    let sh = Shell::new()?;
    cmd!(sh, "{objcopy} --only-keep-debug {from} {debug}").run()?;
    strip_with_debuglink(objcopy, from, to, &debug)
}

/// Through a temporary name: a running program keeps the old file's pages.
fn strip_with_debuglink(objcopy: &Path, from: &Path, to: &Path, debug: &Path) -> Result<()> {
    let tmp = to.with_extension("tmp");
    let sh = Shell::new()?;
    cmd!(
        sh,
        "{objcopy} --strip-debug --add-gnu-debuglink={debug} {from} {tmp}"
    )
    .run()?;
    fs::rename(&tmp, to).with_context(|| format!("renaming to {}", to.display()))
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(dir) = to.parent() {
        fs::create_dir_all(dir)?;
    }
    let tmp = to.with_extension("tmp");
    fs::copy(from, &tmp)
        .with_context(|| format!("copying {} to {}", from.display(), tmp.display()))?;
    fs::rename(&tmp, to).with_context(|| format!("renaming to {}", to.display()))?;
    Ok(())
}

/// The x86_64 device RTL under `dir` (lib/omptarget-indirect/), which the x86_64 config
/// links into device images.
fn install_host_device_rtl(dir: &Path) -> Result<()> {
    copy(
        &device_build::host_staticlib()?,
        &dir.join("x86_64-unknown-linux-gnu/libdevice_rtl.a"),
    )
}

/// The device RTL of every target under `dir` (lib/omptarget-indirect/), and the
/// device runtime archive that clang `major`'s GPU links take the lookup from.
fn install_device_rtl(dir: &Path, major: u32) -> Result<()> {
    let device = device_build::device_dir();
    install_host_device_rtl(dir)?;
    // Each GPU bitcode with its rewrites for the older LLVMs this machine has
    // (`device_rtl.llvmN.bc`, which clang-N's `-mlink-builtin-bitcode` reads).
    let bitcode_names: Vec<String> = std::iter::once("device_rtl.bc".to_owned())
        .chain(
            device_build::older_llvms()
                .into_iter()
                .map(device_build::older_bitcode_name),
        )
        .collect();
    ensure!(
        bitcode_names.contains(&device_build::older_bitcode_name(major)),
        "no LLVM {major} tools here (clang-{major}, llvm-as-{major}), so no bitcode clang-{major} reads"
    );
    for variant in ["", device_build::WARP_COOPERATIVE] {
        for name in &bitcode_names {
            let rel = Path::new(NVPTX).join(variant).join(name);
            copy(&device.join(&rel), &dir.join(&rel))?;
        }
    }
    for gfx in device_build::AMDGPU_ARCHES {
        let rel = Path::new(AMDGCN).join(gfx);
        for name in &bitcode_names {
            copy(&device.join(&rel).join(name), &dir.join(&rel).join(name))?;
        }
    }
    let scratch = util::target_dir().join("install-build");
    fs::create_dir_all(&scratch)?;
    let tools = OffloadTools::of(major)?;
    let mut members = Vec::new();
    let gpus = NVPTX_INSTALL_ARCHES
        .iter()
        .map(|sm| (NVPTX, *sm))
        .chain(device_build::AMDGPU_ARCHES.iter().map(|gfx| (AMDGCN, *gfx)));
    for (triple, arch) in gpus {
        let image = archive_image(dir, major, triple, arch, &scratch)?;
        members.push(tools.offload_object(&image, triple, arch, &scratch)?);
    }
    tools.devicertl_archive(&members, &dir.join(DEVICERTL_ARCHIVE))
}

const NVPTX: &str = NVPTX_TRIPLE;
const AMDGCN: &str = AMDGCN_TRIPLE;

/// What clang `major`'s device link takes of ours for one GPU (the installed file under
/// `dir`). clang 16: machine code (a relocatable cubin, an AMDGPU object from LLVM 22's
/// llc), which that link has run on GPUs with. clang 17 and 18: their own bitcode,
/// which the linker wrapper's LTO links with LLVM's device runtime.
fn archive_image(
    dir: &Path,
    major: u32,
    triple: &str,
    arch: &str,
    scratch: &Path,
) -> Result<PathBuf> {
    let folder = match triple {
        NVPTX => dir.join(NVPTX),
        _ => dir.join(AMDGCN).join(arch),
    };
    if major != 16 {
        return Ok(folder.join(device_build::older_bitcode_name(major)));
    }
    if triple == NVPTX {
        let installed = folder.join(format!("device_rtl.{arch}.cubin"));
        copy(
            &device_build::ptx::device_rtl_cubin_for(arch, scratch)?,
            &installed,
        )?;
        Ok(installed)
    } else {
        let object = folder.join("device_rtl.o");
        amdgpu_object(&folder.join("device_rtl.bc"), arch, &object)?;
        Ok(object)
    }
}

/// A relocatable AMDGPU object from the device bitcode (LLVM 22's, which clang 16's
/// LTO cannot read; lld 16 links the object), code object version 4 like clang 16's.
fn amdgpu_object(bitcode: &Path, gfx: &str, out: &Path) -> Result<()> {
    let llc = util::llvm22("llc")?;
    let sh = Shell::new()?;
    cmd!(
        sh,
        "{llc} -O2 -mtriple=amdgcn-amd-amdhsa -mcpu={gfx} --amdhsa-code-object-version=4 -filetype=obj {bitcode} -o {out}"
    )
    .run()?;
    Ok(())
}

/// LLVM `major`'s tools that pack device code the way its driver does.
struct OffloadTools {
    major: u32,
    packager: PathBuf,
    clang: PathBuf,
    ar: PathBuf,
}

impl OffloadTools {
    fn of(major: u32) -> Result<Self> {
        let tool = |name| test_support::tools::find_llvm(major, name);
        Ok(OffloadTools {
            major,
            packager: tool("clang-offload-packager")?,
            clang: tool("clang")?,
            ar: tool("llvm-ar")?,
        })
    }

    /// A host object whose `.llvm.offloading` section carries `image` for one (triple,
    /// arch): what clang's linker wrapper takes device code from.
    fn offload_object(
        &self,
        image: &Path,
        triple: &str,
        arch: &str,
        scratch: &Path,
    ) -> Result<PathBuf> {
        let arch_tag = format!("{}-{arch}", triple.split('-').next().unwrap_or(triple));
        let packed = scratch.join(format!("omptarget-indirect-{arch_tag}.offload"));
        let (packager, clang) = (&self.packager, &self.clang);
        let sh = Shell::new()?;
        cmd!(
            sh,
            "{packager} -o {packed} --image=file={image},triple={triple},arch={arch},kind=openmp"
        )
        .run()?;
        let holder = scratch.join("omptarget-indirect-holder.c");
        fs::write(
            &holder,
            "/* holds the omptarget-indirect device RTL's offload image */\n",
        )?;
        let object = scratch.join(format!("omptarget-indirect-{arch_tag}.o"));
        cmd!(
            sh,
            "{clang} -c {holder} -Xclang=-fembed-offload-object={packed} -o {object}"
        )
        .run()?;
        Ok(object)
    }

    /// LLVM's `libomptarget.devicertl.a` with our offload objects added.
    ///
    /// Why this name: clang appends `-lomptarget.devicertl` to every OpenMP link after
    /// the user's objects, and its linker wrapper extracts an archive member only for the
    /// (triple, arch) it links and only when an earlier input needs a symbol the member
    /// defines. A config file can only put arguments *before* the user's inputs (an
    /// archive there is scanned before anything needs the lookup), clang 16 passes no
    /// `-Xoffload-linker` arguments to nvlink, and one object carrying every architecture
    /// makes the wrapper link an extra image per architecture. So the config's `-L` puts
    /// this superset first on the search path: LLVM's members unchanged (reinstall after
    /// an update of libomp-N-dev), plus one member per GPU architecture holding our
    /// lookup, pulled in exactly when the compiler plugin's calls need it.
    fn devicertl_archive(&self, members: &[PathBuf], out: &Path) -> Result<()> {
        let llvm = llvm_devicertl(self.major);
        ensure!(
            llvm.is_file(),
            "{} is missing: install libomp-{}-dev",
            llvm.display(),
            self.major
        );
        let tmp = out.with_extension("tmp");
        fs::copy(&llvm, &tmp).with_context(|| format!("copying {}", llvm.display()))?;
        let ar = &self.ar;
        let sh = Shell::new()?;
        cmd!(sh, "{ar} qs {tmp} {members...}").run()?;
        fs::rename(&tmp, out).with_context(|| format!("renaming to {}", out.display()))?;
        Ok(())
    }
}

/// LLVM `major`'s own device runtime archive, which clang-N links as
/// `-lomptarget.devicertl`.
fn llvm_devicertl(major: u32) -> PathBuf {
    PathBuf::from(format!(
        "/usr/lib/llvm-{major}/lib/libomptarget.devicertl.a"
    ))
}

/// The clang `major` config file for one offload target. Paths are relative to the file
/// (`<CFGDIR>`, which clang expands), so the prefix can move.
pub fn config_text_for(triple: &str, major: u32) -> String {
    let plugin = format!(
        "<CFGDIR>/../../lib/{}",
        install_layout::compiler_plugin_file(major)
    );
    let mut common = format!(
        "-fopenmp\n\
         -fopenmp-version=51\n\
         -fplugin={plugin}\n\
         -fpass-plugin={plugin}\n\
         -I<CFGDIR>/../../include\n"
    );
    if major != 16 {
        // Debian 12's clang-16 gives OpenMP programs the RUNPATH of its lib folder,
        // where libomptarget.so.16 is; Debian 13's clang-17/18 do not, and their
        // libomptarget.so.N is only there (a config's link options are not reported
        // unused when a unit is only compiled).
        common.push_str(&format!(
            "# libomptarget.so.{major} lives in LLVM {major}'s lib folder only.\n\
             -Wl,-rpath,/usr/lib/llvm-{major}/lib\n"
        ));
    }
    // clang 16's and 17's linker wrappers hand -Xoffload-linker arguments to the device
    // link's clang as `-Wl,<arg>`; clang 18's hands them over as they are, so there a
    // linker option needs its own `-Wl,`.
    let undefined = "--undefined=__kmpc_target_translate_fptr";
    let undefined = if major >= 18 {
        format!("-Wl,{undefined}")
    } else {
        undefined.to_owned()
    };
    match triple {
        "x86_64-pc-linux-gnu" => format!(
            "# clang-{major} --config=<this file> prog.c -o prog: OpenMP 5.1 offloading to the host\n\
             # CPU (an x86_64 device image); `declare target indirect` through the\n\
             # omptarget-indirect compiler plugin. Run: LD_LIBRARY_PATH=<prefix>/lib ./prog\n\
             {common}\
             -fopenmp-targets=x86_64-pc-linux-gnu\n\
             # The device image links the device RTL (the archive reaches the device link\n\
             # before the objects, so --undefined makes the linker take the lookup).\n\
             -Xoffload-linker-x86_64-pc-linux-gnu {undefined}\n\
             -Xoffload-linker-x86_64-pc-linux-gnu <CFGDIR>/../../lib/omptarget-indirect/x86_64-unknown-linux-gnu/libdevice_rtl.a\n"
        ),
        "nvptx64-nvidia-cuda" | "amdgcn-amd-amdhsa" => {
            let example = if triple.starts_with("nvptx") {
                "--offload-arch=sm_90"
            } else {
                "--offload-arch=gfx90a"
            };
            let glibc_compat = if major == 17 || major == 18 {
                format!(
                    "# Device compiles read glibc 2.41's bits/floatn.h without _Float128, whose\n\
                     # complex typedef clang 17 and 18 reject for GPUs (see the header).\n\
                     -Xarch_device -isystem<CFGDIR>/../../{GLIBC_COMPAT_DIR}\n"
                )
            } else {
                String::new()
            };
            format!(
                "# clang-{major} --config=<this file> {example} prog.c -o prog: OpenMP 5.1\n\
                 # offloading to {triple} (give your GPU's --offload-arch); `declare target\n\
                 # indirect` through the omptarget-indirect compiler plugin.\n\
                 # Run: LD_LIBRARY_PATH=<prefix>/lib ./prog\n\
                 {common}\
                 # libomptarget.devicertl.a here is LLVM {major}'s plus our device RTL for each GPU\n\
                 # architecture; the link takes the lookup from it when the program needs it.\n\
                 -L<CFGDIR>/../../lib/omptarget-indirect\n\
                 {glibc_compat}"
            )
        }
        other => panic!("no config file for {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_config_loads_both_plugin_halves_and_openmp_5_1() {
        for triple in CONFIG_TRIPLES {
            let text = config_text_for(triple, 16);
            for line in [
                "-fopenmp-version=51",
                "-fplugin=<CFGDIR>/../../lib/libomptarget-indirect-clang16.so",
                "-fpass-plugin=<CFGDIR>/../../lib/libomptarget-indirect-clang16.so",
            ] {
                assert!(text.lines().any(|l| l == line), "{triple}: no {line}");
            }
        }
    }

    #[test]
    fn the_gpu_configs_leave_the_architecture_to_the_user() {
        for major in [16, 17, 18] {
            for triple in ["nvptx64-nvidia-cuda", "amdgcn-amd-amdhsa"] {
                let text = config_text_for(triple, major);
                assert!(
                    !text.lines().any(|l| l.starts_with("--offload-arch")),
                    "{text}"
                );
                assert!(text.contains("-L<CFGDIR>/../../lib/omptarget-indirect\n"));
                assert!(
                    text.starts_with(&format!("# clang-{major} --config")),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn only_clang_17_and_18_gpu_compiles_read_the_glibc_compat_header() {
        let line = "-Xarch_device -isystem<CFGDIR>/../../include/omptarget-indirect/glibc-compat";
        for major in [16, 17, 18] {
            for triple in CONFIG_TRIPLES {
                let text = config_text_for(triple, major);
                let gpu = triple != HOST_TRIPLE;
                assert_eq!(
                    text.lines().any(|l| l == line),
                    gpu && major != 16,
                    "clang {major}, {triple}:\n{text}"
                );
            }
        }
        let header = glibc_compat_dir().join(GLIBC_COMPAT_FLOATN);
        assert!(header.is_file(), "{} is missing", header.display());
    }

    #[test]
    fn the_clang_17_and_18_configs_name_their_plugin_and_libomptarget_folder() {
        for major in [17, 18] {
            let text = config_text_for("x86_64-pc-linux-gnu", major);
            let plugin = format!("<CFGDIR>/../../lib/libomptarget-indirect-clang{major}.so");
            for line in [
                format!("-fplugin={plugin}"),
                format!("-fpass-plugin={plugin}"),
                format!("-Wl,-rpath,/usr/lib/llvm-{major}/lib"),
            ] {
                assert!(
                    text.lines().any(|l| l == line),
                    "{major}: no {line}\n{text}"
                );
            }
            assert!(
                text.starts_with(&format!("# clang-{major} --config")),
                "{text}"
            );
            assert!(
                !text.contains("clang16") && !text.contains("clang-16"),
                "{text}"
            );
        }
        assert!(!config_text_for("x86_64-pc-linux-gnu", 16).contains("-rpath"));
        for (major, undefined) in [
            (16, "--undefined"),
            (17, "--undefined"),
            (18, "-Wl,--undefined"),
        ] {
            let line = format!(
                "-Xoffload-linker-x86_64-pc-linux-gnu {undefined}=__kmpc_target_translate_fptr"
            );
            let text = config_text_for("x86_64-pc-linux-gnu", major);
            assert!(
                text.lines().any(|l| l == line),
                "{major}: no {line}\n{text}"
            );
        }
    }
}
