//! The kernel's cases on the host: its launch geometry, the tables' host keys, the key
//! patterns, the host mirror of what every thread of tests/fixtures/bench/gpu_lookup.c
//! computes (the reference each launch is checked against, and `--print-reference`), the
//! check, and the index the plugin builds for a table (`--print-index`).

use host_plugin::generic::table::fptr_index::BuildError;
use host_plugin::FptrMapEntry;
use std::fmt::Write as _;

/// The device functions of the kernel, in the order of `bench_fn0..3`.
pub const FUNCTIONS: usize = 4;
/// Launch geometry: enough threads to fill an H100/H200 (132 SMs x 2048 threads); the
/// block size is a multiple of the warp so `thread / 32` is the warp's index.
pub const BLOCKS: u32 = 1024;
pub const THREADS: u32 = 256;
pub const TOTAL_THREADS: usize = (BLOCKS * THREADS) as usize;
/// Host keys: what host function addresses look like, 16 bytes apart, sorted.
const KEY_BASE: u64 = 0x0000_5555_5540_0000;
const KEY_STRIDE: u64 = 16;

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pattern {
    Uniform,
    Divergent,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Uniform => "uniform",
            Pattern::Divergent => "divergent",
        }
    }
}

pub fn host_key(row: usize) -> u64 {
    KEY_BASE + row as u64 * KEY_STRIDE
}

/// The index host-plugin builds for the benchmark's table of `size` rows, with function
/// numbers (row % 4) as device addresses, as text for tests/fixtures/bench/gpu_lookup_host.c,
/// which puts its own function addresses in and runs the kernel through the index.
pub fn print_index(size: usize) -> Result<String, String> {
    let rows: Vec<FptrMapEntry> = (0..size)
        .map(|r| FptrMapEntry {
            host_ptr: host_key(r),
            tgt_ptr: (r % FUNCTIONS) as u64,
        })
        .collect();
    let index = match host_plugin::generic::table::fptr_index::build(&rows) {
        Ok(index) => index,
        // What the plugin installs for a 1-entry table: no index (the search answers).
        Err(BuildError::TooSmall { .. }) => return Ok("0 0 0\n".into()),
        Err(e) => {
            return Err(format!(
                "no index: {}",
                host_plugin::generic::table::fptr_index::describe(e)
            ))
        }
    };
    let mut text = format!(
        "{} {} {}\n",
        index.buckets.len(),
        index.seeds[0],
        index.seeds[1]
    );
    for slot in index.buckets.iter().flatten() {
        let _ = writeln!(text, "{} {}", slot.host_ptr, slot.tgt_ptr);
    }
    Ok(text)
}

/// The kernel's `key_hash`.
fn key_hash(stream: u32, i: u32) -> u32 {
    let mut x =
        stream.wrapping_mul(0x9e37_79b1) ^ i.wrapping_add(0x7f4a_7c15).wrapping_mul(0x85eb_ca77);
    x ^= x >> 15;
    x = x.wrapping_mul(0x2c1b_3c6d);
    x ^= x >> 13;
    x
}

/// The kernel's bench_fn0..3.
fn call(function: u32, x: u32) -> u32 {
    match function {
        0 => x.wrapping_add(1),
        1 => x.wrapping_mul(3).wrapping_add(5),
        2 => x ^ 0x9e37_79b9,
        _ => x.wrapping_mul(x).wrapping_sub(7),
    }
}

/// The kernel's `accumulate`: one-to-one in `acc` for a fixed `called`.
fn accumulate(acc: u32, called: u32) -> u32 {
    acc.wrapping_mul(0x0100_0193) ^ called
}

/// What the first `threads` threads of the kernel store, computed on all host cores.
pub fn reference(mask: usize, iters: u64, pattern: Pattern, threads: usize) -> Vec<u32> {
    let mut out = vec![0u32; threads];
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = threads.div_ceil(workers).max(1);
    std::thread::scope(|s| {
        for (c, slice) in out.chunks_mut(chunk).enumerate() {
            s.spawn(move || {
                for (k, slot) in slice.iter_mut().enumerate() {
                    let thread = (c * chunk + k) as u32;
                    let stream = match pattern {
                        Pattern::Uniform => thread / 32,
                        Pattern::Divergent => thread,
                    };
                    let mut acc = thread;
                    for i in 0..iters as u32 {
                        let row = key_hash(stream, i) & mask as u32;
                        let called = call(row % FUNCTIONS as u32, thread.wrapping_add(i));
                        acc = accumulate(acc, called);
                    }
                    *slot = acc;
                }
            });
        }
    });
    out
}

