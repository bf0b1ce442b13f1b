//! `cargo xtask bench gpu`: the GPU lookup benchmark (docs/BENCHMARKS.md 1b).
//!
//! Builds tests/fixtures/bench/gpu_lookup.c once per lookup variant and SM (clang-22 for
//! nvptx64, the variant's device runtime bitcode linked in, then ptxas) into
//! target/gpu-bench/, builds the host driver `gpu_lookup_bench` (gpu-lookup-bench, release),
//! checks the kernel run on the CPU against the driver's reference
//! ([`check_kernel_on_host`]), and runs the driver on the cubins. Without a CUDA driver
//! or GPU the driver prints one `SKIPPED:` line and exits 0. GPU machines have no clang: `cargo xtask gpu-bundle`
//! packs the same cubins and driver (see [`bundle_files`]).

use crate::util;
use anyhow::{ensure, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

#[derive(clap::Args)]
pub struct Args {
    /// Build everything but do not run the driver.
    #[arg(long)]
    build_only: bool,
    /// Arguments for the driver (`gpu_lookup_bench --help`), after `--`.
    #[arg(last = true)]
    driver_args: Vec<String>,
}

/// Which lookup a variant's kernel calls, i.e. which `-DLOOKUP_*` and bitcode it gets.
#[derive(Clone, Copy)]
enum Lookup {
    /// No lookup: the kernel calls the device pointers it reads (the floor).
    Direct,
    /// `__kmpc_target_translate_fptr` from a device-rtl build (path below target/device/).
    Ours(&'static str),
    /// LLVM 19 DeviceRTL's `__llvm_omp_indirect_call_lookup` (libomp-19-dev).
    Llvm19,
    /// `__kmpc_target_translate_fptr` out of line, from the relocatable device RTL cubin
    /// that the devicertl archive holds, linked by nvlink: what clang-16 programs get.
    Archive,
}

/// The variants, in the order the driver's table shows them; names must match the
/// driver's (harness/gpu-lookup-bench/src/bench.rs).
/// `ours_index` and `ours` are the same build: the driver keeps the plugin's index for
/// the first and clears it for the second (and for `ours_warp`), so they compare the
/// index with the search. `ours_archive` gets the table as `ours_index` does, through a
/// call into the device RTL's own cubin.
const VARIANTS: &[(&str, Lookup)] = &[
    ("direct", Lookup::Direct),
    (
        "ours_index",
        Lookup::Ours("nvptx64-nvidia-cuda/device_rtl.bc"),
    ),
    ("ours_archive", Lookup::Archive),
    ("ours", Lookup::Ours("nvptx64-nvidia-cuda/device_rtl.bc")),
    (
        "ours_warp",
        Lookup::Ours("nvptx64-nvidia-cuda/warp-cooperative/device_rtl.bc"),
    ),
    ("llvm19", Lookup::Llvm19),
];

/// The SMs the cubins are built for (the GPU machines are H100/H200, sm_90; sm_80 for
/// A100s).
const ARCHES: [u32; 2] = [90, 80];

/// The name LLVM 19's device environment global gets in our cubins. LLVM 19 made that
/// global 48 bytes (the indirect call table is at 24 and 32); our CUDA backend, an LLVM 16
/// plugin, writes LLVM 16's 16-byte environment into any global of the old name at load
/// and refuses one of another size, so the PTX renames it (the lookup code is unchanged).
pub const LLVM19_ENVIRONMENT: &str = "__gpu_bench_llvm19_device_environment";
const LLVM19_ENVIRONMENT_ORIGINAL: &str = "__omp_rtl_device_environment";

/// target/gpu-bench/: the cubins (and their PTX) the driver reads.
pub fn cubin_dir() -> PathBuf {
    util::target_dir().join("gpu-bench")
}

pub fn main(args: Args) -> Result<()> {
    let driver = build_and_check()?;
    if args.build_only {
        println!("gpu lookup bench: driver {}", driver.display());
        return Ok(());
    }
    util::section("gpu lookup bench: run");
    let (cubins, driver_args) = (cubin_dir(), &args.driver_args);
    let sh = Shell::new()?;
    cmd!(sh, "{driver} --cubins {cubins} {driver_args...}").run()?;
    Ok(())
}

/// Everything but the GPU run, for `cargo xtask test` too: the device runtime, every
/// cubin (each lookup survived the link, ptxas accepts it, the symbols the driver needs
/// are there), the driver, and the kernel checked on the CPU. Returns the driver.
pub fn build_and_check() -> Result<PathBuf> {
    device_build::build_all()?;
    build_cubins()?;
    let driver = build_driver()?;
    check_kernel_on_host(&driver)?;
    Ok(driver)
}

/// Every variant for every SM; a variant whose device-rtl bitcode was not built is left
/// out with a warning (the driver reports it as not built). Returns the folder.
pub fn build_cubins() -> Result<PathBuf> {
    util::section("gpu lookup bench: cubins");
    let clang = util::llvm22("clang")?;
    let ptxas = util::ptxas()?;
    let readelf = util::llvm22("llvm-readelf")?;
    let dir = cubin_dir();
    std::fs::create_dir_all(&dir)?;
    let source = util::root().join("tests/fixtures/bench/gpu_lookup.c");
    let mut counts: Vec<(String, u32, KernelSize)> = Vec::new();
    let sh = Shell::new()?;
    for &(name, lookup) in VARIANTS {
        for sm in ARCHES {
            let link = link_for(lookup, sm)?;
            if let Link::Missing = link {
                eprintln!(
                    "warning: gpu lookup bench: no device-rtl bitcode for `{name}`, not built"
                );
                break;
            }
            let ptx = dir.join(format!("gpu_lookup.{name}.sm_{sm}.ptx"));
            let cubin = dir.join(format!("gpu_lookup.{name}.sm_{sm}.cubin"));
            let (define, arch) = (define(lookup), format!("sm_{sm}"));
            let mut extra: Vec<OsString> = Vec::new();
            if let Link::Bitcode(bc) = &link {
                extra.extend(["-Xclang", "-mlink-builtin-bitcode", "-Xclang"].map(OsString::from));
                extra.push(bc.into());
            }
            if matches!(lookup, Lookup::Llvm19) {
                // LLVM 19's bitcode predates the nvptx data layout clang-22 writes (the
                // added shared-memory pointer size): a known, harmless mismatch.
                extra.push("-Wno-linker-warnings".into());
            }
            cmd!(
                sh,
                "{clang} --target=nvptx64-nvidia-cuda -march={arch} -Xclang -target-feature -Xclang +ptx80 -nogpulib -O2 -S -D{define} {source} {extra...} -o {ptx}"
            )
            .run()?;
            let text = std::fs::read_to_string(&ptx)?;
            let text = check_ptx(name, lookup, text)
                .with_context(|| format!("checking {}", ptx.display()))?;
            std::fs::write(&ptx, &text)?;
            if let Lookup::Archive = lookup {
                // As clang 16 links: the kernel relocatable, nvlink adding the device
                // RTL's cubin for the same architecture.
                let object = cubin.with_extension("o.cubin");
                let rtl = device_build::ptx::device_rtl_cubin_for(&arch, &dir)?;
                let nvlink = ptxas.with_file_name("nvlink");
                cmd!(sh, "{ptxas} --compile-only -arch={arch} {ptx} -o {object}").run()?;
                cmd!(sh, "{nvlink} -arch={arch} {object} {rtl} -o {cubin}").run()?;
            } else {
                cmd!(sh, "{ptxas} -arch={arch} {ptx} -o {cubin}").run()?;
            }
            check_cubin_symbols(&readelf, &cubin, lookup)?;
            counts.push((name.to_string(), sm, kernel_instructions(&text)));
        }
    }
    eprintln!(
        "static PTX instructions of the kernel `lookup_bench` (lookup inlined) and of its \
         inner (search) loops:"
    );
    for (name, sm, n) in &counts {
        eprintln!(
            "  {name:<10} sm_{sm}: {:>4} in the kernel, {:>4} in inner loops",
            n.total, n.inner_loops
        );
    }
    Ok(dir)
}

fn define(lookup: Lookup) -> &'static str {
    match lookup {
        Lookup::Direct => "LOOKUP_DIRECT",
        Lookup::Ours(_) | Lookup::Archive => "LOOKUP_OURS",
        Lookup::Llvm19 => "LOOKUP_LLVM19",
    }
}

/// What a variant links into the kernel.
enum Link {
    Nothing,
    Bitcode(PathBuf),
    /// Its device-rtl build does not exist (not built by `cargo xtask build-device`).
    Missing,
}

fn link_for(lookup: Lookup, sm: u32) -> Result<Link> {
    Ok(match lookup {
        Lookup::Direct | Lookup::Archive => Link::Nothing,
        Lookup::Ours(rel) => {
            let bc = device_build::device_dir().join(rel);
            if bc.is_file() {
                Link::Bitcode(bc)
            } else {
                Link::Missing
            }
        }
        Lookup::Llvm19 => Link::Bitcode(llvm19_bitcode(sm)?),
    })
}

/// LLVM 19's DeviceRTL bitcode for an SM, from Debian's libomp-19-dev. That package
/// conflicts with libomp-16-dev, which libomptarget 16 (the host of our plugin) needs, so
/// it is never installed here: when it is not installed already, apt-get downloads it
/// and it is unpacked under target/gpu-bench/libomp-19-dev/.
fn llvm19_bitcode(sm: u32) -> Result<PathBuf> {
    let file = format!("usr/lib/llvm-19/lib/libomptarget-nvptx-sm_{sm}.bc");
    let installed = Path::new("/").join(&file);
    if installed.is_file() {
        return Ok(installed);
    }
    let root = cubin_dir().join("libomp-19-dev");
    let unpacked = root.join(&file);
    if unpacked.is_file() {
        return Ok(unpacked);
    }
    util::section("gpu lookup bench: LLVM 19 DeviceRTL (libomp-19-dev, unpacked, not installed)");
    let debs = root.join("deb");
    std::fs::create_dir_all(&debs)?;
    let sh = Shell::new()?;
    let download = || {
        let _in_debs = sh.push_dir(&debs);
        cmd!(sh, "apt-get download -qq libomp-19-dev").run()
    };
    if download().is_err() {
        // Fresh machines have no package lists yet.
        cmd!(sh, "apt-get update -qq").run()?;
        download()?;
    }
    let deb = std::fs::read_dir(&debs)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .context("apt-get download left no .deb")?;
    cmd!(sh, "dpkg-deb -x {deb} {root}").run()?;
    ensure!(unpacked.is_file(), "{} is not in {}", file, deb.display());
    Ok(unpacked)
}

/// Fail if the lookup did not survive the link (an internalized table global folds the
/// lookup away, see TOOLCHAIN.md); for LLVM 19, rename its environment global.
fn check_ptx(name: &str, lookup: Lookup, text: String) -> Result<String> {
    ensure!(
        text.contains(".entry lookup_bench"),
        "`{name}`: no kernel lookup_bench in the PTX"
    );
    match lookup {
        Lookup::Direct => Ok(text),
        Lookup::Archive => {
            let lookup = device_rtl::symbols::LOOKUP;
            let declared = text
                .lines()
                .any(|l| l.starts_with(".extern .func") && l.ends_with(lookup));
            ensure!(
                declared && text.contains(&format!("call.uni (retval0), {lookup},")),
                "`{name}`: the kernel does not call the lookup out of line"
            );
            Ok(text)
        }
        Lookup::Ours(_) => {
            for global in [
                device_rtl::symbols::TABLE,
                device_rtl::symbols::TABLE_SIZE,
                device_rtl::symbols::INDEX,
                device_rtl::symbols::HEAD,
            ] {
                ensure!(
                    text.contains(&format!("[{global}]")),
                    "`{name}`: the kernel never reads {global}: the lookup was folded away"
                );
            }
            Ok(text)
        }
        Lookup::Llvm19 => {
            ensure!(
                text.contains(&format!(
                    ".const .align 8 .b8 {LLVM19_ENVIRONMENT_ORIGINAL}[48]"
                )),
                "`{name}`: no 48-byte {LLVM19_ENVIRONMENT_ORIGINAL} in the PTX"
            );
            ensure!(
                text.contains(&format!("[{LLVM19_ENVIRONMENT_ORIGINAL}+24]")),
                "`{name}`: the kernel never reads the table pointer (byte 24) of \
                 {LLVM19_ENVIRONMENT_ORIGINAL}"
            );
            Ok(rename_symbol(
                &text,
                LLVM19_ENVIRONMENT_ORIGINAL,
                LLVM19_ENVIRONMENT,
            ))
        }
    }
}

/// The symbols the driver resolves in a variant's cubin, with their sizes (None: a
/// kernel, any size): what `load_binary` would reject on the GPU machine, checked here.
fn required_symbols(lookup: Lookup) -> Vec<(String, Option<u64>)> {
    let mut symbols = vec![("lookup_bench".to_string(), None)];
    symbols.extend((0..4).map(|f| (format!("__omp_offloading_bench_fn{f}"), Some(8))));
    match lookup {
        Lookup::Direct => {}
        Lookup::Ours(_) | Lookup::Archive => {
            for global in [device_rtl::symbols::TABLE, device_rtl::symbols::TABLE_SIZE] {
                symbols.push((global.to_string(), Some(8)));
            }
            symbols.push((device_rtl::symbols::INDEX.to_string(), Some(32)));
            symbols.push((
                device_rtl::symbols::HEAD.to_string(),
                Some(device_rtl::head::HEAD_BYTES as u64),
            ));
        }
        Lookup::Llvm19 => symbols.push((LLVM19_ENVIRONMENT.to_string(), Some(48))),
    }
    symbols
}

fn check_cubin_symbols(readelf: &Path, cubin: &Path, lookup: Lookup) -> Result<()> {
    let sh = Shell::new()?;
    let listing = util::read(cmd!(sh, "{readelf} --syms {cubin}"))?;
    // Rows: "Num: Value Size Type Bind Vis [<other: ..>] Ndx Name".
    let sizes: Vec<(&str, u64)> = listing
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let size = fields.get(2)?.parse().ok()?;
            Some((*fields.last()?, size))
        })
        .collect();
    for (name, size) in required_symbols(lookup) {
        let found = sizes.iter().find(|(n, _)| *n == name).map(|(_, s)| *s);
        match (found, size) {
            (None, _) => anyhow::bail!("{}: no symbol {name}", cubin.display()),
            (Some(got), Some(want)) if got != want => anyhow::bail!(
                "{}: {name} is {got} bytes, the driver expects {want}",
                cubin.display()
            ),
            _ => {}
        }
    }
    Ok(())
}

