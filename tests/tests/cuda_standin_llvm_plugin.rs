//! What a loop of maps asks of the CUDA driver, ours beside LLVM 16's own cuda plugins,
//! on a CPU: tests/fixtures/cuda/map_loop.c (a 4 KiB array mapped into a region and a
//! 1 MiB one in and out with enter/exit data, each iteration), built by clang 16 for
//! sm_90, run under the real libomptarget 16 with the CUDA driver stand-in (launches
//! skipped) for 1 and for 1,000 iterations through
//! - our cuda plugin (target/plugin/ on `LD_LIBRARY_PATH`, as in
//!   cuda_standin_data_path.rs),
//! - LLVM 16's legacy plugin (`libomptarget.rtl.cuda.so`,
//!   `LIBOMPTARGET_NEXTGEN_PLUGINS=0`) and
//! - LLVM 16's nextgen plugin (`libomptarget.rtl.cuda.nextgen.so`, libomptarget 16's
//!   default, set to 1 here),
//!
//! LLVM's from Debian's /usr/lib/llvm-16/lib, with only the stand-in on
//! `LD_LIBRARY_PATH`. The stand-in's `calls` event gives each run's driver calls; the
//! calls per later iteration are (calls at 1,000 - calls at 1) / 999. The loader's own
//! log (`LD_DEBUG=libs`) says which plugin file each run initialised.
//!
//! The table printed (`--nocapture`) is docs/BENCHMARKS.md's "Driver calls per
//! iteration on the CUDA stand-in (CPU)".

use e2e_tests::compile::compile_nvptx_program;
use e2e_tests::cuda_standin::{self, Log};
use e2e_tests::paths::{fixture, require_file, scratch};
use e2e_tests::plugin::built_plugin_dir;
use std::path::{Path, PathBuf};
use std::process::Command;

const ITERATIONS: u64 = 1000;
/// LLVM 16's own plugins (and libomptarget) as Debian installs them.
const LLVM_LIB: &str = "/usr/lib/llvm-16/lib";

/// The rows of the table: a name and the driver functions it counts (by prefix;
/// `cuMemAlloc` counts cuMemAlloc_v2, cuMemAllocHost, cuMemAllocManaged...). `None`:
/// every call.
const ROWS: &[(&str, Option<&[&str]>)] = &[
    ("cuMemAlloc*", Some(&["cuMemAlloc"])),
    ("cuMemFree*", Some(&["cuMemFree"])),
    ("cuCtxSynchronize", Some(&["cuCtxSynchronize"])),
    ("cuStreamSynchronize", Some(&["cuStreamSynchronize"])),
    ("cuMemcpy* (calls)", Some(&["cuMemcpy"])),
    ("cuLaunchKernel", Some(&["cuLaunchKernel"])),
    ("cuEvent*", Some(&["cuEvent"])),
    ("total", None),
];

/// The three ways the program runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Plugin {
    Ours,
    LlvmLegacy,
    LlvmNextgen,
}

impl Plugin {
    fn column(self) -> &'static str {
        match self {
            Plugin::Ours => "ours",
            Plugin::LlvmLegacy => "LLVM 16 legacy",
            Plugin::LlvmNextgen => "LLVM 16 nextgen",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Plugin::Ours => "ours",
            Plugin::LlvmLegacy => "llvm-legacy",
            Plugin::LlvmNextgen => "llvm-nextgen",
        }
    }

    /// The plugin file the run must initialise.
    fn file(self) -> PathBuf {
        match self {
            Plugin::Ours => require_file(
                built_plugin_dir().join("libomptarget.rtl.cuda.nextgen.so"),
                "`cargo xtask build-plugin`",
            ),
            Plugin::LlvmLegacy => {
                require_file(Path::new(LLVM_LIB).join("libomptarget.rtl.cuda.so"), "")
            }
            Plugin::LlvmNextgen => require_file(
                Path::new(LLVM_LIB).join("libomptarget.rtl.cuda.nextgen.so"),
                "",
            ),
        }
    }
}

