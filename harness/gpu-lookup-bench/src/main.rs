//! gpu_lookup_bench: lookups per second on a GPU (docs/BENCHMARKS.md 1b).
//!
//! Runs the kernel of tests/fixtures/bench/gpu_lookup.c, built per lookup variant by
//! `cargo xtask bench gpu` (cubins `gpu_lookup.<variant>.sm_<sm>.cubin`), through the
//! plugin core with its CUDA backend: every thread makes `iters` calls through a table of
//! 1 to 1M keys mapped onto four device functions, for warp-uniform keys (every lane of
//! a warp the same: the virtual-call case) and divergent ones (each lane its own).
//! `direct` calls device pointers (the floor); `ours_index`, `ours` and `ours_warp`
//! translate host keys with `__kmpc_target_translate_fptr` (table installed with
//! `set_function_ptr_map`, which also writes the head and builds the index: `ours_index`
//! keeps both, what the plugin installs; `ours` and `ours_warp` get the empty head and
//! index header written over them, so they search the table); `ours_archive` as
//! `ours_index`, with the lookup called out of line from the devicertl archive's cubin
//! (linked by nvlink, as clang-16 programs get it);
//! `llvm19` with LLVM 19's `__llvm_omp_indirect_call_lookup` (table written into its
//! device environment). Every thread's result is checked against a host-computed
//! reference: a wrong lookup fails the run. Timing: one warm-up launch, then the best of
//! `--reps` launches, each long enough (`--min-ms`) for launch overhead not to matter.
//!
//! Without a CUDA driver or a GPU it prints one `SKIPPED:` line and exits 0.

use e2e_tests::plugin::{entry, words};
use host_plugin::backend::cuda::{image::cubin_runs_on, CudaBackend};
use host_plugin::backend::AllocKind;
use host_plugin::backend::LaunchRequest;
use host_plugin::device_buffer::DeviceBuffer;
use host_plugin::host_entry::FLAG_INDIRECT;
use host_plugin::table::fptr_index::{BuildError, FptrIndex};
use host_plugin::{DeviceAddr, FptrMapEntry, HostOffloadEntry, Plugin, PluginKind};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Where run.sh (gpu-bundle) points the driver at the prebuilt cubins.
const CUBINS_ENV: &str = "OMPTARGET_RS_GPU_BENCH_DIR";
/// The SMs `cargo xtask bench gpu` builds for.
const ARCHES: [u32; 2] = [90, 80];
/// Lookup variants, in table order (names as harness/src/bench/gpu_lookup.rs builds them).
const VARIANTS: [(&str, Lookup); 6] = [
    ("direct", Lookup::Direct),
    ("ours_index", Lookup::Ours { index: true }),
    ("ours_archive", Lookup::Ours { index: true }),
    ("ours", Lookup::Ours { index: false }),
    ("ours_warp", Lookup::Ours { index: false }),
    ("llvm19", Lookup::Llvm19),
];
/// The renamed LLVM 19 device environment (xtask's `LLVM19_ENVIRONMENT`: our CUDA backend
/// claims the original name for LLVM 16's 16-byte environment) and its size.
const LLVM19_ENVIRONMENT: &str = "__gpu_bench_llvm19_device_environment";
const LLVM19_ENVIRONMENT_SIZE: u64 = 48;
/// Where LLVM 19's lookup reads the table pointer and row count in that global.
const LLVM19_TABLE_OFFSET: u64 = 24;

/// The device functions of the kernel, in the order of `bench_fn0..3`.
const FUNCTIONS: usize = 4;
const DEFAULT_SIZES: [usize; 5] = [1, 16, 1024, 65536, 1 << 20];
/// Launch geometry: enough threads to fill an H100/H200 (132 SMs x 2048 threads); the
/// block size is a multiple of the warp so `thread / 32` is the warp's index.
const BLOCKS: u32 = 1024;
const THREADS: u32 = 256;
const TOTAL_THREADS: usize = (BLOCKS * THREADS) as usize;
/// Iterations per thread: calibration starts here and stops at the cap, which bounds the
/// host reference (TOTAL_THREADS x iters evaluations).
const FIRST_ITERS: u64 = 16;
const MAX_ITERS: u64 = 1 << 16;
/// Host keys: what host function addresses look like, 16 bytes apart, sorted.
const KEY_BASE: u64 = 0x0000_5555_5540_0000;
const KEY_STRIDE: u64 = 16;
/// Written over the results before each launch, so a launch that stores nothing fails.
const SENTINEL: u8 = 0xa5;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Lookup {
    Direct,
    /// `__kmpc_target_translate_fptr`, with the plugin's index or without it.
    Ours {
        index: bool,
    },
    Llvm19,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Pattern {
    Uniform,
    Divergent,
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::Uniform => "uniform",
            Pattern::Divergent => "divergent",
        }
    }
}

