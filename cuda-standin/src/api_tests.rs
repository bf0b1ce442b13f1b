//! Tests of what the exported functions record and refuse for the GPU data path's
//! tests: the `calls` tally (counts, bytes), each device's memory limit, the copy told
//! to fail, and the report a child process leaves at exit.

use crate::calls::{self, Tally};
use crate::errors::*;
use crate::state::{self, with_state};
use crate::*;
use std::collections::BTreeMap;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::MutexGuard;

/// Device 0's primary context, current on this thread, with the other tests that use
/// the exports kept out; released when dropped.
struct Device0 {
    context: *mut c_void,
    _alone: MutexGuard<'static, ()>,
}

fn device0() -> Device0 {
    let alone = state::exclusive();
    let mut context = null_mut();
    assert_eq!(cuInit(0), CUDA_SUCCESS);
    // SAFETY: a live local.
    let retained = unsafe { cuDevicePrimaryCtxRetain(&mut context, 0) };
    assert_eq!(retained, CUDA_SUCCESS);
    assert_eq!(cuCtxSetCurrent(context), CUDA_SUCCESS);
    Device0 {
        context,
        _alone: alone,
    }
}

impl Drop for Device0 {
    fn drop(&mut self) {
        cuDevicePrimaryCtxRelease_v2(0);
        cuCtxSetCurrent(null_mut());
    }
}

/// What was called between two tallies: (count, bytes) per function.
fn since(
    before: &BTreeMap<&'static str, Tally>,
    after: &BTreeMap<&'static str, Tally>,
) -> BTreeMap<&'static str, (u64, Option<u64>)> {
    after
        .iter()
        .filter_map(|(&name, now)| {
            let then = before.get(name).copied().unwrap_or_default();
            let count = now.count - then.count;
            let bytes = now.bytes.map(|b| b - then.bytes.unwrap_or(0));
            (count > 0).then_some((name, (count, bytes)))
        })
        .collect()
}

#[test]
fn the_calls_tally_counts_every_call_and_the_bytes_of_every_copy() {
    let device = device0();
    let ctx = device.context;
    let before = calls::tallies();
    let (mut p, mut q) = (0u64, 0u64);
    let mut host = [3u8; 128];
    let stream = null_mut();
    // SAFETY: live locals; `host` has 128 bytes, `p` 64 and `q` 128.
    unsafe {
        assert_eq!(cuMemAlloc_v2(&mut p, 64), CUDA_SUCCESS);
        assert_eq!(cuMemAlloc_v2(&mut q, 128), CUDA_SUCCESS);
        let h = host.as_mut_ptr().cast::<c_void>();
        assert_eq!(cuMemcpyHtoD_v2(p, h, 64), CUDA_SUCCESS);
        assert_eq!(cuMemcpyHtoD_v2(p, h, 65), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemcpyHtoDAsync_v2(q, h, 100, stream), CUDA_SUCCESS);
        assert_eq!(cuMemcpyDtoD_v2(q, p, 32), CUDA_SUCCESS);
        assert_eq!(cuMemcpyDtoDAsync_v2(q, p, 16, stream), CUDA_SUCCESS);
        assert_eq!(cuMemcpy(q, p, 8), CUDA_SUCCESS);
        assert_eq!(cuMemcpyDtoH_v2(h, p, 64), CUDA_SUCCESS);
        assert_eq!(cuMemcpyDtoHAsync_v2(h, q, 128, stream), CUDA_SUCCESS);
        assert_eq!(cuMemcpyPeer(q, ctx, p, ctx, 4), CUDA_SUCCESS);
        assert_eq!(cuMemcpyPeerAsync(q, ctx, p, ctx, 2, stream), CUDA_SUCCESS);
        assert_eq!(cuMemcpyHtoD_v2(q, h, 0), CUDA_SUCCESS);
        assert_eq!(cuMemsetD8_v2(p, 1, 64), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(q), CUDA_SUCCESS);
    }
    // From several threads at once: none lost.
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..250 {
                    let mut version = 0;
                    // SAFETY: a live local.
                    assert_eq!(unsafe { cuDriverGetVersion(&mut version) }, CUDA_SUCCESS);
                }
            });
        }
    });
    let expected = BTreeMap::from([
        ("cuMemAlloc_v2", (2, None)),
        ("cuMemcpyHtoD_v2", (3, Some(64 + 65))),
        ("cuMemcpyHtoDAsync_v2", (1, Some(100))),
        ("cuMemcpyDtoD_v2", (1, Some(32))),
        ("cuMemcpyDtoDAsync_v2", (1, Some(16))),
        ("cuMemcpy", (1, Some(8))),
        ("cuMemcpyDtoH_v2", (1, Some(64))),
        ("cuMemcpyDtoHAsync_v2", (1, Some(128))),
        ("cuMemcpyPeer", (1, Some(4))),
        ("cuMemcpyPeerAsync", (1, Some(2))),
        ("cuMemsetD8_v2", (1, None)),
        ("cuMemFree_v2", (2, None)),
        ("cuDriverGetVersion", (1000, None)),
    ]);
    assert_eq!(since(&before, &calls::tallies()), expected);
}

