//! `Plugin::load_binary` on the real host backend (the image is written out, dlopened,
//! its symbols resolved, its globals read, the table uploaded and the globals patched),
//! with fuzzer-chosen offload entries against a real clang-16 device image.
//!
//! The image itself is not mutated here: dlopen runs the image's constructors and
//! relocations, and a mutated image that is still a well-formed shared object can run
//! anything (see docs/RELIABILITY.md, "Fuzzing"). Mutated images go through
//! `image_inspect` (validation only) instead.
//!
//! The image is `OMPTARGET_RS_FUZZ_IMAGE`, set by `cargo xtask fuzz` (which builds it
//! from tests/fixtures/plugin/device_image.c with clang-16 and device-rtl).
#![no_main]
use host_plugin::generic::host_entry::{
    EntryKind, HostEntry, HostOffloadEntry, FLAG_CTOR, FLAG_INDIRECT, FLAG_INDIRECT_VTABLE,
};
use host_plugin::{FptrMapEntry, Plugin, PluginKind};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use std::ffi::CString;
use std::sync::OnceLock;

/// Symbols of device_image.c (functions, globals of every size, the device runtime's
/// table globals and lookup), and names the image does not have.
const NAMES: &[&str] = &[
    "kernel_call",
    "kernel_bump",
    "add_one",
    "twice",
    "negate",
    "ptr_to_negate",
    "not_a_pointer",
    "device_vtable",
    "vtable_ptr",
    "counter",
    "__omp_offloading_fptr_map_p",
    "__omp_offloading_fptr_map_size",
    "__kmpc_target_translate_fptr",
    "no_such_symbol",
    "",
];

/// The one vtable entry the caller contract allows against this image: libomptarget
/// passes compiler-made entries, and for an indirect vtable entry the compiler promises
/// the named device global points at a device vtable of the host vtable's size
/// (`device_vtable`, 3 slots). The plugin reads that many bytes there; other
/// combinations break the promise and are a finding, not a fuzz input (see the note).
const VTABLE_GLOBAL: &str = "vtable_ptr";
const VTABLE_BYTES: u64 = 24;

struct Fixture {
    plugin: Plugin,
    image: Vec<u8>,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let path = std::env::var_os("OMPTARGET_RS_FUZZ_IMAGE").expect(
            "OMPTARGET_RS_FUZZ_IMAGE is not set: run this target through \
             `cargo xtask fuzz --target load_binary`, which builds the clang-16 image",
        );
        let image = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.to_string_lossy()));
        Fixture {
            plugin: Plugin::new(PluginKind::X86_64),
            image,
        }
    })
}

fn entry(u: &mut Unstructured) -> Result<HostOffloadEntry<'static>> {
    let name = if u.ratio(7, 8)? {
        u.choose(NAMES)?.to_string()
    } else {
        let len = u.int_in_range(0..=12)?;
        String::from_utf8_lossy(u.bytes(len)?).replace('\0', "")
    };
    let flags = match u.choose_index(6)? {
        0 | 1 => 0,
        2 => FLAG_INDIRECT,
        3 => FLAG_CTOR,
        4 => FLAG_INDIRECT | FLAG_INDIRECT_VTABLE,
        _ => u.arbitrary::<i32>()? & !FLAG_INDIRECT_VTABLE,
    };
    let mut size = if u.arbitrary()? {
        *u.choose(&[0u64, 4, 8, 16, 24])?
    } else {
        u.arbitrary()?
    };
    let mut name = name;
    let mut host_vtable = None;
    if flags & FLAG_INDIRECT_VTABLE != 0 {
        name = VTABLE_GLOBAL.to_string();
        size = 8 * u.int_in_range(1..=(VTABLE_BYTES / 8))?;
        if u.ratio(15, 16)? {
            let mut v = Vec::new();
            for _ in 0..size / 8 {
                v.extend_from_slice(&u.int_in_range(0..=0x40u64)?.to_ne_bytes());
            }
            host_vtable = Some(v);
        }
    }
    Ok(HostOffloadEntry {
        host_addr: u.int_in_range(0..=0x40u64)? * 8,
        name: CString::new(name).expect("NULs were removed").into(),
        size,
        flags,
        host_vtable,
    })
}

fn check_table(table: &[FptrMapEntry], entries: &[HostOffloadEntry]) {
    assert!(table.windows(2).all(|w| w[0].host_ptr < w[1].host_ptr));
    for e in entries {
        let k = e.kind();
        // The null host address is no function's: its row is left out (fptr.rs).
        if e.host_addr != 0
            && matches!(
                k,
                Some(EntryKind::IndirectFunction | EntryKind::IndirectThroughGlobal)
            )
        {
            assert!(
                table.iter().any(|r| r.host_ptr == e.host_addr),
                "indirect entry {:?} missing from the table",
                e.name
            );
        }
    }
}

