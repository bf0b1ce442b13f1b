//! The plugin core and host backend through the crate's Rust API, on device images
//! compiled by clang 16 (tests/fixtures/plugin/*.c linked with device-rtl).

mod plugin_support;

use e2e_tests::plugin::{entry, words};
use host_plugin::backend::AllocKind;
use host_plugin::generic::host_entry::{FLAG_INDIRECT, FLAG_INDIRECT_VTABLE};
use host_plugin::generic::table::fptr_index::FptrIndex;
use host_plugin::{
    fptr_head, DeviceEntry, FptrHead, HostOffloadEntry, IndexInfo, Plugin, PluginError, PluginKind,
};
use plugin_support::{host_image, many_functions_image};

// Host "addresses" are only keys for the device: any distinct values do.
const HOST_ADD_ONE: u64 = 0x5000;
const HOST_NEGATE: u64 = 0x3000;
const HOST_VTABLE: u64 = 0x9000;
const HOST_VT_SLOT1: u64 = 0xA000;
const HOST_VT_SLOT2: u64 = 0xA008;

fn full_entries() -> Vec<HostOffloadEntry<'static>> {
    let mut vt = entry(
        "vtable_ptr",
        HOST_VTABLE,
        24,
        FLAG_INDIRECT | FLAG_INDIRECT_VTABLE,
    );
    vt.host_vtable = Some(words(&[0, HOST_VT_SLOT1, HOST_VT_SLOT2]));
    vec![
        entry("kernel_call", 0x100, 0, 0),
        entry("kernel_bump", 0x108, 0, 0),
        entry("counter", 0x200, 4, 0),
        entry("add_one", HOST_ADD_ONE, 0, FLAG_INDIRECT),
        entry("ptr_to_negate", HOST_NEGATE, 8, FLAG_INDIRECT),
        vt,
    ]
}

/// Run `kernel_call` on the device: returns (io[0] after the call, translated pointer).
fn call_through(plugin: &Plugin, kernel: &DeviceEntry, host_fp: u64, arg: i64) -> (i64, u64) {
    let fp_buffer = plugin
        .device(0)
        .and_then(|on| on.alloc(8, AllocKind::Device))
        .unwrap();
    let fp = fp_buffer.addr();
    let io_buffer = plugin
        .device(0)
        .and_then(|on| on.alloc(16, AllocKind::Device))
        .unwrap();
    let io = io_buffer.addr();
    let mut io_bytes = [0u8; 16];
    io_bytes[..8].copy_from_slice(&arg.to_ne_bytes());
    // SAFETY: fp and io are fresh device allocations of 8 and 16 bytes; kernel_call takes
    // two pointers to exactly those.
    unsafe {
        plugin
            .device(0)
            .and_then(|on| on.write(fp, &host_fp.to_ne_bytes()))
            .unwrap();
        plugin
            .device(0)
            .and_then(|on| on.write(io, &io_bytes))
            .unwrap();
        plugin
            .device(0)
            .and_then(|on| on.launch(kernel.addr, &[fp, io]))
            .unwrap();
        plugin
            .device(0)
            .and_then(|on| on.read(io, &mut io_bytes))
            .unwrap();
        fp_buffer.free().unwrap();
        io_buffer.free().unwrap();
    }
    (
        i64::from_ne_bytes(io_bytes[..8].try_into().unwrap()),
        u64::from_ne_bytes(io_bytes[8..].try_into().unwrap()),
    )
}

