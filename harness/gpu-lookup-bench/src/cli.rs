//! The command line: the options, `--help`'s text and their parsing.

use crate::kernel::{Pattern, TOTAL_THREADS};
use std::path::PathBuf;
use std::time::Duration;

/// Where run.sh (gpu-bundle) points the driver at the prebuilt cubins.
const CUBINS_ENV: &str = "OMPTARGET_RS_GPU_BENCH_DIR";
const DEFAULT_SIZES: [usize; 5] = [1, 16, 1024, 65536, 1 << 20];

pub struct Options {
    pub cubins: PathBuf,
    pub sizes: Vec<usize>,
    pub reps: u32,
    pub min_time: Duration,
    pub json: Option<PathBuf>,
    pub markdown: Option<PathBuf>,
    /// Print the host reference of one case and exit (no GPU needed).
    pub print_reference: Option<ReferenceCase>,
    /// Print the index the plugin builds for a table of this size and exit.
    pub print_index: Option<usize>,
}

/// `--print-reference SIZE,uniform|divergent,ITERS,THREADS`.
pub struct ReferenceCase {
    pub size: usize,
    pub pattern: Pattern,
    pub iters: u64,
    pub threads: usize,
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

pub fn parse_options() -> Result<Options, String> {
    let mut o = Options {
        cubins: std::env::var_os(CUBINS_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| test_support::workspace::target_dir().join("gpu-bench")),
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
