//! `cargo xtask bench cpu`: the CPU benchmarks of the fptr lookup (device-rtl/benches).
//!
//! Three measurements of the same implementations, sizes and workloads:
//! - instructions per lookup, counted by callgrind on `benches/lookup_count.rs`: exact
//!   and repeatable even on a loaded machine, but blind to caches and branch misses;
//! - time per lookup from criterion (`benches/lookup.rs`), kept short (the machine may be
//!   shared): real, but noisy;
//! - the fastest of many interleaved timed rounds (`lookup_count SIZE WORKLOAD ROUNDS`):
//!   what other load on the machine disturbs least.
//!
//! It prints the tables, writes every number to target/bench/cpu-lookup.json and, with
//! `--write-docs`, replaces the generated section of docs/BENCHMARKS.md with the tables,
//! copies the JSON to docs/bench/ and redraws the plots from it ([`plot`]). Nothing here
//! is a pass/fail test; it does print whether the index meets issue 15's criterion (no
//! more instructions than the libgomp-style hash at every size from 16 to 1M).

pub mod gpu_lookup;
pub mod load_binary;
pub mod plot;
mod plugin_overhead;
mod virtual_calls;

use crate::util;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use xshell::{cmd, Shell};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Lookup on the CPU: ours vs plain binary search vs libgomp-style hash and more
    /// (callgrind instruction counts, criterion times, fastest interleaved rounds).
    Cpu(CpuArgs),
    /// Plugin overhead through libomptarget 16 on the host device: empty-region latency
    /// and map(tofrom) times, our plugin vs LLVM 16's, interleaved runs (section 1c).
    Plugin(plugin_overhead::Args),
    /// `load_binary` with 10, 10k and 1M indirect entries through the Rust API, with the
    /// time of each phase (section 1d).
    Load(load_binary::Args),
    /// Lookups per second on a GPU: ours (with and without the index), the
    /// warp-cooperative build and LLVM 19's lookup vs a direct call, warp-uniform and
    /// divergent keys, tables of 1 to 1M (section 1b). Builds the cubins and the driver;
    /// without a GPU it prints SKIPPED.
    Gpu(gpu_lookup::Args),
    /// Virtual calls per second on the host device: objects built on the host, on the
    /// device, and direct calls, with and without the compiler plugin (section 1e).
    Virtual(virtual_calls::Args),
    /// Redraw the SVG plots of docs/ from the JSON results in docs/bench/.
    Plot(plot::Args),
}

#[derive(clap::Args)]
struct CpuArgs {
    /// Criterion measurement time per benchmark, seconds.
    #[arg(long, default_value_t = 1.0)]
    measurement_time: f64,
    /// Criterion warm-up time per benchmark, seconds.
    #[arg(long, default_value_t = 0.3)]
    warm_up_time: f64,
    /// Criterion samples per benchmark (at least 10).
    #[arg(long, default_value_t = 20)]
    sample_size: u32,
    /// Only count instructions (no timing).
    #[arg(long)]
    skip_criterion: bool,
    /// Only time (no callgrind).
    #[arg(long)]
    skip_callgrind: bool,
    /// Timed rounds per case for the fastest-round table (0: skip it).
    #[arg(long, default_value_t = 50)]
    rounds: u32,
    /// Replace the generated section of docs/BENCHMARKS.md with this run's tables.
    #[arg(long)]
    write_docs: bool,
}

pub fn main(args: Args) -> Result<()> {
    match args.what {
        What::Cpu(a) => cpu(a),
        What::Plugin(a) => plugin_overhead::main(a),
        What::Load(a) => load_binary::main(a),
        What::Gpu(a) => gpu_lookup::main(a),
        What::Virtual(a) => virtual_calls::main(a),
        What::Plot(a) => plot::main(a),
    }
}

/// The implementations in the order the tables show them (names as the benches print):
/// ours with the head and the index (what the device runs), with the index alone, and
/// the search, the baselines, the layout and index-design experiments, then the exported
/// C function called once per key (with the head and the index, and without both).
const IMPLS: [&str; 12] = [
    "ours_head",
    "ours_index",
    "ours",
    "plain_lower_bound",
    "libgomp_hash",
    "upstream_style",
    "eytzinger",
    "index_1slot",
    "index_4slots",
    "range_buckets",
    "exported_index",
    "exported_search",
];