#[test]
fn every_kind_of_indirect_entry_translates_on_the_device() {
    let image = host_image("device_image", true);
    let plugin = Plugin::new(PluginKind::X86_64);
    plugin.device(0).and_then(|on| on.init_device()).unwrap();
    let key = 0x1111;
    let entries = full_entries();
    let dev = plugin
        .device(0)
        .and_then(|on| on.load_binary(key, &image, &entries))
        .unwrap();

    // One device entry per host entry, in order: libomptarget 16 matches by index.
    assert_eq!(dev.len(), entries.len());
    for (d, h) in dev.iter().zip(&entries) {
        assert_eq!((d.size, d.flags), (h.size, h.flags));
        assert_ne!(d.addr, 0, "{:?} unresolved", h.name);
    }

    // The table: sorted by host address; the vtable's functions (its null slot
    // skipped) and the address of each of its words (where a host vptr points), which
    // maps to the same word of the device vtable (LLVM 22's rule).
    let table = plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_table(key))
        .expect("the image has the table globals");
    let keys: Vec<u64> = table.iter().map(|r| r.host_ptr).collect();
    assert_eq!(
        keys,
        vec![
            HOST_NEGATE,
            HOST_ADD_ONE,
            HOST_VTABLE,
            HOST_VTABLE + 8,
            HOST_VTABLE + 16,
            HOST_VT_SLOT1,
            HOST_VT_SLOT2
        ]
    );
    let device_vtable = dev[5].addr;
    for word in 0..3 {
        assert_eq!(table[2 + word].tgt_ptr, device_vtable + 8 * word as u64);
    }
    // Indirect entries' device addresses are the device functions themselves (what
    // libomptarget 16 maps their host addresses to), for both conventions.
    assert_eq!(table[1].tgt_ptr, dev[3].addr);
    assert_eq!(table[0].tgt_ptr, dev[4].addr);

    // What the device runtime makes of it, from inside a kernel.
    let kernel = &dev[0];
    assert_eq!(
        call_through(&plugin, kernel, HOST_ADD_ONE, 41),
        (42, dev[3].addr)
    );
    assert_eq!(call_through(&plugin, kernel, HOST_NEGATE, 5).0, -5);
    assert_eq!(call_through(&plugin, kernel, HOST_VT_SLOT1, 10).0, 11);
    assert_eq!(call_through(&plugin, kernel, HOST_VT_SLOT2, 10).0, 20);
    // Unregistered pointers and null come back unchanged (and are not called).
    assert_eq!(call_through(&plugin, kernel, 0x4000, 7), (7, 0x4000));
    assert_eq!(call_through(&plugin, kernel, 0, 7), (7, 0));

    // The global entry is the real device global: a kernel's write shows through it.
    let counter = dev[2].addr;
    let mut value = [0u8; 4];
    let by_buffer = plugin
        .device(0)
        .and_then(|on| on.alloc(4, AllocKind::Device))
        .unwrap();
    let by = by_buffer.addr();
    // SAFETY: `counter` is the image's 4-byte global; `by` a fresh 4-byte allocation
    // that kernel_bump reads.
    unsafe {
        plugin
            .device(0)
            .and_then(|on| on.read(counter, &mut value))
            .unwrap();
        assert_eq!(i32::from_ne_bytes(value), 5);
        plugin
            .device(0)
            .and_then(|on| on.write(by, &3i32.to_ne_bytes()))
            .unwrap();
        plugin
            .device(0)
            .and_then(|on| on.launch(dev[1].addr, &[by]))
            .unwrap();
        plugin
            .device(0)
            .and_then(|on| on.read(counter, &mut value))
            .unwrap();
        by_buffer.free().unwrap();
    }
    assert_eq!(i32::from_ne_bytes(value), 8);

    // Unloading closes the image and forgets its kernels.
    plugin.device(0).and_then(|on| on.unload(key)).unwrap();
    assert_eq!(plugin.device(0).map_or(0, |on| on.loaded_images()), 0);
    assert!(plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_table(key))
        .is_none());
    // SAFETY: the launch is refused before anything runs (the kernel is gone).
    let err = unsafe { plugin.device(0).and_then(|on| on.launch(kernel.addr, &[])) }.unwrap_err();
    assert!(err.to_string().contains("not a kernel"), "{err}");
}

