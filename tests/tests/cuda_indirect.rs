//! GPU tests: the fixture kernels (tests/fixtures/cuda/indirect_calls.c, device-rtl
//! linked in) loaded through the plugin core with its CUDA backend. Every thread calls
//! device functions given by their host addresses; unknown pointers pass through; tables
//! of 1, 1,000 and 1,000,000 entries. Without a CUDA driver or GPU each test prints one
//! `SKIPPED:` line and passes.

mod cuda_support;

use cuda_support::{fixture_cubin, skip, RtlVariant, ARCHES, VARIANTS};
use e2e_tests::plugin::{entry, words};
use host_plugin::backend::cuda::{image::cubin_runs_on, CudaBackend};
use host_plugin::backend::AllocKind;
use host_plugin::backend::LaunchRequest;
use host_plugin::generic::device_buffer::DeviceBuffer;
use host_plugin::generic::host_entry::FLAG_INDIRECT;
use host_plugin::{DeviceAddr, FptrMapEntry, HostOffloadEntry, Plugin, PluginKind};

// Host "addresses" are only keys for the device. Odd multiples of 8; the synthetic rows
// of big tables are multiples of 16 centred on them, so the real rows sit in the middle.
const HOST_ADD_ONE: u64 = 0x0100_0008;
const HOST_TIMES_THREE: u64 = 0x0100_0108;
const HOST_SQUARE: u64 = 0x0100_0208;

const TEAMS: u32 = 8;
const THREADS: u32 = 128;

fn reference(host_fn: u64, x: i32) -> i32 {
    match host_fn {
        HOST_ADD_ONE => x + 1,
        HOST_TIMES_THREE => 3 * x,
        HOST_SQUARE => x.wrapping_mul(x) - 7,
        other => panic!("no reference for {other:#x}"),
    }
}

fn entries() -> Vec<HostOffloadEntry<'static>> {
    vec![
        entry("call_through_host_pointers", 0x100, 0, 0),
        entry("translate_all", 0x108, 0, 0),
        entry("translate_in_groups", 0x110, 0, 0),
        entry(
            "__omp_offloading_fn_add_one",
            HOST_ADD_ONE,
            8,
            FLAG_INDIRECT,
        ),
        entry(
            "__omp_offloading_fn_times_three",
            HOST_TIMES_THREE,
            8,
            FLAG_INDIRECT,
        ),
        entry(
            "__omp_offloading_fn_square_minus_seven",
            HOST_SQUARE,
            8,
            FLAG_INDIRECT,
        ),
    ]
}

/// A plugin with the CUDA backend and the fixture loaded on device 0, or None (skipped).
struct Gpu {
    plugin: Plugin,
    call: DeviceAddr,
    translate: DeviceAddr,
    translate_in_groups: DeviceAddr,
    /// The table the plugin built from the image's entries (3 rows).
    loaded_table: Vec<FptrMapEntry>,
    /// The SM of the fixture loaded.
    sm: u32,
}

/// The default device RTL build; see [`gpu_with`].
fn gpu(test: &str) -> Option<Gpu> {
    gpu_with(test, RtlVariant::Default)
}

fn gpu_with(test: &str, variant: RtlVariant) -> Option<Gpu> {
    let backend = CudaBackend::new();
    if let Some(reason) = backend.unavailable_reason() {
        skip(test, reason);
        return None;
    }
    let ((major, minor), name) = backend.describe(0).expect("device 0 exists");
    let Some(sm) = ARCHES
        .into_iter()
        .find(|&sm| cubin_runs_on(sm, major, minor))
    else {
        skip(
            test,
            &format!("{name} is sm_{major}{minor}; fixtures exist for {ARCHES:?}"),
        );
        return None;
    };
    println!("{test}: device 0 is {name} (sm_{major}{minor}), fixture sm_{sm}, {variant:?} RTL");
    let plugin = Plugin::with_backend(PluginKind::Cuda, Box::new(backend));
    plugin
        .device(0)
        .and_then(|on| on.init_device())
        .expect("init device 0");
    let cubin = fixture_cubin(variant, sm);
    let loaded = plugin
        .device(0)
        .and_then(|on| on.load_binary(1, &cubin, &entries()))
        .unwrap_or_else(|e| panic!("loading the fixture: {e}"));
    let loaded_table = plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_table(1))
        .expect("the image has the table globals");
    Some(Gpu {
        plugin,
        call: loaded[0].addr,
        translate: loaded[1].addr,
        translate_in_groups: loaded[2].addr,
        loaded_table,
        sm,
    })
}

