//! `load_binary` on device images with many indirect entries (docs/BENCHMARKS.md, 1d).
//!
//! Run by `cargo xtask bench load`, which generates the images (x86_64 shared objects
//! exporting one 8-byte `declare target` pointer global per indirect function, the
//! convention of clang 18+ and of `omp_indirect.h`, plus the device runtime's two table
//! globals) and passes them here:
//!
//!     load_binary IMAGE ENTRIES REPS
//!
//! It times, through the crate's Rust API with the host backend (no libomptarget):
//! - `total`: `Device::load_binary` with ENTRIES host entries, the whole real path;
//! - the phases of that path, each called on its own through the same public pieces:
//!   `inspect` (ELF checks, the symbol tables located), `dlopen` (temp file + dlopen,
//!   which runs the image's relocations), `resolve` (per batch of names: lookups in the
//!   image's GNU hash table; per entry: the symbol checked, its pointer global read),
//!   `build` (`fptr::build_rows`: radix sort, dedupe, validate), `upload` (allocate and
//!   copy the table, write the two globals), `index` (the table's index:
//!   `host_memory::build_index` in device memory, its header written);
//! - `set_map`: `Device::set_function_ptr_map` with the same ENTRIES rows, shuffled
//!   (validate + sort + upload into the loaded image).
//!
//! With two more arguments, `OUR_PLUGIN LLVM_PLUGIN` (plugin files), it also times
//! `__tgt_rtl_load_binary` through the C ABI libomptarget 16 calls, ours and LLVM 16's
//! alternately in the same process (`abi_ours`, `abi_llvm`): the upstream baseline. LLVM's
//! plugin builds no table, so the difference is what the table costs on top of loading
//! the image and resolving its entries.
//!
//!
//!     load_binary --abi-only IMAGE ENTRIES REPS OUR_PLUGIN LLVM_PLUGIN
//!
//! times only that comparison, for an image of any plugin kind: the GPU kit runs it with
//! a cubin and both cuda plugins (the image from `cargo xtask bench load`'s
//! `generate_cubin`).
//!
//! Each line is `<what> <best ns> <median ns>` over REPS repetitions. Before timing, the
//! installed table is checked (size, order, every host key present): a wrong table
//! fails the run instead of giving numbers.

use device_rtl::symbols::{INDEX_C, TABLE_C, TABLE_SIZE_C};
use host_plugin::abi::{TgtDeviceImage, TgtOffloadEntry, TgtTargetTable};
use host_plugin::backend::host::HostBackend;
use host_plugin::backend::HostMemory;
use host_plugin::backend::{AllocKind, Backend};
use host_plugin::elf::symbols::{Wanted, LOOKUP_BATCH};
use host_plugin::generic::device_buffer::{DeviceBuffer, DeviceMemory};
use host_plugin::generic::host_entry::{HostEntry, FLAG_INDIRECT};
use host_plugin::generic::table::fptr;
use host_plugin::{FptrMapEntry, HostOffloadEntry, Plugin, PluginKind};
use std::ffi::CString;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The name `cargo xtask bench load` gives entry `i`'s pointer global in the image.
fn global_name(i: usize) -> CString {
    CString::new(offload_formats::entries::holder::macro_name(&format!(
        "bench_fn_{i}"
    )))
    .expect("no NUL in the name")
}

/// Host address of entry `i`: distinct, 16-byte aligned like functions, and in an order
/// unrelated to the entry order (a permutation), so the table build really sorts.
fn host_addr(i: usize, n: usize) -> u64 {
    const STRIDE: u64 = 7919; // prime, so coprime with every n the xtask uses
    0x5555_0000_0000 + 16 * ((i as u64 * STRIDE) % n as u64)
}

fn host_entries(n: usize) -> Vec<HostOffloadEntry<'static>> {
    (0..n)
        .map(|i| HostOffloadEntry {
            host_addr: host_addr(i, n),
            name: global_name(i).into(),
            size: 8,
            flags: FLAG_INDIRECT,
            host_vtable: None,
        })
        .collect()
}

/// Fastest and median of the samples, in nanoseconds.
fn summary(samples: &mut [Duration]) -> (u128, u128) {
    samples.sort();
    (
        samples[0].as_nanos(),
        samples[(samples.len() - 1) / 2].as_nanos(),
    )
}

