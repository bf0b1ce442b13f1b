//! The CUDA plugin file through its C ABI, the way libomptarget 16 drives it: count and
//! initialise devices, load the fixture cubin with its offload entries, allocate each
//! memory kind, launch with KernelArgs' team and thread counts, read the results back.
//! Without a CUDA driver or GPU it prints one `SKIPPED:` line and passes.

mod cuda_support;

use cuda_support::{fixture_cubin, skip, RtlVariant, ARCHES};
use e2e_tests::plugin::{
    built_plugin, device_image, kernel_args, DataAlloc, DataDelete, DataMove, Launch, LoadBinary,
};
use host_plugin::abi::{TgtAsyncInfo, TgtOffloadEntry, OFFLOAD_SUCCESS};
use host_plugin::backend::cuda::{image::cubin_runs_on, CudaBackend};
use host_plugin::generic::host_entry::FLAG_INDIRECT;
use std::ffi::{c_void, CString};
use std::ptr::null_mut;

type Count = unsafe extern "C" fn() -> i32;
type InitDevice = unsafe extern "C" fn(i32) -> i32;
type MoveAsync = unsafe extern "C" fn(i32, *mut c_void, *mut c_void, i64, *mut TgtAsyncInfo) -> i32;
type Sync = unsafe extern "C" fn(i32, *mut TgtAsyncInfo) -> i32;
type CreateEvent = unsafe extern "C" fn(i32, *mut *mut c_void) -> i32;
type EventOnQueue = unsafe extern "C" fn(i32, *mut c_void, *mut TgtAsyncInfo) -> i32;
type EventOnly = unsafe extern "C" fn(i32, *mut c_void) -> i32;
type Lock = unsafe extern "C" fn(i32, *mut c_void, i64, *mut *mut c_void) -> i32;
type Unlock = unsafe extern "C" fn(i32, *mut c_void) -> i32;
type ExchangeAsync =
    unsafe extern "C" fn(i32, *mut c_void, i32, *mut c_void, i64, *mut TgtAsyncInfo) -> i32;

/// Copy `len` bytes to `device_buffer` and back with the asynchronous entry points, the
/// way libomptarget orders two queues with an event; returns (bytes equal, whether the
/// plugin used real queues).
///
/// # Safety
/// `lib` is an initialised plugin; `device_buffer` is `len` bytes of memory of device 0.
unsafe fn async_round_trip(
    lib: &libloading::Library,
    device_buffer: *mut c_void,
    len: usize,
) -> (bool, bool) {
    // SAFETY: LLVM 16's signatures of these entry points.
    let (submit, retrieve, sync, query, create, record, wait, sync_event, destroy) = unsafe {
        (
            *lib.get::<MoveAsync>(b"__tgt_rtl_data_submit_async")
                .unwrap(),
            *lib.get::<MoveAsync>(b"__tgt_rtl_data_retrieve_async")
                .unwrap(),
            *lib.get::<Sync>(b"__tgt_rtl_synchronize").unwrap(),
            *lib.get::<Sync>(b"__tgt_rtl_query_async").unwrap(),
            *lib.get::<CreateEvent>(b"__tgt_rtl_create_event").unwrap(),
            *lib.get::<EventOnQueue>(b"__tgt_rtl_record_event").unwrap(),
            *lib.get::<EventOnQueue>(b"__tgt_rtl_wait_event").unwrap(),
            *lib.get::<EventOnly>(b"__tgt_rtl_sync_event").unwrap(),
            *lib.get::<EventOnly>(b"__tgt_rtl_destroy_event").unwrap(),
        )
    };
    let mut data: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
    let mut back = vec![0u8; len];
    let mut upload = TgtAsyncInfo { queue: null_mut() };
    let mut download = TgtAsyncInfo { queue: null_mut() };
    let mut event = null_mut();
    // SAFETY: the buffers live until both queues are synchronized below.
    unsafe {
        assert_eq!(
            submit(
                0,
                device_buffer,
                data.as_mut_ptr().cast(),
                len as i64,
                &mut upload
            ),
            0
        );
        let queued = !upload.queue.is_null();
        assert_eq!(create(0, &mut event), 0);
        assert!(!event.is_null());
        assert_eq!(record(0, event, &mut upload), 0);
        // The download queue waits for the upload's event, not for the whole device.
        assert_eq!(wait(0, event, &mut download), 0);
        assert_eq!(
            retrieve(
                0,
                back.as_mut_ptr().cast(),
                device_buffer,
                len as i64,
                &mut download
            ),
            0
        );
        assert_eq!(sync(0, &mut download), 0);
        assert!(download.queue.is_null(), "synchronize clears the queue");
        assert_eq!(sync_event(0, event), 0);
        assert_eq!(query(0, &mut upload), 0);
        assert_eq!(sync(0, &mut upload), 0);
        assert!(upload.queue.is_null());
        assert_eq!(destroy(0, event), 0);
        (back == data, queued)
    }
}