impl Gpu {
    fn upload(&self, bytes: &[u8]) -> DeviceBuffer {
        let buffer = self
            .plugin
            .device(0)
            .and_then(|on| on.alloc(bytes.len(), AllocKind::Device))
            .expect("alloc");
        buffer.write_at(0, bytes).expect("submit");
        buffer
    }

    fn download(&self, addr: DeviceAddr, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        // SAFETY: `addr` is an allocation of at least `len` bytes.
        unsafe { self.plugin.device(0).and_then(|on| on.read(addr, &mut out)) }.expect("retrieve");
        out
    }

    /// Free buffers no launch in flight uses (the launches are synchronous).
    fn free(&self, buffers: Vec<DeviceBuffer>) {
        for buffer in buffers {
            buffer.free().expect("free");
        }
    }

    /// Launch call_through_host_pointers on TEAMS x THREADS; check every thread's
    /// result for every function and the geometry the device saw.
    fn check_calls(&self, host_fns: &[u64]) {
        let threads = (TEAMS * THREADS) as usize;
        let n = host_fns.len();
        let fns_buffer = self.upload(&words(host_fns));
        let fns = fns_buffer.addr();
        let out_buffer = self.upload(&vec![0u8; threads * n * 4]);
        let out = out_buffer.addr();
        let shape_buffer = self.upload(&[0u8; 8]);
        let shape = shape_buffer.addr();
        let request = LaunchRequest {
            num_teams: TEAMS,
            thread_limit: THREADS,
            tripcount: 0,
            dynamic_shared_memory: 0,
        };
        // SAFETY: the kernel takes (void **, int *, unsigned long, unsigned *): the
        // pointers are allocations of n words, threads * n ints and 2 u32.
        unsafe {
            self.plugin
                .device(0)
                .and_then(|on| on.launch_teams(self.call, &[fns, out, n as u64, shape], request))
        }
        .expect("launch call_through_host_pointers");
        let results = self.download(out, threads * n * 4);
        let seen = self.download(shape, 8);
        self.free(vec![fns_buffer, out_buffer, shape_buffer]);
        let seen: Vec<u32> = seen
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(seen, [TEAMS, THREADS], "launch geometry seen on the device");
        let mut wrong = 0;
        for t in 0..threads {
            for (i, &f) in host_fns.iter().enumerate() {
                let at = (t * n + i) * 4;
                let got = i32::from_ne_bytes(results[at..at + 4].try_into().unwrap());
                let want = reference(f, t as i32);
                if got != want {
                    if wrong < 5 {
                        eprintln!("thread {t}, function {f:#x}: got {got}, want {want}");
                    }
                    wrong += 1;
                }
            }
        }
        assert_eq!(
            wrong,
            0,
            "{wrong} of {} calls returned a wrong value",
            threads * n
        );
    }

    /// Translate `pointers` on the device; returns what came back.
    fn translate(&self, pointers: &[u64]) -> Vec<u64> {
        let n = pointers.len();
        let input_buffer = self.upload(&words(pointers));
        let input = input_buffer.addr();
        let output_buffer = self.upload(&vec![0u8; n * 8]);
        let output = output_buffer.addr();
        let request = LaunchRequest {
            num_teams: 64,
            thread_limit: 256,
            tripcount: 0,
            dynamic_shared_memory: 0,
        };
        // SAFETY: translate_all takes (void **, void **, unsigned long): two allocations
        // of n words and n.
        unsafe {
            self.plugin
                .device(0)
                .and_then(|on| on.launch_teams(self.translate, &[input, output, n as u64], request))
        }
        .expect("launch translate_all");
        let bytes = self.download(output, n * 8);
        self.free(vec![input_buffer, output_buffer]);
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }
}

impl Gpu {
    /// Run translate_in_groups over `pointers` with `group` consecutive threads sharing
    /// one pointer; returns each thread's output (0 for the threads that stay out).
    fn translate_in_groups(&self, pointers: &[u64], group: u64) -> Vec<u64> {
        const TEAMS: u32 = 16;
        const THREADS: u32 = 256;
        let threads = (TEAMS * THREADS) as usize;
        let input_buffer = self.upload(&words(pointers));
        let input = input_buffer.addr();
        let output_buffer = self.upload(&vec![0xffu8; threads * 8]);
        let output = output_buffer.addr();
        let request = LaunchRequest {
            num_teams: TEAMS,
            thread_limit: THREADS,
            tripcount: 0,
            dynamic_shared_memory: 0,
        };
        // SAFETY: translate_in_groups takes (void **, void **, unsigned long, unsigned
        // long): n words in, one word per launched thread out, n, group.
        unsafe {
            self.plugin.device(0).and_then(|on| {
                on.launch_teams(
                    self.translate_in_groups,
                    &[input, output, pointers.len() as u64, group],
                    request,
                )
            })
        }
        .expect("launch translate_in_groups");
        let bytes = self.download(output, threads * 8);
        self.free(vec![input_buffer, output_buffer]);
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }
}