fn timed<R>(f: impl FnOnce() -> R) -> (R, Duration) {
    let start = Instant::now();
    let r = f();
    (r, start.elapsed())
}

/// The table a load installed must hold every host key once, in increasing order.
fn check_table(table: &[FptrMapEntry], n: usize) -> Result<(), String> {
    if table.len() != n {
        return Err(format!("table has {} rows, expected {n}", table.len()));
    }
    if !table.windows(2).all(|w| w[0].host_ptr < w[1].host_ptr) {
        return Err("table is not strictly increasing".into());
    }
    // The keys are exactly host_addr(0..n): a permutation of base + 16 * (0..n).
    for (k, row) in table.iter().enumerate() {
        if row.host_ptr != 0x5555_0000_0000 + 16 * k as u64 || row.tgt_ptr == 0 {
            return Err(format!("row {k} is {row:?}"));
        }
    }
    Ok(())
}

/// The phases of one load, each timed on its own; in load_binary's order.
const PHASES: [&str; 6] = ["inspect", "dlopen", "resolve", "build", "upload", "index"];

fn phases_once(bytes: &[u8], entries: &[HostOffloadEntry]) -> Result<[Duration; 6], String> {
    let backend = HostBackend;
    let (symbols, inspect) = timed(|| backend.inspect_image(bytes));
    let symbols = symbols
        .map_err(|e| e.to_string())?
        .ok_or("the host backend inspects every image")?;
    let device = backend.device(0);
    let (module, dlopen) = timed(|| device.load_image(bytes, Some(&symbols), None));
    let module = module.map_err(|e| e.to_string())?;
    let bias = module
        .load_bias()
        .ok_or("the host backend knows its load bias")?;
    let (rows, resolve) = timed(|| -> Result<Vec<FptrMapEntry>, String> {
        let mut rows = Vec::with_capacity(entries.len());
        let mut found = Vec::with_capacity(LOOKUP_BATCH);
        for batch in entries.chunks(LOOKUP_BATCH) {
            let names: Vec<&[u8]> = batch.iter().map(|e| e.name.to_bytes()).collect();
            symbols.dynamic_batch(&names, &mut found);
            for sym in found.iter().flatten() {
                HostMemory.prefetch(bias.wrapping_add(sym.value));
            }
            for ((e, name), &dynamic) in batch.iter().zip(&names).zip(&found) {
                let sym = symbols
                    .indirect_target_given(name, Wanted::Data, dynamic)
                    .map_err(|err| err.to_string())?;
                if sym.size != 8 {
                    return Err(format!("{} is not an 8-byte global", e.name_lossy()));
                }
                let mut word = [0u8; 8];
                // SAFETY: the address of an 8-byte global inside the loaded image.
                unsafe { device.read(bias.wrapping_add(sym.value), &mut word) }
                    .map_err(|e| e.to_string())?;
                rows.push(FptrMapEntry {
                    host_ptr: e.host_addr,
                    tgt_ptr: u64::from_ne_bytes(word),
                });
            }
        }
        Ok(rows)
    });
    let (table, build) = timed(|| {
        fptr::build_rows(rows?, |_| Default::default())
            .map(|t| t.rows)
            .map_err(|e| e.to_string())
    });
    let table = table?;
    let memory = DeviceMemory::new(HostBackend.device(0));
    let (uploaded, upload) = timed(|| -> Result<DeviceBuffer, String> {
        let err = |e: host_plugin::BackendError| e.to_string();
        let map_p = module.global(TABLE_C).map_err(err)?;
        let map_size = module.global(TABLE_SIZE_C).map_err(err)?;
        let bytes = fptr::as_bytes(&table);
        let buffer = memory.alloc(bytes.len(), AllocKind::Device).map_err(err)?;
        buffer.write_at(0, bytes).map_err(err)?;
        // SAFETY: `map_p` and `map_size` are the image's 8-byte table globals.
        unsafe {
            memory
                .write(map_p, &buffer.addr().to_ne_bytes())
                .map_err(err)?;
            memory
                .write(map_size, &(table.len() as u64).to_ne_bytes())
                .map_err(err)?;
        }
        Ok(buffer)
    });
    let (indexed, index) = timed(|| -> Result<DeviceBuffer, String> {
        let err = |e: host_plugin::BackendError| e.to_string();
        let global = module.global(INDEX_C).map_err(err)?;
        let placed = host_plugin::generic::table::host_index::build(&memory, &table)?;
        // SAFETY: `global` is the image's 32-byte index global.
        unsafe { memory.write(global, bytemuck::bytes_of(&placed.index.header)) }.map_err(err)?;
        Ok(placed.index.buckets)
    });
    // The table and index buffers go before the module, the last user of their addresses.
    uploaded?.free().map_err(|e| e.to_string())?;
    indexed?.free().map_err(|e| e.to_string())?;
    drop(module);
    check_table(&table, entries.len())?;
    Ok([inspect, dlopen, resolve, build, upload, index])
}

