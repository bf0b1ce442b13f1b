#!/usr/bin/env python3
"""Compile once here, replay there: the compiler (and `ar`) of LLVM 16's libomptarget lit
suite for nvptx64-nvidia-cuda in the GPU kit.

LLVM's lit tests compile and run in one RUN line. The build machine has clang 16 and no
GPU; the GPU machine has a GPU and no clang. So lit runs twice with the same tests and
the same RUN lines (lit.site.cfg.py beside this file configures both):

  build  (here, `cargo xtask gpu-bundle`): each compile runs the real clang 16 with the
         GPU's flags added, and its output file, stdout, stderr and exit status are
         stored under $KIT_LIT_STORE, keyed by the output's path below the exec root
         and by how many compiles of that output came before it in the test.
  check  (there, run.sh): each compile writes back the stored output file, stdout,
         stderr and exit status of the same compile; the programs then run for real.

Usage: lit_tool.py build|check TOOL ARGS...   (TOOL: a compiler, or `ar`)
Environment (set by lit.site.cfg.py): KIT_LIT_STORE, KIT_LIT_EXEC_ROOT, and in build
mode KIT_LIT_OFFLOAD_FLAGS (a JSON list added to compiles for nvptx64-nvidia-cuda).
"""
import json
import os
import shutil
import subprocess
import sys

OFFLOAD_TARGET = "-fopenmp-targets=nvptx64-nvidia-cuda"


def output_of(tool, args):
    """The file this invocation writes, as given on its command line."""
    if os.path.basename(tool) == "ar":
        # ar OPERATIONS ARCHIVE MEMBERS...
        if len(args) < 2:
            sys.exit("lit_tool: cannot tell the archive of: ar " + " ".join(args))
        return args[1]
    output = None
    for i, arg in enumerate(args):
        if arg == "-o" and i + 1 < len(args):
            output = args[i + 1]
        elif arg.startswith("-o") and len(arg) > 2:
            output = arg[2:]
    if output is None:
        if "-c" in args or "-S" in args or "-E" in args:
            sys.exit("lit_tool: a compile without -o: " + " ".join(args))
        output = "a.out"
    return output


def store_key(output):
    """(the stored compile's folder, its sequence number) for this test's next compile."""
    exec_root = os.environ["KIT_LIT_EXEC_ROOT"]
    path = os.path.abspath(output)
    relative = os.path.relpath(path, exec_root)
    if relative.startswith(".."):
        sys.exit("lit_tool: output %s is outside the exec root %s" % (path, exec_root))
    # Compiles of one test run one after another: a counter beside the output is safe.
    counter = path + ".kit-seq"
    seq = 0
    if os.path.exists(counter):
        with open(counter) as f:
            seq = int(f.read().strip() or 0)
    with open(counter, "w") as f:
        f.write(str(seq + 1))
    return os.path.join(os.environ["KIT_LIT_STORE"], "%s.%d" % (relative, seq))


def build(tool, args):
    output = output_of(tool, args)
    entry = store_key(output)
    command = [tool] + args
    if OFFLOAD_TARGET in args:
        command += json.loads(os.environ.get("KIT_LIT_OFFLOAD_FLAGS", "[]"))
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.makedirs(entry, exist_ok=True)
    with open(os.path.join(entry, "stdout"), "wb") as f:
        f.write(proc.stdout)
    with open(os.path.join(entry, "stderr"), "wb") as f:
        f.write(proc.stderr)
    with open(os.path.join(entry, "command.json"), "w") as f:
        json.dump(command, f)
    if proc.returncode == 0 and os.path.isfile(output):
        shutil.copy2(output, os.path.join(entry, "output"))
    # Written last: a stored compile is complete when it has its exit status.
    with open(os.path.join(entry, "rc"), "w") as f:
        f.write(str(proc.returncode))
    sys.stdout.buffer.write(proc.stdout)
    sys.stderr.buffer.write(proc.stderr)
    return proc.returncode


def check(tool, args):
    output = output_of(tool, args)
    entry = store_key(output)
    if not os.path.isfile(os.path.join(entry, "rc")):
        sys.stderr.write(
            "lit_tool: no stored compile %s: the kit was built from other tests or RUN "
            "lines\n" % entry
        )
        return 127
    with open(os.path.join(entry, "rc")) as f:
        rc = int(f.read().strip())
    stored = os.path.join(entry, "output")
    if os.path.isfile(stored):
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        shutil.copy2(stored, output)
    with open(os.path.join(entry, "stdout"), "rb") as f:
        sys.stdout.buffer.write(f.read())
    with open(os.path.join(entry, "stderr"), "rb") as f:
        sys.stderr.buffer.write(f.read())
    return rc


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("build", "check"):
        sys.exit(__doc__)
    mode, tool, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    sys.stdout.flush()
    rc = build(tool, args) if mode == "build" else check(tool, args)
    sys.stdout.flush()
    sys.stderr.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main())