/// The loaded table plus `total - 3` synthetic rows spread around the real ones.
fn big_table(real: &[FptrMapEntry], total: usize) -> Vec<FptrMapEntry> {
    let synthetic = (total - real.len()) as u64;
    let base = (HOST_TIMES_THREE - 8) - 16 * (synthetic / 2);
    let mut rows: Vec<FptrMapEntry> = (0..synthetic)
        .map(|i| FptrMapEntry {
            host_ptr: base + 16 * i,
            tgt_ptr: 0xDEAD_0000_0000 + i,
        })
        .collect();
    rows.extend_from_slice(real);
    rows
}

/// Pointers no table row holds: below, above, between rows, and null.
fn unknown_pointers(table: &[FptrMapEntry]) -> Vec<u64> {
    let min = table.iter().map(|r| r.host_ptr).min().unwrap();
    let max = table.iter().map(|r| r.host_ptr).max().unwrap();
    vec![
        0,
        8,
        min - 1,
        min + 1,
        HOST_ADD_ONE + 4,
        max + 1,
        max + 16,
        u64::MAX >> 1,
    ]
}

/// [`run_with_variant`] with each device RTL build.
fn run_with_table(test: &str, total: usize) {
    for variant in VARIANTS {
        run_with_variant(test, total, variant);
    }
}

fn run_with_variant(test: &str, total: usize, variant: RtlVariant) {
    let Some(gpu) = gpu_with(test, variant) else {
        return;
    };
    assert_eq!(
        gpu.loaded_table.len(),
        3,
        "three indirect entries in the image"
    );
    let table = if total == 1 {
        let add_one: Vec<_> = gpu
            .loaded_table
            .iter()
            .filter(|r| r.host_ptr == HOST_ADD_ONE)
            .copied()
            .collect();
        add_one
    } else {
        big_table(&gpu.loaded_table, total)
    };
    assert_eq!(table.len(), total);
    if total > 3 {
        let below = table.iter().filter(|r| r.host_ptr < HOST_ADD_ONE).count();
        assert!(
            below > 0 && below < total - 3,
            "synthetic rows on both sides"
        );
    }
    if total != 3 {
        let patched = gpu
            .plugin
            .device(0)
            .and_then(|on| on.set_function_ptr_map(&table))
            .expect("install");
        assert_eq!(patched, 1, "one loaded image takes the table");
    }
    let installed = gpu
        .plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_table(1))
        .unwrap();
    assert_eq!(installed.len(), total);

    let callable: Vec<u64> = [HOST_ADD_ONE, HOST_TIMES_THREE, HOST_SQUARE]
        .into_iter()
        .filter(|h| installed.iter().any(|r| r.host_ptr == *h))
        .collect();
    gpu.check_calls(&callable);

    // Known pointers translate to their rows (a sample of a big table: first, last, and
    // a stride through it), unknown ones come back unchanged.
    let step = (installed.len() / 1000).max(1);
    let sample: Vec<FptrMapEntry> = installed
        .iter()
        .step_by(step)
        .chain(installed.last())
        .copied()
        .collect();
    let unknown = unknown_pointers(&installed);
    let mut pointers: Vec<u64> = sample.iter().map(|r| r.host_ptr).collect();
    pointers.extend(callable.iter());
    pointers.extend(&unknown);
    let translated = gpu.translate(&pointers);
    for (p, got) in pointers.iter().zip(&translated) {
        let want = installed
            .iter()
            .find(|r| r.host_ptr == *p)
            .map_or(*p, |r| r.tgt_ptr);
        assert_eq!(*got, want, "translating {p:#x}");
    }
    // Warps whose active lanes share one pointer (group 32: with the warp-cooperative
    // RTL they search together under a partial mask) or hold several (group 8).
    let expected = |p: u64| {
        installed
            .binary_search_by_key(&p, |r| r.host_ptr)
            .map_or(p, |i| installed[i].tgt_ptr)
    };
    let mut grouped = 0;
    for group in [32u64, 8] {
        let out = gpu.translate_in_groups(&pointers, group);
        for (t, got) in out.iter().enumerate() {
            let t = t as u64;
            let want = if t % 3 == 1 {
                0
            } else {
                expected(pointers[((t / group) % pointers.len() as u64) as usize])
            };
            assert_eq!(*got, want, "{variant:?}: thread {t}, group {group}");
        }
        grouped += out.len();
    }
    println!(
        "{test}: {variant:?} RTL, {total} entries, {} translations and {grouped} grouped \
         translations checked",
        pointers.len()
    );
}