#[test]
fn set_function_ptr_map_replaces_the_table() {
    let image = host_image("device_image", true);
    let plugin = Plugin::new(PluginKind::X86_64);
    let entries = vec![
        entry("kernel_call", 0x100, 0, 0),
        entry("add_one", HOST_ADD_ONE, 0, FLAG_INDIRECT),
        entry("twice", 0x5100, 0, FLAG_INDIRECT),
    ];
    let dev = plugin
        .device(1)
        .and_then(|on| on.load_binary(7, &image, &entries))
        .unwrap();
    let (add_one, twice) = (dev[1].addr, dev[2].addr);
    // Rows out of order; the plugin sorts its copy.
    let rows = [
        host_plugin::FptrMapEntry {
            host_ptr: 0x7000,
            tgt_ptr: twice,
        },
        host_plugin::FptrMapEntry {
            host_ptr: 0x6000,
            tgt_ptr: add_one,
        },
    ];
    assert_eq!(
        plugin
            .device(1)
            .and_then(|on| on.set_function_ptr_map(&rows))
            .unwrap(),
        1
    );
    let keys: Vec<u64> = plugin
        .device(1)
        .ok()
        .and_then(|on| on.fptr_table(7))
        .unwrap()
        .iter()
        .map(|r| r.host_ptr)
        .collect();
    assert_eq!(keys, vec![0x6000, 0x7000]);
    // `call_through` runs on device 0; load the same image there too.
    let dev0 = plugin
        .device(0)
        .and_then(|on| on.load_binary(7, &image, &entries))
        .unwrap();
    let rows0 = [host_plugin::FptrMapEntry {
        host_ptr: 0x6000,
        tgt_ptr: dev0[2].addr,
    }];
    plugin
        .device(0)
        .and_then(|on| on.set_function_ptr_map(&rows0))
        .unwrap();
    assert_eq!(call_through(&plugin, &dev0[0], 0x6000, 4).0, 8);
    // The entries' own table was replaced: HOST_ADD_ONE is no longer known.
    assert_eq!(
        call_through(&plugin, &dev0[0], HOST_ADD_ONE, 4),
        (4, HOST_ADD_ONE)
    );

    let conflict = [
        rows[0],
        host_plugin::FptrMapEntry {
            host_ptr: 0x7000,
            tgt_ptr: add_one,
        },
    ];
    let err = plugin
        .device(1)
        .and_then(|on| on.set_function_ptr_map(&conflict))
        .unwrap_err();
    assert!(err.to_string().contains("0x7000"), "{err}");
    plugin.unload_all().unwrap();
}

/// The 32 bytes of an image's index global, read back from the device.
fn index_global_on_device(plugin: &Plugin, device: i32, info: IndexInfo) -> FptrIndex {
    let mut bytes = [0u8; 32];
    // SAFETY: `info.global` is the image's 32-byte index global.
    unsafe {
        plugin
            .device(device)
            .and_then(|on| on.read(info.global, &mut bytes))
    }
    .unwrap();
    bytemuck::pod_read_unaligned(&bytes)
}

/// Write an index header into the image's global, as the plugin would.
fn write_index_global(plugin: &Plugin, info: IndexInfo, header: FptrIndex) {
    // SAFETY: `info.global` is the image's 32-byte index global on device 0.
    unsafe {
        plugin
            .device(0)
            .and_then(|on| on.write(info.global, bytemuck::bytes_of(&header)))
    }
    .unwrap();
}

/// The plugin writes the index beside the table, the device answers from it (an emptied
/// index finds nothing though the table is there), and without it (the empty header, as
/// a plugin that knows no index leaves it) the search gives the same answers.
#[test]
fn the_index_is_installed_used_and_optional() {
    let image = host_image("device_image", true);
    let plugin = Plugin::new(PluginKind::X86_64);
    let key = 0x2222;
    let dev = plugin
        .device(0)
        .and_then(|on| on.load_binary(key, &image, &full_entries()))
        .unwrap();
    let kernel = &dev[0];
    let info = plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_index(key))
        .expect("device-rtl has the index global");
    // What the plugin says it wrote is what the device's global holds.
    let header = index_global_on_device(&plugin, 0, info);
    assert_eq!(header, info.header);
    // 7 rows (2 functions, 3 vtable words, 2 vtable slots) at 80 % load: 5 buckets of
    // 2 pairs, 32-byte aligned.
    assert_eq!(header.bucket_count, 5);
    assert_eq!(header.buckets % 32, 0);
    assert!(header.seeds.iter().all(|s| s % 2 == 1));

    let expected = [
        (HOST_ADD_ONE, 41, 42),
        (HOST_NEGATE, 5, -5),
        (HOST_VT_SLOT1, 10, 11),
        (HOST_VT_SLOT2, 10, 20),
        (0x4000, 7, 7),
        (0, 7, 7),
    ];
    let check_all = |what: &str| {
        for (host_fp, arg, result) in expected {
            assert_eq!(
                call_through(&plugin, kernel, host_fp, arg).0,
                result,
                "{what}: pointer {host_fp:#x}"
            );
        }
    };
    check_all("with the index");

    // Without the index, the sorted table's search answers alike.
    write_index_global(&plugin, info, FptrIndex::NONE);
    check_all("without the index");

    // The index is what answered: with every bucket emptied (all-zero slots, 0 being no
    // key of this table) and the header back, the device finds nothing.
    let bytes = header.bucket_count as usize * 32;
    // SAFETY: the plugin's bucket allocation of this image holds `bytes` bytes there.
    unsafe {
        plugin
            .device(0)
            .and_then(|on| on.write(header.buckets, &vec![0u8; bytes]))
    }
    .unwrap();
    write_index_global(&plugin, info, header);
    assert_eq!(
        call_through(&plugin, kernel, HOST_ADD_ONE, 41),
        (41, HOST_ADD_ONE)
    );
    plugin.unload_all().unwrap();
}

