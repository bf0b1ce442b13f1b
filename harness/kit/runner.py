#!/usr/bin/env python3
"""The GPU kit's runner: run.sh hands over to it. Python 3.9+ standard library only.

It unpacks the kit's compressed runtime closure (libomptarget N, libomp, LLVM N's cuda
plugin, libLLVM-N, ...; N is the manifest's `llvm`, 16 unless it says otherwise) into a
temporary folder, runs the steps of the part asked for (those whose parts the kit holds),
writes each step's full log and a summary into the results folder, and ends with
    SUMMARY: N step(s) passed, N failed, N test(s) SKIPPED
exiting non-zero when a step failed. Where no GPU exists (a bare root on a CPU machine)
every GPU step prints a `SKIPPED:` line; the clang-N programs and the lit suite then run
on libomptarget's host fallback, which still proves that the unpacked libraries load.

manifest.json (written by `cargo xtask gpu-bundle`) says what the kit holds.
"""
import argparse
import ctypes
import glob
import json
import lzma
import math
import os
import platform
import re
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET

KIT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The x86-64 dynamic loader, which lists what each ELF file of the kit would load.
LOADER = "/lib64/ld-linux-x86-64.so.2"
# What every step's programs get: our plugin's debug log and libomptarget's information.
DIAGNOSTICS = {"OMPTARGET_RS_DEBUG": "1", "LIBOMPTARGET_INFO": "-1"}
# The C++ runtime the NVIDIA tools load too: the kit's (older) copies stay out of their
# way under compute-sanitizer.
CXX_RUNTIME = ("libstdc++.so.6", "libgcc_s.so.1")
# Settings of the caller's environment that would change which libraries or plugins load.
CLEARED = (
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "LD_DEBUG",
    "LD_DEBUG_OUTPUT",
    "LIBOMPTARGET_NEXTGEN_PLUGINS",
    "OMP_TARGET_OFFLOAD",
    "OMPTARGET_RS_ALLOW_HOST_FALLBACK",
    "OMPTARGET_RS_LOAD_MARKER",
)
LIT_SUITE = "libomptarget :: nvptx64-nvidia-cuda"


# --------------------------------------------------------------------------------------
# The machine


class Gpu:
    """What the CUDA driver reports, asked through libcuda with ctypes."""

    def __init__(self):
        self.devices = []  # (name, "sm_90")
        self.driver = None
        self.reason = None
        # Where the driver's library is, when plugins cannot dlopen it by the name both
        # LLVM 16's and ours use (`libcuda.so`, which only some installations provide).
        self.libcuda_without_unversioned_name = None
        try:
            cuda = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            self.reason = "no CUDA driver (libcuda.so.1: %s)" % e
            return
        try:
            ctypes.CDLL("libcuda.so")
        except OSError:
            self.libcuda_without_unversioned_name = loaded_path("libcuda.so")
        version = ctypes.c_int()
        if cuda.cuDriverGetVersion(ctypes.byref(version)) == 0:
            self.driver = "%d.%d" % (version.value // 1000, version.value % 1000 // 10)
        rc = cuda.cuInit(0)
        if rc != 0:
            self.reason = "cuInit failed with CUDA error %d" % rc
            return
        count = ctypes.c_int()
        if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
            self.reason = "the CUDA driver reports no GPU"
            return
        for i in range(count.value):
            device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
            name = ctypes.create_string_buffer(256)
            cuda.cuDeviceGet(ctypes.byref(device), i)
            cuda.cuDeviceGetName(name, 256, device)
            # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR
            cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device)
            cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)
            self.devices.append(
                (name.value.decode(errors="replace"), "sm_%d%d" % (major.value, minor.value))
            )

    @property
    def present(self):
        return bool(self.devices)

    def describe(self):
        if not self.present:
            return "no GPU: %s" % self.reason
        names = ", ".join("%s (%s)" % d for d in self.devices)
        return "%d GPU(s): %s; driver (CUDA) %s" % (len(self.devices), names, self.driver)