/// A plugin file opened the way libomptarget 16 opens it, device 0 initialised.
struct AbiPlugin {
    load_binary: unsafe extern "C" fn(i32, *mut TgtDeviceImage) -> *mut TgtTargetTable,
    // Last: the function pointer above points into it.
    _library: libloading::Library,
}

impl AbiPlugin {
    fn open(path: &str) -> Result<Self, String> {
        type InitPlugin = unsafe extern "C" fn() -> i32;
        type NumberOfDevices = unsafe extern "C" fn() -> i32;
        type InitDevice = unsafe extern "C" fn(i32) -> i32;
        let err = |what: &str, e: libloading::Error| format!("{path}: {what}: {e}");
        // SAFETY: a libomptarget 16 plugin; its initializers only set up its own state.
        let library = unsafe { libloading::Library::new(path) }.map_err(|e| err("dlopen", e))?;
        // SAFETY: (each `get`) the symbols have these signatures in LLVM 16's plugin ABI
        // (omptargetplugin.h), which both plugins export.
        unsafe {
            if let Ok(init) = library.get::<InitPlugin>(b"__tgt_rtl_init_plugin\0") {
                if init() != 0 {
                    return Err(format!("{path}: __tgt_rtl_init_plugin failed"));
                }
            }
            let devices = library
                .get::<NumberOfDevices>(b"__tgt_rtl_number_of_devices\0")
                .map_err(|e| err("number_of_devices", e))?;
            if devices() < 1 {
                return Err(format!("{path}: no devices"));
            }
            let init_device = library
                .get::<InitDevice>(b"__tgt_rtl_init_device\0")
                .map_err(|e| err("init_device", e))?;
            if init_device(0) != 0 {
                return Err(format!("{path}: __tgt_rtl_init_device(0) failed"));
            }
            let load_binary = *library
                .get::<unsafe extern "C" fn(i32, *mut TgtDeviceImage) -> *mut TgtTargetTable>(
                    b"__tgt_rtl_load_binary\0",
                )
                .map_err(|e| err("load_binary", e))?;
            Ok(AbiPlugin {
                load_binary,
                _library: library,
            })
        }
    }

    /// One timed `__tgt_rtl_load_binary(0, image)`; the table it returns must have one
    /// entry per host entry, none null.
    fn load(&self, image: &mut TgtDeviceImage, n: usize) -> Result<Duration, String> {
        // SAFETY: `image` describes live image bytes and `n` live entries whose names are
        // NUL-terminated strings (see `abi_image`), as load_binary requires.
        let (table, t) = timed(|| unsafe { (self.load_binary)(0, image) });
        if table.is_null() {
            return Err("__tgt_rtl_load_binary returned NULL".into());
        }
        // SAFETY: a non-null table from load_binary points to its entry range, which the
        // plugin keeps while the image is loaded (at least until the next load).
        let entries = unsafe {
            let begin = (*table).entries_begin;
            let len = (*table).entries_end.offset_from(begin);
            std::slice::from_raw_parts(begin, usize::try_from(len).unwrap_or(0))
        };
        if entries.len() != n || entries.iter().any(|e| e.addr.is_null()) {
            return Err(format!(
                "load_binary returned {} entries for {n}, or a null address",
                entries.len()
            ));
        }
        Ok(t)
    }
}

