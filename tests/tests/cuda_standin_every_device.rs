//! Every GPU of a node, on a CPU: tests/fixtures/cuda/every_device.c, a standard
//! `declare target indirect` program built by clang-16 through the installed nvptx64
//! config (the compiler plugin registers its two indirect functions, so the table the
//! plugin installs is the real one), runs under the real libomptarget 16 with our cuda
//! plugin and the CUDA driver stand-in set to 4 and to 8 devices, launches skipped. It
//! offloads a region to every device and copies device 0 memory to every other device
//! with `omp_target_memcpy`, reading each copy back to the host (the program checks
//! those bytes: the kernels do not run, so only copies can be checked). The stand-in's
//! report shows, per device:
//!
//! 1. its own primary context, its own module loaded there and a launch in it with that
//!    module;
//! 2. the table installed for that launch: its rows' device addresses name the indirect
//!    functions in that device's module (the stand-in resolves them there), and no two
//!    devices' addresses or tables are the same;
//! 3. its own streams (created in its context, its launch queued on one of them), and
//!    its allocations made in its own context (each device's memory is set to hold one
//!    copy block but not two) and in the same number on every device;
//! 4. the device-to-device copies as cuMemcpyPeer calls, one per other device, with
//!    their bytes.
//!
//! Each device count is run once ([`node`]) and its report checked by several tests.
//! Needs `cargo xtask build-plugin` (target/plugin, target/cuda-standin) and
//! `cargo xtask install --prefix target/install` (the nvptx64 config).

use e2e_tests::compile::compile_nvptx_with_config;
use e2e_tests::cuda_standin::{self, Launch, Log};
use e2e_tests::paths::{fixture, require_file, scratch, target_dir};
use e2e_tests::plugin::built_plugin_dir;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::OnceLock;

const SM: &str = "sm_90";
/// The bytes of each device-to-device copy (every_device.c's PEER_BYTES).
const PEER_BYTES: u64 = 192 * 1024 + 48;
/// The program's indirect functions.
const FUNCTIONS: [&str; 2] = ["every_device_plus_one", "every_device_times_three"];
/// Each device's memory in the stand-in (`OMPTARGET_RS_CUDA_STANDIN_MEMORY`): one copy
/// block (the pool rounds PEER_BYTES up by at most a quarter) and the device's few small
/// blocks fit; two copy blocks do not.
const DEVICE_MEMORY: u64 = PEER_BYTES * 3 / 2;
const MEMORY_ENV: &str = "OMPTARGET_RS_CUDA_STANDIN_MEMORY";
const DEVICES_ENV: &str = "OMPTARGET_RS_CUDA_STANDIN_DEVICES";

/// every_device.c built through target/install's nvptx64 config, once.
fn program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let config = require_file(
            install_layout::Prefix::new(target_dir().join("install"))
                .config(install_layout::NVPTX_TRIPLE),
            "`cargo xtask install --prefix target/install`",
        );
        let exe = scratch("standin-every-device", "build").join("every_device");
        compile_nvptx_with_config(&config, &fixture("cuda/every_device.c"), &exe, SM, &["-O2"]);
        exe
    })
}

/// One run of the program with the stand-in.
struct Run {
    devices: usize,
    pid: u32,
    output: Output,
    stdout: String,
    log: Log,
    /// Our plugin's load marker (`<kind> <pid>` lines).
    marker: String,
}

impl Run {
    /// The program with the stand-in set to `devices` devices of `memory` bytes each,
    /// launches skipped, offloading mandatory.
    fn start(devices: usize, memory: u64) -> Run {
        let dir = scratch("standin-every-device", &format!("{devices}-devices"));
        let (log, marker) = (dir.join("standin.jsonl"), dir.join("marker"));
        let child = cuda_standin::command(program(), &built_plugin_dir(), &log)
            .env(cuda_standin::LAUNCH_ENV, "skip")
            .env(DEVICES_ENV, devices.to_string())
            .env(MEMORY_ENV, memory.to_string())
            .env("OMP_TARGET_OFFLOAD", "MANDATORY")
            .env("OMPTARGET_RS_LOAD_MARKER", &marker)
            .env_remove("OMPTARGET_RS_ALLOW_HOST_FALLBACK")
            .env_remove("OMPTARGET_RS_ISOLATED")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start every_device");
        let pid = child.id();
        let output = child.wait_with_output().expect("wait for every_device");
        Run {
            devices,
            pid,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            output,
            log: Log::read(&log, Some(pid)),
            marker: std::fs::read_to_string(&marker).unwrap_or_default(),
        }
    }

