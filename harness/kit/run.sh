#!/usr/bin/env bash
# The GPU kit of the declare-target-indirect runtime, built by `cargo xtask gpu-bundle`.
# Runs the whole chain on a machine with the NVIDIA driver and python3 (no Rust, no
# clang, no LLVM needed: the kit carries libomptarget 16 and everything it loads).
#
#   bash run.sh [--results DIR] [--part 1|2|all]
#
# Part 1 (the default; minutes): the CUDA tests, the plugin's device count, the clang-16
# programs through our cuda plugin and LLVM 16's, LLVM 16's lit suite for nvptx64 through
# both, the GPU lookup benchmark. Part 2: the CUDA tests under compute-sanitizer.
# Each step's full log and summary.txt / summary.json go into DIR (default: results/
# beside this script). The last line is
#   SUMMARY: N step(s) passed, N failed, N test(s) SKIPPED
# and the exit status is non-zero when a step failed. `--help` lists the options.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python=$(command -v python3 || true)
if [ -z "$python" ]; then
  echo "run.sh: python3 is required (it unpacks the kit and runs the steps)" >&2
  echo "SUMMARY: 0 step(s) passed, 1 failed (python3), 0 test(s) SKIPPED"
  exit 1
fi
# Unbuffered: the output interleaves with the steps' as they run.
exec "$python" -u "$here/kit/runner.py" "$@"
