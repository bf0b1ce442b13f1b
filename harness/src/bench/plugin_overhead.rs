//! `cargo xtask bench plugin`: what our plugin costs per target region and per
//! map(tofrom) compared with LLVM 16's own x86_64 plugin, both under the real
//! libomptarget 16, on our in-process host device and on the isolated one
//! (`OMPTARGET_RS_ISOLATED=1`: the device in its own process; docs/BENCHMARKS.md,
//! section 1c).
//!
//! One clang-16 program (tests/fixtures/bench/plugin_overhead.c) times the regions
//! itself; it runs once per measurement with our plugin first on the library path
//! (target/plugin) and once with the plain search path (LLVM's plugin from
//! /usr/lib/llvm-16/lib), alternately, round after round, so both see the same load on
//! this shared machine. Every run of ours must leave our load marker and every run of
//! LLVM's must not: a run through the wrong plugin stops the benchmark.

use super::{load_average, machine_line, min_and_median, utc_now, write_docs_section};
use crate::{plugin, util};
use anyhow::{bail, ensure, Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use xshell::{cmd, Shell};

#[derive(clap::Args)]
pub struct Args {
    /// Interleaved rounds (each runs every measurement once per plugin).
    #[arg(long, default_value_t = 10)]
    rounds: u32,
    /// Empty target regions per timed batch.
    #[arg(long, default_value_t = 20_000)]
    regions: u32,
    /// Timed batches of empty regions per run (the run reports its fastest).
    #[arg(long, default_value_t = 10)]
    batches: u32,
    /// Buffer sizes for map(tofrom), MiB.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 4, 16, 64, 256, 1024])]
    sizes: Vec<u64>,
    /// Least map(tofrom) repetitions per run and size, rounded up to a multiple of 4
    /// (the program cycles the host buffer through 4 alignments); small buffers get
    /// more, see `reps_for`.
    #[arg(long, default_value_t = 4)]
    reps: u32,
    /// Replace the generated 1c section of docs/BENCHMARKS.md with this run's table.
    #[arg(long)]
    write_docs: bool,
}

/// LLVM 16's own x86_64 plugin: the baseline (libomptarget 16 loads the nextgen one).
pub(super) const LLVM_PLUGIN: &str = "/usr/lib/llvm-16/lib/libomptarget.rtl.x86_64.nextgen.so";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Which {
    /// Our plugin, the host device in the program's own process.
    Ours,
    /// Our plugin, the isolated host device.
    Isolated,
    Llvm,
}

impl Which {
    const ALL: [Which; 3] = [Which::Ours, Which::Isolated, Which::Llvm];
}

/// One measurement: empty regions, or map(tofrom) of a buffer of some MiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Measure {
    Empty,
    Map(u64),
}

pub fn main(args: Args) -> Result<()> {
    ensure!(
        args.rounds > 0 && args.regions > 0 && args.batches > 0 && args.reps > 0,
        "rounds, regions, batches and reps must be positive"
    );
    let plugins = plugin::build_plugins()?;
    ensure!(
        Path::new(LLVM_PLUGIN).is_file(),
        "{LLVM_PLUGIN} is missing (Debian package libomp-16-dev)"
    );
    let program = build_program()?;
    let load_before = load_average();

    let mut measures = vec![Measure::Empty];
    measures.extend(args.sizes.iter().map(|&m| Measure::Map(m)));
    // Per (measure, plugin): each run's fastest time, ns.
    let mut samples: BTreeMap<(Measure, Which), Vec<f64>> = BTreeMap::new();
    util::section("bench plugin: interleaved runs, ours and LLVM 16's");
    for round in 0..args.rounds {
        // Rotate who goes first, so a drift in load favours none.
        let mut order = Which::ALL;
        order.rotate_left(round as usize % Which::ALL.len());
        for &measure in &measures {
            for which in order {
                let ns = run_once(&program, &plugins, which, measure, &args)?;
                samples.entry((measure, which)).or_default().push(ns);
            }
        }
        eprintln!("  round {} of {} done", round + 1, args.rounds);
    }
    let load_after = load_average();

    let table = render(&measures, &samples);
    println!("{table}");
    let slower = slower_cells(&measures, &samples);
    if slower.is_empty() {
        println!("our plugin is not slower than LLVM 16's anywhere (fastest and median).");
    } else {
        println!(
            "our plugin is SLOWER than LLVM 16's at: {}",
            slower.join(", ")
        );
    }
    if args.write_docs {
        let header = format!(
            "- Machine: {}\n\
             - Date: {}\n\
             - Load average (1/5/15 min) before: {load_before}; after: {load_after}\n\
             - {} interleaved rounds; per run: {} batches of {} empty regions (the run \
             reports its fastest batch), or {} maps of one size (the run reports the mean \
             over the 4 host buffer alignments of each one's fastest map); the table shows \
             the fastest and the median of those over the rounds\n\
             - Rerun: `cargo xtask bench plugin --write-docs`\n",
            machine_line(),
            utc_now()?,
            args.rounds,
            args.batches,
            args.regions,
            args.sizes
                .iter()
                .map(|&m| format!("{} ({})", reps_for(m, args.reps), size_label(m)))
                .collect::<Vec<_>>()
                .join(", "),
        );
        write_docs_section(BEGIN_MARK, END_MARK, &format!("{header}\n{table}"))?;
    }
    Ok(())
}

