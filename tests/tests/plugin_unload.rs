//! Unloading really closes images: after unload/deinit no mapping of them remains.
//! (Its own test binary: nothing else loads images in this process meanwhile.)

mod plugin_support;

use e2e_tests::plugin::entry;
use host_plugin::generic::host_entry::FLAG_INDIRECT;
use host_plugin::{Plugin, PluginKind};
use plugin_support::host_image;

/// Mappings of our image files in this process (the host backend names them
/// `omptarget-rs-image-<pid>-<n>.so` and unlinks them after dlopen).
fn mapped_images() -> usize {
    let tag = format!("omptarget-rs-image-{}-", std::process::id());
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&tag))
        .count()
}

#[test]
fn unload_and_unload_all_close_every_image() {
    let image = host_image("device_image", true);
    let entries = [entry("add_one", 0x5000, 0, FLAG_INDIRECT)];
    let plugin = Plugin::new(PluginKind::X86_64);
    assert_eq!(mapped_images(), 0);

    plugin
        .device(0)
        .and_then(|on| on.load_binary(1, &image, &entries))
        .unwrap();
    plugin
        .device(1)
        .and_then(|on| on.load_binary(1, &image, &entries))
        .unwrap();
    plugin
        .device(1)
        .and_then(|on| on.load_binary(2, &image, &entries))
        .unwrap();
    let per_image = mapped_images() / 3;
    assert!(
        per_image > 0,
        "images are not mapped under their temporary names"
    );
    // Nothing is left in the temporary directory: the files were unlinked.
    let leftovers = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("omptarget-rs-image-{}-", std::process::id()))
        })
        .count();
    assert_eq!(leftovers, 0);

    // Reloading a key replaces the image instead of adding one.
    plugin
        .device(1)
        .and_then(|on| on.load_binary(2, &image, &entries))
        .unwrap();
    assert_eq!(mapped_images(), 3 * per_image);

    plugin.device(1).and_then(|on| on.unload(2)).unwrap();
    assert_eq!(mapped_images(), 2 * per_image);
    plugin.unload_all().unwrap();
    assert_eq!(mapped_images(), 0);
    assert_eq!(
        plugin.device(0).map_or(0, |on| on.loaded_images())
            + plugin.device(1).map_or(0, |on| on.loaded_images()),
        0
    );
}
