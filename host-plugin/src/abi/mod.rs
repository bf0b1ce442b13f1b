//! The C boundary: the `__tgt_rtl_*` entry points of libomptarget 16, 17 and 18 over one
//! process-wide [`Plugin`]. 17 speaks 16's ABI; where 18's differs ([`loader`]), the shim
//! asks which libomptarget loaded the plugin.
//!
//! Each shim converts its C arguments, calls the safe core inside [`guard`] (which turns
//! errors and panics into a printed message plus OFFLOAD_FAIL), and converts back.
//!
//! The shims, by family: the plugin's and its devices' lifetime ([`lifetime`]), device
//! images ([`images`]) and libomptarget 18's lookups in them ([`lookup`]), memory and
//! data transfers ([`memory`]), kernel launches ([`launch`]), queues and events
//! ([`queues`]), OpenMP interop ([`interop`]). What they share is here.

mod binary;
mod entries;
mod images;
mod interop;
mod launch;
mod lifetime;
pub mod loader;
mod lookup;
mod memory;
mod published;
mod queues;
pub mod types;

use crate::generic::device::Device;
use crate::generic::error::PluginError;
use crate::generic::plugin::Plugin;
use crate::generic::plugin_kind::PluginKind;
use crate::support::diag;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
pub use types::*;

/// Which plugin this library is, from the name libomptarget loaded it by
/// (`libomptarget.rtl.<kind>.so`): one build serves every kind, each copy is its own.
fn own_kind() -> PluginKind {
    let file = crate::support::own_file::path();
    let base = file
        .as_deref()
        .and_then(|f| f.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    PluginKind::all()
        .into_iter()
        .find(|k| base.starts_with(&format!("libomptarget.rtl.{}.", k.name())))
        .unwrap_or(PluginKind::X86_64)
}

fn plugin() -> &'static Plugin {
    static PLUGIN: OnceLock<Plugin> = OnceLock::new();
    PLUGIN.get_or_init(|| {
        let kind = own_kind();
        diag::set_plugin_name(kind.name());
        let p = Plugin::new(kind);
        diag::debug(|| format!("plugin {} with {} devices", kind.name(), p.device_count()));
        p
    })
}

/// `call` on device `device` of the plugin (NoSuchDevice if there is none).
fn on_device<T>(
    device: i32,
    call: impl FnOnce(&Device) -> Result<T, PluginError>,
) -> Result<T, PluginError> {
    plugin().device(device).and_then(call)
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Run a shim body: an error or a panic is reported and becomes `fail`.
fn guard<R>(what: &'static str, fail: R, body: impl FnOnce() -> Result<R, PluginError>) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            diag::error(&format!("{what}: {e}"));
            fail
        }
        Err(p) => {
            diag::error(&format!(
                "{what}: {}",
                PluginError::Panic(what, panic_message(p))
            ));
            fail
        }
    }
}

fn status(r: Result<(), PluginError>) -> Result<i32, PluginError> {
    r.map(|()| OFFLOAD_SUCCESS)
}

fn invalid(device: i32, what: impl Into<String>) -> PluginError {
    PluginError::Invalid {
        device,
        what: what.into(),
    }
}