/// One run's report, and every shared object the loader initialised.
struct Run {
    log: Log,
    initialised: Vec<PathBuf>,
}

impl Run {
    /// Calls to the functions of one row (all calls for `None`).
    fn count(&self, prefixes: Option<&[&str]>) -> u64 {
        match prefixes {
            Some(p) => self.log.calls_to(p),
            None => self
                .log
                .calls()
                .map_or(0, |calls| calls.values().map(|c| c.count).sum()),
        }
    }
}

/// The objects the loader's log (`LD_DEBUG=libs`, one file per process under `dir`)
/// says it ran the initialisers of.
fn initialised(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the loader's log folder") {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        for line in text.lines() {
            if let Some((_, path)) = line.split_once("calling init: ") {
                let path = Path::new(path.trim());
                found.push(path.canonicalize().unwrap_or_else(|_| path.to_path_buf()));
            }
        }
    }
    found
}

/// Run map_loop for `iterations` through `plugin`, with the stand-in (launches skipped,
/// offload mandatory); it must succeed with no driver error.
fn run(exe: &Path, plugin: Plugin, iterations: u64) -> Run {
    let dir = scratch(
        "standin-llvm-plugin",
        &format!("{}-{iterations}", plugin.tag()),
    );
    let log = dir.join("standin.jsonl");
    let loader = dir.join("ld");
    std::fs::create_dir_all(&loader).unwrap();
    let mut cmd = match plugin {
        Plugin::Ours => cuda_standin::command(exe, &built_plugin_dir(), &log),
        Plugin::LlvmLegacy | Plugin::LlvmNextgen => {
            let mut cmd = Command::new(exe);
            cmd.env("LD_LIBRARY_PATH", cuda_standin::dir())
                .env(cuda_standin::LOG_ENV, &log);
            cmd
        }
    };
    // libomptarget 16 opens `libomptarget.rtl.<kind>.nextgen.so` when this is 1 (its
    // default), `libomptarget.rtl.<kind>.so` when 0; target/plugin/ has ours under both.
    let nextgen = if plugin == Plugin::LlvmLegacy {
        "0"
    } else {
        "1"
    };
    cmd.env("LIBOMPTARGET_NEXTGEN_PLUGINS", nextgen);
    let output = cmd
        .arg(iterations.to_string())
        .env(cuda_standin::LAUNCH_ENV, "skip")
        .env("OMP_TARGET_OFFLOAD", "MANDATORY")
        .env_remove("LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD")
        .env("LD_DEBUG", "libs")
        .env("LD_DEBUG_OUTPUT", loader.join("ld"))
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    let shown = format!(
        "{:?}, {iterations} iterations: {}\nstdout:\n{}\nstderr:\n{}",
        plugin,
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{shown}");
    let expected = format!("map_loop: {iterations} iterations");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(&expected),
        "{shown}"
    );
    let log = Log::read(&log, None);
    assert!(log.calls().is_some(), "no calls line\n{shown}");
    assert!(log.errors().is_empty(), "{:?}\n{shown}", log.errors());
    Run {
        log,
        initialised: initialised(&loader),
    }
}

/// Calls per later iteration: (at 1,000 - at 1) / 999.
fn per_iteration(once: &Run, many: &Run, prefixes: Option<&[&str]>) -> f64 {
    let (a, b) = (once.count(prefixes), many.count(prefixes));
    assert!(b >= a, "{b} calls at {ITERATIONS} iterations, {a} at 1");
    (b - a) as f64 / (ITERATIONS - 1) as f64
}

fn shown(value: f64) -> String {
    if (value - value.round()).abs() < 1e-9 {
        format!("{}", value.round())
    } else {
        format!("{value:.3}")
    }
}