/// Set by `cargo xtask fuzz`'s dlopen sweep, which runs this binary once per mutated image
/// in its own process: the input is then an image, loaded for real if validation accepts
/// it. Never set while fuzzing (see the note at the top).
const SWEEP_VAR: &str = "OMPTARGET_RS_FUZZ_DLOPEN_MUTATED";

/// The entries the plugin tests give device_image.c: one of every kind.
fn fixture_entries() -> Vec<HostOffloadEntry<'static>> {
    let e = |name: &str, host_addr: u64, size: u64, flags: i32| HostOffloadEntry {
        host_addr,
        name: CString::new(name).expect("no NUL").into(),
        size,
        flags,
        host_vtable: None,
    };
    let mut vt = e(
        VTABLE_GLOBAL,
        0x9000,
        VTABLE_BYTES,
        FLAG_INDIRECT | FLAG_INDIRECT_VTABLE,
    );
    vt.host_vtable = Some(
        [0u64, 0xa000, 0xa008]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect(),
    );
    vec![
        e("kernel_call", 0x100, 0, 0),
        e("kernel_bump", 0x108, 0, 0),
        e("counter", 0x200, 4, 0),
        e("add_one", 0x5000, 0, FLAG_INDIRECT),
        e("ptr_to_negate", 0x3000, 8, FLAG_INDIRECT),
        vt,
    ]
}

/// One mutated image through validation and, if accepted, `load_binary` (dlopen, symbol
/// resolution, global reads, table upload). Prints one `sweep:` line saying which.
fn sweep_one(plugin: &Plugin, image: &[u8]) {
    if let Err(e) = host_plugin::backend::host::inspect_loadable(image) {
        eprintln!("sweep: rejected: {e}");
        return;
    }
    match plugin
        .device(0)
        .and_then(|on| on.load_binary(0x2000, image, &fixture_entries()))
    {
        Ok(_) => {
            plugin
                .device(0)
                .and_then(|on| on.unload(0x2000))
                .expect("unload");
            eprintln!("sweep: loaded");
        }
        Err(e) => eprintln!("sweep: load failed: {e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let fx = fixture();
    if std::env::var_os(SWEEP_VAR).is_some() {
        sweep_one(&fx.plugin, data);
        return;
    }
    let mut u = Unstructured::new(data);
    let Ok(device) = u.choose(&[0, 1, 3, 0, 0, 4, -1]).copied() else {
        return;
    };
    let mut entries = Vec::new();
    while entries.len() < 12 && !u.is_empty() {
        match entry(&mut u) {
            Ok(e) => entries.push(e),
            Err(_) => break,
        }
    }
    let key = 0x1000;
    let plugin = &fx.plugin;
    match plugin
        .device(device)
        .and_then(|on| on.load_binary(key, &fx.image, &entries))
    {
        Ok(device_entries) => {
            assert!((0..4).contains(&device));
            // One device entry per host entry, in order, same sizes and flags.
            assert_eq!(device_entries.len(), entries.len());
            for (d, e) in device_entries.iter().zip(&entries) {
                assert_eq!((d.size, d.flags), (e.size, e.flags));
                // Every entry resolves to a real address, a size-8 indirect entry's
                // device function included (a null one is refused: finding F1).
                assert_ne!(d.addr, 0, "entry {:?}", e.name);
            }
            // The image links device-rtl: the table is installed, sorted, complete.
            let table = plugin
                .device(device)
                .ok()
                .and_then(|on| on.fptr_table(key))
                .expect("device_image.c has the table globals");
            check_table(&table, &entries);
            // Replacing the image under the same key keeps one image loaded.
            if u.arbitrary().unwrap_or(false) {
                plugin
                    .device(device)
                    .and_then(|on| on.load_binary(key, &fx.image, &entries))
                    .expect("the same load succeeds twice");
                assert_eq!(plugin.device(device).map_or(0, |on| on.loaded_images()), 1);
            }
            plugin
                .device(device)
                .and_then(|on| on.unload(key))
                .expect("unload");
        }
        Err(e) => {
            // Nothing stays loaded after a failed load, and the message is not empty.
            assert!(!e.to_string().is_empty());
        }
    }
    assert_eq!(plugin.device(device).map_or(0, |on| on.loaded_images()), 0);
});