    /// The program's output, for messages.
    fn shown(&self) -> String {
        format!(
            "{} devices, {}\nstdout:\n{}stderr:\n{}",
            self.devices,
            self.output.status,
            self.stdout,
            String::from_utf8_lossy(&self.output.stderr)
        )
    }

    /// The program passed (its own checks of the copied bytes), our cuda plugin ran it
    /// (not LLVM's), no driver call failed, and libomptarget saw every device.
    fn check_clean(&self) {
        assert!(
            self.output.status.success() && self.stdout.contains("every_device: PASS"),
            "{}",
            self.shown()
        );
        // Catches libomptarget taking LLVM 16's own cuda plugin: no marker of ours.
        assert!(
            self.marker
                .lines()
                .any(|l| l == format!("cuda {}", self.pid)),
            "our cuda plugin wrote no load marker (marker: {:?})\n{}",
            self.marker,
            self.shown()
        );
        // Catches any failed driver call: a copy to or from memory of no device, an
        // allocation past a device's memory, a stream or context used after its end.
        assert!(
            self.log.errors().is_empty(),
            "driver calls failed: {:#?}\n{}",
            self.log.errors(),
            self.shown()
        );
        // Catches devices lost between the driver and the program (the plugin counting
        // fewer, or other plugins' devices counted in).
        let expected = format!("every_device: devices {}\n", self.devices);
        assert!(self.stdout.contains(&expected), "{}", self.shown());
        assert!(
            self.log.calls().is_some(),
            "the report has no calls event\n{}",
            self.shown()
        );
    }

    /// The primary context of each device, in device order: one per device, all
    /// different.
    fn contexts(&self) -> Vec<u64> {
        let contexts = self.log.primary_contexts();
        // Catches a device never initialised (no context retained for it) or two
        // libomptarget devices on one CUdevice.
        assert_eq!(
            contexts.keys().copied().collect::<Vec<_>>(),
            (0..self.devices as i32).collect::<Vec<_>>(),
            "the devices whose primary context was retained\n{}",
            self.shown()
        );
        let distinct: BTreeSet<u64> = contexts.values().copied().collect();
        assert_eq!(distinct.len(), self.devices, "contexts {contexts:?}");
        contexts.into_values().collect()
    }

    /// The one launch in `context`.
    fn launch_in(&self, context: u64) -> &Launch {
        let launches: Vec<&Launch> = self
            .log
            .launches()
            .into_iter()
            .filter(|l| l.context == Some(context))
            .collect();
        assert_eq!(
            launches.len(),
            1,
            "launches in context {context:#x}: {launches:?}\n{}",
            self.shown()
        );
        launches[0]
    }

    /// The one module loaded in `context`.
    fn module_in(&self, context: u64) -> u64 {
        let modules: Vec<u64> = self
            .log
            .modules_loaded()
            .into_iter()
            .filter(|(_, c)| *c == Some(context))
            .map(|(m, _)| m)
            .collect();
        assert_eq!(
            modules.len(),
            1,
            "modules loaded in context {context:#x}: {modules:?}\n{}",
            self.shown()
        );
        modules[0]
    }

    /// The host address of each indirect function, as the program printed it.
    fn host_addresses(&self) -> BTreeMap<u64, &'static str> {
        FUNCTIONS
            .iter()
            .map(|&f| {
                let prefix = format!("every_device: host {f} 0x");
                let line = self
                    .stdout
                    .lines()
                    .find_map(|l| l.strip_prefix(&prefix))
                    .unwrap_or_else(|| panic!("no host address of {f}\n{}", self.shown()));
                let addr = u64::from_str_radix(line.trim(), 16).expect("a hex address");
                (addr, f)
            })
            .collect()
    }
}

/// The run with `devices` devices (4 or 8) of [`DEVICE_MEMORY`] each, once, checked
/// clean.
fn node(devices: usize) -> &'static Run {
    static FOUR: OnceLock<Run> = OnceLock::new();
    static EIGHT: OnceLock<Run> = OnceLock::new();
    let cell = match devices {
        4 => &FOUR,
        8 => &EIGHT,
        _ => unreachable!("runs of 4 and 8 devices only"),
    };
    cell.get_or_init(|| {
        let run = Run::start(devices, DEVICE_MEMORY);
        run.check_clean();
        run
    })
}