/// Our plugin makes no driver allocation, free or device-wide wait after the first
/// iteration; LLVM 16's plugins, run on the same stand-in (each launching once per
/// iteration, so the comparison is of the same loop), are measured beside it.
#[test]
fn driver_calls_per_iteration_ours_beside_llvm16s_cuda_plugins() {
    let exe = scratch("standin-llvm-plugin", "map-loop").join("map_loop");
    compile_nvptx_program(&fixture("cuda/map_loop.c"), &exe, "sm_90", &[]);
    let plugins = [Plugin::Ours, Plugin::LlvmLegacy, Plugin::LlvmNextgen];
    let mut table = Vec::new();
    for plugin in plugins {
        let once = run(&exe, plugin, 1);
        let many = run(&exe, plugin, ITERATIONS);
        // The plugin the run was meant to use is the one the loader initialised, and
        // the other cuda plugin files were not.
        let file = plugin.file().canonicalize().unwrap();
        for r in [&once, &many] {
            assert!(
                r.initialised.contains(&file),
                "{plugin:?}: {} was not initialised: {:?}",
                file.display(),
                r.initialised
            );
            let cuda_plugins: Vec<_> = r
                .initialised
                .iter()
                .filter(|p| p.to_string_lossy().contains("libomptarget.rtl.cuda"))
                .collect();
            assert_eq!(cuda_plugins, [&file], "{plugin:?}");
        }
        let row: Vec<f64> = ROWS
            .iter()
            .map(|(_, prefixes)| per_iteration(&once, &many, *prefixes))
            .collect();
        table.push((plugin, row, once, many));
    }

    println!(
        "driver calls per later iteration of map_loop ((calls at {ITERATIONS} - calls at 1) \
         / {}), CUDA driver stand-in, libomptarget 16",
        ITERATIONS - 1
    );
    let header: Vec<&str> = table.iter().map(|(p, ..)| p.column()).collect();
    println!("| driver calls | {} |", header.join(" | "));
    println!("|---|{}", "---:|".repeat(header.len()));
    for (i, (name, _)) in ROWS.iter().enumerate() {
        let cells: Vec<String> = table.iter().map(|(_, row, ..)| shown(row[i])).collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
    // Every function that grew, per later iteration.
    for (plugin, _, once, many) in &table {
        let grown: Vec<String> = many
            .log
            .calls()
            .into_iter()
            .flatten()
            .filter_map(|(name, c)| {
                let before = once.log.call(name).count;
                let v = (c.count - before.min(c.count)) as f64 / (ITERATIONS - 1) as f64;
                (v > 0.0).then(|| format!("{name} {}", shown(v)))
            })
            .collect();
        println!("{}: {}", plugin.column(), grown.join(", "));
    }

    let value = |plugin: Plugin, row: &str| {
        let (_, values, ..) = table.iter().find(|(p, ..)| *p == plugin).unwrap();
        let i = ROWS.iter().position(|(n, _)| *n == row).unwrap();
        values[i]
    };
    for row in ["cuMemAlloc*", "cuMemFree*", "cuCtxSynchronize"] {
        assert_eq!(value(Plugin::Ours, row), 0.0, "ours: {row} per iteration");
    }
    for plugin in plugins {
        assert_eq!(
            value(plugin, "cuLaunchKernel"),
            1.0,
            "{plugin:?} launches once per iteration"
        );
    }
    // LLVM's plugins loaded the image with cuModuleLoadDataEx, ours with
    // cuModuleLoadData: each run's driver calls are its plugin's.
    for (plugin, _, once, _) in &table {
        let (ex, plain) = (
            once.log.call("cuModuleLoadDataEx").count,
            once.log.call("cuModuleLoadData").count,
        );
        let expected = if *plugin == Plugin::Ours {
            (0, 1)
        } else {
            (1, 0)
        };
        assert_eq!((ex, plain), expected, "{plugin:?}");
    }
}