const BEGIN_MARK: &str =
    "<!-- BEGIN plugin-overhead: generated by `cargo xtask bench plugin --write-docs` -->";
const END_MARK: &str = "<!-- END plugin-overhead -->";

/// The fixture, compiled by clang 16 for the x86_64 offload device into target/bench/.
fn build_program() -> Result<PathBuf> {
    util::section("bench plugin: compile tests/fixtures/bench/plugin_overhead.c");
    let clang = util::llvm16("clang")?;
    let dir = util::target_dir().join("bench");
    std::fs::create_dir_all(&dir)?;
    let exe = dir.join("plugin_overhead");
    let source = util::root().join("tests/fixtures/bench/plugin_overhead.c");
    let sh = Shell::new()?;
    cmd!(
        sh,
        "{clang} -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu {source} -o {exe}"
    )
    .run()?;
    Ok(exe)
}

/// One run of the program for one measurement; returns its fastest time in ns (per
/// region for `Empty`, per map for `Map`).
fn run_once(
    program: &Path,
    plugins: &Path,
    which: Which,
    measure: Measure,
    args: &Args,
) -> Result<f64> {
    let marker = util::target_dir().join("bench/plugin_overhead.marker");
    let _ = std::fs::remove_file(&marker);
    let measure_args = match measure {
        Measure::Empty => [
            "empty".to_string(),
            args.regions.to_string(),
            args.batches.to_string(),
        ],
        Measure::Map(mib) => [
            "map".to_string(),
            mib.to_string(),
            reps_for(mib, args.reps).to_string(),
        ],
    };
    let sh = Shell::new()?;
    let cmd = cmd!(sh, "{program} {measure_args...}")
        .env("OMPTARGET_RS_LOAD_MARKER", &marker)
        .env_remove("LIBOMPTARGET_INFO")
        .env_remove("LIBOMPTARGET_NEXTGEN_PLUGINS");
    let cmd = match which {
        Which::Ours => cmd
            .env("LD_LIBRARY_PATH", plugins)
            .env_remove("OMPTARGET_RS_ISOLATED"),
        Which::Isolated => cmd
            .env("LD_LIBRARY_PATH", plugins)
            .env("OMPTARGET_RS_ISOLATED", "1"),
        Which::Llvm => cmd.env_remove("LD_LIBRARY_PATH"),
    };
    // Spawned through std: the load marker's lines are told apart by the pid.
    let child = Command::from(cmd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", program.display()))?;
    let pid = child.id();
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{} {:?} with {which:?}'s plugin failed with {}:\n{stdout}{}",
            program.display(),
            measure,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Our plugin writes "<kind> <pid>" when libomptarget loads it.
    let marker_text = std::fs::read_to_string(&marker).unwrap_or_default();
    let ours_loaded = marker_text
        .lines()
        .any(|l| l == format!("x86_64 {pid}").as_str());
    match which {
        Which::Ours | Which::Isolated => ensure!(
            ours_loaded,
            "run {pid} with target/plugin first did not load our x86_64 plugin"
        ),
        Which::Llvm => ensure!(
            marker_text.is_empty(),
            "run {pid} meant for LLVM's plugin loaded ours: {marker_text}"
        ),
    }
    parse_line(&stdout, measure)
        .with_context(|| format!("no result for {measure:?} in the output:\n{stdout}"))
}

/// Repetitions of a map per run: at least `least`, up to 48 for small buffers (whose
/// sub-millisecond maps a handful of repetitions leaves at the mercy of the first, cold
/// one and of the machine's other load), always a multiple of the program's 4 host
/// buffer alignments.
fn reps_for(mib: u64, least: u32) -> u32 {
    let for_size = (256 / mib.max(1)).min(48) as u32;
    least.max(for_size).max(1).div_ceil(4) * 4
}

/// The fastest time of a run's result line: `empty <best ns> <median ns>` or
/// `map <MiB> <best ns> <median ns>`.
fn parse_line(stdout: &str, measure: Measure) -> Option<f64> {
    stdout.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        match (measure, words.as_slice()) {
            (Measure::Empty, ["empty", best, _median]) => best.parse().ok(),
            (Measure::Map(mib), ["map", m, best, _median]) if m.parse() == Ok(mib) => {
                best.parse().ok()
            }
            _ => None,
        }
    })
}