/// The asynchronous entry points on the host plugin: complete at once, no queues, token
/// events, the data arrives.
#[test]
fn host_plugin_async_entry_points_complete_in_order() {
    // The plugin files come from OMPTARGET_RS_PLUGIN_DIR in the GPU kit, as the cuda
    // test's below: the kit has no build tree.
    let lib = e2e_tests::plugin::open(&built_plugin("x86_64"));
    // SAFETY: LLVM 16's signatures; the buffer is allocated on device 0 with the size used.
    unsafe {
        let init = *lib.get::<Count>(b"__tgt_rtl_init_plugin").unwrap();
        let alloc = *lib.get::<DataAlloc>(b"__tgt_rtl_data_alloc").unwrap();
        let delete = *lib.get::<DataDelete>(b"__tgt_rtl_data_delete").unwrap();
        assert_eq!(init(), OFFLOAD_SUCCESS);
        let buffer = alloc(0, 4096, null_mut(), 0);
        assert!(!buffer.is_null());
        assert_eq!(async_round_trip(&lib, buffer, 4096), (true, false));
        // Host memory needs no pinning: data_lock gives the address itself.
        let lock = *lib.get::<Lock>(b"__tgt_rtl_data_lock").unwrap();
        let unlock = *lib.get::<Unlock>(b"__tgt_rtl_data_unlock").unwrap();
        let mut locked = null_mut();
        assert_eq!(lock(0, buffer, 4096, &mut locked), OFFLOAD_SUCCESS);
        assert_eq!(locked, buffer);
        assert_eq!(unlock(0, buffer), OFFLOAD_SUCCESS);
        assert_eq!(delete(0, buffer, 0), OFFLOAD_SUCCESS);
    }
}

/// What one host thread of [`two_queues`] saw: the results of its launches, whether its
/// async info held a queue after the launches (they were enqueued, not waited for), and
/// the copy of the results another buffer got through `data_exchange_async`.
struct QueueRun {
    results: Vec<i32>,
    queued: bool,
    exchanged: Vec<i32>,
}