/// The image's head global as the device holds it.
fn head_on_device(plugin: &Plugin, key: usize) -> (u64, FptrHead) {
    let (global, written) = plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_head(key))
        .expect("device-rtl has the head global");
    let mut bytes = [0u8; fptr_head::HEAD_BYTES];
    // SAFETY: `global` is the image's 96-byte head global on device 0.
    unsafe { plugin.device(0).and_then(|on| on.read(global, &mut bytes)) }.unwrap();
    let on_device: FptrHead = bytemuck::pod_read_unaligned(&bytes);
    assert_eq!(on_device, written, "what the plugin says it wrote");
    (global, on_device)
}

fn write_head(plugin: &Plugin, global: u64, head: &FptrHead) {
    // SAFETY: `global` is the image's 96-byte head global on device 0.
    unsafe {
        plugin
            .device(0)
            .and_then(|on| on.write(global, bytemuck::bytes_of(head)))
    }
    .unwrap();
}

/// The head answers first: a table of up to four rows from the head alone (no index, no
/// table needed), a larger table's key range for the keys outside it.
#[test]
fn the_head_holds_a_small_table_or_a_larger_ones_range() {
    let image = host_image("device_image", true);
    let plugin = Plugin::new(PluginKind::X86_64);

    // Seven rows: the head has their key range.
    let dev = plugin
        .device(0)
        .and_then(|on| on.load_binary(1, &image, &full_entries()))
        .unwrap();
    let (global, head) = head_on_device(&plugin, 1);
    let table = plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_table(1))
        .unwrap();
    assert_eq!(head, FptrHead::of(&table));
    assert_eq!(
        (head.rows_here, head.first_key, head.last_key()),
        (0, HOST_NEGATE, HOST_VT_SLOT2)
    );
    assert_eq!(call_through(&plugin, &dev[0], HOST_ADD_ONE, 41).0, 42);
    // It is what answers first: a range that leaves add_one out answers it unchanged,
    // though the index and the table hold it.
    let narrower = FptrHead {
        first_key: HOST_ADD_ONE + 1,
        span_complement: !(HOST_VT_SLOT2 - HOST_ADD_ONE - 1),
        ..head
    };
    write_head(&plugin, global, &narrower);
    assert_eq!(
        call_through(&plugin, &dev[0], HOST_ADD_ONE, 41),
        (41, HOST_ADD_ONE)
    );
    plugin.unload_all().unwrap();

    // Two rows: the head holds them, and answers with the index and table gone.
    let entries = [
        entry("kernel_call", 0x100, 0, 0),
        entry("add_one", HOST_ADD_ONE, 0, FLAG_INDIRECT),
        entry("ptr_to_negate", HOST_NEGATE, 8, FLAG_INDIRECT),
    ];
    let dev = plugin
        .device(0)
        .and_then(|on| on.load_binary(2, &image, &entries))
        .unwrap();
    let (_, head) = head_on_device(&plugin, 2);
    assert_eq!(head.rows_here, 2);
    assert_eq!(head.rows[0].host_ptr, HOST_NEGATE);
    assert_eq!(head.rows[1].host_ptr, HOST_ADD_ONE);
    let info = plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_index(2))
        .unwrap();
    write_index_global(&plugin, info, FptrIndex::NONE);
    let map_p = plugin
        .device(0)
        .and_then(|on| on.image_global(2, c"__omp_offloading_fptr_map_p"))
        .unwrap();
    // SAFETY: the image's 8-byte table pointer global: null says "no table".
    unsafe {
        plugin
            .device(0)
            .and_then(|on| on.write(map_p, &0u64.to_ne_bytes()))
    }
    .unwrap();
    assert_eq!(call_through(&plugin, &dev[0], HOST_ADD_ONE, 41).0, 42);
    assert_eq!(call_through(&plugin, &dev[0], HOST_NEGATE, 5).0, -5);
    assert_eq!(call_through(&plugin, &dev[0], 0x4000, 7), (7, 0x4000));

    // A table handed over whole gets its head too: 1000 rows, a range.
    let rows: Vec<host_plugin::FptrMapEntry> = (0..1000u64)
        .map(|i| host_plugin::FptrMapEntry {
            host_ptr: 0x10_0000 + 16 * i,
            tgt_ptr: dev[2].addr,
        })
        .collect();
    plugin
        .device(0)
        .and_then(|on| on.set_function_ptr_map(&rows))
        .unwrap();
    let (_, head) = head_on_device(&plugin, 2);
    assert_eq!(
        (head.rows_here, head.first_key, head.last_key()),
        (0, 0x10_0000, 0x10_0000 + 16 * 999)
    );
    plugin.unload_all().unwrap();
}

