//! Diagnostics: `OMPTARGET_RS_DEBUG=1` debug lines, `LIBOMPTARGET_INFO` info lines,
//! error reports, and the `OMPTARGET_RS_LOAD_MARKER` file that proves which plugin ran.

use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Once, OnceLock};

/// `OMP_INFOTYPE_DUMP_TABLE`: libomptarget's bit for dumping mapping tables.
pub const INFO_DUMP_TABLE: u32 = 0x4;
/// `OMP_INFOTYPE_PLUGIN_KERNEL`: libomptarget's bit for plugin-level information.
pub const INFO_PLUGIN: u32 = 0x10;

static PLUGIN_NAME: OnceLock<&'static str> = OnceLock::new();
static INFO_BITS: OnceLock<AtomicU32> = OnceLock::new();

/// The name this process knows the plugin by (`x86_64`, `cuda`, `amdgpu`).
pub fn set_plugin_name(name: &'static str) {
    let _ = PLUGIN_NAME.set(name);
}

pub fn plugin_name() -> &'static str {
    PLUGIN_NAME.get().copied().unwrap_or("x86_64")
}

pub fn debug_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("OMPTARGET_RS_DEBUG").is_ok_and(|v| !v.is_empty() && v != "0"))
}

fn info_bits() -> &'static AtomicU32 {
    INFO_BITS.get_or_init(|| {
        // libomptarget reads LIBOMPTARGET_INFO as a decimal integer (-1 = everything).
        let bits = std::env::var("LIBOMPTARGET_INFO")
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .map_or(0, |v| v as u32);
        AtomicU32::new(bits)
    })
}

/// `__tgt_rtl_set_info_flag`: libomptarget tells us its current info bits.
pub fn set_info_flags(bits: u32) {
    info_bits().store(bits, Ordering::Relaxed);
}

pub fn info_enabled(bits: u32) -> bool {
    info_bits().load(Ordering::Relaxed) & bits != 0
}

/// Write whole lines in one call so concurrent threads do not interleave them.
fn emit(kind: &str, msg: &str) {
    let mut text = String::new();
    for line in msg.lines() {
        text.push_str(&format!(
            "omptarget-rs ({}) {kind}: {line}\n",
            plugin_name()
        ));
    }
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

pub fn debug(msg: impl FnOnce() -> String) {
    if debug_enabled() {
        emit("debug", &msg());
    }
}

pub fn info(bits: u32, msg: impl FnOnce() -> String) {
    if info_enabled(bits) || debug_enabled() {
        emit("info", &msg());
    }
}

/// Errors are always reported: they come with an OFFLOAD_FAIL libomptarget explains badly.
pub fn error(msg: &str) {
    emit("error", msg);
}

/// The file [`write_load_marker`] appends to.
pub const LOAD_MARKER_ENV: &str = "OMPTARGET_RS_LOAD_MARKER";

/// Append `<plugin-name> <pid>` to `$OMPTARGET_RS_LOAD_MARKER`, once per process. Never
/// fails: a marker that cannot be written is only mentioned in the debug log.
pub fn write_load_marker() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Some(path) = std::env::var_os(LOAD_MARKER_ENV) else {
            return;
        };
        let line = format!("{} {}\n", plugin_name(), std::process::id());
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            debug(|| format!("could not write the load marker {path:?}: {e}"));
        }
    });
}
