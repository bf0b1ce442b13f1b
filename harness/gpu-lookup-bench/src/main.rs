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
//!
//! The modules: `cli` (the options), `kernel` (the kernel's cases and their host
//! reference), `bench` (the variants' images and tables through the plugin), `launch` (a
//! launch and a measured case), `report` (the table and JSON).

mod bench;
mod cli;
mod kernel;
mod launch;
mod report;

use bench::{Bench, Lookup, VARIANTS};
use cli::{parse_options, Options};
use host_plugin::backend::cuda::{image::cubin_runs_on, CudaBackend};
use host_plugin::{Plugin, PluginKind};
use kernel::{print_index, reference, BLOCKS, THREADS};
use report::{render_json, render_table};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// The SMs `cargo xtask bench gpu` builds for.
const ARCHES: [u32; 2] = [90, 80];

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