/// `__tgt_rtl_set_function_ptr_map` rebuilds the index with the table it installs.
#[test]
fn set_function_ptr_map_rebuilds_the_index() {
    let image = host_image("device_image", true);
    let plugin = Plugin::new(PluginKind::X86_64);
    let entries = vec![
        entry("kernel_call", 0x100, 0, 0),
        entry("add_one", HOST_ADD_ONE, 0, FLAG_INDIRECT),
        entry("twice", 0x5100, 0, FLAG_INDIRECT),
    ];
    let dev = plugin
        .device(0)
        .and_then(|on| on.load_binary(9, &image, &entries))
        .unwrap();
    let before = plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_index(9))
        .unwrap()
        .header;
    // 1000 rows, all to `twice`.
    let rows: Vec<host_plugin::FptrMapEntry> = (0..1000u64)
        .map(|i| host_plugin::FptrMapEntry {
            host_ptr: 0x10_0000 + 16 * i,
            tgt_ptr: dev[2].addr,
        })
        .collect();
    plugin
        .device(0)
        .and_then(|on| on.set_function_ptr_map(&rows))
        .unwrap();
    let info = plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_index(9))
        .unwrap();
    let after = index_global_on_device(&plugin, 0, info);
    assert_eq!(after, info.header);
    assert_ne!(after.buckets, before.buckets);
    assert_eq!(after.bucket_count, 625);
    for i in [0u64, 1, 500, 999] {
        assert_eq!(call_through(&plugin, &dev[0], 0x10_0000 + 16 * i, 4).0, 8);
    }
    assert_eq!(
        call_through(&plugin, &dev[0], HOST_ADD_ONE, 4),
        (4, HOST_ADD_ONE)
    );
    // An empty table: no index, the empty header.
    plugin
        .device(0)
        .and_then(|on| on.set_function_ptr_map(&[]))
        .unwrap();
    let info = plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_index(9))
        .unwrap();
    assert_eq!(info.header, FptrIndex::NONE);
    assert_eq!(index_global_on_device(&plugin, 0, info), FptrIndex::NONE);
    plugin.unload_all().unwrap();
}

/// An image whose device runtime predates the index (no `__omptarget_rs_fptr_index`) gets
/// the table and no index, and its lookups work.
#[test]
fn image_with_a_runtime_from_before_the_index_still_works() {
    let image = host_image("old_runtime_image", false);
    let plugin = Plugin::new(PluginKind::X86_64);
    let entries = [
        entry("kernel_call", 0x100, 0, 0),
        entry("add_one", HOST_ADD_ONE, 0, FLAG_INDIRECT),
    ];
    let dev = plugin
        .device(0)
        .and_then(|on| on.load_binary(5, &image, &entries))
        .unwrap();
    assert_eq!(
        plugin
            .device(0)
            .ok()
            .and_then(|on| on.fptr_table(5))
            .unwrap()
            .len(),
        1
    );
    assert!(plugin
        .device(0)
        .ok()
        .and_then(|on| on.fptr_index(5))
        .is_none());
    assert_eq!(call_through(&plugin, &dev[0], HOST_ADD_ONE, 1).0, 2);
    assert_eq!(call_through(&plugin, &dev[0], 0x4000, 1), (1, 0x4000));
    plugin.unload_all().unwrap();
}