def loaded_path(stem):
    """The file of a library this process has loaded (`libcuda.so.580.95.05` for
    `libcuda.so`), from /proc/self/maps."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith(stem):
                return os.path.realpath(path)
    return None


# --------------------------------------------------------------------------------------
# The unpacked kit


class Workspace:
    """The kit unpacked into a temporary folder: the closure, the tools, the plugin copies
    and the lit suite."""

    def __init__(self, manifest, keep):
        self.manifest = manifest
        self.keep = keep
        self.root = tempfile.mkdtemp(prefix="omptarget-rs-kit.")
        self.lib = os.path.join(self.root, "lib")
        self.lib_for_tools = os.path.join(self.root, "lib-without-cxx-runtime")
        self.bin = os.path.join(self.root, "bin")
        self.plugins_ours = os.path.join(self.root, "plugins-ours")
        self.plugins_tests = os.path.join(self.root, "plugins-tests")
        self.lit = os.path.join(self.root, "lit")
        # The doctor's install prefix (manifest "doctor"): its part of the install, and
        # the kit's plugin under every name the install gives it.
        self.prefix = os.path.join(self.root, "prefix")
        # `libcuda.so`, where the driver has only `libcuda.so.1` (see Gpu).
        self.driver = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.keep:
            print("runner: kept the unpacked kit in %s" % self.root)
        else:
            shutil.rmtree(self.root, ignore_errors=True)

    def unpack(self, gpu):
        start = time.time()
        if gpu.libcuda_without_unversioned_name:
            self.driver = os.path.join(self.root, "driver")
            os.makedirs(self.driver)
            os.symlink(gpu.libcuda_without_unversioned_name,
                       os.path.join(self.driver, "libcuda.so"))
        closure = self.manifest["closure"]
        for folder in (self.lib, self.lib_for_tools, self.bin, self.plugins_ours,
                       self.plugins_tests, self.lit):
            os.makedirs(folder)
        for entry in closure["libraries"]:
            path = self._unxz(entry["archive"], os.path.join(self.lib, entry["name"]))
            if entry["name"] not in CXX_RUNTIME:
                os.symlink(path, os.path.join(self.lib_for_tools, entry["name"]))
        for entry in closure["tools"]:
            self._unxz(entry["archive"], os.path.join(self.bin, entry["name"]))
        # Our plugin takes its kind from its file name: one copy per name (copies, not
        # links: one inode would be one dlopen handle).
        plugin = os.path.join(KIT, self.manifest["plugin"])
        for name in ("libomptarget.rtl.cuda.so", "libomptarget.rtl.cuda.nextgen.so"):
            shutil.copy2(plugin, os.path.join(self.plugins_ours, name))
        for name in ("libomptarget.rtl.cuda.so", "libomptarget.rtl.x86_64.so"):
            shutil.copy2(plugin, os.path.join(self.plugins_tests, name))
        if "lit" in self.manifest:
            extract(self.manifest["lit"]["archive"], self.lit)
        if "doctor" in self.manifest:
            doctor = self.manifest["doctor"]
            extract(doctor["archive"], self.prefix)
            for name in doctor["plugin_copies"]:
                shutil.copy2(plugin, os.path.join(self.prefix, name))
        return time.time() - start

    def _unxz(self, archive, target):
        with lzma.open(os.path.join(KIT, archive)) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.chmod(target, 0o755)
        return target


def extract(archive, folder):
    """The kit's tar.xz `archive` into `folder`."""
    with tarfile.open(os.path.join(KIT, archive), "r:xz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(folder, filter="data")
        else:
            tar.extractall(folder)


# --------------------------------------------------------------------------------------
# Running commands


class Run:
    def __init__(self, rc, output, seconds, timed_out, pid):
        self.rc, self.output, self.seconds = rc, output, seconds
        self.timed_out, self.pid = timed_out, pid

    def status(self):
        if self.timed_out:
            return "TIMED OUT after %.0f s" % self.seconds
        if self.rc < 0:
            try:
                return "CRASHED (%s)" % signal.Signals(-self.rc).name
            except ValueError:
                return "CRASHED (signal %d)" % -self.rc
        return "exit %d" % self.rc


class Context:
    def __init__(self, args, manifest, results, gpu, work, deadline):
        self.args, self.manifest, self.results = args, manifest, results
        self.gpu, self.work, self.deadline = gpu, work, deadline

    def env(self, plugins=None, libraries=None, extra=None, diagnostics=True):
        """The caller's environment with the kit's library path (and `plugins` first)."""
        env = {k: v for k, v in os.environ.items() if k not in CLEARED}
        path = [p for p in (plugins, libraries or self.work.lib, self.work.driver) if p]
        env["LD_LIBRARY_PATH"] = ":".join(path)
        if diagnostics:
            env.update(DIAGNOSTICS)
        env.update(extra or {})
        return env

    def remaining(self):
        return self.deadline - time.time()

    def run(self, cmd, env, log_path, timeout, cwd=None):
        """Runs `cmd` (stdout and stderr together) into `log_path`; kills its process
        group after `timeout` seconds or when the part's time is up."""
        timeout = max(1.0, min(timeout, self.remaining()))
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        start = time.time()
        with open(log_path, "ab") as log:
            log.write(("+ %s\n" % " ".join(cmd)).encode())
            changed = {k: v for k, v in env.items() if os.environ.get(k) != v}
            for k in sorted(changed):
                log.write(("  %s=%s\n" % (k, changed[k])).encode())
            log.flush()
            proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            timed_out = False
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
            log.write(out)
            seconds = time.time() - start
            result = Run(proc.returncode, out.decode(errors="replace"), seconds, timed_out,
                         proc.pid)
            log.write(("=> %s after %.1f s\n" % (result.status(), seconds)).encode())
        return result


def say(log_path, line):
    """A line of the runner's own into a step's log (and onto the console)."""
    print(line)
    with open(log_path, "a") as log:
        log.write(line + "\n")


# --------------------------------------------------------------------------------------
# Steps: each returns (passed, detail, summary lines)


def step_kit_libraries(ctx, log):
    """Every ELF file of the kit, as the dynamic loader resolves it with the kit's library
    path: no dependency missing, none taken from the system except glibc."""
    w = ctx.work
    glibc = set(ctx.manifest["closure"]["glibc"])
    files = []
    for folder in ("bin", "plugins", "programs"):
        files += sorted(glob.glob(os.path.join(KIT, folder, "*")))
    for folder in (w.lib, w.bin, w.plugins_ours):
        files += sorted(glob.glob(os.path.join(folder, "*")))
    files += sorted(glob.glob(os.path.join(w.lit, "store", "**", "output"), recursive=True))
    if "doctor" in ctx.manifest:
        not_loaded = {os.path.join(w.prefix, e["path"]): e["why"]
                      for e in ctx.manifest["doctor"]["not_loaded"]}
        for path in sorted(glob.glob(os.path.join(w.prefix, "**"), recursive=True)):
            if path in not_loaded:
                say(log, "kit_libraries: not checked: %s (%s)"
                    % (os.path.relpath(path, w.prefix), not_loaded[path]))
            elif os.path.isfile(path) and not os.path.islink(path):
                files.append(path)
    problems, checked = [], 0
    env = ctx.env(diagnostics=False)
    for path in files:
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                continue
        r = subprocess.run([LOADER, "--list", path], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        text = r.stdout.decode(errors="replace")
        checked += 1
        with open(log, "a") as f:
            f.write("== %s\n%s" % (path, text))
        if "statically linked" in text or "not a dynamic executable" in text:
            continue
        for line in text.splitlines():
            m = re.match(r"\s*(\S+) => (.*?)(?: \(0x[0-9a-f]+\))?$", line)
            if not m:
                continue
            name, where = m.group(1), m.group(2)
            if "lit" in ctx.manifest and name.startswith(ctx.manifest["lit"]["exec_root"]):
                continue  # a lit test's own library by its path, replayed with the test
            if where == "not found":
                problems.append("%s: %s not found" % (relative(path), name))
            elif not (where.startswith(w.root) or where.startswith(KIT) or name in glibc):
                problems.append("%s: %s comes from the system (%s), not the kit"
                                % (relative(path), name, where))
    for p in problems:
        say(log, "kit_libraries: " + p)
    detail = "%d ELF files, %d problem(s)" % (checked, len(problems))
    return not problems and checked > 0, detail, []


def relative(path):
    return os.path.relpath(path, KIT) if path.startswith(KIT) else path


def test_step(test):
    """One of the kit's CUDA test executables (each GPU test prints SKIPPED without one)."""

    def step(ctx, log):
        env = ctx.env(extra={
            "OMPTARGET_RS_CUDA_FIXTURES": os.path.join(KIT, ctx.manifest["fixtures"]),
            "OMPTARGET_RS_PLUGIN_DIR": ctx.work.plugins_tests,
            "OMPTARGET_RS_GPU_BENCH_DIR": os.path.join(KIT, ctx.manifest["bench"]["cubins"]),
        })
        r = ctx.run([os.path.join(KIT, test["exe"])] + test["args"], env, log, 300)
        counts = re.findall(r"test result: \w+\. (\d+) passed; (\d+) failed", r.output)
        passed = sum(int(p) for p, _ in counts)
        failed = sum(int(f) for _, f in counts)
        detail = "%d passed, %d failed (%s)" % (passed, failed, r.status())
        return r.rc == 0 and not r.timed_out, detail, []

    step.__doc__ = "the %s test executable" % test["name"]
    return step


def step_plugin_devices(ctx, log):
    """Our cuda plugin file, as libomptarget opens it: init, then count devices; the count
    must be the driver's."""
    plugin = os.path.join(ctx.work.plugins_tests, "libomptarget.rtl.cuda.so")
    code = (
        "import ctypes, sys\n"
        "lib = ctypes.CDLL(sys.argv[1])\n"
        "assert lib.__tgt_rtl_init_plugin() == 0, 'init_plugin failed'\n"
        "print('devices:', lib.__tgt_rtl_number_of_devices())\n"
    )
    r = ctx.run([sys.executable, "-c", code, plugin], ctx.env(), log, 60)
    m = re.search(r"^devices: (-?\d+)$", r.output, re.M)
    if r.rc != 0 or not m:
        return False, "the plugin did not load or init (%s)" % r.status(), []
    count = int(m.group(1))
    want = len(ctx.gpu.devices)
    detail = "the plugin reports %d device(s), the driver %d" % (count, want)
    if not ctx.gpu.present:
        say(log, "SKIPPED: plugin_reports_devices: %s (the plugin loads and reports %d)"
            % (ctx.gpu.describe(), count))
    return count == want, detail, []


DOCTOR_LINE = re.compile(r"^(ok|FAIL|warn|skip): (.*)$")


def doctor_verdict(output, rc, cuda_devices):
    """The doctor step's judgement of the doctor's output and exit status `rc`, with
    `cuda_devices` devices seen by the driver: (problems, counts, self-test lines ok).

    No line may FAIL (a missing clang is a warning: the kit compiles nothing), the exit
    status is 1 exactly when one does, and the [self-test] section must have an ok line
    for the host device, the isolated host device and each CUDA device.
    """
    section, verdicts = None, []
    for line in output.splitlines():
        header = re.match(r"^\[(.+)\]$", line)
        if header:
            section = header.group(1)
            continue
        m = DOCTOR_LINE.match(line)
        if m:
            verdicts.append((section, m.group(1), m.group(2)))
    problems = []
    if not re.search(r"^summary: ", output, re.M):
        problems.append("the doctor printed no summary line")
    fails = [text for _, verdict, text in verdicts if verdict == "FAIL"]
    problems.extend("FAIL: " + text for text in fails)
    if rc != (1 if fails else 0):
        problems.append("exit status %s with %d FAIL line(s)" % (rc, len(fails)))
    self_tests = [(verdict, text) for s, verdict, text in verdicts if s == "self-test"]
    # (device, how its line starts): `host device: ...`, `CUDA device 0 (sm_90): ...`.
    wanted = [("host device", "host device: "),
              ("isolated host device", "isolated host device: ")] + [
        ("CUDA device %d" % i, "CUDA device %d (" % i) for i in range(cuda_devices)]
    passed = []
    for device, start in wanted:
        if any(v == "ok" and t.startswith(start) for v, t in self_tests):
            passed.append(device)
        else:
            problems.append("no ok self-test line for the %s" % device)
    counts = {v: sum(1 for _, verdict, _ in verdicts if verdict == v)
              for v in ("ok", "FAIL", "warn", "skip")}
    return problems, counts, passed


def step_doctor(ctx, log):
    """The install's doctor (omptarget-indirect-doctor) on the kit's prefix and
    libomptarget N: which plugin loads, the GPUs, the self-tests on the host, the isolated
    host device and each CUDA device (doctor.txt)."""
    w, doctor = ctx.work, ctx.manifest["doctor"]
    cmd = [os.path.join(w.prefix, doctor["exe"]), "--prefix", w.prefix,
           "--llvm-root", w.root] + doctor["args"]
    # Our plugins first, then the kit's libomptarget, as the programs have them; no
    # diagnostics: the doctor's output is what a user sees.
    env = ctx.env(plugins=os.path.join(w.prefix, "lib"), diagnostics=False)
    r = ctx.run(cmd, env, log, 300)
    with open(os.path.join(ctx.results, "doctor.txt"), "w") as f:
        f.write(r.output)
    problems, counts, passed = doctor_verdict(r.output, r.rc, len(ctx.gpu.devices))
    if r.timed_out:
        problems.insert(0, r.status())
    if not ctx.gpu.present:
        say(log, "SKIPPED: the doctor's CUDA self-tests: %s (the host and isolated host "
            "device self-tests ran)" % ctx.gpu.describe())
    for p in problems:
        say(log, "doctor: " + p)
    detail = "%s: %d ok, %d FAIL, %d warn, %d skip; self-tests ok: %s%s" % (
        r.status(), counts["ok"], counts["FAIL"], counts["warn"], counts["skip"],
        ", ".join(passed) or "none",
        "; " + "; ".join(problems) if problems else "")
    table = ["The install's doctor (doctor.txt): %s" % " ".join(cmd), "", "```text"] + r.output.rstrip("\n").splitlines() + ["```"]
    return not problems, detail, table


class ProgramRun:
    """One program run under the kit's libomptarget through one plugin."""

    def __init__(self, ctx, program, plugin, args=(), folder="programs", tag=""):
        self.program, self.plugin = program, plugin
        folder = os.path.join(ctx.results, folder)
        base = os.path.join(folder, "%s.%s%s" % (program["name"], plugin, tag))
        self.log = base + ".log"
        marker, ld_debug = base + ".marker", base + ".ld-debug"
        for stale in [self.log, marker] + glob.glob(ld_debug + ".*"):
            if os.path.exists(stale):
                os.remove(stale)
        extra = {
            "OMPTARGET_RS_LOAD_MARKER": marker,
            "LD_DEBUG": "libs",
            "LD_DEBUG_OUTPUT": ld_debug,
        }
        if not ctx.gpu.present:
            extra["OMPTARGET_RS_ALLOW_HOST_FALLBACK"] = "1"
        ours = plugin == "ours"
        env = ctx.env(plugins=ctx.work.plugins_ours if ours else None, extra=extra)
        self.run = ctx.run([os.path.join(KIT, program["exe"])] + list(args), env, self.log, 120)
        self.verdict = self._verdict(program, ctx.gpu.present)
        self.passed = self.run.rc == 0 and bool(self.verdict) and self.verdict.startswith("PASSED")
        self.plugin_problem = self._prove_plugin(ctx, marker, ld_debug)

    def _verdict(self, program, gpu):
        """PASSED/FAILED and what it rests on. A program with an `expect` line (the
        standard-source programs) passes when it prints that line (`expect_fallback`
        without a GPU); the kit's own print `<name>: PASSED (N checks)`, or a bare PASSED
        (examples/indirect_calls.c)."""
        if "expect" in program:
            line = program["expect"] if gpu else program["expect_fallback"]
            if line in self.run.output:
                return "PASSED (%s)" % line
            return "FAILED (no line %r)" % line
        verdicts = re.findall(r"^(?:%s: )?(PASSED|FAILED)(.*)$" % re.escape(program["name"]),
                              self.run.output, re.M)
        return " ".join(verdicts[-1]).strip() if verdicts else None

    def _prove_plugin(self, ctx, marker, ld_debug):
        """Which cuda plugin file this process initialised, from the loader's own log and
        our plugin's load marker; a problem when it is not the one asked for."""
        pid = self.run.pid
        marked = os.path.exists(marker) and ("cuda %d" % pid) in open(marker).read().split("\n")
        initialised = []
        for path in glob.glob("%s.%d" % (ld_debug, pid)):
            for line in open(path, errors="replace"):
                m = re.search(r"calling init: (\S+)", line)
                if m and "libomptarget.rtl.cuda" in os.path.basename(m.group(1)):
                    initialised.append(m.group(1))
        self.initialised = initialised
        if self.plugin == "ours":
            if not marked:
                return "our cuda plugin wrote no load marker for pid %d" % pid
            if not any(p.startswith(ctx.work.plugins_ours) for p in initialised):
                return "the loader initialised no cuda plugin of ours: %s" % initialised
            if any(p.startswith(ctx.work.lib) for p in initialised):
                return "LLVM's cuda plugin was initialised too: %s" % initialised
        else:
            if marked:
                return "our cuda plugin loaded in LLVM's run"
            if not any(p.startswith(ctx.work.lib) for p in initialised):
                return "the loader initialised no LLVM cuda plugin: %s" % initialised
        return None

    def cell(self):
        if self.run.rc == 0 and self.passed:
            text = "PASSED" + (self.verdict[len("PASSED"):] if self.verdict else "")
        elif self.verdict and self.verdict.startswith("FAILED"):
            text = "%s, %s" % (self.verdict, self.run.status())
        else:
            text = "FAILED: %s, no verdict line" % self.run.status()
        if self.plugin_problem:
            text += " [WRONG PLUGIN: %s]" % self.plugin_problem
        return text


def step_programs(ctx, log):
    """The clang-N OpenMP programs under the unpacked libomptarget N, each through our
    cuda plugin and through LLVM N's own."""
    n = llvm_major(ctx.manifest)
    gpu = ctx.gpu.present
    if not gpu:
        say(log, "SKIPPED: programs on the GPU: %s; they run on libomptarget's host "
            "fallback instead (which proves the unpacked libraries load)" % ctx.gpu.describe())
    rows, failures = [], []
    for program in ctx.manifest["programs"]:
        ours = ProgramRun(ctx, program, "ours")
        llvm = ProgramRun(ctx, program, "llvm")
        for r in (ours, llvm):
            say(log, "%-17s %-5s %s  (log: programs/%s)" % (
                program["name"], r.plugin, r.cell(), os.path.basename(r.log)))
        rows.append("| %s | %s | %s |" % (program["name"], ours.cell(), llvm.cell()))
        if not ours.passed or ours.plugin_problem or llvm.plugin_problem:
            failures.append(program["name"])
        elif not gpu and not llvm.passed:
            failures.append(program["name"] + " (LLVM's run, host fallback)")
    where = "GPU" if gpu else "host fallback (no GPU)"
    table = [
        "Programs (%s): clang-%d for %s, libomptarget %d; which plugin ran is proved by "
        "our load marker and the loader's log" % (where, n, ctx.manifest["sm"], n),
        "",
        "| program | ours (cuda plugin) | LLVM %d's cuda plugin |" % n,
        "|---|---|---|",
    ] + rows
    if gpu:
        table.append("(LLVM %d's plugin builds no table: its failures on indirect "
                     "calls are expected; a step fails when ours fails)" % n)
    detail = "%d programs, %d failed%s" % (len(rows), len(failures),
                                          ": " + ", ".join(failures) if failures else "")
    return not failures, detail, table


class LitRun:
    """The kit's LLVM lit suite in check mode through one plugin."""

    def __init__(self, ctx, plugin, tests, label=None, diagnostics=False):
        w, lit = ctx.work, ctx.manifest["lit"]
        self.plugin = plugin
        label = label or plugin
        # The path the tests were built in (a test program may name its library by its
        # path): one run at a time uses it.
        exec_root = lit["exec_root"]
        shutil.rmtree(exec_root, ignore_errors=True)
        os.makedirs(exec_root)
        shutil.copy(os.path.join(KIT, ctx.manifest["scripts"]["lit_site_cfg"]),
                    os.path.join(exec_root, "lit.site.cfg.py"))
        folder = os.path.join(ctx.results, "lit")
        os.makedirs(folder, exist_ok=True)
        self.marker = os.path.join(folder, label + ".marker")
        if os.path.exists(self.marker):
            os.remove(self.marker)
        paths = [w.plugins_ours] if plugin == "ours" else []
        environment = {
            "LD_LIBRARY_PATH": ":".join(paths + [w.lib] + ([w.driver] if w.driver else [])),
            "OMPTARGET_RS_LOAD_MARKER": self.marker,
        }
        if diagnostics:
            environment.update(DIAGNOSTICS)
        config = {
            "mode": "check",
            "llvm": llvm_major(ctx.manifest),
            "python": sys.executable,
            "tool": os.path.join(KIT, ctx.manifest["scripts"]["lit_tool"]),
            # Replayed, never run: lit_tool.py only needs a name here.
            "c_compiler": "clang",
            "cxx_compiler": "clang++",
            "compiler_features": lit["compiler_features"],
            "cuda_test_arch": lit["cuda_test_arch"],
            "library_dir": w.lib,
            "omp_header_dir": w.lib,
            "filecheck": os.path.join(w.bin, "FileCheck"),
            "not": os.path.join(w.bin, "not"),
            "store": os.path.join(w.lit, lit["store"]),
            "upstream_lit_cfg": os.path.join(w.lit, lit["upstream_lit_cfg"]),
            "environment": environment,
        }
        with open(os.path.join(exec_root, "kit-lit.json"), "w") as f:
            json.dump(config, f, indent=1)
        self.xunit = os.path.join(folder, label + ".xunit.xml")
        self.log = os.path.join(folder, label + ".log")
        for stale in (self.xunit, self.log):
            if os.path.exists(stale):
                os.remove(stale)
        pattern = " :: (%s)$" % "|".join(re.escape(t) for t in tests)
        cmd = [sys.executable, os.path.join(w.lit, lit["lit_py"]), "-v", "--no-progress-bar",
               "-j", str(os.cpu_count() or 2), "--xunit-xml-output", self.xunit,
               "--filter", pattern, exec_root]
        if diagnostics:
            cmd.insert(3, "-a")
        self.run = ctx.run(cmd, ctx.env(libraries=None, diagnostics=False), self.log, 400)
        # The report lists the tests the filter left out too, as skipped.
        self.outcomes = {t: o for t, o in self._parse().items() if t in tests}
        marks = open(self.marker).read().split() if os.path.exists(self.marker) else []
        self.marker_lines = len([m for m in marks if m == "cuda"])

    def _parse(self):
        """{test path: 'pass' | 'fail' | 'skip'} from lit's xunit report."""
        outcomes = {}
        if not os.path.exists(self.xunit):
            return outcomes
        for case in ET.parse(self.xunit).getroot().iter("testcase"):
            classname, name = case.get("classname", ""), case.get("name", "")
            folder = classname[len(LIT_SUITE) + 1:] if classname.startswith(LIT_SUITE) else ""
            path = "%s/%s" % (folder, name) if folder else name
            if case.find("failure") is not None:
                outcomes[path] = "fail"
            elif case.find("skipped") is not None:
                outcomes[path] = "skip"
            else:
                outcomes[path] = "pass"
        return outcomes

    def count(self, what):
        return sum(1 for o in self.outcomes.values() if o == what)


# A test whose outcome differs between the plugins is run again, this many times through
# each (alternating), before the step decides: some of LLVM 16's tests race in libomp
# itself (target_nowait_target.cpp: llvm-project #85963, fixed in LLVM 19), and one run
# per plugin cannot tell such a race from a plugin's bug.
LIT_RERUNS = 15
# A test fails "only with ours" when it failed more often with ours and a one-sided
# Fisher exact test puts the chance of that, were both plugins alike, below this.
LIT_SIGNIFICANCE = 0.01


def more_failures_p(fails_ours, runs_ours, fails_llvm, runs_llvm):
    """One-sided Fisher exact test: if both plugins failed the test at the same rate, the
    chance that ours would show `fails_ours` or more of all the failures seen."""
    total, failures = runs_ours + runs_llvm, fails_ours + fails_llvm
    if failures == 0:
        return 1.0
    denominator = math.comb(total, runs_ours)
    return sum(math.comb(failures, k) * math.comb(total - failures, runs_ours - k)
               for k in range(fails_ours, min(failures, runs_ours) + 1)) / denominator


class RerunCounts:
    """One test's failures and runs through each plugin, first run included."""

    def __init__(self):
        self.fails = {"ours": 0, "llvm": 0}
        self.runs = {"ours": 0, "llvm": 0}

    def add(self, plugin, outcome):
        if outcome in ("pass", "fail"):
            self.runs[plugin] += 1
            self.fails[plugin] += outcome == "fail"

    def p(self):
        return more_failures_p(self.fails["ours"], self.runs["ours"],
                               self.fails["llvm"], self.runs["llvm"])

    def only_ours(self):
        """Fails more often with ours, beyond chance."""
        rate = lambda plugin: self.fails[plugin] / max(1, self.runs[plugin])
        return rate("ours") > rate("llvm") and self.p() < LIT_SIGNIFICANCE

    def describe(self):
        return "failed %d/%d with ours, %d/%d with LLVM's (p = %.2g)" % (
            self.fails["ours"], self.runs["ours"], self.fails["llvm"], self.runs["llvm"],
            self.p())


def rerun_counts(first, tests, run_lit, reruns, time_left):
    """{test: RerunCounts}: each first outcome, plus `reruns` more runs of `tests` through
    each plugin (`run_lit(plugin, tests, label)` -> {test: outcome}), while `time_left()`
    allows another pair."""
    counts = {t: RerunCounts() for t in tests}
    for plugin, outcomes in first.items():
        for t in tests:
            counts[t].add(plugin, outcomes.get(t))
    for i in range(reruns):
        if time_left() < 60:
            break
        for plugin in ("ours", "llvm"):
            outcomes = run_lit(plugin, tests, "rerun%d-%s" % (i + 1, plugin))
            for t in tests:
                counts[t].add(plugin, outcomes.get(t))
    return counts


def compare_lit(first, built, gpu, run_lit, time_left, say_line):
    """The verdict on one run of the suite through both plugins (`first`: {plugin: {test:
    outcome}}). Tests that fail only with ours (on a GPU), or differ at all (on the host
    fallback, where the plugin should change nothing), are rerun through both; a test
    fails the step when it fails more often with ours, beyond chance, or when it passes
    or skips differently for another reason than failing. Returns (problems, the tests
    that fail only with ours, notes for the summary)."""
    ours, llvm = first["ours"], first["llvm"]
    failed = lambda outcomes: {t for t, o in outcomes.items() if o == "fail"}
    if gpu:
        suspects = sorted(failed(ours) - failed(llvm))
    else:
        suspects = sorted(t for t in built if ours.get(t) != llvm.get(t))
    problems, notes = [], []
    # A skip or a missing result on one side is no race: it fails at once.
    static = [t for t in suspects
              if {ours.get(t), llvm.get(t)} - {"pass", "fail"}]
    if static:
        problems.append("outcome differs between the plugins (not pass/fail) for: "
                        + ", ".join(static))
    racy = [t for t in suspects if t not in static]
    if not racy:
        return problems, [], notes
    say_line("%d test(s) differ between the plugins: %s; rerunning them %d times through "
             "each" % (len(racy), ", ".join(racy), LIT_RERUNS))
    counts = rerun_counts(first, racy, run_lit, LIT_RERUNS, time_left)
    only_ours = []
    for t in racy:
        c = counts[t]
        verdict = ("fails more often with ours: plugin-dependent" if c.only_ours()
                   else "not plugin-dependent")
        line = "%s: %s: %s" % (t, c.describe(), verdict)
        say_line("rerun: " + line)
        notes.append(line)
        if c.only_ours():
            only_ours.append(t)
    if only_ours:
        where = "" if gpu else " (the host fallback should not depend on the plugin)"
        problems.append("%d test(s) fail more often with ours%s: %s" % (
            len(only_ours), where, "; ".join("%s %s" % (t, counts[t].describe())
                                            for t in only_ours)))
    return problems, only_ours, notes


def step_lit(ctx, log):
    """LLVM's libomptarget lit suite for nvptx64, compiled when the kit was built, run
    here through our cuda plugin and through LLVM's, on the same binaries."""
    lit = ctx.manifest["lit"]
    n = llvm_major(ctx.manifest)
    built = lit["built"]
    gpu = ctx.gpu.present
    if not gpu:
        say(log, "SKIPPED: lit nvptx64 on the GPU: %s; the suite runs on libomptarget's "
            "host fallback instead, to check the kit's lit machinery (replayed compiles, "
            "FileCheck, not)" % ctx.gpu.describe())
    runs = {}
    for plugin in ("ours", "llvm"):
        runs[plugin] = LitRun(ctx, plugin, built)
        r = runs[plugin]
        say(log, "lit through %-4s: %d passed, %d failed, %d skipped of %d (%s; log: lit/%s)"
            % (plugin, r.count("pass"), r.count("fail"), r.count("skip"), len(built),
               r.run.status(), os.path.basename(r.log)))
    ours, llvm = runs["ours"], runs["llvm"]
    failed = lambda r: sorted(t for t, o in r.outcomes.items() if o == "fail")
    both = sorted(set(failed(ours)) & set(failed(llvm)))
    only_llvm = sorted(set(failed(llvm)) - set(failed(ours)))
    problems = []
    for r in runs.values():
        missing = sorted(set(built) - set(r.outcomes))
        if missing:
            problems.append("%s: no result for %d test(s): %s" % (
                r.plugin, len(missing), ", ".join(missing[:10])))
        # The kit's own machinery must not be what fails a test.
        broken = sorted(set(re.findall(r"lit_tool: no stored compile \S+|'[^']+': command not found",
                                       r.run.output)))
        if broken:
            problems.append("%s: the kit's lit replay broke: %s" % (r.plugin, "; ".join(broken[:5])))
    if ours.marker_lines == 0:
        problems.append("ours: our cuda plugin wrote no load marker: it did not load")
    if llvm.marker_lines != 0:
        problems.append("llvm: our cuda plugin loaded in LLVM's run")

    def run_lit(plugin, tests, label):
        r = LitRun(ctx, plugin, tests, label=label)
        if r.marker_lines == 0 and plugin == "ours":
            problems.append("ours (%s): our cuda plugin wrote no load marker" % label)
        return r.outcomes

    verdict, only_ours, rerun_notes = compare_lit(
        {"ours": ours.outcomes, "llvm": llvm.outcomes}, built, gpu, run_lit,
        ctx.remaining, lambda line: say(log, line))
    problems += verdict
    if gpu:
        # Each test that fails only with ours once more, alone, with our plugin's debug
        # log and libomptarget's information; while the part has time for it (the
        # benchmark comes after).
        for test in only_ours[:5]:
            if ctx.remaining() < 240:
                say(log, "no time left to rerun %s with diagnostics" % test)
                break
            diag = LitRun(ctx, "ours", [test], label="diag-" + re.sub(r"\W", "_", test),
                          diagnostics=True)
            say(log, "rerun with diagnostics: %s (%s; log: lit/%s)"
                % (test, diag.run.status(), os.path.basename(diag.log)))
    for p in problems:
        say(log, "lit: " + p)
    where = "GPU" if gpu else "host fallback (no GPU)"
    table = [
        "lit, LLVM %d libomptarget suite for nvptx64-nvidia-cuda (%s): %d tests, %d built "
        "for %s when the kit was built, %d not built, %d unsupported" % (
            n, where, lit["total"], len(built), ctx.manifest["sm"], len(lit["not_built"]),
            len(lit["unsupported"])),
        "",
        "| plugin | passed | failed | skipped |",
        "|---|---|---|---|",
        "| ours (cuda) | %d | %d | %d |" % (ours.count("pass"), ours.count("fail"),
                                           ours.count("skip")),
        "| LLVM %d cuda | %d | %d | %d |" % (n, llvm.count("pass"), llvm.count("fail"),
                                            llvm.count("skip")),
        "",
        "fails only with ours (after reruns): %s" % (", ".join(only_ours) or "none"),
        "fails only with LLVM's: %s" % (", ".join(only_llvm) or "none"),
        "fails with both: %s" % (", ".join(both) or "none"),
    ]
    table += ["rerun: %s" % n for n in rerun_notes]
    for entry in lit["not_built"]:
        table.append("not built: %s: %s" % (entry["test"], entry["reason"]))
    for entry in lit["unsupported"]:
        table.append("unsupported: %s: %s" % (entry["test"], entry["reason"]))
    detail = "ours %d/%d passed, LLVM's %d/%d; %d fail only with ours" % (
        ours.count("pass"), len(built), llvm.count("pass"), len(built), len(only_ours))
    if rerun_notes:
        detail += " (%d rerun)" % len(rerun_notes)
    return not problems, detail, table


def parse_measures(output):
    """{measure: (best, median, unit or None)} from a benchmark's
    `<measure> <best> <median> [unit]` lines; other lines are ignored."""
    measures = {}
    for line in output.splitlines():
        words = line.split()
        if len(words) not in (3, 4):
            continue
        try:
            best, median = float(words[1]), float(words[2])
        except ValueError:
            continue
        measures[words[0]] = (best, median, words[3] if len(words) == 4 else None)
    return measures


def higher_is_better(unit):
    return unit.endswith("/s")


def median(values):
    values = sorted(values)
    return values[(len(values) - 1) // 2] if values else None


def compare_plugins(runs, default_unit):
    """Ours beside LLVM 16's plugin: `runs` is {plugin: [parse_measures() of each passing
    run]}. Per measure, each plugin's value is the median over its runs of each run's
    best; the ratio is ours / LLVM's. Returns (table rows, [(measure, unit, ours, llvm,
    ratio, ours at least as good)])."""
    order = []
    for plugin_runs in runs.values():
        for measures in plugin_runs:
            order += [m for m in measures if m not in order]
    rows, facts = [], []
    for measure in order:
        unit = next((m[measure][2] for rs in runs.values() for m in rs
                     if measure in m and m[measure][2]), default_unit)
        value = {p: median([m[measure][0] for m in rs if measure in m])
                 for p, rs in runs.items()}
        ours, llvm = value.get("ours"), value.get("llvm")
        if ours is not None and llvm:
            ratio = ours / llvm
            good = ratio >= 1.0 if higher_is_better(unit) else ratio <= 1.0
            cells = "%.2f | %s" % (ratio, "yes" if good else "**no**")
        else:
            ratio, good, cells = None, None, "n/a | n/a"
        show = lambda v: "%.3f" % v if v is not None else "n/a"
        rows.append("| %s | %s | %s | %s | %s |" % (measure, unit, show(ours), show(llvm),
                                                   cells))
        facts.append((measure, unit, ours, llvm, ratio, good))
    return rows, facts


def step_bench_runtime(ctx, log):
    """Launch latency, copy throughput and the virtual-call cost (docs/BENCHMARKS.md 1g):
    each benchmark under our cuda plugin and LLVM 16's, alternately, round after round."""
    gpu = ctx.gpu.present
    rounds = 3 if gpu else 1
    if not gpu:
        say(log, "SKIPPED: runtime benchmarks on the GPU: %s; each runs once, shortened, on "
            "libomptarget's host fallback instead (which proves it runs)" % ctx.gpu.describe())
    tables, raw, failures = [], {}, []
    for bench in ctx.manifest["benchmarks"]:
        args = bench["args"] if gpu else bench["fallback_args"]
        runs = {p: [] for p in bench["plugins"]}
        for r in range(rounds):
            order = bench["plugins"] if r % 2 == 0 else list(reversed(bench["plugins"]))
            for plugin in order:
                run = ProgramRun(ctx, bench, plugin, args, folder="benchmarks",
                                 tag=".%d" % (r + 1))
                say(log, "%-14s %-5s round %d: %s  (log: benchmarks/%s)" % (
                    bench["name"], plugin, r + 1, run.cell(), os.path.basename(run.log)))
                if run.passed and not run.plugin_problem:
                    runs[plugin].append(parse_measures(run.run.output))
                elif plugin == "ours" or run.plugin_problem:
                    failures.append("%s (%s, round %d)" % (bench["name"], plugin, r + 1))
        raw[bench["name"]] = runs
        rows, facts = compare_plugins(runs, bench["unit"])
        direct = next((f[2] for f in facts if f[0] == "direct"), None)
        if direct:
            rows += ["", "ours, each against `direct`: " + ", ".join(
                "%s %.2fx" % (f[0], f[2] / direct) for f in facts
                if f[0] != "direct" and f[2] is not None)]
        passing = ", ".join("%s %d/%d" % (p, len(rs), rounds) for p, rs in runs.items())
        tables += ["", "%s (%s): %s; runs passed: %s; each plugin's value is the median of "
                   "its runs' bests" % (bench["name"], "GPU" if gpu else "host fallback, "
                                        "not a measurement", bench["measures"], passing), "",
                   "| measure | unit | ours | LLVM 16's | ours / LLVM | ours at least as "
                   "good |", "|---|---|---:|---:|---:|---|"] + rows
    with open(os.path.join(ctx.results, "runtime_bench.json"), "w") as f:
        json.dump({"gpu": gpu, "rounds": rounds, "runs": raw}, f, indent=1)
    detail = "%d benchmarks, %d rounds%s" % (
        len(ctx.manifest["benchmarks"]), rounds,
        "; failed: " + ", ".join(failures) if failures else "")
    return not failures, detail, ["Runtime benchmarks, ours beside LLVM 16's cuda plugin "
                                  "(also runtime_bench.json):"] + tables


def step_bench_load(ctx, log):
    """`__tgt_rtl_load_binary` of cubins with many indirect entries: our cuda plugin beside
    LLVM 16's, alternately in one process (docs/BENCHMARKS.md 1d)."""
    bench = ctx.manifest["load_bench"]
    if not ctx.gpu.present:
        say(log, "SKIPPED: load_binary on the GPU: %s" % ctx.gpu.describe())
        return True, "skipped (no GPU)", []
    ours = os.path.join(ctx.work.plugins_ours, "libomptarget.rtl.cuda.so")
    llvm = os.path.join(ctx.work.lib, "libomptarget.rtl.cuda.so")
    rows, failures, raw = [], [], {}
    for image in bench["images"]:
        n = image["entries"]
        cmd = [os.path.join(KIT, bench["exe"]), "--abi-only", os.path.join(KIT, image["cubin"]),
               str(n), str(bench["reps"]), ours, llvm]
        # No diagnostics: our information lines name every row of the table.
        r = ctx.run(cmd, ctx.env(diagnostics=False), log, 240)
        measures = parse_measures(r.output)
        if r.rc != 0 or "abi_ours" not in measures or "abi_llvm" not in measures:
            failures.append("%d entries: %s" % (n, r.status()))
            rows.append("| %d | FAILED: %s | | | | |" % (n, r.status()))
            continue
        raw[n] = measures
        (ours_best, ours_median, _), (llvm_best, llvm_median, _) = (measures["abi_ours"],
                                                                    measures["abi_llvm"])
        rows.append("| %d | %.2f | %.2f | %.2f | %.2f | %.2f |" % (
            n, ours_best / 1e6, ours_median / 1e6, llvm_best / 1e6, llvm_median / 1e6,
            ours_median / llvm_median))
    with open(os.path.join(ctx.results, "load_bench.json"), "w") as f:
        json.dump(raw, f, indent=1)
    table = ["load_binary on the GPU (ms; best and median of %d loads each, ours and LLVM 16's "
             "cuda plugin alternately in one process; LLVM's builds no table):" % bench["reps"],
             "", "| entries | ours, best | ours, median | LLVM's, best | LLVM's, median | "
             "ours / LLVM's (medians) |", "|---:|---:|---:|---:|---:|---:|"] + rows
    detail = "%d images%s" % (len(bench["images"]),
                              "; failed: " + ", ".join(failures) if failures else "")
    return not failures, detail, table


def step_bench(ctx, log):
    """The GPU lookup benchmark (docs/BENCHMARKS.md 1b); it checks every thread's result
    too, so a wrong lookup fails it. The kit's arguments shorten it (fewer, shorter
    launches) unless run.sh is given --full-lookup-bench."""
    bench = ctx.manifest["bench"]
    md = os.path.join(ctx.results, "gpu_lookup.md")
    cmd = [os.path.join(KIT, bench["exe"]), "--cubins", os.path.join(KIT, bench["cubins"]),
           "--json", os.path.join(ctx.results, "gpu_lookup.json"), "--markdown", md]
    if not ctx.args.full_lookup_bench:
        cmd += bench.get("args", [])
    r = ctx.run(cmd, ctx.env(), log, 420)
    table = []
    if os.path.exists(md):
        table = ["GPU lookup benchmark (docs/BENCHMARKS.md 1b):", ""] + open(md).read().splitlines()
    return r.rc == 0 and not r.timed_out, r.status(), table


def find_compute_sanitizer():
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    candidates = sorted(glob.glob("/usr/local/cuda*/bin/compute-sanitizer")) + sorted(
        glob.glob("/usr/local/cuda*/compute-sanitizer/compute-sanitizer"))
    return candidates[-1] if candidates else None


def memcheck(ctx, log, runs, reserve):
    """Each of `runs` (name, command, environment) under compute-sanitizer's memcheck,
    keeping `reserve` seconds of the part for each run still to come. Returns (passed,
    table rows), or None after a SKIPPED line when there is no GPU or no tool."""
    tool = find_compute_sanitizer()
    if not ctx.gpu.present:
        say(log, "SKIPPED: memcheck: %s" % ctx.gpu.describe())
        return None
    if not tool:
        say(log, "SKIPPED: memcheck: compute-sanitizer is neither on PATH nor under "
            "/usr/local/cuda*/bin")
        return None
    rows, ok = ["compute-sanitizer memcheck (%s):" % tool, "", "| run | result |",
                "|---|---|"], True
    for index, (name, command, env) in enumerate(runs):
        cmd = [tool, "--tool", "memcheck", "--error-exitcode", "86", "--print-limit", "100"]
        r = ctx.run(cmd + command, env, os.path.join(ctx.results, "memcheck-%s.log" % name),
                    ctx.remaining() - 5 - reserve * (len(runs) - index - 1))
        errors = re.findall(r"ERROR SUMMARY: (\d+) error", r.output)
        if "Device not supported" in r.output:
            say(log, "SKIPPED: memcheck %s: compute-sanitizer says 'Device not supported' "
                "here" % name)
            rows.append("| %s | not supported here |" % name)
            continue
        verdict = "%s errors, %s" % (errors[-1] if errors else "no summary", r.status())
        say(log, "memcheck %-28s %s (log: memcheck-%s.log)" % (name, verdict, name))
        rows.append("| %s | %s |" % (name, verdict))
        ok = ok and r.rc == 0 and not r.timed_out and bool(errors) and errors[-1] == "0"
    return ok, rows


def step_memcheck(ctx, log):
    """The CUDA test executables once more under compute-sanitizer's memcheck."""
    env = ctx.env(libraries=ctx.work.lib_for_tools, extra={
        "OMPTARGET_RS_CUDA_FIXTURES": os.path.join(KIT, ctx.manifest["fixtures"]),
        "OMPTARGET_RS_PLUGIN_DIR": ctx.work.plugins_tests,
    })
    runs = [(t["name"], [os.path.join(KIT, t["exe"])] + t["args"], env)
            for t in ctx.manifest["tests"]]
    # A minute for each executable still to run (cuda_indirect, the first, takes the
    # longest).
    result = memcheck(ctx, log, runs, 60)
    if result is None:
        return True, "skipped", []
    return result[0], "%d test executables" % len(runs), result[1]


def step_memcheck_programs(ctx, log):
    """The programs once more through our cuda plugin, under compute-sanitizer's
    memcheck (a kit without test executables)."""
    env = ctx.env(plugins=ctx.work.plugins_ours, libraries=ctx.work.lib_for_tools)
    runs = [(p["name"], [os.path.join(KIT, p["exe"])], env) for p in ctx.manifest["programs"]]
    result = memcheck(ctx, log, runs, 30)
    if result is None:
        return True, "skipped", []
    return result[0], "%d programs through ours" % len(runs), result[1]


# --------------------------------------------------------------------------------------
# The parts


def llvm_major(manifest):
    """The LLVM major whose libomptarget the kit carries."""
    return manifest.get("llvm", 16)


def steps(manifest):
    """(part, name, function, needs a GPU) of every step the kit holds, in order. A step
    that needs a GPU prints at least one SKIPPED line without one."""
    out = [(1, "kit_libraries", step_kit_libraries, False)]
    # cuda_no_driver's test checks the backend's answer either way: it never skips.
    out += [(1, t["name"], test_step(t), t["name"] != "cuda_no_driver")
            for t in manifest.get("tests", [])]
    out.append((1, "plugin_reports_devices", step_plugin_devices, True))
    optional = [
        ("doctor", (1, "doctor", step_doctor, True)),
        ("programs", (1, "programs", step_programs, True)),
        ("lit", (1, "lit_nvptx64", step_lit, True)),
        ("benchmarks", (1, "bench_runtime", step_bench_runtime, True)),
        ("load_bench", (1, "bench_load", step_bench_load, True)),
        ("bench", (1, "bench_gpu_lookup", step_bench, True)),
    ]
    out += [step for key, step in optional if key in manifest]
    if "tests" in manifest:
        out.append((2, "memcheck", step_memcheck, True))
    elif "programs" in manifest:
        out.append((2, "memcheck", step_memcheck_programs, True))
    return out


def environment_lines(manifest, gpu, work_seconds):
    built = manifest["built"]
    lines = [
        "date: %s" % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine: %s, %s, %d CPUs, Python %s" % (platform.node(), platform.platform(),
                                                 os.cpu_count() or 0,
                                                 platform.python_version()),
        "gpu: %s" % gpu.describe(),
        "kit: commit %s%s, built %s, for %s" % (
            built["commit"], " (with uncommitted changes)" if built["uncommitted_changes"] else "",
            built["date"], manifest["sm"]),
        "unpacked the kit's closure in %.1f s" % work_seconds,
    ]
    if gpu.libcuda_without_unversioned_name:
        lines.append("the driver has no libcuda.so (only libcuda.so.1): the runs get a link "
                     "to %s by that name" % gpu.libcuda_without_unversioned_name)
    smi = shutil.which("nvidia-smi")
    if smi:
        r = subprocess.run([smi], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        lines += ["", "nvidia-smi:"] + r.stdout.decode(errors="replace").splitlines()
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", default=os.path.join(KIT, "results"),
                        help="folder for the logs and the summary (default: results/ "
                             "beside run.sh)")
    parser.add_argument("--part", choices=("1", "2", "all"), default="1",
                        help="1: everything but compute-sanitizer (the default); "
                             "2: compute-sanitizer; all: both")
    parser.add_argument("--step", action="append", default=[],
                        help="run only this step (repeatable); --list shows them")
    parser.add_argument("--list", action="store_true", help="list the steps and exit")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds the run may take in all; a step still running then "
                             "is stopped and fails (default: 540 a part, to stay inside "
                             "a 10-minute command)")
    parser.add_argument("--full-lookup-bench", action="store_true",
                        help="the GPU lookup benchmark with its own defaults (longer) "
                             "instead of the kit's shortened arguments")
    parser.add_argument("--keep", action="store_true",
                        help="keep the unpacked kit (its folder is printed)")
    args = parser.parse_args()
    with open(os.path.join(KIT, "manifest.json")) as f:
        manifest = json.load(f)
    chosen = [s for s in steps(manifest)
              if (args.part == "all" or str(s[0]) == args.part)
              and (not args.step or s[1] in args.step)]
    if args.list:
        for part, name, fn, _ in steps(manifest):
            print("part %d  %-24s %s" % (part, name, (fn.__doc__ or "").split("\n")[0]))
        return 0
    start = time.time()
    results = os.path.abspath(args.results)
    os.makedirs(results, exist_ok=True)
    gpu = Gpu()
    print("runner: %s; results in %s" % (gpu.describe(), results))
    outcomes = []
    with Workspace(manifest, args.keep) as work:
        unpack_seconds = work.unpack(gpu)
        env_lines = environment_lines(manifest, gpu, unpack_seconds)
        label = "part%s" % args.part
        with open(os.path.join(results, "environment-%s.txt" % label), "w") as f:
            f.write("\n".join(env_lines) + "\n")
        limit = args.time_limit or (1080 if args.part == "all" else 540)
        ctx = Context(args, manifest, results, gpu, work, start + limit)
        for part, name, fn, needs_gpu in chosen:
            log = os.path.join(results, name + ".log")
            if os.path.exists(log):
                os.remove(log)
            print("=== %s" % name)
            t0 = time.time()
            try:
                passed, detail, table = fn(ctx, log)
            except Exception as e:  # a broken step is a failed step, with its reason
                passed, detail, table = False, "runner error: %r" % e, []
                say(log, "runner error in %s: %r" % (name, e))
            seconds = time.time() - t0
            text = open(log, errors="replace").read() if os.path.exists(log) else ""
            skipped = len(re.findall(r"SKIPPED: ", text))
            outcomes.append({"step": name, "part": part, "passed": passed, "detail": detail,
                             "skipped": skipped, "needs_gpu": needs_gpu,
                             "seconds": round(seconds, 1), "table": table})
            print("<== %s: %s (%.1f s): %s%s" % (name, "ok" if passed else "FAILED", seconds,
                                                detail, ", %d SKIPPED" % skipped if skipped else ""))
    failed = [o["step"] for o in outcomes if not o["passed"]]
    passed = len(outcomes) - len(failed)
    skipped = sum(o["skipped"] for o in outcomes)
    summary_line = "SUMMARY: %d step(s) passed, %d failed%s, %d test(s) SKIPPED" % (
        passed, len(failed), " (%s)" % " ".join(failed) if failed else "", skipped)
    lines = env_lines + ["", "| step | result | time | detail |", "|---|---|---|---|"]
    for o in outcomes:
        lines.append("| %s | %s | %.1f s | %s%s |" % (
            o["step"], "passed" if o["passed"] else "FAILED", o["seconds"], o["detail"],
            "; %d SKIPPED" % o["skipped"] if o["skipped"] else ""))
    for o in outcomes:
        if o["table"]:
            lines += [""] + o["table"]
    lines += ["", "total %.0f s" % (time.time() - start), summary_line]
    with open(os.path.join(results, "summary-%s.txt" % label), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(results, "summary-%s.json" % label), "w") as f:
        json.dump({"environment": env_lines, "gpu": gpu.present, "steps": outcomes,
                   "summary": summary_line, "kit": manifest["built"]}, f, indent=1)
    print("\n" + "\n".join(lines[len(env_lines):]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
