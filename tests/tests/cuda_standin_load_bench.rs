//! The GPU kit's load_binary benchmark image through our cuda plugin over the CUDA
//! driver stand-in (its own test process: the stand-in takes its report file once).
//!
//! The kit times `__tgt_rtl_load_binary` of this cubin (generated PTX with 10,000
//! indirect holders and the device runtime's globals, assembled by ptxas:
//! `cargo xtask gpu-programs`) beside LLVM 16's plugin on a GPU
//! (host-plugin/benches/load_binary.rs `--abi-only`). Here, before any GPU: it loads,
//! every entry resolves, the driver is asked for nothing the cubin lacks, and the table
//! has one row per entry, each pointing at the one device function.

use e2e_tests::cuda_standin::{self, Log};
use e2e_tests::paths::{require_file, scratch, target_dir};
use e2e_tests::plugin::entry;
use host_plugin::generic::host_entry::FLAG_INDIRECT;
use host_plugin::{Plugin, PluginKind};

/// The entries of the cubin `cargo xtask gpu-programs` generates (harness/src/gpu_programs.rs,
/// `LOAD_BENCH_ENTRIES`), named by `generate_cubin` in harness/src/bench/load_binary.rs.
const ENTRIES: usize = 10_000;

#[test]
fn the_kits_load_bench_cubin_loads_with_a_row_per_entry() {
    let cubin = require_file(
        target_dir().join(format!("bench/load/entries-{ENTRIES}.sm_90.cubin")),
        "`cargo xtask gpu-programs` (or `cargo xtask test`)",
    );
    let log_file = scratch("standin-tests", "load-bench").join("standin.jsonl");
    cuda_standin::preload(&log_file);
    let bytes = std::fs::read(&cubin).unwrap();
    // The bench's names; distinct host addresses in an order unrelated to the entries'.
    let entries: Vec<_> = (0..ENTRIES)
        .map(|i| {
            let name = offload_formats::entries::holder::macro_name(&format!("bench_fn_{i}"));
            let host = 0x5555_0000_0000 + 16 * ((i as u64 * 7919) % ENTRIES as u64);
            entry(&name, host, 8, FLAG_INDIRECT)
        })
        .collect();
    let plugin = Plugin::new(PluginKind::Cuda);
    assert_eq!(plugin.device_count(), 1, "the stand-in's one device");
    let device = plugin.device(0).expect("device 0");
    device.init_device().expect("init device 0");
    let loaded = device
        .load_binary(1, &bytes, &entries)
        .unwrap_or_else(|e| panic!("load_binary of {}: {e}", cubin.display()));
    assert_eq!(loaded.len(), ENTRIES);
    let table = device.fptr_table(1).expect("a table");
    assert_eq!(table.len(), ENTRIES);
    let target = table[0].tgt_ptr;
    assert!(
        target != 0 && table.iter().all(|r| r.tgt_ptr == target),
        "every holder points at bench_fn"
    );
    assert!(table.windows(2).all(|w| w[0].host_ptr < w[1].host_ptr));
    let log = Log::read(&log_file, Some(std::process::id()));
    assert_eq!(log.module_loads(), 1);
    assert!(log.errors().is_empty(), "driver errors: {:?}", log.errors());
}