/// The structures whose memory the bench reports (bytes per entry beside the table).
const MEMORY_IMPLS: [&str; 5] = [
    "ours_index",
    "index_1slot",
    "index_4slots",
    "range_buckets",
    "libgomp_hash",
];

/// Issue 15's criterion covers the sizes from 16 to 1M.
const CRITERION_SIZES: std::ops::RangeInclusive<usize> = 16..=(1 << 20);

/// One cell of the results: (table size, workload, implementation).
type Key = (usize, String, &'static str);

#[derive(Default)]
struct Measures {
    instructions: Option<f64>,
    nanoseconds: Option<f64>,
    fastest_round: Option<f64>,
}

fn cpu(args: CpuArgs) -> Result<()> {
    let load_before = load_average();
    let mut results: BTreeMap<Key, Measures> = BTreeMap::new();
    let memory = memory_per_entry()?;
    if !args.skip_callgrind {
        util::section("callgrind: instructions per lookup");
        util::ensure_debian_packages(&["valgrind"])?;
        let counter = build_bench_binary("device-rtl", "lookup_count")?;
        for (size, workload) in cases(&counter)? {
            for (imp, per_lookup) in count_instructions(&counter, size, &workload)? {
                results
                    .entry((size, workload.clone(), imp))
                    .or_default()
                    .instructions = Some(per_lookup);
            }
        }
    }
    if args.rounds > 0 {
        util::section("fastest of interleaved rounds: time per lookup");
        let counter = build_bench_binary("device-rtl", "lookup_count")?;
        let sh = Shell::new()?;
        let rounds = args.rounds.to_string();
        for (size, workload) in cases(&counter)? {
            let size_arg = size.to_string();
            let out = util::read(cmd!(sh, "{counter} {size_arg} {workload} {rounds}"))?;
            for line in out.lines() {
                let Some((imp, ns)) = line.strip_prefix("time ").and_then(|l| l.split_once(' '))
                else {
                    continue;
                };
                let Some(imp) = IMPLS.into_iter().find(|i| *i == imp) else {
                    continue;
                };
                let ns: f64 = ns.trim().parse()?;
                eprintln!("  {size:>8} {workload:<7} {imp:<18} {ns:8.2} ns/lookup");
                results
                    .entry((size, workload.clone(), imp))
                    .or_default()
                    .fastest_round = Some(ns);
            }
        }
    }
    if !args.skip_criterion {
        util::section("criterion: time per lookup");
        for ((size, workload, imp), ns) in run_criterion(&args)? {
            results
                .entry((size, workload, imp))
                .or_default()
                .nanoseconds = Some(ns);
        }
    }
    let load_after = load_average();

    let verdict = index_verdict(&results);
    let tables = format!(
        "{}{}\n{}\n",
        render_tables(&results),
        render_memory(&memory),
        verdict
    );
    println!("{tables}");
    let json = results_json(&results, &memory, &load_before);
    let json_path = util::target_dir().join("bench").join(plot::CPU_JSON);
    std::fs::create_dir_all(json_path.parent().expect("a parent"))?;
    std::fs::write(&json_path, serde_json::to_string_pretty(&json)? + "\n")?;
    eprintln!("wrote {}", json_path.display());
    let slower = ours_slower_than_plain(&results);
    if slower.is_empty() {
        println!("ours is never slower than plain_lower_bound in these runs.");
    } else {
        println!(
            "ours is SLOWER than plain_lower_bound at: {}",
            slower.join(", ")
        );
    }
    if args.write_docs {
        let header = run_header(&args, &load_before, &load_after)?;
        write_docs(&format!("{header}\n{tables}"))?;
        std::fs::create_dir_all(plot::data_dir())?;
        std::fs::copy(&json_path, plot::data_dir().join(plot::CPU_JSON))?;
        plot::cpu_plots(&json)?;
    }
    Ok(())
}

/// Bytes per table entry that each structure adds beside the sorted table, per size
/// (`lookup_count SIZE hits` prints them; no timing).
fn memory_per_entry() -> Result<BTreeMap<(usize, &'static str), f64>> {
    let counter = build_bench_binary("device-rtl", "lookup_count")?;
    let mut memory = BTreeMap::new();
    let sizes: Vec<usize> = cases(&counter)?.into_iter().map(|(s, _)| s).collect();
    let mut sizes = sizes;
    sizes.dedup();
    let sh = Shell::new()?;
    for size in sizes {
        let size_arg = size.to_string();
        let out = util::read(cmd!(sh, "{counter} {size_arg} hits"))?;
        for line in out.lines() {
            let Some((imp, bytes)) = line.strip_prefix("memory ").and_then(|l| l.split_once(' '))
            else {
                continue;
            };
            if let Some(imp) = MEMORY_IMPLS.into_iter().find(|i| *i == imp) {
                memory.insert((size, imp), bytes.trim().parse::<f64>()?);
            }
        }
    }
    Ok(memory)
}

/// Markdown: bytes per entry beside the sorted table (16 bytes per entry itself).
fn render_memory(memory: &BTreeMap<(usize, &'static str), f64>) -> String {
    let mut sizes: Vec<usize> = memory.keys().map(|(s, _)| *s).collect();
    sizes.dedup();
    let mut out = String::from(
        "**Memory beside the sorted table (16 bytes per entry), bytes per entry**\n\n",
    );
    let _ = writeln!(out, "| size | {} |", MEMORY_IMPLS.join(" | "));
    let _ = writeln!(out, "|---:|{}", "---:|".repeat(MEMORY_IMPLS.len()));
    for size in sizes {
        let cells: Vec<String> = MEMORY_IMPLS
            .iter()
            .map(|imp| match memory.get(&(size, *imp)) {
                Some(b) => format!("{b:.1}"),
                None => "n/a".into(),
            })
            .collect();
        let _ = writeln!(out, "| {size} | {} |", cells.join(" | "));
    }
    out
}

/// Issue 15's criterion, from the callgrind counts of this run: `ours_index` uses no more
/// instructions than `libgomp_hash` at every size from 16 to 1M, for every workload.
fn index_verdict(results: &BTreeMap<Key, Measures>) -> String {
    let mut checked = 0;
    let mut above = Vec::new();
    for ((size, workload, imp), m) in results {
        if *imp != "ours_index" || !CRITERION_SIZES.contains(size) {
            continue;
        }
        let hash = results
            .get(&(*size, workload.clone(), "libgomp_hash"))
            .and_then(|h| h.instructions);
        if let (Some(ours), Some(hash)) = (m.instructions, hash) {
            checked += 1;
            if ours > hash {
                above.push(format!("{size}/{workload} ({ours:.1} > {hash:.1})"));
            }
        }
    }
    match (checked, above.is_empty()) {
        (0, _) => "Criterion (issue 15): not checked, no callgrind counts in this run.".into(),
        (n, true) => format!(
            "Criterion (issue 15): `ours_index` uses no more instructions than \
             `libgomp_hash` in all {n} cells from 16 to 1M entries (hits, misses, mixed) of \
             this callgrind run: MET."
        ),
        (n, false) => format!(
            "Criterion (issue 15): NOT MET in {} of {n} cells: {}.",
            above.len(),
            above.join(", ")
        ),
    }
}

/// Every measurement of the run as JSON, for the plots and anyone who wants the numbers.
fn results_json(
    results: &BTreeMap<Key, Measures>,
    memory: &BTreeMap<(usize, &'static str), f64>,
    load_before: &str,
) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = results
        .iter()
        .map(|((size, workload, imp), m)| {
            serde_json::json!({
                "size": size,
                "workload": workload,
                "impl": imp,
                "instructions": m.instructions,
                "criterion_ns": m.nanoseconds,
                "fastest_round_ns": m.fastest_round,
            })
        })
        .collect();
    let memory: Vec<serde_json::Value> = memory
        .iter()
        .map(|((size, imp), bytes)| {
            serde_json::json!({ "size": size, "impl": imp, "bytes_per_entry": bytes })
        })
        .collect();
    serde_json::json!({
        "benchmark": "cargo xtask bench cpu",
        "machine": machine_line(),
        "date": utc_now().unwrap_or_default(),
        "load_average_before": load_before,
        "lookups_per_workload": 65536,
        "results": rows,
        "memory": memory,
    })
}

/// Build a `[[bench]]` target of a package and return its executable.
fn build_bench_binary(package: &str, name: &str) -> Result<PathBuf> {
    let out = util::cargo_messages(&["bench", "-p", package, "--no-run", "--bench", name])?;
    util::cargo_executable(&out, name)
        .with_context(|| format!("cargo did not report the executable of bench `{name}`"))
}

/// The (size, workload) pairs the bench defines (`lookup_count --list`).
fn cases(counter: &Path) -> Result<Vec<(usize, String)>> {
    let sh = Shell::new()?;
    util::read(cmd!(sh, "{counter} --list"))?
        .lines()
        .map(|l| {
            let (size, workload) = l.split_once(' ').context("bad --list line")?;
            Ok((size.parse()?, workload.to_string()))
        })
        .collect()
}

/// Run `lookup_count SIZE WORKLOAD` under callgrind; return each implementation's
/// instructions per lookup: the inclusive count of its `count_<impl>` function (the loop
/// over the keys, so about 4 instructions of loop overhead included) over the keys.
fn count_instructions(
    counter: &Path,
    size: usize,
    workload: &str,
) -> Result<Vec<(&'static str, f64)>> {
    let dir = util::target_dir().join("bench/callgrind");
    std::fs::create_dir_all(&dir)?;
    let out_file = dir.join(format!("{size}-{workload}.out"));
    let size_arg = size.to_string();
    let sh = Shell::new()?;
    let stdout = util::read(cmd!(
        sh,
        "valgrind --tool=callgrind --dump-instr=no --compress-strings=no --compress-pos=no --callgrind-out-file={out_file} {counter} {size_arg} {workload}"
    ))?;
    let keys: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("keys "))
        .context("lookup_count printed no key count")?
        .trim()
        .parse()?;
    let costs = inclusive_costs(&std::fs::read_to_string(&out_file)?);
    let mut rows = Vec::new();
    for imp in IMPLS {
        // Implementations that cannot run this workload print no checksum.
        if !stdout.lines().any(|l| l.starts_with(&format!("{imp} "))) {
            continue;
        }
        let symbol = format!("lookup_count::count_{imp}");
        let total = costs
            .get(&symbol)
            .with_context(|| format!("no `{symbol}` in {}", out_file.display()))?;
        let per_lookup = *total as f64 / keys;
        eprintln!("  {size:>8} {workload:<7} {imp:<18} {per_lookup:8.1} instructions/lookup");
        rows.push((imp, per_lookup));
    }
    Ok(rows)
}

/// Inclusive instruction count of every function in an uncompressed callgrind profile
/// (`--compress-strings=no --compress-pos=no`): its own cost lines plus the cost line
/// after each of its `calls=` lines.
fn inclusive_costs(profile: &str) -> BTreeMap<String, u64> {
    let mut costs = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in profile.lines() {
        if let Some(name) = line.strip_prefix("fn=") {
            current = Some(name.to_string());
            continue;
        }
        // Cost lines are "<position> <Ir>"; a call's line counts the callee's inclusive
        // cost, which belongs to the caller's inclusive cost too.
        let starts_with_digit = line.starts_with(|c: char| c.is_ascii_digit());
        if let (true, Some(name)) = (starts_with_digit, &current) {
            if let Some(ir) = line
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
            {
                *costs.entry(name.clone()).or_insert(0) += ir;
            }
        }
    }
    costs
}

/// Run the criterion bench (short settings) and read its bencher-format lines:
/// `test lookup/<workload>/<size>/<impl> ... bench:  12,345 ns/iter (+/- 67)`, where one
/// iteration is 65536 lookups.
fn run_criterion(args: &CpuArgs) -> Result<Vec<(Key, f64)>> {
    // benches/common/mod.rs LOOKUPS.
    const LOOKUPS_PER_ITER: f64 = 65536.0;
    let cargo = util::cargo();
    let (warm_up, measurement, samples) = (
        args.warm_up_time.to_string(),
        args.measurement_time.to_string(),
        args.sample_size.to_string(),
    );
    let sh = Shell::new()?;
    sh.change_dir(util::root());
    let bench = cmd!(
        sh,
        "{cargo} bench -p device-rtl --bench lookup -- --output-format bencher --noplot --warm-up-time {warm_up} --measurement-time {measurement} --sample-size {samples}"
    );
    eprintln!("$ {bench}");
    // Through std: the lines are shown as criterion prints them (xshell gives the output
    // only at the end).
    let mut child = Command::from(bench)
        .stdout(Stdio::piped())
        .spawn()
        .context("could not start cargo bench")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut rows = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        eprintln!("{line}");
        if let Some(row) = parse_bencher_line(&line) {
            rows.push((row.0, row.1 / LOOKUPS_PER_ITER));
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("cargo bench failed with {status}");
    }
    if rows.is_empty() {
        bail!("criterion printed no results");
    }
    Ok(rows)
}

fn parse_bencher_line(line: &str) -> Option<(Key, f64)> {
    let name = line.strip_prefix("test lookup/")?.split(' ').next()?;
    let mut parts = name.split('/');
    let (workload, size, imp) = (parts.next()?, parts.next()?, parts.next()?);
    let imp = IMPLS.into_iter().find(|i| *i == imp)?;
    let ns = line.split("bench:").nth(1)?.split("ns/iter").next()?;
    let ns: f64 = ns.trim().replace(',', "").parse().ok()?;
    Some(((size.parse().ok()?, workload.to_string(), imp), ns))
}

fn ours_slower_than_plain(results: &BTreeMap<Key, Measures>) -> Vec<String> {
    let mut slower = Vec::new();
    for ((size, workload, imp), ours) in results {
        if *imp != "ours" {
            continue;
        }
        let Some(plain) = results.get(&(*size, workload.clone(), "plain_lower_bound")) else {
            continue;
        };
        if let (Some(a), Some(b)) = (ours.instructions, plain.instructions) {
            if a > b {
                slower.push(format!("{size}/{workload} (instructions {a:.1} > {b:.1})"));
            }
        }
        if let (Some(a), Some(b)) = (ours.nanoseconds, plain.nanoseconds) {
            if a > b {
                slower.push(format!("{size}/{workload} (criterion {a:.2} > {b:.2} ns)"));
            }
        }
        if let (Some(a), Some(b)) = (ours.fastest_round, plain.fastest_round) {
            if a > b {
                slower.push(format!(
                    "{size}/{workload} (fastest round {a:.2} > {b:.2} ns)"
                ));
            }
        }
    }
    slower
}

/// Which measure a table shows.
type Pick = fn(&Measures) -> Option<f64>;

/// Markdown tables (instructions, then times), one row per (size, workload), one
/// column per implementation, and ours/plain as a ratio.
fn render_tables(results: &BTreeMap<Key, Measures>) -> String {
    let mut rows: Vec<(usize, String)> = results.keys().map(|(s, w, _)| (*s, w.clone())).collect();
    rows.dedup();
    rows.sort_by_key(|(s, w)| (*s, workload_order(w)));
    let mut out = String::new();
    let tables: [(&str, Pick, usize); 3] = [
        ("Instructions per lookup (callgrind)", |m| m.instructions, 1),
        (
            "Time per lookup, ns (criterion estimate)",
            |m| m.nanoseconds,
            2,
        ),
        (
            "Time per lookup, ns (fastest of the interleaved rounds)",
            |m| m.fastest_round,
            2,
        ),
    ];
    for (title, pick, decimals) in tables {
        if !results.values().any(|m| pick(m).is_some()) {
            continue;
        }
        let _ = writeln!(out, "**{title}**\n");
        let _ = writeln!(
            out,
            "| size | keys | {} | ours / plain | index / hash |",
            IMPLS.join(" | ")
        );
        let _ = writeln!(out, "|---:|---|{}---:|---:|", "---:|".repeat(IMPLS.len()));
        for (size, workload) in &rows {
            let value =
                |imp: &'static str| results.get(&(*size, workload.clone(), imp)).and_then(pick);
            let cells: Vec<String> = IMPLS
                .iter()
                .map(|imp| match value(imp) {
                    Some(v) => format!("{v:.decimals$}"),
                    None => "n/a".into(),
                })
                .collect();
            let ratio = |a: &'static str, b: &'static str| match (value(a), value(b)) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                _ => "n/a".into(),
            };
            let _ = writeln!(
                out,
                "| {size} | {workload} | {} | {} | {} |",
                cells.join(" | "),
                ratio("ours", "plain_lower_bound"),
                ratio("ours_index", "libgomp_hash")
            );
        }
        out.push('\n');
    }
    out
}