/// Replace `from` where it is a whole PTX identifier (not part of a longer one).
fn rename_symbol(text: &str, from: &str, to: &str) -> String {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(from) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + from.len()..].chars().next();
        out.push_str(&rest[..at]);
        if before.is_some_and(ident) || after.is_some_and(|c| ident(c) && c != '.') {
            out.push_str(from);
        } else {
            out.push_str(to);
        }
        rest = &rest[at + from.len()..];
    }
    out.push_str(rest);
    out
}

/// Static PTX instruction counts of `.entry lookup_bench`, where every variant's
/// lookup is inlined: the whole kernel, and the blocks of its inner loops (loop depth 2
/// and more: the search steps, nested in the per-call loop), as llc's block comments
/// (`in Loop: Header=... Depth=N`, `Loop Header: Depth=N`) mark them. Labels,
/// directives, declarations, braces and comments are not instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct KernelSize {
    total: usize,
    inner_loops: usize,
}

fn kernel_instructions(ptx: &str) -> KernelSize {
    let mut size = KernelSize {
        total: 0,
        inner_loops: 0,
    };
    let Some(start) = ptx.find(".entry lookup_bench") else {
        return size;
    };
    let mut braces = 0;
    let mut depth = 0;
    // After a block label, the loop comments may continue on comment-only lines.
    let mut in_block_header = false;
    for line in ptx[start..].lines() {
        let t = line.trim();
        let (code, comment) = match t.find("//") {
            Some(at) => (t[..at].trim(), &t[at..]),
            None => (t, ""),
        };
        let is_label = code.ends_with(':') || (code.is_empty() && comment.starts_with("// %bb."));
        if is_label {
            depth = 0;
            in_block_header = true;
        }
        if (is_label || (in_block_header && code.is_empty())) && comment.contains("Depth=") {
            if let Some(d) = comment
                .rsplit("Depth=")
                .next()
                .and_then(|d| d.trim().parse::<u32>().ok())
            {
                depth = depth.max(d);
            }
        }
        if !is_label && !code.is_empty() {
            in_block_header = false;
        }
        if code.starts_with('{') {
            braces += 1;
        }
        if code.starts_with('}') {
            braces -= 1;
            if braces == 0 {
                break;
            }
            continue;
        }
        let instruction = braces > 0
            && !is_label
            && !code.is_empty()
            && !code.starts_with('.')
            && !code.starts_with('{')
            && !code.starts_with("prototype_");
        if instruction {
            size.total += 1;
            if depth >= 2 {
                size.inner_loops += 1;
            }
        }
    }
    size
}

