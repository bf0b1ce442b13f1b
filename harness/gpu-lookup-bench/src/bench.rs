//! The run on the GPU: the variants, each one's image loaded through the plugin's CUDA
//! backend and its table installed its own way (device pointers, the plugin's table with
//! or without its index, LLVM 19's environment), then every case measured (launch.rs).

use crate::cli::Options;
use crate::kernel::{host_key, Pattern, FUNCTIONS, TOTAL_THREADS};
use host_plugin::backend::AllocKind;
use host_plugin::generic::device_buffer::DeviceBuffer;
use host_plugin::generic::host_entry::FLAG_INDIRECT;
use host_plugin::generic::table::fptr_index::FptrIndex;
use host_plugin::{DeviceAddr, FptrMapEntry, HostOffloadEntry, Plugin};
use std::collections::HashMap;
use std::time::Duration;

/// Lookup variants, in table order (names as harness/src/bench/gpu_lookup.rs builds them).
pub const VARIANTS: [(&str, Lookup); 6] = [
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

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    Direct,
    /// `__kmpc_target_translate_fptr`, with the plugin's index or without it.
    Ours {
        index: bool,
    },
    Llvm19,
}

/// One measured case.
pub struct Measure {
    pub variant: &'static str,
    pub size: usize,
    pub pattern: Pattern,
    pub iters: u64,
    pub best: Duration,
}

impl Measure {
    pub fn lookups_per_second(&self) -> f64 {
        (TOTAL_THREADS as u64 * self.iters) as f64 / self.best.as_secs_f64()
    }
}

pub struct Bench<'a> {
    pub plugin: &'a Plugin,
    pub options: &'a Options,
    /// Iterations per thread of each (size, pattern), set by the first variant measured
    /// (direct when built) and reused, so every variant runs the same work.
    pub iters: HashMap<(usize, Pattern), u64>,
    /// The expected result of every thread, per (size, pattern, iters).
    pub references: HashMap<(usize, Pattern, u64), Vec<u32>>,
    pub results: Vec<Measure>,
}

/// A variant's image, loaded.
pub struct Loaded {
    pub kernel: DeviceAddr,
    /// Device addresses of bench_fn0..3 in this image.
    functions: [u64; FUNCTIONS],
    /// LLVM 19's environment global (llvm19 only).
    environment: Option<DeviceAddr>,
}

impl Bench<'_> {
    pub fn upload(&self, bytes: &[u8]) -> Result<DeviceBuffer, String> {
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
    pub fn free(&self, buffers: Vec<DeviceBuffer>) -> Result<(), String> {
        for buffer in buffers {
            buffer.free().map_err(|e| format!("free: {e}"))?;
        }
        Ok(())
    }

    fn load(&self, key: usize, lookup: Lookup, bytes: &[u8]) -> Result<Loaded, String> {
        let entry = |name: &str, host: u64, size: u64, flags: i32| {
            HostOffloadEntry::named(name, host, size, flags).map_err(|e| e.to_string())
        };
        let mut entries: Vec<HostOffloadEntry> = vec![entry("lookup_bench", 0x1000, 0, 0)?];
        // The four functions as `declare target indirect` entries; their host keys are
        // the first rows of every table.
        for f in 0..FUNCTIONS {
            entries.push(entry(
                &format!("__omp_offloading_bench_fn{f}"),
                host_key(f),
                8,
                FLAG_INDIRECT,
            )?);
        }
        if lookup == Lookup::Llvm19 {
            entries.push(entry(
                LLVM19_ENVIRONMENT,
                0x2000,
                LLVM19_ENVIRONMENT_SIZE,
                0,
            )?);
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

    pub fn run_variant(
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
            let mut owned = vec![self.upload(bytemuck::cast_slice(&keys))?];
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
                    let table = self.upload(host_plugin::generic::table::fptr::as_bytes(&rows))?;
                    let table_addr = table.addr();
                    owned.push(table);
                    let env = image.environment.ok_or("no LLVM 19 environment")?;
                    // SAFETY: `env` is the image's 48-byte environment global; bytes 24..40
                    // are its table pointer and row count.
                    unsafe {
                        self.plugin.device(0).and_then(|on| {
                            on.write(
                                env + LLVM19_TABLE_OFFSET,
                                bytemuck::cast_slice(&[table_addr, size as u64]),
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
}

/// Rows a head holds (device-rtl's `HEAD_ROWS`).
fn device_rtl_head_rows() -> usize {
    host_plugin::fptr_head::HEAD_ROWS
}
