"""Unit tests of the kit runner: its verdict on lit runs that differ between the
plugins, the steps a kit's manifest gives, its verdict on the doctor's output, and the
memcheck steps over a stand-in
compute-sanitizer (`python3 -m unittest test_runner` in this folder; `cargo test -p
xtask` runs them). Not part of the kit."""
import os
import random
import stat
import tempfile
import time
import unittest

import runner


class FakeLit:
    """Plays the lit suite: each test fails through each plugin with a given chance."""

    def __init__(self, fail_chance, seed=1):
        self.fail_chance = fail_chance  # {(test, plugin): chance}
        self.random = random.Random(seed)
        self.calls = []

    def __call__(self, plugin, tests, label):
        self.calls.append((plugin, label))
        return {t: "fail" if self.random.random() < self.fail_chance.get((t, plugin), 0.0)
                else "pass" for t in tests}


def verdict(first, built, gpu, lit, time_left=lambda: 1e9):
    lines = []
    problems, only_ours, notes = runner.compare_lit(first, built, gpu, lit, time_left,
                                                    lines.append)
    return problems, only_ours, notes, lines


class MoreFailuresP(unittest.TestCase):
    def test_no_failures_is_no_evidence(self):
        self.assertEqual(runner.more_failures_p(0, 16, 0, 16), 1.0)

    def test_one_failure_is_a_coin_toss(self):
        self.assertAlmostEqual(runner.more_failures_p(1, 16, 0, 16), 0.5)

    def test_every_run_failing_with_ours_alone_is_far_beyond_chance(self):
        self.assertLess(runner.more_failures_p(16, 16, 0, 16), 1e-8)

    def test_more_failures_with_llvm_is_no_evidence_against_ours(self):
        self.assertGreater(runner.more_failures_p(0, 16, 5, 16), 0.99)


class CompareLit(unittest.TestCase):
    BUILT = ["a.c", "racy.cpp", "b.c"]

    def test_a_race_of_the_test_itself_does_not_fail_the_step(self):
        # target_nowait_target.cpp's case: one failure with ours, then both plugins fail
        # it now and then.
        first = {"ours": {"a.c": "pass", "racy.cpp": "fail", "b.c": "pass"},
                 "llvm": {"a.c": "pass", "racy.cpp": "pass", "b.c": "pass"}}
        lit = FakeLit({("racy.cpp", "ours"): 0.2, ("racy.cpp", "llvm"): 0.2})
        problems, only_ours, notes, lines = verdict(first, self.BUILT, False, lit)
        self.assertEqual((problems, only_ours), ([], []))
        self.assertEqual(len(lit.calls), 2 * runner.LIT_RERUNS)
        self.assertIn("racy.cpp: failed", notes[0])
        self.assertIn("not plugin-dependent", notes[0])

    def test_a_failure_that_follows_our_plugin_fails_the_step_with_the_counts(self):
        first = {"ours": {"a.c": "pass", "racy.cpp": "pass", "b.c": "fail"},
                 "llvm": {"a.c": "pass", "racy.cpp": "pass", "b.c": "pass"}}
        lit = FakeLit({("b.c", "ours"): 1.0})
        for gpu in (False, True):
            problems, only_ours, notes, _ = verdict(first, self.BUILT, gpu, lit)
            self.assertEqual(only_ours, ["b.c"])
            self.assertEqual(len(problems), 1)
            runs = runner.LIT_RERUNS + 1
            self.assertIn("b.c failed %d/%d with ours, 0/%d with LLVM's" % (runs, runs, runs),
                          problems[0])

    def test_a_failure_only_now_and_then_with_ours_is_still_caught(self):
        first = {"ours": {"a.c": "fail"}, "llvm": {"a.c": "pass"}}
        lit = FakeLit({("a.c", "ours"): 0.7}, seed=3)
        problems, only_ours, _, _ = verdict(first, ["a.c"], True, lit)
        self.assertEqual(only_ours, ["a.c"], problems)

    def test_on_a_gpu_only_failures_with_ours_are_rerun(self):
        first = {"ours": {"a.c": "pass", "b.c": "pass"},
                 "llvm": {"a.c": "fail", "b.c": "pass"}}
        lit = FakeLit({})
        problems, only_ours, notes, _ = verdict(first, ["a.c", "b.c"], True, lit)
        self.assertEqual((problems, only_ours, notes, lit.calls), ([], [], [], []))

    def test_a_skip_on_one_side_fails_at_once(self):
        first = {"ours": {"a.c": "skip"}, "llvm": {"a.c": "pass"}}
        lit = FakeLit({})
        problems, _, _, _ = verdict(first, ["a.c"], False, lit)
        self.assertEqual(len(problems), 1)
        self.assertIn("a.c", problems[0])
        self.assertEqual(lit.calls, [])

    def test_reruns_stop_when_the_part_runs_out_of_time(self):
        first = {"ours": {"a.c": "fail"}, "llvm": {"a.c": "pass"}}
        lit = FakeLit({})
        _, only_ours, notes, _ = verdict(first, ["a.c"], False, lit, time_left=lambda: 10)
        self.assertEqual((only_ours, lit.calls), ([], []))
        self.assertIn("failed 1/1 with ours, 0/1 with LLVM's", notes[0])