/// 1: a region ran on every device, in its own context with its own module.
fn every_device_runs_its_region_in_its_own_context_and_module(run: &Run) {
    let contexts = run.contexts();
    for d in 0..run.devices {
        // Catches a region the program did not reach (its device(d) region failed).
        let line = format!("every_device: region on device {d}\n");
        assert!(run.stdout.contains(&line), "{}", run.shown());
    }
    let mut modules = BTreeSet::new();
    for (d, &context) in contexts.iter().enumerate() {
        // Catches a device that got no image (loaded in another device's context, or
        // never) or two loads in one context.
        let module = run.module_in(context);
        // Catches `device(d)` going to another device: no launch in d's context.
        let launch = run.launch_in(context);
        // Catches a launch of one device's kernel from another device's module.
        assert_eq!(
            launch.module, module,
            "device {d}'s launch used module {:#x}, its context holds {module:#x}",
            launch.module
        );
        modules.insert(module);
    }
    // Catches one module handle shared by several devices.
    assert_eq!(modules.len(), run.devices, "modules {modules:?}");
    // Catches extra loads or launches beyond one per device (an image loaded again, a
    // region run twice).
    assert_eq!(run.log.module_loads(), run.devices, "{}", run.shown());
    assert_eq!(run.log.calls_to(&["cuLaunchKernel"]), run.devices as u64);
}

/// 2: the table installed on each device maps the host addresses to that device's
/// functions.
fn each_device_table_holds_its_own_functions(run: &Run) {
    let host = run.host_addresses();
    let mut device_addresses: BTreeMap<u64, usize> = BTreeMap::new();
    let mut tables = BTreeSet::new();
    for (d, &context) in run.contexts().iter().enumerate() {
        let launch = run.launch_in(context);
        // Catches a device launched without the table (the plugin installed it on
        // device 0 only) or with a table its memory does not hold.
        let table = launch
            .table
            .as_ref()
            .unwrap_or_else(|| panic!("device {d}: the launch has no table globals"));
        assert!(table.error.is_none(), "device {d}: {:?}", table.error);
        assert!(
            !table.truncated && table.map_size == Some(FUNCTIONS.len() as u64),
            "device {d}: {table:?}"
        );
        assert_eq!(table.rows.len(), FUNCTIONS.len(), "device {d}: {table:?}");
        for row in &table.rows {
            // Catches a row whose host key is not an indirect function's address.
            let function = host.get(&row.host).unwrap_or_else(|| {
                panic!(
                    "device {d}: host key {:#x} is no indirect function",
                    row.host
                )
            });
            // The stand-in names a device address after the symbol of the launched
            // module (device d's, checked above) that holds it: `unknown` catches a row
            // holding another device's address (device 0's table copied to all), and a
            // wrong name a row pointing at the wrong function.
            assert_eq!(
                row.tgt_name,
                format!("{function}+0"),
                "device {d}: the host's {function} maps to {:#x}",
                row.tgt
            );
            // Catches two devices' rows with one device address.
            if let Some(other) = device_addresses.insert(row.tgt, d) {
                panic!(
                    "devices {other} and {d} both map to device address {:#x}",
                    row.tgt
                );
            }
        }
        // Catches one table buffer shared by several devices.
        assert!(
            tables.insert(table.map_p),
            "device {d}'s table at {:?} is another device's",
            table.map_p
        );
    }
}