/// Load must fail with an error naming `needles`, and leave nothing loaded.
fn assert_load_fails(
    plugin: &Plugin,
    image: &[u8],
    entries: &[HostOffloadEntry],
    needles: &[&str],
) {
    let err = plugin
        .device(0)
        .and_then(|on| on.load_binary(42, image, entries))
        .unwrap_err();
    let msg = err.to_string();
    for n in needles {
        assert!(msg.contains(n), "error {msg:?} does not mention {n:?}");
    }
    assert_eq!(plugin.device(0).map_or(0, |on| on.loaded_images()), 0);
}

#[test]
fn bad_images_and_entries_fail_with_clear_errors() {
    let image = host_image("device_image", true);
    let plugin = Plugin::new(PluginKind::X86_64);

    assert_load_fails(
        &plugin,
        b"definitely not an ELF file",
        &[],
        &["device 0", "ELF"],
    );
    assert_load_fails(
        &plugin,
        &image[..image.len() / 3],
        &[],
        &["device 0", "image"],
    );
    assert!(!plugin.is_valid_binary(b"\x7fELF"));
    assert!(plugin.is_valid_binary(&image));

    let missing = [
        entry("kernel_call", 0x100, 0, 0),
        entry("no_such_kernel", 0x108, 0, 0),
    ];
    assert_load_fails(
        &plugin,
        &image,
        &missing,
        &["no_such_kernel", "not found", "device 0"],
    );

    // A vtable's word is data: a function entry at its address contradicts it.
    let mut vt = entry(
        "vtable_ptr",
        HOST_VTABLE,
        24,
        FLAG_INDIRECT | FLAG_INDIRECT_VTABLE,
    );
    vt.host_vtable = Some(words(&[0, HOST_VT_SLOT1, HOST_VT_SLOT2]));
    let word_and_function = [vt, entry("add_one", HOST_VTABLE + 8, 0, FLAG_INDIRECT)];
    assert_load_fails(
        &plugin,
        &image,
        &word_and_function,
        &[
            "host address 0x9008",
            "by entry `&vtable_ptr[1]` and",
            "by entry `add_one`",
            "contradict each other",
        ],
    );

    let not_pointer = [entry("not_a_pointer", 0x3000, 8, FLAG_INDIRECT)];
    assert_load_fails(&plugin, &image, &not_pointer, &["not_a_pointer", "4 bytes"]);

    let odd_size = [entry("add_one", 0x3000, 12, FLAG_INDIRECT)];
    assert_load_fails(&plugin, &image, &odd_size, &["add_one", "size 12"]);

    let vtable_without_host = [entry(
        "vtable_ptr",
        0x9000,
        24,
        FLAG_INDIRECT | FLAG_INDIRECT_VTABLE,
    )];
    assert_load_fails(&plugin, &image, &vtable_without_host, &["vtable_ptr"]);

    let bad_device = plugin
        .device(9)
        .and_then(|on| on.load_binary(1, &image, &[]))
        .unwrap_err();
    assert!(matches!(
        bad_device,
        PluginError::NoSuchDevice { device: 9, .. }
    ));

    // The same pair twice is one row, not a conflict.
    let dup = [
        entry("add_one", HOST_ADD_ONE, 0, FLAG_INDIRECT),
        entry("add_one", HOST_ADD_ONE, 0, FLAG_INDIRECT),
    ];
    plugin
        .device(0)
        .and_then(|on| on.load_binary(1, &image, &dup))
        .unwrap();
    assert_eq!(
        plugin
            .device(0)
            .ok()
            .and_then(|on| on.fptr_table(1))
            .unwrap()
            .len(),
        1
    );
    plugin.unload_all().unwrap();
    assert_eq!(plugin.device(0).map_or(0, |on| on.loaded_images()), 0);
}