if __name__ == "__main__":
    unittest.main()


class RuntimeBenchmarks(unittest.TestCase):
    OUTPUT = ("devices 1\nlaunch_empty 5.0000 5.5000 us\nupdate_to_4KiB 2.0 1.5 GB/s\n"
              "host-built 40.0 41.0\nruntime: PASSED\n")

    def test_measure_lines_are_parsed_and_others_ignored(self):
        m = runner.parse_measures(self.OUTPUT)
        self.assertEqual(m["launch_empty"], (5.0, 5.5, "us"))
        self.assertEqual(m["host-built"], (40.0, 41.0, None))
        self.assertNotIn("devices", m)
        self.assertNotIn("runtime:", m)

    def test_ratios_take_each_plugins_median_of_bests_and_judge_by_unit(self):
        ours = [runner.parse_measures("launch_empty %s 9 us\nupdate_to_4KiB %s 1 GB/s" % v)
                for v in (("4", "3"), ("6", "2"), ("5", "4"))]
        llvm = [runner.parse_measures("launch_empty 5 9 us\nupdate_to_4KiB 4 1 GB/s")]
        rows, facts = runner.compare_plugins({"ours": ours, "llvm": llvm}, "")
        by_name = {f[0]: f for f in facts}
        # Launch: ours 5 (median of 4, 6, 5) against 5: 1.00, as good.
        self.assertEqual(by_name["launch_empty"][2:], (5.0, 5.0, 1.0, True))
        # Copies: ours 3 GB/s against 4: 0.75, worse (higher is better).
        self.assertEqual(by_name["update_to_4KiB"][2:], (3.0, 4.0, 0.75, False))
        self.assertIn("**no**", rows[1])

    def test_a_plugin_without_passing_runs_gives_no_ratio(self):
        ours = [runner.parse_measures("host-built 40 41\ndirect 10 11")]
        rows, facts = runner.compare_plugins({"ours": ours}, "ns per call")
        self.assertEqual(facts[0], ("host-built", "ns per call", 40.0, None, None, None))
        self.assertIn("n/a", rows[0])


