//! The CUDA driver stand-in (cuda-standin/: a `libcuda.so` that loads real cubins on a
//! machine without a GPU and reports every driver call) as the tests use it: where the
//! built library is, running a program with it, loading it into the test process, and
//! its report read back into typed events.
//!
//! `cargo xtask build-plugin` installs it as target/cuda-standin/libcuda.so. A program
//! gets it first on `LD_LIBRARY_PATH`; a test process dlopens it by its full path
//! ([`preload`]) before any `CudaBackend::new()`: its soname is `libcuda.so`, so
//! cudarc's later `dlopen("libcuda.so")` returns it.

use crate::paths::{require_file, target_dir};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The report file the stand-in appends to.
pub const LOG_ENV: &str = "OMPTARGET_RS_CUDA_STANDIN_LOG";
/// `skip`: launches succeed without running (default: CUDA_ERROR_NOT_SUPPORTED).
pub const LAUNCH_ENV: &str = "OMPTARGET_RS_CUDA_STANDIN_LAUNCH";
/// The CUresult name of the stand-in's refusal to run a kernel.
pub const CANNOT_RUN: &str = "CUDA_ERROR_NOT_SUPPORTED";

/// target/cuda-standin/, which holds the built stand-in as `libcuda.so`.
pub fn dir() -> PathBuf {
    let lib = require_file(
        target_dir().join("cuda-standin/libcuda.so"),
        "`cargo xtask build-plugin` (or `cargo xtask test`)",
    );
    lib.parent().expect("a folder").to_path_buf()
}

/// `program` set up to run with the stand-in as its CUDA driver: `LD_LIBRARY_PATH` is
/// the stand-in's folder, then `plugin_dir` (where libomptarget finds the plugins);
/// the report goes to `log`, emptied first.
pub fn command(program: &Path, plugin_dir: &Path, log: &Path) -> Command {
    let _ = std::fs::remove_file(log);
    let mut cmd = Command::new(program);
    cmd.env(
        "LD_LIBRARY_PATH",
        format!("{}:{}", dir().display(), plugin_dir.display()),
    )
    .env(LOG_ENV, log)
    .env_remove(LAUNCH_ENV);
    cmd
}

/// Load the stand-in into this process (once; it stays loaded), reporting to `log`.
/// Call it before anything opens the CUDA driver. Later calls keep the first report
/// file (the stand-in reads its environment once).
pub fn preload(log: &Path) -> &'static libloading::Library {
    static LIB: OnceLock<libloading::Library> = OnceLock::new();
    LIB.get_or_init(|| {
        let _ = std::fs::remove_file(log);
        // The stand-in reads it at its first report; nothing else in this process
        // reads it.
        std::env::set_var(LOG_ENV, log);
        let path = dir().join("libcuda.so");
        // SAFETY: the stand-in's initialisers only set up Rust statics.
        unsafe { libloading::Library::new(&path) }
            .unwrap_or_else(|e| panic!("dlopen {}: {e}", path.display()))
    })
}

/// One line of the report.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Init {
        exe: Option<String>,
        load_base: Option<u64>,
        devices: usize,
        sm: u32,
    },
    Error {
        call: String,
        error: String,
        detail: String,
    },
    ModuleLoad {
        module: u64,
        /// The context it was loaded in (absent from older stand-ins' reports).
        #[serde(default)]
        context: Option<u64>,
        sm: u32,
        bytes: usize,
        symbols: usize,
    },
    ModuleUnload {
        module: u64,
    },
    Global {
        module: u64,
        name: String,
        address: u64,
        size: u64,
    },
    SetLimit {
        name: String,
        value: u64,
    },
    SetAttribute {
        function: String,
        attribute: u32,
        value: i64,
    },
    StreamCreate {
        stream: u64,
        /// The context it was created in (the current one).
        #[serde(default)]
        context: Option<u64>,
    },
    /// cuDevicePrimaryCtxRetain handed out `context`, the primary context of `device`.
    ContextRetain {
        device: i32,
        context: u64,
    },
    Launch(Box<Launch>),
    /// At the process's end: every driver function called, with its count (and, for
    /// copies, the bytes).
    Calls {
        calls: std::collections::BTreeMap<String, CallCount>,
    },
}