fn workload_order(w: &str) -> usize {
    ["hits", "misses", "mixed"]
        .iter()
        .position(|x| *x == w)
        .unwrap_or(usize::MAX)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Machine, date, load and the command that reproduces the run.
fn run_header(args: &CpuArgs, load_before: &str, load_after: &str) -> Result<String> {
    let sh = Shell::new()?;
    let rustc = util::read(cmd!(sh, "rustc --version"))?;
    Ok(format!(
        "- Machine: {}\n\
         - Date: {}\n\
         - Load average (1/5/15 min) before: {load_before}; after: {load_after}\n\
         - Compiler: {}\n\
         - Criterion: warm-up {} s, measurement {} s, {} samples per benchmark; one \
         iteration = 65536 independent lookups (throughput, not latency)\n\
         - Fastest round: {} rounds of the 65536 lookups per case, implementations \
         interleaved\n\
         - Rerun: `cargo xtask bench cpu --write-docs`\n",
        machine_line(),
        utc_now()?,
        rustc.trim(),
        args.warm_up_time,
        args.measurement_time,
        args.sample_size,
        args.rounds,
    ))
}

const BEGIN_MARK: &str =
    "<!-- BEGIN cpu-lookup: generated by `cargo xtask bench cpu --write-docs` -->";
const END_MARK: &str = "<!-- END cpu-lookup -->";

/// Replace the cpu-lookup section of docs/BENCHMARKS.md.
fn write_docs(generated: &str) -> Result<()> {
    write_docs_section(BEGIN_MARK, END_MARK, generated)
}

/// Replace what lies between two marker lines in docs/BENCHMARKS.md.
fn write_docs_section(begin_mark: &str, end_mark: &str, generated: &str) -> Result<()> {
    let path = util::root().join("docs/BENCHMARKS.md");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let (Some(begin), Some(end)) = (text.find(begin_mark), text.find(end_mark)) else {
        bail!(
            "{} lacks the markers {begin_mark} / {end_mark}",
            path.display()
        );
    };
    if end < begin {
        bail!("{}: markers out of order", path.display());
    }
    let updated = format!(
        "{}{begin_mark}\n{generated}{}",
        &text[..begin],
        &text[end..]
    );
    std::fs::write(&path, updated)?;
    eprintln!("updated {}", path.display());
    Ok(())
}

/// The machine: CPU model, count, architecture and hypervisor, from lscpu.
fn machine_line() -> String {
    let lscpu = Shell::new()
        .map_err(anyhow::Error::from)
        .and_then(|sh| util::read(cmd!(sh, "lscpu")))
        .unwrap_or_default();
    let field = |name: &str| {
        lscpu
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim_start().strip_prefix(':'))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into())
    };
    format!(
        "{} ({} CPUs, {}), {}",
        field("Model name"),
        field("CPU(s)"),
        field("Architecture"),
        field("Hypervisor vendor").replace("unknown", "bare metal"),
    )
}

