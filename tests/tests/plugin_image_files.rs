//! Where the host backend puts an image for dlopen: small ones in a temp file, big ones
//! (8 MiB and more) in a memory file. Either way the image loads and resolves, and
//! nothing of it is left in the temporary directory, mapped or open once it is unloaded.
//! (Its own test binary: nothing else loads images in this process meanwhile.)

mod plugin_support;

use e2e_tests::plugin::entry;
use host_plugin::generic::host_entry::FLAG_INDIRECT;
use host_plugin::{Plugin, PluginKind};
use plugin_support::host_image;

fn tag() -> String {
    format!("omptarget-rs-image-{}-", std::process::id())
}

/// Lines of /proc/self/maps that map one of our image files.
fn image_mappings() -> Vec<String> {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&tag()))
        .map(str::to_string)
        .collect()
}

fn left_in_temp_dir() -> usize {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&tag()))
        .count()
}

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Load `image`, check its indirect entry resolved into the table, return the lines
/// mapping it, then unload it and check nothing is left.
fn load_check_unload(image: &[u8]) -> Vec<String> {
    let entries = [entry("add_one", 0x5000, 0, FLAG_INDIRECT)];
    let plugin = Plugin::new(PluginKind::X86_64);
    let fds_before = open_descriptors();
    let device = plugin.device(0).unwrap();
    let loaded = device.load_binary(1, image, &entries).unwrap();
    assert_ne!(loaded[0].addr, 0);
    let table = device.fptr_table(1).unwrap();
    assert_eq!(table.len(), 1);
    assert_eq!(
        (table[0].host_ptr, table[0].tgt_ptr),
        (0x5000, loaded[0].addr)
    );
    let mappings = image_mappings();
    assert!(
        !mappings.is_empty(),
        "the image is not mapped under its name"
    );
    assert_eq!(left_in_temp_dir(), 0, "a file or link was left behind");
    device.unload(1).unwrap();
    assert!(image_mappings().is_empty(), "unload left the image mapped");
    assert_eq!(open_descriptors(), fds_before, "a descriptor was left open");
    mappings
}

#[test]
fn small_images_load_from_temp_files_and_big_ones_from_memory_files() {
    let image = host_image("device_image", true);
    assert!(image.len() < 8 << 20);
    let small = load_check_unload(&image);
    assert!(
        small.iter().all(|l| !l.contains("/memfd:")),
        "a small image was mapped from a memory file: {small:?}"
    );

    // The same image padded past 8 MiB: bytes after everything its headers describe,
    // which neither the checks nor the loader read.
    let mut big = image.clone();
    big.resize(9 << 20, 0);
    let mapped = load_check_unload(&big);
    assert!(
        mapped
            .iter()
            .all(|l| l.contains(&format!("/memfd:{}", tag()))),
        "a big image was not mapped from a memory file: {mapped:?}"
    );
}
