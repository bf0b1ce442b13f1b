//! `cargo xtask reliability`: endurance, stress and load/unload cycles through the real
//! libomptarget 16 (issue 8, part 2), `--valgrind` (memcheck of the end-to-end programs,
//! leaks attributed to our plugin's frames) and `--asan` (the parser and table unit
//! tests under AddressSanitizer) (part 3). docs/RELIABILITY.md explains the figures.
//!
//! `cargo test` runs shorter versions of the same programs (tests/tests/reliability_*.rs);
//! this command runs them at full size, times them, and compares with LLVM's own plugin.
use crate::{plugin, util};
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Instant;
use xshell::{cmd, Shell};

#[derive(clap::Args)]
pub struct Args {
    /// Sequential target launches per run (empty regions, then indirect calls).
    #[arg(long, default_value_t = 1_000_000)]
    launches: u64,
    /// Rounds of the 16-thread nowait stress (each: 5 regions and 2 updates per thread).
    #[arg(long, default_value_t = 50)]
    rounds: u64,
    /// dlopen/dlclose cycles of the offloading library.
    #[arg(long, default_value_t = 1000)]
    cycles: u64,
    /// Run the end-to-end programs under valgrind memcheck instead.
    #[arg(long)]
    valgrind: bool,
    /// Run the parser and table unit tests under AddressSanitizer instead (nightly).
    #[arg(long)]
    asan: bool,
}

pub fn main(args: Args) -> Result<()> {
    if args.asan {
        asan()?;
    }
    if args.valgrind {
        valgrind()?;
    }
    if !args.asan && !args.valgrind {
        endurance(&args)?;
    }
    Ok(())
}

fn fixture(name: &str) -> PathBuf {
    util::root().join("tests/fixtures/reliability").join(name)
}

fn out_dir() -> Result<PathBuf> {
    let d = util::target_dir().join("reliability");
    fs::create_dir_all(&d)?;
    Ok(d)
}

/// The fixture programs, built with clang 16 against device-rtl.
struct Programs {
    launches: PathBuf,
    stress: PathBuf,
    cycles: PathBuf,
    library: PathBuf,
    example: PathBuf,
}

fn build_programs() -> Result<(Programs, PathBuf)> {
    let plugins = plugin::build_plugins()?;
    util::section("reliability: build the fixture programs with clang 16");
    let dir = out_dir()?;
    let p = Programs {
        launches: dir.join("launches"),
        stress: dir.join("stress"),
        cycles: dir.join("dlopen_cycles"),
        library: dir.join("liboffload_lib.so"),
        example: dir.join("indirect_calls"),
    };
    plugin::compile_offload_program(&fixture("launches.c"), &p.launches)?;
    plugin::compile_offload_program(&fixture("stress.c"), &p.stress)?;
    plugin::compile_offload_program(&util::root().join("examples/indirect_calls.c"), &p.example)?;
    let clang = util::llvm16("clang")?;
    let x = "-Xoffload-linker-x86_64-pc-linux-gnu";
    let (include, rtl) = (
        util::root().join("host-plugin/include"),
        device_build::host_staticlib()?,
    );
    let (library_source, cycles_source) = (fixture("offload_lib.c"), fixture("dlopen_cycles.c"));
    let (library, cycles) = (&p.library, &p.cycles);
    let sh = Shell::new()?;
    cmd!(
        sh,
        "{clang} -O1 -fPIC -shared -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -I {include} {x} --undefined=__kmpc_target_translate_fptr {x} {rtl} {library_source} -o {library}"
    )
    .run()?;
    cmd!(
        sh,
        "{clang} -O1 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu {cycles_source} -o {cycles}"
    )
    .run()?;
    Ok((p, plugins))
}

/// Which plugin serves the x86_64 device: ours (target/plugin first on the search path)
/// or LLVM 16's own (found through libomptarget's rpath).
#[derive(Clone, Copy, PartialEq)]
enum Which {
    Ours,
    Llvms,
}

struct Run {
    out: Output,
    seconds: f64,
}