/// One driver function's line in the `calls` event.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct CallCount {
    pub count: u64,
    #[serde(default)]
    pub bytes: u64,
}

/// A `launch` event.
#[derive(Clone, Debug, Deserialize)]
pub struct Launch {
    pub kernel: String,
    pub module: u64,
    /// The context current at the launch, and the stream it was queued on (0: the
    /// default stream); absent from older stand-ins' reports.
    #[serde(default)]
    pub context: Option<u64>,
    #[serde(default)]
    pub stream: Option<u64>,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    pub stack_size: u64,
    pub heap_size: u64,
    pub device_environment: Option<DeviceEnvironment>,
    pub table: Option<Table>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct DeviceEnvironment {
    pub name: String,
    /// Hex.
    pub bytes: String,
}

/// The indirect-function table as the device would read it at a launch.
#[derive(Clone, Debug, Deserialize)]
pub struct Table {
    pub map_p: Option<u64>,
    pub map_size: Option<u64>,
    #[serde(default)]
    pub truncated: bool,
    #[serde(default)]
    pub rows: Vec<Row>,
    /// Why the device could not read it.
    pub error: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Row {
    pub host: u64,
    pub tgt: u64,
    /// `symbol+offset` in the module, or `unknown`.
    pub tgt_name: String,
}

impl Row {
    /// (symbol, offset) of the device address, None for `unknown`.
    pub fn tgt_symbol(&self) -> Option<(&str, u64)> {
        let (name, offset) = self.tgt_name.rsplit_once('+')?;
        Some((name, offset.parse().ok()?))
    }
}

/// The report of one process (the lines of other processes are left out).
#[derive(Clone, Debug, Default)]
pub struct Log {
    pub events: Vec<Event>,
}

impl Log {
    /// Read `path`; the lines of process `pid` only, when given. A missing file is an
    /// empty report.
    pub fn read(path: &Path, pid: Option<u32>) -> Log {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let events = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| {
                    panic!("{}: a line that is not JSON ({e}): {l}", path.display())
                })
            })
            .filter(|v| pid.is_none_or(|p| v["pid"].as_u64() == Some(p as u64)))
            .map(|v| {
                serde_json::from_value(v.clone()).unwrap_or_else(|e| {
                    panic!("{}: an event not understood ({e}): {v}", path.display())
                })
            })
            .collect();
        Log { events }
    }

    /// The primary context the driver handed out for `device`, if it was retained.
    pub fn primary_context(&self, device: i32) -> Option<u64> {
        self.events.iter().find_map(|e| match e {
            Event::ContextRetain { device: d, context } if *d == device => Some(*context),
            _ => None,
        })
    }

    /// The last `calls` event (the stand-in writes another, complete, one when calls
    /// come after its first): every driver function the process called, with its count.
    pub fn calls(&self) -> Option<&std::collections::BTreeMap<String, CallCount>> {
        self.events.iter().rev().find_map(|e| match e {
            Event::Calls { calls } => Some(calls),
            _ => None,
        })
    }

    /// One driver function's line of the `calls` event (zero when it was never called).
    pub fn call(&self, name: &str) -> CallCount {
        self.calls()
            .and_then(|calls| calls.get(name).copied())
            .unwrap_or_default()
    }

    /// The bytes copied by the driver functions whose names start with any of
    /// `prefixes` (`cuMemcpyDtoH` counts `cuMemcpyDtoH_v2` and `cuMemcpyDtoHAsync_v2`).
    pub fn bytes_to(&self, prefixes: &[&str]) -> u64 {
        self.calls().map_or(0, |calls| {
            calls
                .iter()
                .filter(|(name, _)| prefixes.iter().any(|p| name.starts_with(p)))
                .map(|(_, c)| c.bytes)
                .sum()
        })
    }

    /// The primary context of every device retained, by device.
    pub fn primary_contexts(&self) -> std::collections::BTreeMap<i32, u64> {
        let mut contexts = std::collections::BTreeMap::new();
        for e in &self.events {
            if let Event::ContextRetain { device, context } = e {
                contexts.entry(*device).or_insert(*context);
            }
        }
        contexts
    }

    /// Every module loaded: (module, the context it was loaded in).
    pub fn modules_loaded(&self) -> Vec<(u64, Option<u64>)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::ModuleLoad {
                    module, context, ..
                } => Some((*module, *context)),
                _ => None,
            })
            .collect()
    }

    /// Every stream created: (stream, the context it was created in).
    pub fn streams_created(&self) -> Vec<(u64, Option<u64>)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::StreamCreate { stream, context } => Some((*stream, *context)),
                _ => None,
            })
            .collect()
    }

    /// How often the process called the driver functions whose names start with any of
    /// `prefixes` (`cuMemAlloc` counts `cuMemAlloc_v2`, `cuMemAllocManaged`...).
    pub fn calls_to(&self, prefixes: &[&str]) -> u64 {
        self.calls().map_or(0, |calls| {
            calls
                .iter()
                .filter(|(name, _)| prefixes.iter().any(|p| name.starts_with(p)))
                .map(|(_, c)| c.count)
                .sum()
        })
    }

    pub fn init(&self) -> Option<(Option<u64>, u32)> {
        self.events.iter().find_map(|e| match e {
            Event::Init { load_base, sm, .. } => Some((*load_base, *sm)),
            _ => None,
        })
    }

    /// Every error event: (call, error, detail).
    pub fn errors(&self) -> Vec<(&str, &str, &str)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Error {
                    call,
                    error,
                    detail,
                } => Some((call.as_str(), error.as_str(), detail.as_str())),
                _ => None,
            })
            .collect()
    }

    /// The error events of one call: (error, detail).
    pub fn errors_of(&self, call: &str) -> Vec<(&str, &str)> {
        self.errors()
            .into_iter()
            .filter(|(c, _, _)| *c == call)
            .map(|(_, e, d)| (e, d))
            .collect()
    }

    /// The error events of the calls whose names start with `prefix` (`cuMemAlloc`:
    /// `cuMemAlloc_v2` and `cuMemAllocAsync`): (call, error, detail).
    pub fn errors_of_calls(&self, prefix: &str) -> Vec<(&str, &str, &str)> {
        self.errors()
            .into_iter()
            .filter(|(call, _, _)| call.starts_with(prefix))
            .collect()
    }

    /// Every error but the stand-in's refusal to run a kernel.
    pub fn errors_but_cannot_run(&self) -> Vec<(&str, &str, &str)> {
        self.errors()
            .into_iter()
            .filter(|(call, error, _)| !(*call == "cuLaunchKernel" && *error == CANNOT_RUN))
            .collect()
    }

    /// The globals asked for with cuModuleGetGlobal_v2 and not found, by name.
    pub fn globals_not_found(&self) -> Vec<String> {
        self.errors_of("cuModuleGetGlobal_v2")
            .into_iter()
            .filter(|(error, _)| *error == "CUDA_ERROR_NOT_FOUND")
            .filter_map(|(_, detail)| {
                let name = detail.strip_prefix("name ")?;
                Some(name.split_once(": ").map_or(name, |(n, _)| n).to_owned())
            })
            .collect()
    }

    /// The globals found, by name.
    pub fn globals_found(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Global { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect()
    }

    pub fn module_loads(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, Event::ModuleLoad { .. }))
            .count()
    }

    pub fn launches(&self) -> Vec<&Launch> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Launch(l) => Some(&**l),
                _ => None,
            })
            .collect()
    }

    /// The limits set, in order: (name, value).
    pub fn limits_set(&self) -> Vec<(&str, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::SetLimit { name, value } => Some((name.as_str(), *value)),
                _ => None,
            })
            .collect()
    }
}