struct Options {
    cubins: PathBuf,
    sizes: Vec<usize>,
    reps: u32,
    min_time: Duration,
    json: Option<PathBuf>,
    markdown: Option<PathBuf>,
    /// Print the host reference of one case and exit (no GPU needed).
    print_reference: Option<ReferenceCase>,
    /// Print the index the plugin builds for a table of this size and exit.
    print_index: Option<usize>,
}

/// `--print-reference SIZE,uniform|divergent,ITERS,THREADS`.
struct ReferenceCase {
    size: usize,
    pattern: Pattern,
    iters: u64,
    threads: usize,
}

fn parse_reference_case(value: &str) -> Result<ReferenceCase, String> {
    let bad = || format!("--print-reference {value}: want SIZE,uniform|divergent,ITERS,THREADS");
    let parts: Vec<&str> = value.split(',').collect();
    let [size, pattern, iters, threads] = parts.as_slice() else {
        return Err(bad());
    };
    let size: usize = size.parse().map_err(|_| bad())?;
    let threads: usize = threads.parse().map_err(|_| bad())?;
    if !size.is_power_of_two() || size > 1 << 24 || threads > TOTAL_THREADS {
        return Err(bad());
    }
    let pattern = match *pattern {
        "uniform" => Pattern::Uniform,
        "divergent" => Pattern::Divergent,
        _ => return Err(bad()),
    };
    Ok(ReferenceCase {
        size,
        pattern,
        iters: iters.parse().map_err(|_| bad())?,
        threads,
    })
}

const USAGE: &str = "usage: gpu_lookup_bench [--cubins DIR] [--sizes 1,16,...] [--reps N] \
                     [--min-ms MS] [--json FILE] [--markdown FILE]
  --cubins DIR     the gpu_lookup.<variant>.sm_<sm>.cubin files (default: $OMPTARGET_RS_GPU_BENCH_DIR,
                   else target/gpu-bench, where `cargo xtask bench gpu` builds them)
  --sizes LIST     table sizes, powers of two (default 1,16,1024,65536,1048576)
  --reps N         timed launches per case after one warm-up; the best counts (default 5)
  --min-ms MS      grow the iterations until a direct launch takes this long (default 20)
  --json FILE      also write the results as JSON
  --markdown FILE  also write the table as markdown
  --print-reference SIZE,uniform|divergent,ITERS,THREADS
                   print the host reference of the first THREADS threads and exit
  --print-index SIZE
                   print the plugin's index of a SIZE-row table, row r -> function r % 4
                   (`BUCKETS SEED0 SEED1`, then `KEY VALUE` per slot: VALUE is the
                   function's number, or KEY itself for an empty slot; `0 0 0` where the
                   plugin builds none) and exit";