/// Sets device memory to `limit` bytes while it lives; puts the default back after.
struct MemoryLimit;

fn set_memory(limit: usize) {
    with_state(|s| {
        s.config.memory = limit;
        Ok(())
    })
    .unwrap();
}

impl MemoryLimit {
    fn set(limit: usize) -> MemoryLimit {
        set_memory(limit);
        MemoryLimit
    }
}

impl Drop for MemoryLimit {
    fn drop(&mut self) {
        set_memory(device::TOTAL_MEMORY);
    }
}

/// cuMemGetInfo_v2's (free, total).
fn memory_info() -> (usize, usize) {
    let (mut free, mut total) = (0, 0);
    // SAFETY: live locals.
    let result = unsafe { cuMemGetInfo_v2(&mut free, &mut total) };
    assert_eq!(result, CUDA_SUCCESS);
    (free, total)
}

#[test]
fn allocations_past_the_devices_memory_fail_until_some_is_freed() {
    let _device = device0();
    let (free, total) = memory_info();
    assert_eq!(total, device::TOTAL_MEMORY);
    let in_use = total - free;
    let limit = in_use + 4096;
    let _limit = MemoryLimit::set(limit);
    assert_eq!(memory_info(), (4096, limit));
    let (mut a, mut b, mut pinned) = (0u64, 0u64, null_mut());
    let mut reported = 0;
    // SAFETY: live locals.
    unsafe {
        assert_eq!(cuDeviceTotalMem_v2(&mut reported, 0), CUDA_SUCCESS);
        assert_eq!(reported, limit);
        assert_eq!(cuMemAlloc_v2(&mut a, 3000), CUDA_SUCCESS);
        assert_eq!(memory_info(), (1096, limit));
        assert_eq!(cuMemAlloc_v2(&mut b, 2000), CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(cuMemAllocManaged(&mut b, 2000, 1), CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(
            memory_info(),
            (1096, limit),
            "nothing taken by the failures"
        );
        assert_eq!(
            cuMemAllocHost_v2(&mut pinned, 8192),
            CUDA_SUCCESS,
            "host memory"
        );
        assert_eq!(
            cuMemAllocManaged(&mut b, 1096, 1),
            CUDA_SUCCESS,
            "to the byte"
        );
        assert_eq!(memory_info(), (0, limit));
        assert_eq!(cuMemFree_v2(a), CUDA_SUCCESS);
        assert_eq!(cuMemAlloc_v2(&mut a, 2000), CUDA_SUCCESS, "after a free");
        assert_eq!(memory_info(), (1000, limit));
        assert_eq!(cuMemFree_v2(a), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(b), CUDA_SUCCESS);
        assert_eq!(cuMemFreeHost(pinned), CUDA_SUCCESS);
    }
    assert_eq!(memory_info(), (4096, limit));
}

#[test]
fn the_copy_told_to_fail_fails_without_touching_memory_and_the_next_works() {
    let _device = device0();
    let mut p = 0u64;
    let ones = [1u8; 16];
    let nines = [9u8; 16];
    let mut back = [0xaau8; 16];
    // SAFETY: live locals; `p` has 16 bytes, as have the host buffers.
    unsafe {
        assert_eq!(cuMemAlloc_v2(&mut p, 16), CUDA_SUCCESS);
        faults::set_fail_copy(faults::copies_so_far() + 2);
        assert_eq!(
            cuMemcpyHtoD_v2(p, ones.as_ptr().cast(), 16),
            CUDA_SUCCESS,
            "the copy before"
        );
        assert_eq!(
            cuMemcpyHtoD_v2(p, nines.as_ptr().cast(), 16),
            CUDA_ERROR_ILLEGAL_ADDRESS
        );
        let h = back.as_mut_ptr().cast::<c_void>();
        assert_eq!(cuMemcpyDtoH_v2(h, p, 16), CUDA_SUCCESS, "the copy after");
        assert_eq!(back, ones, "the failed copy left the device memory alone");

        // Any kind of copy, before its arguments are checked; the host side untouched.
        back = [0xaa; 16];
        let h = back.as_mut_ptr().cast::<c_void>();
        faults::set_fail_copy(faults::copies_so_far() + 1);
        assert_eq!(cuMemcpyDtoH_v2(h, p, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_eq!(back, [0xaa; 16]);
        faults::set_fail_copy(faults::copies_so_far() + 1);
        assert_eq!(
            cuMemcpyPeer(8, null_mut(), p, null_mut(), 16),
            CUDA_ERROR_ILLEGAL_ADDRESS
        );
        assert_eq!(cuMemcpyDtoH_v2(h, p, 16), CUDA_SUCCESS);
        assert_eq!(back, ones);
        faults::set_fail_copy(0);
        assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
    }
}

/// Set in the child process of [`the_report_ends_with_the_calls_event_at_exit`].
const CHILD_ENV: &str = "CUDA_STANDIN_TEST_EXIT_CHILD";

/// A child process (this test binary again, running only this test) makes driver calls
/// and exits while another thread is still calling; its report ends with the `calls`
/// event, complete with a call made by an exit handler that ran after the stand-in's.
#[test]
fn the_report_ends_with_the_calls_event_at_exit() {
    if std::env::var_os(CHILD_ENV).is_some() {
        exiting_child();
    }
    let log = std::env::temp_dir().join(format!(
        "cuda-standin-exit-{}-{:?}.jsonl",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_file(&log);
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "api_tests::the_report_ends_with_the_calls_event_at_exit",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .env(log::LOG_ENV, &log)
        .env(device::DEVICES_ENV, "2")
        .env(device::MEMORY_ENV, "1048576")
        .env(faults::FAIL_COPY_ENV, "3")
        .spawn()
        .unwrap();
    let pid = child.id();
    // The child must exit: wait for it on a thread, for a minute at most.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let output = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the child hung at exit")
        .unwrap();
    assert!(output.status.success(), "the child failed: {output:?}");

    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(events.iter().all(|e| e["pid"] == pid), "{text}");
    let errors: Vec<_> = events.iter().filter(|e| e["event"] == "error").collect();
    assert_eq!(errors.len(), 2, "{text}");
    assert_eq!(errors[0]["call"], "cuMemAlloc_v2");
    assert_eq!(errors[0]["code"], 2);
    assert_eq!(errors[0]["error"], "CUDA_ERROR_OUT_OF_MEMORY");
    assert_eq!(errors[1]["call"], "cuMemcpyDtoH_v2");
    assert_eq!(errors[1]["code"], 700);
    assert_eq!(errors[1]["error"], "CUDA_ERROR_ILLEGAL_ADDRESS");
    let detail = errors[1]["detail"].as_str().unwrap();
    assert!(detail.contains("told to fail copy 3"), "{detail}");

    // Two `calls` events: the exit handler's, then the destructor's with the late call.
    let tallies: Vec<_> = events.iter().filter(|e| e["event"] == "calls").collect();
    assert_eq!(tallies.len(), 2, "{text}");
    assert_eq!(events.last().unwrap()["event"], "calls", "{text}");
    assert!(tallies[0]["calls"].get("cuDriverGetVersion").is_none());
    let calls = tallies[1]["calls"].as_object().unwrap().clone();
    let busy = calls["cuCtxGetCurrent"]["count"].as_u64().unwrap();
    assert!(busy >= 1, "{calls:?}");
    let mut calls = serde_json::Value::Object(calls);
    calls["cuCtxGetCurrent"]["count"] = serde_json::json!(1);
    assert_eq!(
        calls,
        serde_json::json!({
            "cuInit": {"count": 1},
            "cuDevicePrimaryCtxRetain": {"count": 2},
            "cuCtxSetCurrent": {"count": 3},
            "cuCtxGetCurrent": {"count": 1},
            "cuMemAlloc_v2": {"count": 3},
            "cuMemGetInfo_v2": {"count": 2},
            "cuMemcpyHtoD_v2": {"count": 1, "bytes": 100},
            "cuMemcpyHtoDAsync_v2": {"count": 1, "bytes": 200},
            "cuMemcpyDtoH_v2": {"count": 2, "bytes": 100},
            "cuMemcpyPeer": {"count": 1, "bytes": 64},
            "cuDriverGetVersion": {"count": 1},
        })
    );
}

/// The child's part: 2 devices of 1 MiB, the third copy told to fail.
fn exiting_child() -> ! {
    extern "C" fn late_call() {
        let mut version = 0;
        // SAFETY: a live local.
        unsafe { cuDriverGetVersion(&mut version) };
    }
    // SAFETY: registered before cuInit, so it runs after the stand-in's exit handler;
    // it only makes a driver call.
    assert_eq!(unsafe { libc::atexit(late_call) }, 0);
    let (mut ctx0, mut ctx1) = (null_mut(), null_mut());
    let (mut p0, mut p1, mut refused) = (0u64, 0u64, 0u64);
    let data = [5u8; 200];
    let mut back = [0xaau8; 50];
    // SAFETY: live locals; p0 and p1 have 768 KiB, the host buffers their lengths.
    unsafe {
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx0, 0), CUDA_SUCCESS);
        assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx1, 1), CUDA_SUCCESS);
        assert_eq!(cuCtxSetCurrent(ctx0), CUDA_SUCCESS);
        assert_eq!(cuMemAlloc_v2(&mut p0, 768 << 10), CUDA_SUCCESS);
        assert_eq!(
            cuMemAlloc_v2(&mut refused, 512 << 10),
            CUDA_ERROR_OUT_OF_MEMORY
        );
        assert_eq!(memory_info(), (256 << 10, 1 << 20));
        assert_eq!(cuCtxSetCurrent(ctx1), CUDA_SUCCESS);
        assert_eq!(cuMemAlloc_v2(&mut p1, 768 << 10), CUDA_SUCCESS, "its own");
        assert_eq!(memory_info(), (256 << 10, 1 << 20));
        assert_eq!(cuCtxSetCurrent(ctx0), CUDA_SUCCESS);
        assert_eq!(cuMemcpyHtoD_v2(p0, data.as_ptr().cast(), 100), CUDA_SUCCESS);
        let null = null_mut();
        let d = data.as_ptr().cast();
        assert_eq!(cuMemcpyHtoDAsync_v2(p1, d, 200, null), CUDA_SUCCESS);
        let h = back.as_mut_ptr().cast::<c_void>();
        assert_eq!(cuMemcpyDtoH_v2(h, p0, 50), CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_eq!(back, [0xaa; 50]);
        assert_eq!(cuMemcpyDtoH_v2(h, p0, 50), CUDA_SUCCESS);
        assert_eq!(back, [5; 50]);
        assert_eq!(cuMemcpyPeer(p1, ctx1, p0, ctx0, 64), CUDA_SUCCESS);
    }
    // Another thread keeps calling while this one exits.
    static CALLING: AtomicBool = AtomicBool::new(false);
    std::thread::spawn(|| loop {
        let mut context = null_mut();
        // SAFETY: a live local.
        unsafe { cuCtxGetCurrent(&mut context) };
        CALLING.store(true, Ordering::Release);
    });
    while !CALLING.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    std::process::exit(0)
}

/// The stream-ordered pair the cuda plugin uses where the device has memory pools: made
/// and freed at once on the legacy stream or a live one, counted, refused on a stream
/// that is not live, and only device memory is freed by it.
#[test]
fn stream_ordered_allocations_are_made_and_freed_on_a_live_stream() {
    let _device = device0();
    let (free_before, _) = memory_info();
    let (mut a, mut pinned) = (0u64, null_mut());
    // SAFETY: live locals.
    unsafe {
        assert_eq!(cuMemAllocAsync(&mut a, 4096, 0), CUDA_SUCCESS);
        assert_ne!(a, 0);
        assert_eq!(memory_info().0, free_before - 4096);
        assert_eq!(
            cuMemAllocAsync(&mut a, 1, 0xdead_0000),
            CUDA_ERROR_INVALID_HANDLE
        );
        assert_eq!(cuMemFreeAsync(a, 0xdead_0000), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuMemFreeAsync(a, 0), CUDA_SUCCESS);
        assert_eq!(memory_info().0, free_before);
        assert_eq!(
            cuMemFreeAsync(a, 0),
            CUDA_ERROR_INVALID_VALUE,
            "freed twice"
        );
        assert_eq!(cuMemAllocHost_v2(&mut pinned, 64), CUDA_SUCCESS);
        assert_ne!(
            cuMemFreeAsync(pinned as u64, 0),
            CUDA_SUCCESS,
            "host memory"
        );
        assert_eq!(cuMemFreeHost(pinned), CUDA_SUCCESS);
    }
}