impl Run {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    /// "exit 0", "exit 1", "SIGSEGV" ...
    fn outcome(&self) -> String {
        match (self.out.status.code(), self.out.status.signal()) {
            (Some(c), _) => format!("exit {c}"),
            (_, Some(11)) => "SIGSEGV".into(),
            (_, Some(s)) => format!("signal {s}"),
            _ => "unknown".into(),
        }
    }
    /// The program's last stdout line (its summary), or its outcome.
    fn summary(&self) -> String {
        self.stdout()
            .lines()
            .last()
            .map(str::to_string)
            .unwrap_or_else(|| format!("(no output, {})", self.outcome()))
    }
}

fn run(which: Which, plugins: &Path, prefix: &[&str], exe: &Path, args: &[&str]) -> Result<Run> {
    // `prefix` (valgrind and its options) runs the program, when given.
    let (program, prefix_args, exe_arg) = match prefix.split_first() {
        Some((first, rest)) => (Path::new(first), rest, Some(exe)),
        None => (exe, &[][..], None),
    };
    let sh = Shell::new()?;
    let cmd =
        cmd!(sh, "{program} {prefix_args...} {exe_arg...} {args...}").env("LIBOMPTARGET_INFO", "0");
    let cmd = if which == Which::Ours {
        cmd.env("LD_LIBRARY_PATH", plugins)
    } else {
        cmd.env_remove("LD_LIBRARY_PATH")
    };
    eprintln!(
        "$ {}{cmd}",
        if which == Which::Ours {
            format!("LD_LIBRARY_PATH={} ", plugins.display())
        } else {
            String::new()
        },
    );
    let start = Instant::now();
    let out = cmd
        .quiet()
        .ignore_status()
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    let r = Run {
        out,
        seconds: start.elapsed().as_secs_f64(),
    };
    eprintln!(
        "  -> {} in {:.2} s: {}",
        r.outcome(),
        r.seconds,
        r.summary()
    );
    Ok(r)
}

fn endurance(args: &Args) -> Result<()> {
    let (p, plugins) = build_programs()?;
    let mut report = String::new();
    let mut failures = Vec::new();
    let n = args.launches.to_string();

    util::section("reliability: sequential launches");
    for mode in ["empty", "indirect"] {
        let ours = run(Which::Ours, &plugins, &[], &p.launches, &[mode, &n])?;
        let rate = args.launches as f64 / ours.seconds;
        writeln!(
            report,
            "{n} sequential {mode} launches, our plugin: {} in {:.2} s ({rate:.0} launches/s): {}",
            ours.outcome(),
            ours.seconds,
            ours.summary()
        )?;
        if !ours.out.status.success() {
            failures.push(format!(
                "{mode} launches with our plugin: {}",
                ours.outcome()
            ));
        }
        let llvm = run(Which::Llvms, &plugins, &[], &p.launches, &[mode, &n])?;
        writeln!(
            report,
            "{n} sequential {mode} launches, LLVM 16's plugin: {} in {:.2} s: {}",
            llvm.outcome(),
            llvm.seconds,
            llvm.summary()
        )?;
    }
    // The ~75,000-launch ceiling: clang 16 leaves each target region's 112-byte argument
    // alloca in the loop body, so the inline loop overflows an 8 MiB stack whatever plugin
    // runs it; with a bigger stack the same loop runs on.
    for which in [Which::Ours, Which::Llvms] {
        let r = run(which, &plugins, &[], &p.launches, &["inline", &n])?;
        writeln!(
            report,
            "{n} launches written inline in a loop (8 MiB stack), {}: {}",
            name(which),
            r.summary()
        )?;
    }
    let big_stack = "ulimit -s 1048576 && exec \"$0\" \"$@\"";
    let r = run(
        Which::Ours,
        &plugins,
        &["bash", "-c", big_stack],
        &p.launches,
        &["inline", &n],
    )?;
    writeln!(
        report,
        "{n} launches written inline in a loop (1 GiB stack), our plugin: {}",
        r.summary()
    )?;

    util::section("reliability: 16 threads of nowait regions and transfers");
    let rounds = args.rounds.to_string();
    for which in [Which::Ours, Which::Llvms] {
        let r = run(which, &plugins, &[], &p.stress, &[&rounds])?;
        writeln!(
            report,
            "stress, {} ({:.1} s): {}",
            name(which),
            r.seconds,
            r.summary()
        )?;
        if which == Which::Ours && !r.out.status.success() {
            failures.push(format!("stress with our plugin: {}", r.outcome()));
        }
    }

    util::section("reliability: dlopen/dlclose cycles of an offloading library");
    let cycles = args.cycles.to_string();
    let warmup = (args.cycles / 10).to_string();
    let lib = p.library.to_string_lossy().into_owned();
    for which in [Which::Ours, Which::Llvms] {
        let r = run(which, &plugins, &[], &p.cycles, &[&lib, &cycles, &warmup])?;
        let stdout = r.stdout();
        writeln!(
            report,
            "{cycles} dlopen cycles, {} ({}, {:.2} s):",
            name(which),
            r.outcome(),
            r.seconds
        )?;
        for line in stdout.lines() {
            writeln!(report, "    {line}")?;
        }
        if which == Which::Ours && !r.out.status.success() {
            failures.push(format!(
                "dlopen cycles with our plugin: {} (see docs/RELIABILITY.md, fixes R1/R2)",
                r.outcome()
            ));
        }
    }

    let path = out_dir()?.join("endurance.txt");
    fs::write(&path, &report)?;
    util::section(&format!(
        "reliability: summary (also in {})",
        path.display()
    ));
    print!("{report}");
    if !failures.is_empty() {
        bail!("reliability failures:\n  {}", failures.join("\n  "));
    }
    Ok(())
}

