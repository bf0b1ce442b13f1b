#!/usr/bin/python3
"""The lit suites' compile cache: `compile_cache.py CACHE RUN_DIR CLANG ARGS...`.

`cargo xtask test` runs each libomptarget lit suite two or three times (through LLVM's
plugin, ours, ours on the isolated host device). The plugin is chosen when a test's
program runs, not when it is built: the compile commands are the same in every run but
for the run's own folder. So the first run compiles, and the later runs of the same
suite in the same `xtask` process take the very files it made.

The key of a compile is CLANG, the working folder and every argument with the run's
folder RUN_DIR written as @RUN@, the compiler's environment variables, and the SHA-256
of every argument that is a file (the test's source). The value is the `-o` output, stdout and stderr, kept only for a
compile that exited 0 and wrote a regular file. A command this cannot key exactly (no
single `-o`, side outputs, standard input) runs the compiler as it is, and so does one
that reads anything from the run's own folder (an object or a shared library an earlier
command of the test made there): a link records such a library by its path, which is
this run's, and a program taken from another run would load the other run's library.

Each call appends `hit` or `miss` to CACHE/stats, which the harness reports.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

# Arguments whose command writes more than its `-o` file, or reads standard input.
UNKEYED_PREFIXES = ("-save-temps", "-M", "-gsplit-dwarf", "-ftime-trace", "-###")
# The driver's environment: what else changes its output.
COMPILER_ENV = (
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "LIBRARY_PATH",
    "COMPILER_PATH",
    "SOURCE_DATE_EPOCH",
)


def output_of(args):
    """The single `-o` output of `args`, or None."""
    outputs = []
    for i, arg in enumerate(args):
        if arg == "-o" and i + 1 < len(args):
            outputs.append(args[i + 1])
        elif arg.startswith("-o") and len(arg) > 2:
            outputs.append(arg[2:])
    return outputs[0] if len(outputs) == 1 else None


def file_digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def key_of(clang, run_dir, args, output):
    """The compile's key, or None when it cannot be keyed exactly."""
    if any(a == "-" or a.startswith(UNKEYED_PREFIXES) for a in args):
        return None
    inputs = [a for i, a in enumerate(args) if not (a == output and i > 0 and args[i - 1] == "-o")]
    if any(run_dir in a for a in inputs):
        return None
    key = hashlib.sha256()

    def part(text):
        key.update(text.replace(run_dir, "@RUN@").encode("utf-8", "surrogateescape"))
        key.update(b"\0")

    part(clang)
    part(os.getcwd())
    for var in COMPILER_ENV:
        part(f"{var}={os.environ.get(var, '')}")
    for i, arg in enumerate(args):
        is_output = arg == output and i > 0 and args[i - 1] == "-o"
        part("@OUTPUT@" if is_output else arg)
        if not is_output and os.path.isfile(arg):
            part(file_digest(arg))
    return key.hexdigest()


def count(cache, what):
    with open(os.path.join(cache, "stats"), "a") as f:
        f.write(what + "\n")


def replay(entry, output):
    tmp = f"{output}.cache-{os.getpid()}"
    shutil.copy2(os.path.join(entry, "output"), tmp)
    os.replace(tmp, output)
    for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
        with open(os.path.join(entry, name), "rb") as f:
            stream.buffer.write(f.read())
        stream.flush()


def store(cache, entry, output, stdout, stderr):
    """Keeps the compile's results under `entry`, made whole under a temporary name."""
    tmp = tempfile.mkdtemp(dir=cache, prefix=".entry-")
    shutil.copy2(output, os.path.join(tmp, "output"))
    for name, data in (("stdout", stdout), ("stderr", stderr)):
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(data)
    try:
        os.rename(tmp, entry)
    except OSError:
        # Another worker stored the same compile first.
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    cache, run_dir, clang = sys.argv[1:4]
    args = sys.argv[4:]
    output = output_of(args)
    key = key_of(clang, run_dir, args, output) if output else None
    if key is None:
        os.execv(clang, [clang] + args)
    entry = os.path.join(cache, key)
    if os.path.isdir(entry):
        replay(entry, output)
        count(cache, "hit")
        return 0
    done = subprocess.run([clang] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sys.stdout.buffer.write(done.stdout)
    sys.stdout.flush()
    sys.stderr.buffer.write(done.stderr)
    sys.stderr.flush()
    if done.returncode == 0 and os.path.isfile(output):
        store(cache, entry, output, done.stdout, done.stderr)
    count(cache, "miss")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
