//! Host offload entries from arbitrary ELF bytes (relocations applied).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(entries) = offload_formats::entries::read_host_entries(data) {
        for e in entries {
            let _ = e.role();
            let _ = offload_formats::entries::flags::names(e.flags);
        }
    }
});