fn name(which: Which) -> &'static str {
    match which {
        Which::Ours => "our plugin",
        Which::Llvms => "LLVM 16's plugin",
    }
}

// ---------------------------------------------------------------------------------------
// valgrind

/// One memcheck error of an XML report: its kind, text, bytes (leaks) and frames.
struct VgError {
    kind: String,
    text: String,
    bytes: u64,
    frames: Vec<String>,
}

fn tag<'a>(block: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = block.find(&open)? + open.len();
    let end = block[start..].find(&close)? + start;
    Some(&block[start..end])
}

fn blocks<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(s) = rest.find(&open) {
        let after = &rest[s + open.len()..];
        let Some(e) = after.find(&close) else { break };
        out.push(&after[..e]);
        rest = &after[e + close.len()..];
    }
    out
}

fn parse_valgrind_xml(xml: &str) -> Vec<VgError> {
    blocks(xml, "error")
        .into_iter()
        .map(|e| VgError {
            kind: tag(e, "kind").unwrap_or("?").to_string(),
            text: tag(e, "text")
                .or_else(|| tag(e, "what"))
                .unwrap_or("")
                .trim()
                .to_string(),
            bytes: tag(e, "leakedbytes")
                .and_then(|b| b.trim().parse().ok())
                .unwrap_or(0),
            frames: blocks(e, "frame")
                .into_iter()
                .map(|f| {
                    format!(
                        "{} ({})",
                        tag(f, "fn").unwrap_or("?"),
                        tag(f, "obj").unwrap_or("?")
                    )
                })
                .collect(),
        })
        .collect()
}

/// A frame of ours: the plugin library (any of its copies in target/plugin) or a
/// function of the host_plugin crate.
fn is_our_frame(frame: &str, plugins: &Path) -> bool {
    frame.contains(&*plugins.to_string_lossy()) || frame.contains("host_plugin")
}