/// Threads and iterations of the host check: tests/fixtures/bench/gpu_lookup_host.c runs
/// 3 blocks of 256.
const HOST_CHECK_THREADS: usize = 768;
const HOST_CHECK_ITERS: u32 = 300;
/// The driver's default table sizes.
const SIZES: [usize; 5] = [1, 16, 1024, 65536, 1 << 20];

/// Run the benchmark's kernel on the CPU (gpu_lookup_host.c: the same source with the
/// grid simulated; `ours` with device-rtl's real lookup from its host static library,
/// searching the table; `ours_index` the same with the plugin's index of the table
/// installed, from `gpu_lookup_bench --print-index`)
/// and compare every thread's result with the driver's host reference, for every size
/// and both key patterns. The GPU run checks the same equality on the device; this
/// catches a kernel and reference that disagree before anyone spends a GPU on it.
pub fn check_kernel_on_host(driver: &Path) -> Result<()> {
    util::section("gpu lookup bench: the kernel on the CPU vs the driver's reference");
    let clang = util::llvm22("clang")?;
    let staticlib = device_build::host_staticlib()?;
    let dir = cubin_dir().join("host-check");
    std::fs::create_dir_all(&dir)?;
    let source = util::root().join("tests/fixtures/bench/gpu_lookup_host.c");
    let mut cases = 0;
    let sh = Shell::new()?;
    for (name, define) in [
        ("direct", "LOOKUP_DIRECT"),
        ("ours", "LOOKUP_OURS"),
        ("ours_index", "LOOKUP_OURS"),
    ] {
        let exe = dir.join(format!("gpu_lookup_host.{name}"));
        cmd!(
            sh,
            "{clang} -O2 -Wno-ignored-attributes -D{define} {source} {staticlib} -o {exe}"
        )
        .run()?;
        for size in SIZES {
            let index_file = dir.join(format!("index-{size}.txt"));
            let size_arg = size.to_string();
            if name == "ours_index" {
                let index = util::read(cmd!(sh, "{driver} --print-index {size_arg}"))?;
                std::fs::write(&index_file, index)?;
            }
            let index_arg = (name == "ours_index").then_some(&index_file);
            for (pattern, divergent) in [("uniform", "0"), ("divergent", "1")] {
                let iters = HOST_CHECK_ITERS.to_string();
                let got = util::read(cmd!(
                    sh,
                    "{exe} {size_arg} {divergent} {iters} {index_arg...}"
                ))?;
                let reference = format!("{size},{pattern},{iters},{HOST_CHECK_THREADS}");
                let want = util::read(cmd!(sh, "{driver} --print-reference {reference}"))?;
                ensure!(
                    want.lines().count() == HOST_CHECK_THREADS,
                    "the driver printed {} reference values, not {HOST_CHECK_THREADS}",
                    want.lines().count()
                );
                if let Some((thread, (g, w))) = got
                    .lines()
                    .zip(want.lines())
                    .enumerate()
                    .find(|(_, (g, w))| g != w)
                {
                    anyhow::bail!(
                        "`{name}`, {size} keys, {pattern}: on the CPU thread {thread} gets \
                         {g}, the driver's reference says {w}: the kernel and its host \
                         mirror disagree"
                    );
                }
                ensure!(
                    got.lines().count() == HOST_CHECK_THREADS,
                    "`{name}`: the host kernel printed {} results",
                    got.lines().count()
                );
                cases += 1;
            }
        }
    }
    eprintln!(
        "  {cases} cases ({HOST_CHECK_THREADS} threads x {HOST_CHECK_ITERS} calls each): the \
         kernel on the CPU and the driver's reference agree"
    );
    Ok(())
}