fn parse_options() -> Result<Options, String> {
    let mut o = Options {
        cubins: std::env::var_os(CUBINS_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| e2e_tests::paths::target_dir().join("gpu-bench")),
        sizes: DEFAULT_SIZES.to_vec(),
        reps: 5,
        min_time: Duration::from_millis(20),
        json: None,
        markdown: None,
        print_reference: None,
        print_index: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        const FLAGS: [&str; 8] = [
            "--print-index",
            "--print-reference",
            "--cubins",
            "--reps",
            "--min-ms",
            "--json",
            "--markdown",
            "--sizes",
        ];
        if !FLAGS.contains(&flag.as_str()) {
            return Err(format!("unknown argument {flag}\n{USAGE}"));
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|e| format!("{flag} {v}: {e}\n{USAGE}"))
        };
        match flag.as_str() {
            "--cubins" => o.cubins = value.into(),
            "--reps" => o.reps = number(&value)?.clamp(1, 1000) as u32,
            "--min-ms" => o.min_time = Duration::from_millis(number(&value)?.max(1)),
            "--json" => o.json = Some(value.into()),
            "--markdown" => o.markdown = Some(value.into()),
            "--print-reference" => o.print_reference = Some(parse_reference_case(&value)?),
            "--print-index" => o.print_index = Some(number(&value)? as usize),
            "--sizes" => {
                o.sizes = value
                    .split(',')
                    .map(|s| {
                        let n = number(s)? as usize;
                        if n.is_power_of_two() && n <= 1 << 24 {
                            Ok(n)
                        } else {
                            Err(format!("--sizes: {n} is not a power of two up to 2^24"))
                        }
                    })
                    .collect::<Result<_, _>>()?
            }
            _ => return Err(format!("unknown argument {flag}\n{USAGE}")),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Some(size) = options.print_index {
        return match print_index(size) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(case) = &options.print_reference {
        let mut text = String::new();
        for v in reference(case.size - 1, case.iters, case.pattern, case.threads) {
            let _ = writeln!(text, "{v}");
        }
        print!("{text}");
        return ExitCode::SUCCESS;
    }
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("FAILED: gpu_lookup_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn skip(reason: &str) {
    println!("SKIPPED: gpu_lookup_bench: no CUDA driver/GPU ({reason})");
}

/// The cubin of a variant for an SM, if it was built.
fn cubin_path(options: &Options, variant: &str, sm: u32) -> PathBuf {
    options
        .cubins
        .join(format!("gpu_lookup.{variant}.sm_{sm}.cubin"))
}

fn run(options: &Options) -> Result<(), String> {
    let backend = CudaBackend::new();
    if let Some(reason) = backend.unavailable_reason() {
        skip(reason);
        return Ok(());
    }
    let ((major, minor), name) = backend.describe(0).ok_or("device 0 is not described")?;
    let name = name.to_string();
    let Some(sm) = ARCHES
        .into_iter()
        .find(|&sm| cubin_runs_on(sm, major, minor))
    else {
        skip(&format!(
            "{name} is sm_{major}{minor}; the cubins are for {ARCHES:?}"
        ));
        return Ok(());
    };
    let available: Vec<(&str, Lookup)> = VARIANTS
        .into_iter()
        .filter(|(v, _)| {
            let found = cubin_path(options, v, sm).is_file();
            if !found {
                println!(
                    "gpu_lookup_bench: `{v}` not built ({} missing): left out",
                    cubin_path(options, v, sm).display()
                );
            }
            found
        })
        .collect();
    if available.is_empty() {
        return Err(format!(
            "no cubins for sm_{sm} in {} (run `cargo xtask bench gpu --build-only` or \
             `cargo xtask gpu-bundle` where clang-22 is)",
            options.cubins.display()
        ));
    }
    println!(
        "gpu_lookup_bench: device 0 is {name} (sm_{major}{minor}), cubins sm_{sm}, \
         {BLOCKS} x {THREADS} threads, best of {} launches after a warm-up",
        options.reps
    );
    let plugin = Plugin::with_backend(PluginKind::Cuda, Box::new(backend));
    plugin
        .device(0)
        .and_then(|on| on.init_device())
        .map_err(|e| format!("init device 0: {e}"))?;
    let mut bench = Bench {
        plugin: &plugin,
        options,
        iters: HashMap::new(),
        references: HashMap::new(),
        results: Vec::new(),
    };
    // A variant that fails (a wrong result, a launch error) is reported and the others
    // still run; the run fails at the end.
    let mut failures = Vec::new();
    for (image_key, &(variant, lookup)) in available.iter().enumerate() {
        let path = cubin_path(options, variant, sm);
        let outcome = std::fs::read(&path)
            .map_err(|e| format!("{}: {e}", path.display()))
            .and_then(|bytes| bench.run_variant(image_key + 1, variant, lookup, &bytes));
        if let Err(e) = outcome {
            println!("FAILED: {variant}: {e}");
            failures.push(variant);
            // Leave no table-holding image behind for the next set_function_ptr_map.
            let _ = plugin.device(0).and_then(|on| on.unload(image_key + 1));
        }
    }
    let names: Vec<&str> = available.iter().map(|(v, _)| *v).collect();
    let table = render_table(&bench.results, &names, &bench.iters);
    println!("\n{table}");
    if let Some(path) = &options.markdown {
        let header = format!(
            "{name} (sm_{major}{minor}), {BLOCKS} x {THREADS} threads, best of {} launches\n\n",
            options.reps
        );
        std::fs::write(path, header + &table)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    if let Some(path) = &options.json {
        std::fs::write(path, render_json(&bench.results, &name, sm))
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("variants failed: {}", failures.join(", ")))
    }
}

/// One measured case.
struct Measure {
    variant: &'static str,
    size: usize,
    pattern: Pattern,
    iters: u64,
    best: Duration,
}

impl Measure {
    fn lookups_per_second(&self) -> f64 {
        (TOTAL_THREADS as u64 * self.iters) as f64 / self.best.as_secs_f64()
    }
}

struct Bench<'a> {
    plugin: &'a Plugin,
    options: &'a Options,
    /// Iterations per thread of each (size, pattern), set by the first variant measured
    /// (direct when built) and reused, so every variant runs the same work.
    iters: HashMap<(usize, Pattern), u64>,
    /// The expected result of every thread, per (size, pattern, iters).
    references: HashMap<(usize, Pattern, u64), Vec<u32>>,
    results: Vec<Measure>,
}

/// A variant's image, loaded.
struct Loaded {
    kernel: DeviceAddr,
    /// Device addresses of bench_fn0..3 in this image.
    functions: [u64; FUNCTIONS],
    /// LLVM 19's environment global (llvm19 only).
    environment: Option<DeviceAddr>,
}

fn host_key(row: usize) -> u64 {
    KEY_BASE + row as u64 * KEY_STRIDE
}

impl Bench<'_> {
    fn upload(&self, bytes: &[u8]) -> Result<DeviceBuffer, String> {
        let buffer = self
            .plugin
            .device(0)
            .and_then(|on| on.alloc(bytes.len(), AllocKind::Device))
            .map_err(|e| format!("alloc: {e}"))?;
        buffer
            .write_at(0, bytes)
            .map_err(|e| format!("submit: {e}"))?;
        Ok(buffer)
    }

    /// Free buffers no launch in flight uses (the launches are synchronous).
    fn free(&self, buffers: Vec<DeviceBuffer>) -> Result<(), String> {
        for buffer in buffers {
            buffer.free().map_err(|e| format!("free: {e}"))?;
        }
        Ok(())
    }

    fn load(&self, key: usize, lookup: Lookup, bytes: &[u8]) -> Result<Loaded, String> {
        let mut entries: Vec<HostOffloadEntry> = vec![entry("lookup_bench", 0x1000, 0, 0)];
        // The four functions as `declare target indirect` entries; their host keys are
        // the first rows of every table.
        entries.extend((0..FUNCTIONS).map(|f| {
            entry(
                &format!("__omp_offloading_bench_fn{f}"),
                host_key(f),
                8,
                FLAG_INDIRECT,
            )
        }));
        if lookup == Lookup::Llvm19 {
            entries.push(entry(
                LLVM19_ENVIRONMENT,
                0x2000,
                LLVM19_ENVIRONMENT_SIZE,
                0,
            ));
        }
        let loaded = self
            .plugin
            .device(0)
            .and_then(|on| on.load_binary(key, bytes, &entries))
            .map_err(|e| format!("load_binary: {e}"))?;
        let mut functions = [0u64; FUNCTIONS];
        for (f, slot) in functions.iter_mut().enumerate() {
            *slot = loaded[1 + f].addr;
        }
        Ok(Loaded {
            kernel: loaded[0].addr,
            functions,
            environment: (lookup == Lookup::Llvm19).then(|| loaded[1 + FUNCTIONS].addr),
        })
    }

    fn run_variant(
        &mut self,
        image_key: usize,
        variant: &'static str,
        lookup: Lookup,
        bytes: &[u8],
    ) -> Result<(), String> {
        println!("== {variant}");
        let image = self
            .load(image_key, lookup, bytes)
            .map_err(|e| format!("{variant}: {e}"))?;
        for size in self.options.sizes.clone() {
            // Row r of every table maps host_key(r) to function r % 4.
            let target = |row: usize| image.functions[row % FUNCTIONS];
            let keys: Vec<u64> = match lookup {
                Lookup::Direct => (0..size).map(target).collect(),
                Lookup::Ours { .. } | Lookup::Llvm19 => (0..size).map(host_key).collect(),
            };
            let rows: Vec<FptrMapEntry> = (0..size)
                .map(|r| FptrMapEntry {
                    host_ptr: host_key(r),
                    tgt_ptr: target(r),
                })
                .collect();
            let mut owned = vec![self.upload(&words(&keys))?];
            match lookup {
                Lookup::Direct => {}
                Lookup::Ours { index } => {
                    let patched = self
                        .plugin
                        .device(0)
                        .and_then(|on| on.set_function_ptr_map(&rows))
                        .map_err(|e| format!("set_function_ptr_map: {e}"))?;
                    if patched != 1 {
                        return Err(format!(
                            "{variant}: set_function_ptr_map patched {patched} images, not 1"
                        ));
                    }
                    let installed = self
                        .plugin
                        .device(0)
                        .ok()
                        .and_then(|on| on.fptr_index(image_key))
                        .ok_or("the cubin has no __omptarget_rs_fptr_index")?;
                    let (head_global, head) = self
                        .plugin
                        .device(0)
                        .ok()
                        .and_then(|on| on.fptr_head(image_key))
                        .ok_or("the cubin has no __omptarget_rs_fptr_head")?;
                    // A table of up to HEAD_ROWS rows lives in the head (no index);
                    // larger ones get their range there and an index.
                    let in_head = size <= device_rtl_head_rows();
                    if index && !in_head && installed.header.bucket_count == 0 {
                        return Err(format!("{variant}: the plugin built no index"));
                    }
                    if index && head == host_plugin::FptrHead::NONE {
                        return Err(format!("{variant}: the plugin wrote no head"));
                    }
                    if !index {
                        // The search: the empty head and index header, as a plugin
                        // without them leaves them.
                        let none = FptrIndex::NONE;
                        let no_head = host_plugin::FptrHead::NONE;
                        // SAFETY: `installed.global` is the image's 32-byte index global,
                        // `head_global` its 96-byte head global.
                        unsafe {
                            self.plugin.device(0).and_then(|on| {
                                on.write(installed.global, bytemuck::bytes_of(&none))?;
                                on.write(head_global, bytemuck::bytes_of(&no_head))
                            })
                        }
                        .map_err(|e| format!("clearing the index header and head: {e}"))?;
                    }
                }
                Lookup::Llvm19 => {
                    // LLVM 19's rows are {host, device} pairs too, sorted unsigned.
                    let table = self.upload(host_plugin::table::fptr::as_bytes(&rows))?;
                    let table_addr = table.addr();
                    owned.push(table);
                    let env = image.environment.ok_or("no LLVM 19 environment")?;
                    // SAFETY: `env` is the image's 48-byte environment global; bytes 24..40
                    // are its table pointer and row count.
                    unsafe {
                        self.plugin.device(0).and_then(|on| {
                            on.write(
                                env + LLVM19_TABLE_OFFSET,
                                &words(&[table_addr, size as u64]),
                            )
                        })
                    }
                    .map_err(|e| format!("writing LLVM 19's environment: {e}"))?;
                }
            }
            for pattern in [Pattern::Uniform, Pattern::Divergent] {
                let m = self
                    .measure(variant, &image, owned[0].addr(), size, pattern)
                    .map_err(|e| format!("{variant}, {size} keys, {}: {e}", pattern.name()))?;
                let floor = self
                    .results
                    .iter()
                    .find(|r| r.variant == "direct" && r.size == size && r.pattern == pattern)
                    .map(|d| {
                        format!(
                            ", {:.2} of direct",
                            m.lookups_per_second() / d.lookups_per_second()
                        )
                    })
                    .unwrap_or_default();
                println!(
                    "  {size:>8} keys {:<9} {:>6} iters: {:>9.3} ms, {:>8.3} G lookups/s{floor} (results checked)",
                    pattern.name(),
                    m.iters,
                    m.best.as_secs_f64() * 1e3,
                    m.lookups_per_second() / 1e9,
                );
                self.results.push(m);
            }
            self.free(owned)?;
        }
        self.plugin
            .device(0)
            .and_then(|on| on.unload(image_key))
            .map_err(|e| format!("unload: {e}"))
    }

    /// One launch of `iters` iterations: its time, with the results left in `out`.
    fn launch(
        &self,
        image: &Loaded,
        args: [DeviceAddr; 6],
        out: DeviceAddr,
    ) -> Result<Duration, String> {
        let sentinel = vec![SENTINEL; TOTAL_THREADS * 4];
        // SAFETY: `out` is an allocation of TOTAL_THREADS u32.
        unsafe {
            self.plugin
                .device(0)
                .and_then(|on| on.write(out, &sentinel))
        }
        .map_err(|e| format!("submit: {e}"))?;
        let request = LaunchRequest {
            num_teams: BLOCKS,
            thread_limit: THREADS,
            tripcount: 0,
            dynamic_shared_memory: 0,
        };
        let start = Instant::now();
        // SAFETY: lookup_bench takes (const u64 *keys, u64 mask, u64 iters, u64 divergent,
        // u32 *out, u32 *shape): `keys` holds mask + 1 words, `out` TOTAL_THREADS u32 (one
        // per thread of this launch) and `shape` two u32; every key is a device function
        // or a host key the variant's table maps to one.
        unsafe {
            self.plugin
                .device(0)
                .and_then(|on| on.launch_teams(image.kernel, &args, request))
        }
        .map_err(|e| format!("launch: {e}"))?;
        self.plugin
            .device(0)
            .and_then(|on| on.synchronize())
            .map_err(|e| format!("synchronize: {e}"))?;
        Ok(start.elapsed())
    }

    fn measure(
        &mut self,
        variant: &'static str,
        image: &Loaded,
        keys: DeviceAddr,
        size: usize,
        pattern: Pattern,
    ) -> Result<Measure, String> {
        let out_buffer = self.upload(&vec![0u8; TOTAL_THREADS * 4])?;
        let shape_buffer = self.upload(&[0u8; 8])?;
        let (out, shape) = (out_buffer.addr(), shape_buffer.addr());
        let args = |iters: u64| {
            [
                keys,
                size as u64 - 1,
                iters,
                u64::from(pattern == Pattern::Divergent),
                out,
                shape,
            ]
        };
        let iters = match self.iters.get(&(size, pattern)) {
            Some(&n) => n,
            None => {
                // Calibrate: grow until a launch takes min_time (or the cap).
                let mut n = FIRST_ITERS;
                self.launch(image, args(n), out)?;
                loop {
                    let t = self.launch(image, args(n), out)?;
                    if t >= self.options.min_time || n >= MAX_ITERS {
                        break;
                    }
                    let scale = self.options.min_time.as_secs_f64() / t.as_secs_f64().max(1e-6);
                    n = ((n as f64 * scale * 1.2) as u64)
                        .next_power_of_two()
                        .clamp(n * 2, MAX_ITERS);
                }
                self.iters.insert((size, pattern), n);
                n
            }
        };
        self.launch(image, args(iters), out)?; // warm-up
        let mut best = Duration::MAX;
        for _ in 0..self.options.reps {
            best = best.min(self.launch(image, args(iters), out)?);
        }
        let mut got = vec![0u8; TOTAL_THREADS * 4];
        let mut seen = [0u8; 8];
        // SAFETY: `out` and `shape` are allocations of exactly these sizes.
        unsafe {
            self.plugin
                .device(0)
                .and_then(|on| on.read(out, &mut got))
                .and_then(|()| {
                    self.plugin
                        .device(0)
                        .and_then(|on| on.read(shape, &mut seen))
                })
        }
        .map_err(|e| format!("retrieve: {e}"))?;
        self.free(vec![out_buffer, shape_buffer])?;
        let seen = [
            u32::from_ne_bytes([seen[0], seen[1], seen[2], seen[3]]),
            u32::from_ne_bytes([seen[4], seen[5], seen[6], seen[7]]),
        ];
        if seen != [BLOCKS, THREADS] {
            return Err(format!(
                "the kernel ran as {} x {}, not {BLOCKS} x {THREADS}",
                seen[0], seen[1]
            ));
        }
        let want = self
            .references
            .entry((size, pattern, iters))
            .or_insert_with(|| reference(size - 1, iters, pattern, TOTAL_THREADS));
        check(&got, want)?;
        Ok(Measure {
            variant,
            size,
            pattern,
            iters,
            best,
        })
    }
}

/// Rows a head holds (device-rtl's `HEAD_ROWS`).
fn device_rtl_head_rows() -> usize {
    host_plugin::fptr_head::HEAD_ROWS
}

/// The index host-plugin builds for the benchmark's table of `size` rows, with function
/// numbers (row % 4) as device addresses, as text for tests/fixtures/bench/gpu_lookup_host.c,
/// which puts its own function addresses in and runs the kernel through the index.
fn print_index(size: usize) -> Result<String, String> {
    let rows: Vec<FptrMapEntry> = (0..size)
        .map(|r| FptrMapEntry {
            host_ptr: host_key(r),
            tgt_ptr: (r % FUNCTIONS) as u64,
        })
        .collect();
    let index = match host_plugin::table::fptr_index::build(&rows) {
        Ok(index) => index,
        // What the plugin installs for a 1-entry table: no index (the search answers).
        Err(BuildError::TooSmall { .. }) => return Ok("0 0 0\n".into()),
        Err(e) => {
            return Err(format!(
                "no index: {}",
                host_plugin::table::fptr_index::describe(e)
            ))
        }
    };
    let mut text = format!(
        "{} {} {}\n",
        index.buckets.len(),
        index.seeds[0],
        index.seeds[1]
    );
    for slot in index.buckets.iter().flatten() {
        let _ = writeln!(text, "{} {}", slot.host_ptr, slot.tgt_ptr);
    }
    Ok(text)
}

/// The kernel's `key_hash`.
fn key_hash(stream: u32, i: u32) -> u32 {
    let mut x =
        stream.wrapping_mul(0x9e37_79b1) ^ i.wrapping_add(0x7f4a_7c15).wrapping_mul(0x85eb_ca77);
    x ^= x >> 15;
    x = x.wrapping_mul(0x2c1b_3c6d);
    x ^= x >> 13;
    x
}

/// The kernel's bench_fn0..3.
fn call(function: u32, x: u32) -> u32 {
    match function {
        0 => x.wrapping_add(1),
        1 => x.wrapping_mul(3).wrapping_add(5),
        2 => x ^ 0x9e37_79b9,
        _ => x.wrapping_mul(x).wrapping_sub(7),
    }
}

/// The kernel's `accumulate`: one-to-one in `acc` for a fixed `called`.
fn accumulate(acc: u32, called: u32) -> u32 {
    acc.wrapping_mul(0x0100_0193) ^ called
}

/// What the first `threads` threads of the kernel store, computed on all host cores.
fn reference(mask: usize, iters: u64, pattern: Pattern, threads: usize) -> Vec<u32> {
    let mut out = vec![0u32; threads];
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = threads.div_ceil(workers).max(1);
    std::thread::scope(|s| {
        for (c, slice) in out.chunks_mut(chunk).enumerate() {
            s.spawn(move || {
                for (k, slot) in slice.iter_mut().enumerate() {
                    let thread = (c * chunk + k) as u32;
                    let stream = match pattern {
                        Pattern::Uniform => thread / 32,
                        Pattern::Divergent => thread,
                    };
                    let mut acc = thread;
                    for i in 0..iters as u32 {
                        let row = key_hash(stream, i) & mask as u32;
                        let called = call(row % FUNCTIONS as u32, thread.wrapping_add(i));
                        acc = accumulate(acc, called);
                    }
                    *slot = acc;
                }
            });
        }
    });
    out
}

fn check(got: &[u8], want: &[u32]) -> Result<(), String> {
    let mut wrong = 0usize;
    let mut first = String::new();
    for (t, (bytes, &w)) in got.chunks_exact(4).zip(want).enumerate() {
        let g = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        if g != w {
            if wrong < 5 {
                let _ = write!(first, "\n  thread {t}: got {g:#010x}, want {w:#010x}");
            }
            wrong += 1;
        }
    }
    if wrong == 0 {
        Ok(())
    } else {
        Err(format!(
            "WRONG RESULTS in {wrong} of {} threads (a lookup returned the wrong \
             function):{first}",
            want.len()
        ))
    }
}

fn render_table(
    results: &[Measure],
    variants: &[&str],
    iters: &HashMap<(usize, Pattern), u64>,
) -> String {
    let mut cases: Vec<(usize, Pattern)> = iters.keys().copied().collect();
    cases.sort();
    let mut out = String::from("G lookups/s (share of direct's rate in parentheses)\n\n");
    let _ = writeln!(out, "| size | keys | iters | {} |", variants.join(" | "));
    let _ = writeln!(out, "|---:|---|---:|{}", "---:|".repeat(variants.len()));
    for (size, pattern) in cases {
        let rate = |v: &str| {
            results
                .iter()
                .find(|r| r.variant == v && r.size == size && r.pattern == pattern)
                .map(Measure::lookups_per_second)
        };
        let cells: Vec<String> = variants
            .iter()
            .map(|v| match (rate(v), rate("direct")) {
                (Some(r), Some(d)) if *v != "direct" => {
                    format!("{:.2} ({:.2})", r / 1e9, r / d)
                }
                (Some(r), _) => format!("{:.2}", r / 1e9),
                (None, _) => "n/a".into(),
            })
            .collect();
        let _ = writeln!(
            out,
            "| {size} | {} | {} | {} |",
            pattern.name(),
            iters[&(size, pattern)],
            cells.join(" | ")
        );
    }
    out
}

fn render_json(results: &[Measure], device: &str, sm: u32) -> String {
    let escaped: String = device
        .chars()
        .filter(|c| !c.is_control())
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    let rows: Vec<String> = results
        .iter()
        .map(|r| {
            format!(
                "    {{\"variant\": \"{}\", \"size\": {}, \"keys\": \"{}\", \"iters\": {}, \
                 \"threads\": {TOTAL_THREADS}, \"best_seconds\": {:.9}, \
                 \"lookups_per_second\": {:.1}}}",
                r.variant,
                r.size,
                r.pattern.name(),
                r.iters,
                r.best.as_secs_f64(),
                r.lookups_per_second()
            )
        })
        .collect();
    format!(
        "{{\n  \"device\": \"{escaped}\",\n  \"sm\": {sm},\n  \"results\": [\n{}\n  ]\n}}\n",
        rows.join(",\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host mirror of key_hash against values computed by hand from the C source's
    /// operations (a typo in a constant would change them).
    #[test]
    fn key_hash_matches_the_kernel_formula() {
        let x: u32 = 0x7f4a_7c15u32.wrapping_mul(0x85eb_ca77);
        let x = x ^ (x >> 15);
        let x = x.wrapping_mul(0x2c1b_3c6d);
        assert_eq!(key_hash(0, 0), x ^ (x >> 13));
        assert_ne!(key_hash(1, 0), key_hash(0, 0));
        assert_ne!(key_hash(0, 1), key_hash(0, 0));
    }

    #[test]
    fn one_key_tables_call_the_first_function_every_time() {
        // A 1-key table (mask 0): every call is bench_fn0(thread + i) = thread + i + 1.
        let got = reference(0, 5, Pattern::Divergent, TOTAL_THREADS);
        for t in [0u32, 1, 77, TOTAL_THREADS as u32 - 1] {
            let mut acc = t;
            for i in 0..5 {
                acc = acc.wrapping_mul(0x0100_0193) ^ (t + i + 1);
            }
            assert_eq!(got[t as usize], acc, "thread {t}");
        }
    }

    #[test]
    fn uniform_keys_follow_the_warp_and_divergent_keys_the_lane() {
        let uniform = reference(1023, 8, Pattern::Uniform, TOTAL_THREADS);
        let divergent = reference(1023, 8, Pattern::Divergent, TOTAL_THREADS);
        // Thread 0 is stream 0 either way; lane 5 of warp 0 is stream 0 only when uniform.
        assert_eq!(uniform[0], divergent[0]);
        assert_ne!(uniform[5], divergent[5]);
        // Threads end with their own values (up to chance collisions of 32-bit values:
        // about 8 pairs among 2^18 threads).
        let mut distinct = divergent.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() > TOTAL_THREADS - 100, "{}", distinct.len());
    }

    /// One wrong call, early or late in a thread's loop, changes its final result: the
    /// check sees every call, not only the last few.
    #[test]
    fn one_wrong_call_anywhere_changes_the_result() {
        let calls: Vec<u32> = (0..5000u32).map(|i| call(i % 4, 12345 + i)).collect();
        let run = |calls: &[u32]| calls.iter().fold(7u32, |acc, &c| accumulate(acc, c));
        let good = run(&calls);
        for wrong_at in [0, 1, 2500, 4999] {
            let mut bad = calls.clone();
            // What another of the four functions returns for the same argument.
            let arg = 12345 + wrong_at as u32;
            bad[wrong_at] = call((wrong_at as u32 + 1) % 4, arg);
            assert_ne!(bad[wrong_at], calls[wrong_at]);
            assert_ne!(run(&bad), good, "a wrong call at {wrong_at} went unseen");
        }
    }

    #[test]
    fn check_reports_wrong_threads() {
        let want = [1u32, 2, 3];
        let good: Vec<u8> = want.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert!(check(&good, &want).is_ok());
        let mut bad = good.clone();
        bad[4] ^= 1;
        let e = check(&bad, &want).unwrap_err();
        assert!(
            e.contains("1 of 3 threads") && e.contains("thread 1"),
            "{e}"
        );
    }
}