/// The C ABI's view of the image and its host entries; the entries borrow the names of
/// `entries` and the image `bytes`, which outlive every use.
fn abi_image(bytes: &[u8], entries: &[HostOffloadEntry]) -> (Vec<TgtOffloadEntry>, TgtDeviceImage) {
    let mut table: Vec<TgtOffloadEntry> = entries
        .iter()
        .map(|e| TgtOffloadEntry {
            addr: e.host_addr as *mut std::ffi::c_void,
            name: e.name.as_ptr().cast_mut(),
            size: e.size as usize,
            flags: e.flags,
            reserved: 0,
        })
        .collect();
    let range = table.as_mut_ptr_range();
    let bytes_range = bytes.as_ptr_range();
    let image = TgtDeviceImage {
        image_start: bytes_range.start.cast_mut().cast(),
        image_end: bytes_range.end.cast_mut().cast(),
        entries_begin: range.start,
        entries_end: range.end,
    };
    (table, image)
}

/// `__tgt_rtl_load_binary` of ours and LLVM's, alternating, `reps` times each.
fn abi_loads(
    bytes: &[u8],
    entries: &[HostOffloadEntry],
    reps: usize,
    abi: &AbiArgs,
) -> Result<(Vec<Duration>, Vec<Duration>), String> {
    let ours = AbiPlugin::open(&abi.ours)?;
    let llvm = AbiPlugin::open(&abi.llvm)?;
    // One copy of the image per load, all kept loaded: our plugin keys images by their
    // address and would otherwise unload the previous load (dlclose) inside the next
    // timed call, which LLVM's, keeping every image, never does.
    let copies: Vec<Vec<u8>> = (0..2 * reps).map(|_| bytes.to_vec()).collect();
    let mut images: Vec<_> = copies.iter().map(|c| abi_image(c, entries)).collect();
    let (mut ours_t, mut llvm_t) = (Vec::new(), Vec::new());
    for pair in images.chunks_mut(2) {
        let [(_, ours_image), (_, llvm_image)] = pair else {
            unreachable!("chunks of two from an even count")
        };
        ours_t.push(ours.load(ours_image, entries.len())?);
        llvm_t.push(llvm.load(llvm_image, entries.len())?);
    }
    Ok((ours_t, llvm_t))
}

/// The optional C ABI comparison: our plugin file and LLVM's.
struct AbiArgs {
    ours: String,
    llvm: String,
}

fn run(image: &str, n: usize, reps: usize, abi: Option<&AbiArgs>) -> Result<(), String> {
    let bytes = std::fs::read(image).map_err(|e| format!("{image}: {e}"))?;
    let entries = host_entries(n);
    let plugin = Plugin::with_backend(PluginKind::X86_64, Box::new(HostBackend));
    const KEY: usize = 1;

    // The real path, checked once before it is timed.
    plugin
        .device(0)
        .and_then(|on| on.load_binary(KEY, &bytes, &entries))
        .map_err(|e| e.to_string())?;
    let table = plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_table(KEY))
        .ok_or("load_binary installed no table")?;
    check_table(&table, n)?;
    // And the index beside it: the timed loads build and upload one too.
    let index = plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_index(KEY))
        .ok_or("the image has no __omptarget_rs_fptr_index")?;
    if index.header.bucket_count == 0 {
        return Err("load_binary installed no index".into());
    }
    plugin
        .device(0)
        .and_then(|on| on.unload(KEY))
        .map_err(|e| e.to_string())?;

    let mut total = Vec::with_capacity(reps);
    for _ in 0..reps {
        let (r, t) = timed(|| {
            plugin
                .device(0)
                .and_then(|on| on.load_binary(KEY, &bytes, &entries))
        });
        let device_entries = r.map_err(|e| e.to_string())?;
        if device_entries.len() != n {
            return Err(format!("{} device entries for {n}", device_entries.len()));
        }
        total.push(t);
        plugin
            .device(0)
            .and_then(|on| on.unload(KEY))
            .map_err(|e| e.to_string())?;
    }

    let mut phases: Vec<Vec<Duration>> = vec![Vec::with_capacity(reps); PHASES.len()];
    for _ in 0..reps {
        for (samples, t) in phases.iter_mut().zip(phases_once(&bytes, &entries)?) {
            samples.push(t);
        }
    }

    // set_function_ptr_map: the whole table handed over again, in a shuffled order.
    plugin
        .device(0)
        .and_then(|on| on.load_binary(KEY, &bytes, &entries))
        .map_err(|e| e.to_string())?;
    let rows: Vec<FptrMapEntry> = (0..n).map(|i| table[(i * 7919) % n]).collect();
    let mut set_map = Vec::with_capacity(reps);
    for _ in 0..reps {
        let (r, t) = timed(|| {
            plugin
                .device(0)
                .and_then(|on| on.set_function_ptr_map(&rows))
        });
        if r.map_err(|e| e.to_string())? != 1 {
            return Err("set_function_ptr_map patched no image".into());
        }
        set_map.push(t);
    }
    check_table(
        &plugin
            .device(0)
            .ok()
            .and_then(|on| on.fptr_table(KEY))
            .ok_or("no table after set_map")?,
        n,
    )?;
    plugin
        .device(0)
        .and_then(|on| on.unload(KEY))
        .map_err(|e| e.to_string())?;

    println!("entries {n}");
    let (best, median) = summary(&mut total);
    println!("total {best} {median}");
    for (name, samples) in PHASES.iter().zip(&mut phases) {
        let (best, median) = summary(samples);
        println!("{name} {best} {median}");
    }
    let (best, median) = summary(&mut set_map);
    println!("set_map {best} {median}");

    if let Some(abi) = abi {
        let (mut ours, mut llvm) = abi_loads(&bytes, &entries, reps, abi)?;
        let (best, median) = summary(&mut ours);
        println!("abi_ours {best} {median}");
        let (best, median) = summary(&mut llvm);
        println!("abi_llvm {best} {median}");
    }
    Ok(())
}