fn stats(samples: &BTreeMap<(Measure, Which), Vec<f64>>, m: Measure, w: Which) -> (f64, f64) {
    samples
        .get(&(m, w))
        .and_then(|v| min_and_median(v))
        .unwrap_or((f64::NAN, f64::NAN))
}

/// Markdown: one row per measurement and statistic (fastest, median): each plugin's
/// time, then the ratios of times in-process ours / LLVM (below 1: ours is faster) and
/// isolated / in-process (what the separate process costs).
fn render(measures: &[Measure], samples: &BTreeMap<(Measure, Which), Vec<f64>>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| measurement | | ours, in-process | ours, isolated | LLVM 16 | ours / LLVM | \
         isolated / in-process |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|");
    for &m in measures {
        let (label, cell): (String, Box<dyn Fn(f64) -> String>) = match m {
            Measure::Empty => (
                "empty target region, latency".into(),
                Box::new(|ns| format!("{ns:.0} ns")),
            ),
            Measure::Map(mib) => (
                format!("map(tofrom) {}", size_label(mib)),
                Box::new(move |ns| {
                    // Bytes copied: the buffer in, and out again.
                    let gbs = 2.0 * (mib << 20) as f64 / ns;
                    format!("{:.2} ms ({gbs:.2} GB/s)", ns / 1e6)
                }),
            ),
        };
        for (statistic, pick) in [("fastest", 0), ("median", 1)] {
            let value = |w| {
                let (min, med) = stats(samples, m, w);
                [min, med][pick]
            };
            let (ours, isolated, llvm) = (
                value(Which::Ours),
                value(Which::Isolated),
                value(Which::Llvm),
            );
            let _ = writeln!(
                out,
                "| {label} | {statistic} | {} | {} | {} | {:.3} | {:.3} |",
                cell(ours),
                cell(isolated),
                cell(llvm),
                ours / llvm,
                isolated / ours,
            );
        }
    }
    out
}

fn size_label(mib: u64) -> String {
    if mib >= 1024 && mib.is_multiple_of(1024) {
        format!("{} GiB", mib / 1024)
    } else {
        format!("{mib} MiB")
    }
}

/// Measurements where ours took longer than LLVM's in both the fastest and the median.
fn slower_cells(
    measures: &[Measure],
    samples: &BTreeMap<(Measure, Which), Vec<f64>>,
) -> Vec<String> {
    measures
        .iter()
        .filter_map(|&m| {
            let (ours_min, ours_med) = stats(samples, m, Which::Ours);
            let (llvm_min, llvm_med) = stats(samples, m, Which::Llvm);
            (ours_min > llvm_min && ours_med > llvm_med).then(|| {
                format!(
                    "{m:?} (fastest x{:.3}, median x{:.3})",
                    ours_min / llvm_min,
                    ours_med / llvm_med
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_buffers_get_more_repetitions() {
        assert_eq!(reps_for(1, 4), 48);
        assert_eq!(reps_for(16, 4), 16);
        assert_eq!(reps_for(1024, 4), 4);
        assert_eq!(reps_for(1024, 7), 8);
        assert_eq!(reps_for(1024, 0), 4);
    }

    #[test]
    fn result_lines_parse() {
        let out = "empty 612.40 986.30\nmap 64 43297516 48843349\n";
        assert_eq!(parse_line(out, Measure::Empty), Some(612.40));
        assert_eq!(parse_line(out, Measure::Map(64)), Some(43297516.0));
        assert_eq!(parse_line(out, Measure::Map(4)), None);
        assert_eq!(parse_line("usage: ...", Measure::Empty), None);
    }

    #[test]
    fn ratios_are_ours_over_llvm() {
        let mut samples = BTreeMap::new();
        samples.insert((Measure::Empty, Which::Ours), vec![300.0, 100.0, 200.0]);
        samples.insert((Measure::Empty, Which::Isolated), vec![900.0, 500.0, 700.0]);
        samples.insert((Measure::Empty, Which::Llvm), vec![400.0, 200.0, 250.0]);
        let table = render(&[Measure::Empty], &samples);
        // Fastest 100 / 200 and 500 / 100, median 200 / 250 and 700 / 200.
        assert!(
            table.contains("| fastest | 100 ns | 500 ns | 200 ns | 0.500 | 5.000 |"),
            "{table}"
        );
        assert!(
            table.contains("| median | 200 ns | 700 ns | 250 ns | 0.800 | 3.500 |"),
            "{table}"
        );
        assert!(slower_cells(&[Measure::Empty], &samples).is_empty());
        samples.insert((Measure::Empty, Which::Llvm), vec![50.0, 60.0, 70.0]);
        assert_eq!(slower_cells(&[Measure::Empty], &samples).len(), 1);
    }
}