class Steps(unittest.TestCase):
    def names(self, manifest):
        return [(part, name) for part, name, _, _ in runner.steps(manifest)]

    def test_a_kit_without_tests_lit_or_benchmarks_runs_its_programs_twice(self):
        self.assertEqual(self.names({"programs": []}), [
            (1, "kit_libraries"), (1, "plugin_reports_devices"), (1, "programs"),
            (2, "memcheck")])

    def test_the_llvm_16_kit_runs_every_step(self):
        manifest = {"tests": [{"name": "cuda_abi"}], "programs": [], "lit": {},
                    "benchmarks": [], "load_bench": {}, "bench": {}}
        names = [n for _, n in self.names(manifest)]
        self.assertEqual(names, ["kit_libraries", "cuda_abi", "plugin_reports_devices",
                                 "programs", "lit_nvptx64", "bench_runtime", "bench_load",
                                 "bench_gpu_lookup", "memcheck"])
        self.assertIs(runner.steps(manifest)[-1][2], runner.step_memcheck)
        self.assertIs(runner.steps({"programs": []})[-1][2], runner.step_memcheck_programs)

    def test_a_kit_with_the_doctor_runs_it_before_the_programs(self):
        names = [n for _, n in self.names({"doctor": {}, "programs": []})]
        self.assertEqual(names, ["kit_libraries", "plugin_reports_devices", "doctor",
                                 "programs", "memcheck"])

    def test_the_llvm_version_defaults_to_16(self):
        self.assertEqual(runner.llvm_major({}), 16)
        self.assertEqual(runner.llvm_major({"llvm": 18}), 18)


class DoctorVerdict(unittest.TestCase):
    """The doctor step's verdict on the doctor's output (lines as the doctor prints
    them, from a run of the kit's doctor in a bare root)."""

    HEAD = """
[install]
ok: prefix /tmp/k/prefix (--prefix)
ok: LLVM 16: lib/libomptarget-indirect-clang16.so

[plugins]
ok: cuda: ours, /tmp/k/prefix/lib/libomptarget.rtl.cuda.nextgen.so (found through LD_LIBRARY_PATH entry /tmp/k/prefix/lib)
warn: OMP_TARGET_OFFLOAD is unset: a program whose device is missing silently runs its target regions on the host
  fix: export OMP_TARGET_OFFLOAD=MANDATORY

[configs]
ok: /tmp/k/prefix/share/omptarget-indirect/x86_64-pc-linux-gnu.cfg: the 4 files and folders it names exist
warn: no clang-16 on PATH nor /tmp/k/bin/clang: programs cannot be compiled on this machine (running programs built elsewhere needs no clang)
  fix: apt-get install clang-16 where you compile
"""
    HOST = """
[self-test]
  each program runs with OMP_TARGET_OFFLOAD=MANDATORY LD_LIBRARY_PATH=/tmp/k/prefix/lib:$LD_LIBRARY_PATH
ok: host device: standard example: 4 ok, 0 wrong (plugin /tmp/k/prefix/lib/libomptarget.rtl.x86_64.nextgen.so)
ok: isolated host device: standard example: 4 ok, 0 wrong (plugin /tmp/k/prefix/lib/libomptarget.rtl.x86_64.nextgen.so)
"""
    GPU = ("ok: CUDA device 0 (sm_90): standard example: 4 ok, 0 wrong (plugin "
           "/tmp/k/prefix/lib/libomptarget.rtl.cuda.nextgen.so)\n")
    END = "\nsummary: 9 ok, 0 FAIL, 2 warn, 0 skip\n"

    def verdict(self, output, rc, devices):
        return runner.doctor_verdict(output, rc, devices)

    def test_without_a_gpu_the_host_self_tests_and_the_missing_clang_pass(self):
        problems, counts, passed = self.verdict(self.HEAD + self.HOST + self.END, 0, 0)
        self.assertEqual(problems, [])
        self.assertEqual(passed, ["host device", "isolated host device"])
        self.assertEqual(counts, {"ok": 6, "FAIL": 0, "warn": 2, "skip": 0})

    def test_each_cuda_device_needs_an_ok_self_test_line(self):
        problems, _, _ = self.verdict(self.HEAD + self.HOST + self.END, 0, 1)
        self.assertEqual(problems, ["no ok self-test line for the CUDA device 0"])
        problems, _, passed = self.verdict(self.HEAD + self.HOST + self.GPU + self.END, 0, 1)
        self.assertEqual(problems, [])
        self.assertEqual(passed[-1], "CUDA device 0")
        failed = self.GPU.replace("ok: CUDA device 0 (sm_90): standard example: 4 ok",
                                  "FAIL: CUDA device 0 (sm_90): x exited with exit status: 1; 0 ok")
        problems, _, _ = self.verdict(self.HEAD + self.HOST + failed + self.END, 1, 1)
        self.assertEqual(len(problems), 2, problems)
        self.assertTrue(problems[0].startswith("FAIL: CUDA device 0 (sm_90)"), problems)

    def test_any_fail_or_a_wrong_exit_status_fails(self):
        other = self.HEAD.replace("ok: cuda: ours", "FAIL: cuda: LLVM's")
        problems, _, _ = self.verdict(other + self.HOST + self.END, 1, 0)
        self.assertEqual(len(problems), 1)
        self.assertTrue(problems[0].startswith("FAIL: cuda: LLVM's"), problems)
        problems, _, _ = self.verdict(other + self.HOST + self.END, 0, 0)
        self.assertEqual(problems[-1], "exit status 0 with 1 FAIL line(s)")
        problems, _, _ = self.verdict(self.HEAD + self.HOST + self.END, 1, 0)
        self.assertEqual(problems, ["exit status 1 with 0 FAIL line(s)"])
        problems, _, _ = self.verdict(self.HEAD + self.HOST + self.END, None, 0)
        self.assertEqual(problems, ["exit status None with 0 FAIL line(s)"])

    def test_a_cut_off_run_fails(self):
        problems, _, _ = self.verdict(self.HEAD, -9, 0)
        self.assertIn("the doctor printed no summary line", problems)
        self.assertIn("no ok self-test line for the host device", problems)