/// 3: streams and memory are per device.
fn streams_and_allocations_are_per_device(run: &Run) {
    let contexts = run.contexts();
    let streams = run.log.streams_created();
    let stream_context: BTreeMap<u64, Option<u64>> = streams.iter().copied().collect();
    // Catches a stream handle handed out twice.
    assert_eq!(stream_context.len(), streams.len(), "streams {streams:?}");
    for (d, &context) in contexts.iter().enumerate() {
        // Catches a device without a stream of its own (all queues in one context).
        assert!(
            streams.iter().any(|(_, c)| *c == Some(context)),
            "device {d}: no stream created in its context {context:#x}: {streams:?}"
        );
        // Catches a launch queued on a stream of another device's context.
        let launch = run.launch_in(context);
        let stream = launch.stream.expect("the launch's stream");
        assert_eq!(
            stream_context.get(&stream).copied().flatten(),
            Some(context),
            "device {d}: launched on stream {stream:#x} of another context"
        );
    }
    // The allocations: no error event (check_clean) with each device's memory at
    // DEVICE_MEMORY, which holds one copy block but not two. Device 0 holds the copies'
    // source and device k each destination: a destination allocated while another
    // device's context was current (a pool or allocation not per device) takes that
    // device past its memory, a CUDA_ERROR_OUT_OF_MEMORY there, and the program fails.
    // `the_memory_limit_binds_per_device` shows the limit is enforced.
    // cuMemAllocAsync where a device has memory pools (the stand-in's have), else
    // cuMemAlloc_v2.
    assert!(run.log.calls_to(&["cuMemAllocAsync", "cuMemAlloc_v2"]) >= run.devices as u64);
}

/// 4: `omp_target_memcpy` from device 0 to device k went peer to peer, and its bytes
/// arrived (the program read them back and compared).
fn device_to_device_copies_go_peer_to_peer(run: &Run) {
    let others = run.devices as u64 - 1;
    for k in 1..run.devices {
        // Catches a copy that failed or brought the wrong bytes to device k.
        let line =
            format!("every_device: peer copy 0 -> {k}: {PEER_BYTES} bytes (rc 0 0 0, 0 wrong): ok");
        assert!(run.stdout.contains(&line), "{line}\n{}", run.shown());
    }
    let peer = [
        run.log.call("cuMemcpyPeer"),
        run.log.call("cuMemcpyPeerAsync"),
    ];
    let (count, bytes) = (
        peer.iter().map(|c| c.count).sum::<u64>(),
        peer.iter().map(|c| c.bytes).sum::<u64>(),
    );
    // Catches libomptarget copying through the host instead (the plugin refusing
    // __tgt_rtl_is_data_exchangable, or its data_exchange failing): no peer calls then.
    assert_eq!(
        (count, bytes),
        (others, others * PEER_BYTES),
        "cuMemcpyPeer[Async] calls and bytes: {:?}",
        run.log.calls()
    );
    // Catches a device-to-device copy between two devices done as a copy within one
    // (cuMemcpyDtoD: the plugin took both sides for the same device).
    assert_eq!(
        run.log.calls_to(&["cuMemcpyDtoD"]),
        0,
        "{:?}",
        run.log.calls()
    );
    // Device to host: the read-backs once each and a few bytes of the regions; a peer
    // copy staged through the host would add another PEER_BYTES per device.
    let to_host = run.log.bytes_to(&["cuMemcpyDtoH"]);
    assert!(
        (others * PEER_BYTES..others * PEER_BYTES + PEER_BYTES).contains(&to_host),
        "{to_host} bytes copied to the host for {others} read-backs of {PEER_BYTES}"
    );
}

#[test]
fn four_devices_each_run_their_region_in_their_own_context_and_module() {
    every_device_runs_its_region_in_its_own_context_and_module(node(4));
}

#[test]
fn eight_devices_each_run_their_region_in_their_own_context_and_module() {
    every_device_runs_its_region_in_its_own_context_and_module(node(8));
}

#[test]
fn four_devices_each_get_a_table_of_their_own_functions() {
    each_device_table_holds_its_own_functions(node(4));
}

#[test]
fn eight_devices_each_get_a_table_of_their_own_functions() {
    each_device_table_holds_its_own_functions(node(8));
}

#[test]
fn four_devices_each_have_their_own_streams_and_memory() {
    streams_and_allocations_are_per_device(node(4));
}

#[test]
fn eight_devices_each_have_their_own_streams_and_memory() {
    streams_and_allocations_are_per_device(node(8));
}

#[test]
fn four_devices_copy_device_to_device_peer_to_peer() {
    device_to_device_copies_go_peer_to_peer(node(4));
}

#[test]
fn eight_devices_copy_device_to_device_peer_to_peer() {
    device_to_device_copies_go_peer_to_peer(node(8));
}