/// The current UTC date and time, for run headers.
pub(crate) fn utc_now() -> Result<String> {
    let sh = Shell::new()?;
    let format = "+%Y-%m-%d %H:%M UTC";
    Ok(util::read(cmd!(sh, "date -u {format}"))?.trim().to_string())
}

/// The fastest and the median of some samples (None when there are none).
fn min_and_median(samples: &[f64]) -> Option<(f64, f64)> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some((v[0], v[(v.len() - 1) / 2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inclusive_cost_adds_own_lines_and_calls() {
        let profile = "fl=a.rs\nfn=outer\n3 10\ncfn=inner\ncalls=2 7\n4 100\n5 1\n\
                       fl=b.rs\nfn=inner\n7 50\nfn=outer\n9 2\n";
        let costs = inclusive_costs(profile);
        assert_eq!(costs["outer"], 113);
        assert_eq!(costs["inner"], 50);
    }

    #[test]
    fn bencher_line_parses() {
        let line = "test lookup/misses/65536/libgomp_hash ... bench:      12,345 ns/iter (+/- 67)";
        let ((size, workload, imp), ns) = parse_bencher_line(line).unwrap();
        assert_eq!(
            (size, workload.as_str(), imp),
            (65536, "misses", "libgomp_hash")
        );
        assert_eq!(ns, 12345.0);
        assert!(parse_bencher_line("test lookup/hits/16/unknown ... bench: 1 ns/iter").is_none());
    }
}