/// One host address, several device functions: what the host's link makes of
/// functions of the same code (`--icf=all`) and of a derived class's destructor (an alias
/// of its base's). The image loads; the address translates to the device function of its
/// first entry in image order.
#[test]
fn a_host_address_of_several_device_functions_translates_to_the_first() {
    let image = host_image("device_image", true);
    let plugin = Plugin::new(PluginKind::X86_64);
    let load = |key, entries: &[HostOffloadEntry]| {
        plugin
            .device(0)
            .and_then(|on| on.load_binary(key, &image, entries))
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let table = |key| {
        plugin
            .device(0)
            .ok()
            .and_then(|on| on.fptr_table(key))
            .unwrap()
    };

    // Two indirect functions folded into one host address: the first entry's wins.
    let folded = [
        entry("kernel_call", 0x100, 0, 0),
        entry("twice", HOST_ADD_ONE, 0, FLAG_INDIRECT),
        entry("add_one", HOST_ADD_ONE, 0, FLAG_INDIRECT),
    ];
    let dev = load(1, &folded);
    assert_eq!(table(1).len(), 1);
    assert_eq!(table(1)[0].tgt_ptr, dev[1].addr);
    assert_eq!(
        call_through(&plugin, &dev[0], HOST_ADD_ONE, 3).0,
        6,
        "twice(3)"
    );

    // A function entry and a vtable slot holding the same host address, another device
    // function in the slot: the entry comes first in the image and wins; the slot's
    // other function (`twice`) stays reachable through the vtable's words.
    let mut vt = entry(
        "vtable_ptr",
        HOST_VTABLE,
        24,
        FLAG_INDIRECT | FLAG_INDIRECT_VTABLE,
    );
    vt.host_vtable = Some(words(&[0, HOST_VT_SLOT1, HOST_ADD_ONE]));
    let aliased = [
        entry("kernel_call", 0x100, 0, 0),
        entry("add_one", HOST_ADD_ONE, 0, FLAG_INDIRECT),
        vt,
    ];
    let dev = load(2, &aliased);
    let rows = table(2);
    let row = rows.iter().find(|r| r.host_ptr == HOST_ADD_ONE).unwrap();
    assert_eq!(row.tgt_ptr, dev[1].addr);
    assert_eq!(
        call_through(&plugin, &dev[0], HOST_ADD_ONE, 3).0,
        4,
        "add_one(3)"
    );
    let word2 = rows
        .iter()
        .find(|r| r.host_ptr == HOST_VTABLE + 16)
        .unwrap();
    assert_eq!(word2.tgt_ptr, dev[2].addr + 16);
    plugin.unload_all().unwrap();
}

#[test]
fn image_without_the_device_runtime_still_loads() {
    let image = host_image("no_table_image", false);
    let plugin = Plugin::new(PluginKind::X86_64);
    let entries = [
        entry("kernel_nop", 0x100, 0, 0),
        entry("add_one", HOST_ADD_ONE, 0, FLAG_INDIRECT),
    ];
    let dev = plugin
        .device(2)
        .and_then(|on| on.load_binary(3, &image, &entries))
        .unwrap();
    assert!(plugin
        .device(2)
        .ok()
        .and_then(|on| on.fptr_table(3))
        .is_none());
    // SAFETY: kernel_nop takes no arguments.
    unsafe { plugin.device(2).and_then(|on| on.launch(dev[0].addr, &[])) }.unwrap();
    plugin.device(2).and_then(|on| on.unload(3)).unwrap();
}

#[test]
fn gpu_kinds_have_no_devices_yet() {
    for kind in [PluginKind::Cuda, PluginKind::Amdgpu] {
        let plugin = Plugin::new(kind);
        assert_eq!(plugin.device_count(), 0);
        assert!(plugin.device(0).and_then(|on| on.init_device()).is_err());
        assert!(plugin
            .device(0)
            .and_then(|on| on.alloc(8, AllocKind::Device))
            .is_err());
    }
    assert_eq!(Plugin::new(PluginKind::X86_64).device_count(), 4);
}

/// The image's own GNU hash table finds every exported definition at the address its
/// .dynsym gives (read independently with the object crate), one name at a time and
/// batched, and nothing for names the image does not export.
#[test]
fn symbol_lookups_through_the_gnu_hash_table_match_the_dynamic_symbol_table() {
    use object::{Object, ObjectSymbol};
    let image = host_image("device_image", true);
    let symbols = host_plugin::elf::image::inspect_shared_object(&image, object::elf::EM_X86_64)
        .expect("a valid image");
    let file = object::File::parse(&*image).unwrap();
    let exported: Vec<(Vec<u8>, u64)> = file
        .dynamic_symbols()
        .filter(|s| s.is_definition() && s.is_global())
        .map(|s| (s.name_bytes().unwrap().to_vec(), s.address()))
        .collect();
    assert!(exported.len() > 10, "{}", exported.len());
    let mut names: Vec<&[u8]> = exported.iter().map(|(n, _)| n.as_slice()).collect();
    names.extend([&b"no_such_symbol"[..], b"", b"add_onex"]);
    let mut batched = Vec::new();
    symbols.dynamic_batch(&names, &mut batched);
    assert_eq!(batched.len(), names.len());
    for (i, name) in names.iter().enumerate() {
        let one = symbols.dynamic(name);
        assert_eq!(batched[i], one, "{}", String::from_utf8_lossy(name));
        let expected = exported.get(i).map(|&(_, addr)| addr);
        assert_eq!(
            one.map(|s| s.value),
            expected,
            "{}",
            String::from_utf8_lossy(name)
        );
    }
}

/// Each entry's address and the installed table's (host, device) rows of one load,
/// device addresses relative to the first entry's.
type LoadResult = (Vec<u64>, Vec<(u64, u64)>);

/// What one load of `entries` gives with at most `threads` resolving them: each entry's
/// address and the installed table, addresses relative to the first entry's (two loads
/// of one image land at different addresses).
fn load_with_threads(
    image: &[u8],
    entries: &[HostOffloadEntry],
    threads: usize,
) -> Result<LoadResult, PluginError> {
    let mut plugin = Plugin::new(PluginKind::X86_64);
    plugin.set_load_threads(threads);
    let device = plugin.device(0).unwrap();
    device.init_device().unwrap();
    let addrs = device.load_binary(1, image, entries)?;
    let base = addrs[0].addr;
    let table = device.fptr_table(1).expect("the image holds a table");
    Ok((
        addrs.iter().map(|a| a.addr.wrapping_sub(base)).collect(),
        table
            .iter()
            .map(|r| (r.host_ptr, r.tgt_ptr.wrapping_sub(base)))
            .collect(),
    ))
}

#[test]
fn a_load_split_across_threads_gives_what_one_thread_gives() {
    // Three parts of 4096 entries and a bit more: the most a load splits this into.
    const N: usize = 3 * 4096 + 17;
    let image = many_functions_image(N);
    // Host addresses descending, so the table is sorted, not copied.
    let host = |i: usize| 0x10_0000 + 16 * (N - i) as u64;
    let entries: Vec<_> = (0..N)
        .map(|i| entry(&format!("f{i}"), host(i), 0, FLAG_INDIRECT))
        .collect();
    let one = load_with_threads(&image, &entries, 1).unwrap();
    let three = load_with_threads(&image, &entries, 3).unwrap();
    assert_eq!(one, three);
    let (addrs, table) = three;
    assert_eq!(table.len(), N);
    let distinct: std::collections::HashSet<_> = addrs.iter().collect();
    assert_eq!(distinct.len(), N, "every function has its own address");
    for (i, &addr) in addrs.iter().enumerate().step_by(997) {
        assert!(table.contains(&(host(i), addr)), "f{i}'s row");
    }

    // Two bad entries in different parts: the error is the first one's, as when one
    // thread resolves them in turn.
    let mut bad = entries.clone();
    bad[5000] = entry("no_such_function_a", host(5000), 0, FLAG_INDIRECT);
    bad[N - 3] = entry("no_such_function_b", host(N - 3), 0, FLAG_INDIRECT);
    for threads in [1, 3] {
        let message = load_with_threads(&image, &bad, threads)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("no_such_function_a") && !message.contains("no_such_function_b"),
            "{threads} thread(s): {message}"
        );
    }
}