/// `--abi-only`: [`abi_loads`] alone.
fn run_abi_only(image: &str, n: usize, reps: usize, abi: &AbiArgs) -> Result<(), String> {
    let bytes = std::fs::read(image).map_err(|e| format!("{image}: {e}"))?;
    let entries = host_entries(n);
    let (mut ours, mut llvm) = abi_loads(&bytes, &entries, reps, abi)?;
    println!("entries {n}");
    let (best, median) = summary(&mut ours);
    println!("abi_ours {best} {median}");
    let (best, median) = summary(&mut llvm);
    println!("abi_llvm {best} {median}");
    Ok(())
}

fn main() -> ExitCode {
    // `cargo bench` appends `--bench` to the arguments of harness-less benches.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let numbers = |n: &str, reps: &str| -> Option<(usize, usize)> {
        let n = n.parse::<usize>().ok().filter(|&n| n > 0)?;
        let reps = reps.parse::<usize>().ok().filter(|&r| r > 0)?;
        Some((n, reps))
    };
    let abi_args = |ours: &String, llvm: &String| AbiArgs {
        ours: ours.clone(),
        llvm: llvm.clone(),
    };
    let (args, abi_only) = match args.split_first() {
        Some((flag, rest)) if flag == "--abi-only" => (rest, true),
        _ => (args.as_slice(), false),
    };
    let parsed = match args {
        [image, n, reps] if !abi_only => {
            numbers(n, reps).map(|(n, reps)| (image.clone(), n, reps, None))
        }
        [image, n, reps, ours, llvm] => {
            numbers(n, reps).map(|(n, reps)| (image.clone(), n, reps, Some(abi_args(ours, llvm))))
        }
        _ => None,
    };
    let Some((image, n, reps, abi)) = parsed else {
        eprintln!(
            "usage: load_binary IMAGE ENTRIES REPS [OUR_PLUGIN LLVM_PLUGIN]\n       \
             load_binary --abi-only IMAGE ENTRIES REPS OUR_PLUGIN LLVM_PLUGIN\n\
             (images come from `cargo xtask bench load`)"
        );
        return ExitCode::from(2);
    };
    let result = match (&abi, abi_only) {
        (Some(abi), true) => run_abi_only(&image, n, reps, abi),
        _ => run(&image, n, reps, abi.as_ref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("load_binary bench: {e}");
            ExitCode::FAILURE
        }
    }
}