#[test]
fn cuda_table_of_1_entry() {
    run_with_table("cuda_table_of_1_entry", 1);
}

#[test]
fn cuda_table_of_3_entries_from_the_image() {
    run_with_table("cuda_table_of_3_entries_from_the_image", 3);
}

#[test]
fn cuda_table_of_1000_entries() {
    run_with_table("cuda_table_of_1000_entries", 1000);
}

#[test]
fn cuda_table_of_1000000_entries() {
    run_with_table("cuda_table_of_1000000_entries", 1_000_000);
}

#[test]
fn cuda_memory_kinds_round_trip() {
    let Some(gpu) = gpu("cuda_memory_kinds_round_trip") else {
        return;
    };
    for kind in [
        AllocKind::Default,
        AllocKind::Device,
        AllocKind::Host,
        AllocKind::Shared,
    ] {
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        let buffer = gpu
            .plugin
            .device(0)
            .and_then(|on| on.alloc(data.len(), kind))
            .expect("alloc");
        buffer.write_at(0, &data).expect("submit");
        let back = gpu.download(buffer.addr(), data.len());
        gpu.free(vec![buffer]);
        assert_eq!(back, data, "{kind:?} memory round trip");
    }
}

#[test]
fn cuda_size_0_indirect_entries_are_refused_clearly() {
    let Some(gpu) = gpu("cuda_size_0_indirect_entries_are_refused_clearly") else {
        return;
    };
    let mut bad = entries();
    bad.push(entry("add_one", 0x7000, 0, FLAG_INDIRECT));
    let err = gpu
        .plugin
        .device(0)
        .and_then(|on| on.load_binary(2, &fixture_cubin(RtlVariant::Default, gpu.sm), &bad))
        .expect_err("a size-0 indirect entry cannot be resolved on CUDA");
    assert!(err.to_string().contains("size-0"), "{err}");
}

#[test]
fn cuda_cubin_for_another_arch_is_refused_clearly() {
    let Some(gpu) = gpu("cuda_cubin_for_another_arch_is_refused_clearly") else {
        return;
    };
    let Some(other) = ARCHES.into_iter().find(|&sm| sm / 10 != gpu.sm / 10) else {
        return;
    };
    let err = gpu
        .plugin
        .device(0)
        .and_then(|on| on.load_binary(3, &fixture_cubin(RtlVariant::Default, other), &entries()))
        .expect_err("a cubin for another major architecture cannot load");
    assert!(err.to_string().contains(&format!("sm_{other}")), "{err}");
}

/// The GPU tests' own table construction, checked here without a GPU: the rows are
/// distinct, the real ones sit among synthetic ones, the "unknown" pointers are unknown.
#[test]
fn synthetic_tables_surround_the_real_rows() {
    let real: Vec<FptrMapEntry> = [HOST_ADD_ONE, HOST_TIMES_THREE, HOST_SQUARE]
        .iter()
        .enumerate()
        .map(|(i, &h)| FptrMapEntry {
            host_ptr: h,
            tgt_ptr: 0x7000_0000 + i as u64,
        })
        .collect();
    for total in [1000, 1_000_000] {
        let rows = big_table(&real, total);
        let table =
            host_plugin::generic::table::fptr::from_rows(&rows).expect("no conflicting rows");
        assert_eq!(table.len(), total, "no duplicate host addresses");
        let at = |h| table.iter().position(|r| r.host_ptr == h).unwrap();
        for r in &real {
            let i = at(r.host_ptr);
            assert!(
                i > 0 && i < total - 1,
                "{:#x} at {i} of {total}",
                r.host_ptr
            );
        }
        for p in unknown_pointers(&table) {
            assert!(
                table.iter().all(|r| r.host_ptr != p),
                "{p:#x} is in the table"
            );
        }
    }
}