class FakeGpu:
    present = True

    def describe(self):
        return "a stand-in GPU"


class FakeWork:
    lib = lib_for_tools = plugins_ours = plugins_tests = tempfile.gettempdir()
    driver = None


class Memcheck(unittest.TestCase):
    """The memcheck steps over a compute-sanitizer stand-in that runs the program and
    prints a clean summary: the verdict follows the program's exit status."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kit-runner-test.")
        tool = os.path.join(self.dir, "compute-sanitizer")
        with open(tool, "w") as f:
            f.write("#!/bin/sh\nshift 6\n\"$@\"\nrc=$?\n"
                    "echo '========= ERROR SUMMARY: 0 errors'\nexit $rc\n")
        os.chmod(tool, stat.S_IRWXU)
        self.saved = runner.find_compute_sanitizer
        runner.find_compute_sanitizer = lambda: tool
        self.log = os.path.join(self.dir, "memcheck.log")

    def tearDown(self):
        runner.find_compute_sanitizer = self.saved

    def context(self, manifest, gpu=None):
        return runner.Context(None, manifest, self.dir, gpu or FakeGpu(), FakeWork(),
                              time.time() + 60)

    def test_programs_pass_when_each_exits_zero_and_fail_otherwise(self):
        ok = {"programs": [{"name": "a", "exe": "/bin/true"}]}
        passed, detail, table = runner.step_memcheck_programs(self.context(ok), self.log)
        self.assertTrue(passed, table)
        self.assertEqual(detail, "1 programs through ours")
        self.assertIn("| a | 0 errors, exit 0 |", table)
        bad = {"programs": [{"name": "a", "exe": "/bin/true"}, {"name": "b", "exe": "/bin/false"}]}
        passed, _, table = runner.step_memcheck_programs(self.context(bad), self.log)
        self.assertFalse(passed, table)

    def test_test_executables_get_their_arguments(self):
        manifest = {"tests": [{"name": "t", "exe": "/bin/test", "args": ["-n", "x"]}],
                    "fixtures": "fixtures"}
        passed, detail, _ = runner.step_memcheck(self.context(manifest), self.log)
        self.assertTrue(passed)
        self.assertEqual(detail, "1 test executables")

    def test_without_a_gpu_it_skips(self):
        gpu = FakeGpu()
        gpu.present = False
        manifest = {"programs": [{"name": "a", "exe": "/bin/false"}]}
        passed, detail, _ = runner.step_memcheck_programs(self.context(manifest, gpu), self.log)
        self.assertTrue(passed)
        self.assertEqual(detail, "skipped")
        self.assertIn("SKIPPED: memcheck", open(self.log).read())