/// Build the host driver (release: it computes the reference results on the CPU).
pub fn build_driver() -> Result<PathBuf> {
    util::section("gpu lookup bench: driver");
    let json = util::cargo_messages(&[
        "build",
        "--release",
        "-p",
        "gpu-lookup-bench",
        "--bin",
        "gpu_lookup_bench",
    ])?;
    util::cargo_executable(&json, "gpu_lookup_bench")
        .context("cargo reported no executable for gpu_lookup_bench")
}

/// What gpu-bundle packs: the driver and every cubin of [`build_cubins`], built and
/// checked by [`build_and_check`].
pub fn bundle_files() -> Result<(PathBuf, Vec<PathBuf>)> {
    let driver = build_and_check()?;
    Ok((driver, cubin_files(&cubin_dir())?))
}

fn cubin_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with("gpu_lookup.") && name.ends_with(".cubin") {
            files.push(path);
        }
    }
    files.sort();
    ensure!(
        !files.is_empty(),
        "no gpu_lookup cubins in {}",
        dir.display()
    );
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_touches_whole_identifiers_only() {
        let ptx = ".weak .const .align 8 .b8 env[48];\n\
                   ld.const.b64 %rd4, [env+24];\n\
                   ld.const.b64 %rd5, [my_env];\n\
                   ld.const.b64 %rd6, [env_2];\n";
        let out = rename_symbol(ptx, "env", "renamed");
        assert!(out.contains(".b8 renamed[48]"));
        assert!(out.contains("[renamed+24]"));
        assert!(out.contains("[my_env]"));
        assert!(out.contains("[env_2]"));
    }

    #[test]
    fn inner_loop_blocks_are_counted_by_their_depth_comments() {
        let ptx = "\
.visible .entry lookup_bench()\n{\n\tmov.u32 %r1, 0;\n\
$L__BB4_2:                // =>This Loop Header: Depth=1\n\
                          //     Child Loop BB4_5 Depth 2\n\tadd.s32 %r1, %r1, 1;\n\
$L__BB4_5:                //   Parent Loop BB4_2 Depth=1\n\
                          // =>  This Inner Loop Header: Depth=2\n\
\tld.b64 %rd1, [%rd2];\n\t@%p1 bra $L__BB4_5;\n\
// %bb.6:                 //   in Loop: Header=BB4_5 Depth=2\n\tshr.u64 %rd3, %rd3, 1;\n\
// %bb.7:                 //   in Loop: Header=BB4_2 Depth=1\n\t@%p2 bra $L__BB4_2;\n\
\tret;\n}\n";
        assert_eq!(
            kernel_instructions(ptx),
            KernelSize {
                total: 7,
                inner_loops: 3
            }
        );
    }

    #[test]
    fn kernel_instructions_skip_labels_and_directives() {
        let ptx = "\
.visible .func f()\n{\n\tret;\n}\n\
.visible .entry lookup_bench(\n\t.param .u64 p\n)\n{\n\t.reg .b32 %r<3>;\n\
// %bb.0:\n\tmov.u32 %r1, %tid.x;\n$L__BB0_1:\n\t{ // callseq 0\n\
\tprototype_0 : .callprototype (.param .b32 _) _ ();\n\tcall (retval0), %rd1, ();\n\
\t} // callseq 0\n\tret;\n}\n";
        assert_eq!(
            kernel_instructions(ptx),
            KernelSize {
                total: 3,
                inner_loops: 0
            }
        );
    }
}
