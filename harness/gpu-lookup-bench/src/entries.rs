//! The plugin's offload entries and device words as the driver builds them: copies of
//! `entry` and `words` in tests/src/plugin.rs (e2e_tests::plugin), which the driver used
//! when it lived in the e2e-tests crate. Keep the two in step.

use host_plugin::HostOffloadEntry;
use std::ffi::CString;

/// An offload entry without a host vtable.
pub fn entry(name: &str, host: u64, size: u64, flags: i32) -> HostOffloadEntry<'static> {
    HostOffloadEntry {
        host_addr: host,
        name: CString::new(name)
            .expect("an entry name without NUL")
            .into(),
        size,
        flags,
        host_vtable: None,
    }
}

/// 64-bit words as the bytes the device reads (native byte order).
pub fn words(w: &[u64]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_ne_bytes()).collect()
}