/// Every device asks the same of the driver: twice the devices make exactly twice the
/// allocations, streams and module loads. Catches a pool shared by the devices (a block
/// freed by one device handed to the next saves that device its allocations), or
/// streams or modules shared.
#[test]
fn twice_the_devices_make_twice_the_allocations_streams_and_modules() {
    let (four, eight) = (node(4), node(8));
    for call in ["cuMemAlloc", "cuStreamCreate", "cuModuleLoad"] {
        let (at_four, at_eight) = (four.log.calls_to(&[call]), eight.log.calls_to(&[call]));
        assert!(
            at_four > 0 && at_eight == 2 * at_four,
            "{call}*: {at_four} calls with 4 devices, {at_eight} with 8"
        );
    }
}

/// The control of the per-device memory check above: with each device's memory below
/// one copy block, device 0 cannot hold the copies' source, and the program fails. (A
/// stand-in that ignored the memory setting would let it pass, and make the check
/// above prove nothing.)
#[test]
fn the_memory_limit_binds_per_device() {
    let run = Run::start(4, PEER_BYTES);
    assert!(!run.output.status.success(), "{}", run.shown());
    assert!(
        run.stdout
            .contains("every_device: FAIL: allocation on the host or device 0"),
        "{}",
        run.shown()
    );
    let refused: Vec<_> = run
        .log
        .errors_of_calls("cuMemAlloc")
        .into_iter()
        .map(|(_, e, d)| (e, d))
        .collect();
    assert!(
        refused
            .iter()
            .any(|(e, d)| *e == "CUDA_ERROR_OUT_OF_MEMORY" && d.contains("device 0 ")),
        "{refused:?}\n{}",
        run.shown()
    );
}

// The checks above catch what they say: each is run on the 4-device report doctored the
// way the fault it names would change it.

impl Run {
    /// This run with its report changed by `change`.
    fn doctored(&self, change: impl FnOnce(&mut Log)) -> Run {
        let mut log = self.log.clone();
        change(&mut log);
        Run {
            devices: self.devices,
            pid: self.pid,
            output: self.output.clone(),
            stdout: self.stdout.clone(),
            log,
            marker: self.marker.clone(),
        }
    }
}

/// The launch events of a report, in order.
fn launches_mut(log: &mut Log) -> Vec<&mut Launch> {
    log.events
        .iter_mut()
        .filter_map(|e| match e {
            cuda_standin::Event::Launch(l) => Some(&mut **l),
            _ => None,
        })
        .collect()
}

/// The last `calls` event's tally.
fn calls_mut(log: &mut Log) -> &mut BTreeMap<String, cuda_standin::CallCount> {
    log.events
        .iter_mut()
        .rev()
        .find_map(|e| match e {
            cuda_standin::Event::Calls { calls } => Some(calls),
            _ => None,
        })
        .expect("a calls event")
}

#[test]
#[should_panic(expected = "launches in context")]
fn every_region_on_device_0_is_caught() {
    let run = node(4).doctored(|log| {
        let context = log.primary_context(0).unwrap();
        for launch in launches_mut(log) {
            launch.context = Some(context);
        }
    });
    every_device_runs_its_region_in_its_own_context_and_module(&run);
}

#[test]
#[should_panic(expected = "maps to")]
fn device_0_table_installed_on_device_1_is_caught() {
    let run = node(4).doctored(|log| {
        let mut launches = launches_mut(log);
        let rows = launches[0].table.as_ref().unwrap().rows.clone();
        let table = launches[1].table.as_mut().unwrap();
        table.rows = rows;
        // What the stand-in reports for an address outside the launched module.
        for row in &mut table.rows {
            row.tgt_name = "unknown".into();
        }
    });
    each_device_table_holds_its_own_functions(&run);
}

#[test]
#[should_panic(expected = "launched on stream")]
fn a_launch_on_another_device_stream_is_caught() {
    let run = node(4).doctored(|log| {
        let mut launches = launches_mut(log);
        let first = launches[0].stream;
        launches[1].stream = first;
    });
    streams_and_allocations_are_per_device(&run);
}

#[test]
#[should_panic(expected = "cuMemcpyPeer[Async] calls and bytes")]
fn a_device_to_device_copy_through_the_host_is_caught() {
    let run = node(4).doctored(|log| {
        let calls = calls_mut(log);
        let peer = calls.remove("cuMemcpyPeerAsync").unwrap();
        let to_host = calls.get_mut("cuMemcpyDtoHAsync_v2").unwrap();
        to_host.count += peer.count;
        to_host.bytes += peer.bytes;
    });
    device_to_device_copies_go_peer_to_peer(&run);
}