pub fn check(got: &[u8], want: &[u32]) -> Result<(), String> {
    let mut wrong = 0usize;
    let mut first = String::new();
    for (t, (bytes, &w)) in got.chunks_exact(4).zip(want).enumerate() {
        let g = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        if g != w {
            if wrong < 5 {
                let _ = write!(first, "\n  thread {t}: got {g:#010x}, want {w:#010x}");
            }
            wrong += 1;
        }
    }
    if wrong == 0 {
        Ok(())
    } else {
        Err(format!(
            "WRONG RESULTS in {wrong} of {} threads (a lookup returned the wrong \
             function):{first}",
            want.len()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host mirror of key_hash against values computed by hand from the C source's
    /// operations (a typo in a constant would change them).
    #[test]
    fn key_hash_matches_the_kernel_formula() {
        let x: u32 = 0x7f4a_7c15u32.wrapping_mul(0x85eb_ca77);
        let x = x ^ (x >> 15);
        let x = x.wrapping_mul(0x2c1b_3c6d);
        assert_eq!(key_hash(0, 0), x ^ (x >> 13));
        assert_ne!(key_hash(1, 0), key_hash(0, 0));
        assert_ne!(key_hash(0, 1), key_hash(0, 0));
    }

    #[test]
    fn one_key_tables_call_the_first_function_every_time() {
        // A 1-key table (mask 0): every call is bench_fn0(thread + i) = thread + i + 1.
        let got = reference(0, 5, Pattern::Divergent, TOTAL_THREADS);
        for t in [0u32, 1, 77, TOTAL_THREADS as u32 - 1] {
            let mut acc = t;
            for i in 0..5 {
                acc = acc.wrapping_mul(0x0100_0193) ^ (t + i + 1);
            }
            assert_eq!(got[t as usize], acc, "thread {t}");
        }
    }

    #[test]
    fn uniform_keys_follow_the_warp_and_divergent_keys_the_lane() {
        let uniform = reference(1023, 8, Pattern::Uniform, TOTAL_THREADS);
        let divergent = reference(1023, 8, Pattern::Divergent, TOTAL_THREADS);
        // Thread 0 is stream 0 either way; lane 5 of warp 0 is stream 0 only when uniform.
        assert_eq!(uniform[0], divergent[0]);
        assert_ne!(uniform[5], divergent[5]);
        // Threads end with their own values (up to chance collisions of 32-bit values:
        // about 8 pairs among 2^18 threads).
        let mut distinct = divergent.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() > TOTAL_THREADS - 100, "{}", distinct.len());
    }

    /// One wrong call, early or late in a thread's loop, changes its final result: the
    /// check sees every call, not only the last few.
    #[test]
    fn one_wrong_call_anywhere_changes_the_result() {
        let calls: Vec<u32> = (0..5000u32).map(|i| call(i % 4, 12345 + i)).collect();
        let run = |calls: &[u32]| calls.iter().fold(7u32, |acc, &c| accumulate(acc, c));
        let good = run(&calls);
        for wrong_at in [0, 1, 2500, 4999] {
            let mut bad = calls.clone();
            // What another of the four functions returns for the same argument.
            let arg = 12345 + wrong_at as u32;
            bad[wrong_at] = call((wrong_at as u32 + 1) % 4, arg);
            assert_ne!(bad[wrong_at], calls[wrong_at]);
            assert_ne!(run(&bad), good, "a wrong call at {wrong_at} went unseen");
        }
    }

    #[test]
    fn check_reports_wrong_threads() {
        let want = [1u32, 2, 3];
        let good: Vec<u8> = want.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert!(check(&good, &want).is_ok());
        let mut bad = good.clone();
        bad[4] ^= 1;
        let e = check(&bad, &want).unwrap_err();
        assert!(
            e.contains("1 of 3 threads") && e.contains("thread 1"),
            "{e}"
        );
    }
}