/// Two host threads, each with its own async info and so its own queue: each launches
/// the kernel twice, copies the output to a second buffer with `data_exchange_async` and
/// both back with `data_retrieve_async`, all without waiting, then synchronizes once.
///
/// # Safety
/// `lib` is the CUDA plugin with the fixture loaded on device 0, `kernel` its
/// `call_through_host_pointers`, `fns` the `n` host function addresses on device 0.
unsafe fn two_queues(
    lib: &libloading::Library,
    kernel: usize,
    fns: usize,
    threads: usize,
    n: usize,
) -> Vec<QueueRun> {
    // SAFETY: LLVM 16's signatures of these entry points.
    let (alloc, delete, launch, retrieve, exchange, sync) = unsafe {
        (
            *lib.get::<DataAlloc>(b"__tgt_rtl_data_alloc").unwrap(),
            *lib.get::<DataDelete>(b"__tgt_rtl_data_delete").unwrap(),
            *lib.get::<Launch>(b"__tgt_rtl_launch_kernel").unwrap(),
            *lib.get::<MoveAsync>(b"__tgt_rtl_data_retrieve_async")
                .unwrap(),
            *lib.get::<ExchangeAsync>(b"__tgt_rtl_data_exchange_async")
                .unwrap(),
            *lib.get::<Sync>(b"__tgt_rtl_synchronize").unwrap(),
        )
    };
    let bytes = threads * n * 4;
    let run = move || -> QueueRun {
        // SAFETY: plugin ABI calls with buffers of the sizes given, alive until after
        // the synchronize below; the kernel's arguments are as in the caller's test.
        unsafe {
            let out = alloc(0, bytes as i64, null_mut(), 0);
            let copy = alloc(0, bytes as i64, null_mut(), 0);
            let shape = alloc(0, 8, null_mut(), 0);
            assert!(!out.is_null() && !copy.is_null() && !shape.is_null());
            let mut info = TgtAsyncInfo { queue: null_mut() };
            let mut args = [fns as *mut c_void, out, n as *mut c_void, shape];
            let mut offsets = [0isize; 4];
            let ka = kernel_args(1, 4, TEAMS, THREAD_LIMIT);
            for _ in 0..2 {
                let rc = launch(
                    0,
                    kernel as *mut c_void,
                    args.as_mut_ptr(),
                    offsets.as_mut_ptr(),
                    &ka,
                    (&mut info as *mut TgtAsyncInfo).cast(),
                );
                assert_eq!(rc, OFFLOAD_SUCCESS, "launch_kernel on a queue");
            }
            let queued = !info.queue.is_null();
            assert_eq!(exchange(0, out, 0, copy, bytes as i64, &mut info), 0);
            let mut results = vec![0i32; threads * n];
            let mut exchanged = vec![0i32; threads * n];
            assert_eq!(
                retrieve(0, results.as_mut_ptr().cast(), out, bytes as i64, &mut info),
                0
            );
            assert_eq!(
                retrieve(
                    0,
                    exchanged.as_mut_ptr().cast(),
                    copy,
                    bytes as i64,
                    &mut info
                ),
                0
            );
            assert_eq!(sync(0, &mut info), OFFLOAD_SUCCESS);
            assert!(info.queue.is_null(), "synchronize lets the queue go");
            for p in [out, copy, shape] {
                assert_eq!(delete(0, p, 0), OFFLOAD_SUCCESS);
            }
            QueueRun {
                results,
                queued,
                exchanged,
            }
        }
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2).map(|_| scope.spawn(run)).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

const HOST_FNS: [u64; 3] = [0x0100_0008, 0x0100_8008, 0x0101_0008];
const TEAMS: u32 = 4;
const THREAD_LIMIT: u32 = 64;

#[test]
fn cuda_plugin_runs_the_libomptarget_call_sequence() {
    let test = "cuda_plugin_runs_the_libomptarget_call_sequence";
    let backend = CudaBackend::new();
    if let Some(reason) = backend.unavailable_reason() {
        skip(test, reason);
        return;
    }
    let ((major, minor), _) = backend.describe(0).unwrap();
    let Some(sm) = ARCHES
        .into_iter()
        .find(|&sm| cubin_runs_on(sm, major, minor))
    else {
        skip(test, &format!("sm_{major}{minor} has no fixture"));
        return;
    };
    drop(backend);

    let lib = e2e_tests::plugin::open(&built_plugin("cuda"));
    // SAFETY: as above; each symbol is read with its LLVM 16 signature.
    let (init_plugin, count, init_device, load_binary, alloc, submit, retrieve, delete, launch) = unsafe {
        (
            *lib.get::<Count>(b"__tgt_rtl_init_plugin").unwrap(),
            *lib.get::<Count>(b"__tgt_rtl_number_of_devices").unwrap(),
            *lib.get::<InitDevice>(b"__tgt_rtl_init_device").unwrap(),
            *lib.get::<LoadBinary>(b"__tgt_rtl_load_binary").unwrap(),
            *lib.get::<DataAlloc>(b"__tgt_rtl_data_alloc").unwrap(),
            *lib.get::<DataMove>(b"__tgt_rtl_data_submit").unwrap(),
            *lib.get::<DataMove>(b"__tgt_rtl_data_retrieve").unwrap(),
            *lib.get::<DataDelete>(b"__tgt_rtl_data_delete").unwrap(),
            *lib.get::<Launch>(b"__tgt_rtl_launch_kernel").unwrap(),
        )
    };
    // SAFETY: plugin ABI calls with valid arguments; every buffer passed below is live
    // and of the size given; the kernel takes (void **, int *, unsigned long, unsigned *).
    unsafe {
        assert_eq!(init_plugin(), OFFLOAD_SUCCESS);
        assert!(count() >= 1, "the plugin sees the GPU");
        assert_eq!(init_device(0), OFFLOAD_SUCCESS);

        let mut image = fixture_cubin(RtlVariant::Default, sm);
        let names: Vec<CString> = [
            "call_through_host_pointers",
            "__omp_offloading_fn_add_one",
            "__omp_offloading_fn_times_three",
            "__omp_offloading_fn_square_minus_seven",
        ]
        .iter()
        .map(|n| CString::new(*n).unwrap())
        .collect();
        let mut entries: Vec<TgtOffloadEntry> = names
            .iter()
            .enumerate()
            .map(|(i, name)| TgtOffloadEntry {
                addr: if i == 0 { 0x100 } else { HOST_FNS[i - 1] } as *mut c_void,
                name: name.as_ptr() as *mut _,
                size: if i == 0 { 0 } else { 8 },
                flags: if i == 0 { 0 } else { FLAG_INDIRECT },
                reserved: 0,
            })
            .collect();
        let mut device_image = device_image(&mut image, &mut entries);
        let table = load_binary(0, &mut device_image);
        assert!(!table.is_null(), "load_binary failed");
        let kernel = (*(*table).entries_begin).addr;

        let threads = (TEAMS * THREAD_LIMIT) as usize;
        let n = HOST_FNS.len();
        // Device memory for the inputs, managed memory for the results, pinned host
        // memory for the shape: each of LLVM 16's kinds on the launch path.
        let fns = alloc(0, (n * 8) as i64, null_mut(), 3);
        let out = alloc(0, (threads * n * 4) as i64, null_mut(), 2);
        let shape = alloc(0, 8, null_mut(), 1);
        assert!(!fns.is_null() && !out.is_null() && !shape.is_null());
        let mut host_fns = HOST_FNS;
        assert_eq!(
            submit(0, fns, host_fns.as_mut_ptr().cast(), (n * 8) as i64),
            0
        );
        // A scalar argument travels as a pointer-sized value, like libomptarget's.
        let mut args = [fns, out, n as *mut c_void, shape];
        let mut offsets = [0isize; 4];
        let ka = kernel_args(1, 4, TEAMS, THREAD_LIMIT);
        let rc = launch(
            0,
            kernel,
            args.as_mut_ptr(),
            offsets.as_mut_ptr(),
            &ka,
            null_mut(),
        );
        assert_eq!(rc, OFFLOAD_SUCCESS, "launch_kernel");
        let mut results = vec![0i32; threads * n];
        assert_eq!(
            retrieve(
                0,
                results.as_mut_ptr().cast(),
                out,
                (threads * n * 4) as i64
            ),
            0
        );
        let mut seen = [0u32; 2];
        assert_eq!(retrieve(0, seen.as_mut_ptr().cast(), shape, 8), 0);
        assert_eq!(seen, [TEAMS, THREAD_LIMIT], "blocks and threads launched");
        for t in 0..threads {
            let x = t as i32;
            assert_eq!(
                results[t * n..t * n + n],
                [x + 1, 3 * x, x * x - 7],
                "thread {t}"
            );
        }
        // The asynchronous path: CUDA streams ordered by a CUDA event.
        let (equal, queued) = async_round_trip(&lib, out, threads * n * 4);
        assert!(queued, "the CUDA plugin copies on streams");
        assert!(equal, "asynchronous round trip through device memory");
        // Two queues at once, launches and copies enqueued on each.
        for (i, run) in two_queues(&lib, kernel as usize, fns as usize, threads, n)
            .into_iter()
            .enumerate()
        {
            assert!(run.queued, "host thread {i}: the launches went on a queue");
            assert_eq!(
                run.results, results,
                "host thread {i}: the kernel's results"
            );
            assert_eq!(
                run.exchanged, results,
                "host thread {i}: the exchanged copy"
            );
        }
        // data_lock pins (cuMemHostRegister): a device-reachable address, unlocked once.
        let lock = *lib.get::<Lock>(b"__tgt_rtl_data_lock").unwrap();
        let unlock = *lib.get::<Unlock>(b"__tgt_rtl_data_unlock").unwrap();
        let mut pinned_host = vec![0u8; 1 << 16];
        let mut locked = null_mut();
        let host = pinned_host.as_mut_ptr().cast::<c_void>();
        assert_eq!(lock(0, host, 1 << 16, &mut locked), OFFLOAD_SUCCESS);
        assert!(!locked.is_null(), "data_lock gives the pinned address");
        assert_eq!(unlock(0, host), OFFLOAD_SUCCESS);
        assert_ne!(
            unlock(0, host),
            OFFLOAD_SUCCESS,
            "a second unlock is refused"
        );
        for (p, kind) in [(fns, 3), (out, 2), (shape, 1)] {
            assert_eq!(delete(0, p, kind), OFFLOAD_SUCCESS);
        }
    }
    println!(
        "{test}: {} threads called 3 functions each",
        TEAMS * THREAD_LIMIT
    );
}
