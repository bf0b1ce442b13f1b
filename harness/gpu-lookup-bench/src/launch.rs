//! One launch of the kernel, and one measured case: the iterations calibrated (once per
//! case, for every variant), a warm-up, the best of the timed launches, and every thread's
//! result checked against the host reference.

use crate::bench::{Bench, Loaded, Measure};
use crate::kernel::{check, reference, Pattern, BLOCKS, THREADS, TOTAL_THREADS};
use host_plugin::backend::LaunchRequest;
use host_plugin::DeviceAddr;
use std::time::{Duration, Instant};

/// Iterations per thread: calibration starts here and stops at the cap, which bounds the
/// host reference (TOTAL_THREADS x iters evaluations).
const FIRST_ITERS: u64 = 16;
const MAX_ITERS: u64 = 1 << 16;
/// Written over the results before each launch, so a launch that stores nothing fails.
const SENTINEL: u8 = 0xa5;

impl Bench<'_> {
    /// One launch of `iters` iterations: its time, with the results left in `out`.
    fn launch(
        &self,
        image: &Loaded,
        args: [DeviceAddr; 6],
        out: DeviceAddr,
    ) -> Result<Duration, String> {
        let sentinel = vec![SENTINEL; TOTAL_THREADS * 4];
        // SAFETY: `out` is an allocation of TOTAL_THREADS u32.
        unsafe {
            self.plugin
                .device(0)
                .and_then(|on| on.write(out, &sentinel))
        }
        .map_err(|e| format!("submit: {e}"))?;
        let request = LaunchRequest {
            num_teams: BLOCKS,
            thread_limit: THREADS,
            tripcount: 0,
            dynamic_shared_memory: 0,
        };
        let start = Instant::now();
        // SAFETY: lookup_bench takes (const u64 *keys, u64 mask, u64 iters, u64 divergent,
        // u32 *out, u32 *shape): `keys` holds mask + 1 words, `out` TOTAL_THREADS u32 (one
        // per thread of this launch) and `shape` two u32; every key is a device function
        // or a host key the variant's table maps to one.
        unsafe {
            self.plugin
                .device(0)
                .and_then(|on| on.launch_teams(image.kernel, &args, request))
        }
        .map_err(|e| format!("launch: {e}"))?;
        self.plugin
            .device(0)
            .and_then(|on| on.synchronize())
            .map_err(|e| format!("synchronize: {e}"))?;
        Ok(start.elapsed())
    }

    pub fn measure(
        &mut self,
        variant: &'static str,
        image: &Loaded,
        keys: DeviceAddr,
        size: usize,
        pattern: Pattern,
    ) -> Result<Measure, String> {
        let out_buffer = self.upload(&vec![0u8; TOTAL_THREADS * 4])?;
        let shape_buffer = self.upload(&[0u8; 8])?;
        let (out, shape) = (out_buffer.addr(), shape_buffer.addr());
        let args = |iters: u64| {
            [
                keys,
                size as u64 - 1,
                iters,
                u64::from(pattern == Pattern::Divergent),
                out,
                shape,
            ]
        };
        let iters = match self.iters.get(&(size, pattern)) {
            Some(&n) => n,
            None => {
                // Calibrate: grow until a launch takes min_time (or the cap).
                let mut n = FIRST_ITERS;
                self.launch(image, args(n), out)?;
                loop {
                    let t = self.launch(image, args(n), out)?;
                    if t >= self.options.min_time || n >= MAX_ITERS {
                        break;
                    }
                    let scale = self.options.min_time.as_secs_f64() / t.as_secs_f64().max(1e-6);
                    n = ((n as f64 * scale * 1.2) as u64)
                        .next_power_of_two()
                        .clamp(n * 2, MAX_ITERS);
                }
                self.iters.insert((size, pattern), n);
                n
            }
        };
        self.launch(image, args(iters), out)?; // warm-up
        let mut best = Duration::MAX;
        for _ in 0..self.options.reps {
            best = best.min(self.launch(image, args(iters), out)?);
        }
        let mut got = vec![0u8; TOTAL_THREADS * 4];
        let mut seen = [0u8; 8];
        // SAFETY: `out` and `shape` are allocations of exactly these sizes.
        unsafe {
            self.plugin
                .device(0)
                .and_then(|on| on.read(out, &mut got))
                .and_then(|()| {
                    self.plugin
                        .device(0)
                        .and_then(|on| on.read(shape, &mut seen))
                })
        }
        .map_err(|e| format!("retrieve: {e}"))?;
        self.free(vec![out_buffer, shape_buffer])?;
        let seen = [
            u32::from_ne_bytes([seen[0], seen[1], seen[2], seen[3]]),
            u32::from_ne_bytes([seen[4], seen[5], seen[6], seen[7]]),
        ];
        if seen != [BLOCKS, THREADS] {
            return Err(format!(
                "the kernel ran as {} x {}, not {BLOCKS} x {THREADS}",
                seen[0], seen[1]
            ));
        }
        let want = self
            .references
            .entry((size, pattern, iters))
            .or_insert_with(|| reference(size - 1, iters, pattern, TOTAL_THREADS));
        check(&got, want)?;
        Ok(Measure {
            variant,
            size,
            pattern,
            iters,
            best,
        })
    }
}
