//! Endurance and stress through the real libomptarget 16 and our plugin (issue 8, part 2):
//! a million sequential launches, 16 threads of nowait regions and transfers, and 1,000
//! dlopen/dlclose cycles of an offloading library with memory accounted.
//! The fixture programs are tests/fixtures/reliability/*.c; `cargo xtask reliability`
//! runs the same programs longer and prints the figures (docs/RELIABILITY.md).

mod plugin_support;
mod reliability_support;

use plugin_support::scratch;
use reliability_support::*;

#[test]
fn a_million_sequential_empty_launches_complete() {
    let dir = scratch("rel-launches");
    let exe = build_program(&dir, "launches.c");
    let out = run_with_our_plugin(&exe, &["empty", "1000000"]);
    let stdout = expect_success("1,000,000 empty launches", &out);
    assert!(
        stdout.contains("empty: 1000000 of 1000000 launches, 0 wrong"),
        "{stdout}"
    );
}

#[test]
fn a_million_sequential_indirect_calls_are_all_right() {
    let dir = scratch("rel-indirect");
    let exe = build_program(&dir, "launches.c");
    let n = 1_000_000;
    let out = run_with_our_plugin(&exe, &["indirect", &n.to_string()]);
    let stdout = expect_success("1,000,000 indirect launches", &out);
    // Every launch checked its own result; the checksum proves they all ran the device
    // version (each device result carries the device copy's +1000).
    let expected = format!(
        "indirect: {n} of {n} launches, 0 wrong, checksum {}\n",
        indirect_checksum(n)
    );
    assert!(
        stdout.contains(&expected),
        "want {expected:?} in:\n{stdout}"
    );
}

#[test]
fn sixteen_threads_of_nowait_regions_and_transfers_are_all_right() {
    let dir = scratch("rel-stress");
    let exe = build_program(&dir, "stress.c");
    // Bounded by rounds, not time. Each round and thread: 5 regions (4 with a mapped
    // buffer, 1 on `target enter data` memory), 2 updates, 5 * 64 checked values.
    let rounds = 8u64;
    let out = run_with_our_plugin(&exe, &[&rounds.to_string()]);
    let stdout = expect_success("the 16-thread stress", &out);
    let expected = format!(
        "stress: 16 threads x {rounds} rounds: {} regions, {} updates, {} values checked, \
         0 wrong",
        16 * rounds * 5,
        16 * rounds * 2,
        16 * rounds * 5 * 64
    );
    assert!(
        stdout.contains(&expected),
        "want {expected:?} in:\n{stdout}"
    );
}

#[test]
fn a_thousand_dlopen_cycles_of_an_offloading_library_do_not_grow() {
    let dir = scratch("rel-dlopen");
    let lib = build_offload_library(&dir, "offload_lib.c");
    let exe = dir.join("dlopen_cycles");
    plugin_support::compile_offload_program(&fixture("dlopen_cycles.c"), &exe, false);
    let (cycles, warmup) = (1000u64, 100u64);
    let out = run_with_our_plugin(
        &exe,
        &[
            lib.to_str().unwrap(),
            &cycles.to_string(),
            &warmup.to_string(),
        ],
    );
    let stdout = expect_success("1,000 dlopen/dlclose cycles", &out);
    assert!(
        stdout.contains(&format!("dlopen cycles: {cycles}, 0 wrong")),
        "{stdout}"
    );
    let warm = memory_report(&stdout, "warm");
    let done = memory_report(&stdout, "done");
    assert_eq!((warm.cycles, done.cycles), (warmup, cycles));
    // Our plugin's own accounting: the images it has mapped and the descriptors it holds
    // do not grow with the cycles (an unloaded library's image is collected).
    assert!(
        done.images_mapped <= warm.images_mapped,
        "the plugin keeps images of unloaded libraries: {warm:?} -> {done:?}"
    );
    assert!(
        done.fds <= warm.fds,
        "file descriptors grew: {warm:?} -> {done:?}"
    );
    // The process as a whole: libomptarget 16 itself keeps a record of every image it
    // ever registered (PM->Images), tens of bytes per cycle; an image kept by the plugin
    // would cost over 16 KiB of mappings per cycle.
    let cycles_measured = cycles - warmup;
    let heap_growth = done.heap_bytes.saturating_sub(warm.heap_bytes);
    let rss_growth_kib = done.rss_kib.saturating_sub(warm.rss_kib);
    assert!(
        heap_growth < 512 * cycles_measured,
        "heap grew {heap_growth} bytes over {cycles_measured} cycles: {warm:?} -> {done:?}"
    );
    assert!(
        rss_growth_kib < 2 * 1024,
        "RSS grew {rss_growth_kib} KiB over {cycles_measured} cycles: {warm:?} -> {done:?}"
    );
}