fn valgrind() -> Result<()> {
    util::ensure_debian_packages(&["valgrind"])?;
    let (p, plugins) = build_programs()?;
    util::section("reliability: valgrind memcheck of the end-to-end programs (our plugin)");
    let dir = out_dir()?;
    let lib = p.library.to_string_lossy().into_owned();
    let cases: Vec<(&str, &Path, Vec<&str>)> = vec![
        ("indirect_calls example", &p.example, vec![]),
        (
            "1,000 indirect launches",
            &p.launches,
            vec!["indirect", "1000"],
        ),
        ("16-thread stress, 1 round", &p.stress, vec!["1"]),
        ("20 dlopen cycles", &p.cycles, vec![lib.as_str(), "20", "2"]),
    ];
    let mut report = String::new();
    let mut ours_total = 0usize;
    for (i, (label, exe, args)) in cases.iter().enumerate() {
        let xml = dir.join(format!("valgrind-{i}.xml"));
        let xml_arg = format!("--xml-file={}", xml.display());
        let prefix = [
            "valgrind",
            "--tool=memcheck",
            "--leak-check=full",
            "--show-leak-kinds=definite,indirect",
            "--xml=yes",
            &xml_arg,
        ];
        let r = run(Which::Ours, &plugins, &prefix, exe, args)?;
        let text = fs::read_to_string(&xml).unwrap_or_default();
        let errors = parse_valgrind_xml(&text);
        let leaks: Vec<&VgError> = errors
            .iter()
            .filter(|e| e.kind == "Leak_DefinitelyLost" || e.kind == "Leak_IndirectlyLost")
            .collect();
        let leaked: u64 = leaks.iter().map(|e| e.bytes).sum();
        let ours: Vec<&VgError> = errors
            .iter()
            .filter(|e| e.frames.iter().any(|f| is_our_frame(f, &plugins)))
            .collect();
        ours_total += ours.len();
        writeln!(
            report,
            "{label}: program {} ({}); memcheck: {} errors, {} definite/indirect leak records \
             ({leaked} bytes, none of ours: {}); errors with a frame of our plugin: {}",
            r.outcome(),
            r.summary(),
            errors.len(),
            leaks.len(),
            ours.is_empty(),
            ours.len()
        )?;
        for e in &ours {
            writeln!(report, "    OURS {}: {}", e.kind, e.text)?;
            for f in &e.frames {
                writeln!(report, "        {f}")?;
            }
        }
        for e in leaks
            .iter()
            .filter(|e| !ours.iter().any(|o| std::ptr::eq(*o, **e)))
        {
            let origin = e
                .frames
                .iter()
                .find(|f| !f.contains("vgpreload"))
                .cloned()
                .unwrap_or_default();
            writeln!(report, "    not ours: {} (first frame {origin})", e.text)?;
        }
    }
    let path = dir.join("valgrind.txt");
    fs::write(&path, &report)?;
    util::section(&format!(
        "reliability: valgrind summary (also in {})",
        path.display()
    ));
    print!("{report}");
    if ours_total > 0 {
        bail!("valgrind found {ours_total} errors or leaks in our plugin's frames");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// AddressSanitizer

fn asan() -> Result<()> {
    util::section("reliability: parser and table unit tests under AddressSanitizer");
    let sh = Shell::new()?;
    let has_nightly = cmd!(sh, "rustup run nightly rustc --version")
        .quiet()
        .ignore_stdout()
        .ignore_stderr()
        .run()
        .is_ok();
    if !has_nightly {
        bail!("--asan needs a nightly toolchain (`rustup toolchain install nightly`)");
    }
    // Its own target dir: sanitizer flags change every crate's build. `--target` keeps
    // the flags off build scripts and proc macros, which cannot be instrumented.
    sh.change_dir(util::root());
    cmd!(
        sh,
        "cargo +nightly test --target x86_64-unknown-linux-gnu --lib -p host-plugin -p device-rtl -p offload-formats"
    )
    .env("RUSTFLAGS", "-Zsanitizer=address")
    .env("RUSTDOCFLAGS", "-Zsanitizer=address")
    .env("CARGO_TARGET_DIR", util::target_dir().join("asan"))
    .env_remove("RUSTUP_TOOLCHAIN")
    .env_remove("CARGO")
    .run()?;
    println!("AddressSanitizer: host-plugin, device-rtl and offload-formats unit tests passed");
    Ok(())
}
