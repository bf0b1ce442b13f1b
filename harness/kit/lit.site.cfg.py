# lit.site.cfg.py for LLVM's libomptarget suite on nvptx64-nvidia-cuda, in the GPU
# kit: LLVM 16's, or LLVM 18's (kit-lit.json's `llvm`). One file for both runs, told
# apart by kit-lit.json beside it:
#   build (here, written by `cargo xtask gpu-bundle`): compiles run clang N for the
#         GPU through lit_tool.py, which stores each result; programs are not run and
#         FileCheck/not do nothing (there is no GPU here).
#   check (on the GPU machine, written by runner.py): compiles replay the stored results
#         through lit_tool.py; programs run, FileCheck and `not` check them.
# Everything else (target, features, substitutions) is the same in both, so both runs
# see the same tests and RUN lines. The values stand for those
# openmp/libomptarget/test/CMakeLists.txt would configure.
import json
import os
import shutil

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "kit-lit.json")) as f:
    kit = json.load(f)
mode = kit["mode"]
assert mode in ("build", "check"), mode
llvm = kit.get("llvm", 16)
assert llvm in (16, 18), llvm
noop = shutil.which("true") or "/bin/true"
tool = "%s %s %s" % (kit["python"], kit["tool"], mode)

config.test_c_compiler = "%s %s" % (tool, kit["c_compiler"])
config.test_cxx_compiler = "%s %s" % (tool, kit["cxx_compiler"])
config.test_compiler_features = kit["compiler_features"]
config.test_openmp_flags = "-fopenmp -pthread"
config.test_extra_flags = ""
config.cuda_path = ""
config.cuda_libdir = ""
config.cuda_test_arch = kit["cuda_test_arch"]
config.libomptarget_obj_root = here
config.library_dir = kit["library_dir"]
config.omp_header_directory = kit["omp_header_dir"]
config.omp_host_rtl_directory = kit["library_dir"]
config.llvm_lib_directory = kit["library_dir"]
config.operating_system = "Linux"
# LIBOMPTARGET_ALL_TARGETS of openmp/libomptarget/CMakeLists.txt (LLVM 16; LLVM 18
# has no amdgcn-amd-amdhsa-LTO).
config.libomptarget_all_targets = """
    aarch64-unknown-linux-gnu aarch64-unknown-linux-gnu-LTO
    amdgcn-amd-amdhsa amdgcn-amd-amdhsa-LTO
    powerpc64le-ibm-linux-gnu powerpc64le-ibm-linux-gnu-LTO
    powerpc64-ibm-linux-gnu powerpc64-ibm-linux-gnu-LTO
    x86_64-pc-linux-gnu x86_64-pc-linux-gnu-LTO
    nvptx64-nvidia-cuda nvptx64-nvidia-cuda-LTO nvptx64-nvidia-cuda-JIT-LTO
""".split()
if llvm >= 18:
    config.libomptarget_all_targets.remove("amdgcn-amd-amdhsa-LTO")
config.libomptarget_current_target = "nvptx64-nvidia-cuda"
config.libomptarget_filecheck = kit["filecheck"] if mode == "check" else noop
config.libomptarget_not = kit["not"] if mode == "check" else noop
# Debian builds libomptarget without LIBOMPTARGET_ENABLE_DEBUG.
config.libomptarget_debug = False
if llvm >= 18:
    # What 18's lit.site.cfg.in adds (as tests/lit/lit.site.cfg.18.in, the x86_64 run):
    # no flang; no AMD GPU; the device runtime archive's folder; OMPT (Debian's
    # libomptarget.so.18.1 has ompt_libomptarget_connect); no GPU libc.
    config.test_fortran_compiler = ""
    config.amdgpu_test_arch = ""
    config.llvm_library_dir = kit["library_dir"]
    config.llvm_library_intdir = kit["library_dir"]
    config.has_libomptarget_ompt = True
    config.libomptarget_has_libc = False
    config.bin_llvm_tools_dir = os.path.dirname(config.libomptarget_filecheck)

# lit gives tests a clean environment: what lit_tool.py needs, and what the run needs
# (the library search path that picks the plugin, our plugin's load marker).
config.environment["KIT_LIT_STORE"] = kit["store"]
config.environment["KIT_LIT_EXEC_ROOT"] = here
config.environment["KIT_LIT_OFFLOAD_FLAGS"] = json.dumps(kit.get("offload_flags", []))
for name, value in kit.get("environment", {}).items():
    config.environment[name] = value

lit_config.load_config(config, kit["upstream_lit_cfg"])

if llvm >= 18:
    # 18's lit.cfg points clang at <library_dir>/DeviceRTL/, where LLVM's build tree has
    # the device runtime's bitcode; Debian installs it in the lib folder itself.
    in_build_tree = "--libomptarget-nvptx-bc-path=%s/DeviceRTL" % config.library_dir
    installed = "--libomptarget-nvptx-bc-path=%s" % config.library_dir
    config.substitutions = [
        (pattern, replacement.replace(in_build_tree, installed))
        for pattern, replacement in config.substitutions
    ]

# The archiver is a command of its own in one test (offloading/static_linking.c). lit
# has put its `%dbg(RUN: at line N)` marker before the command when this applies.
config.substitutions.append((r"^((?:%dbg\([^)]*\))?\s*)ar ", r"\1%s ar " % tool))
if mode == "build":
    # Nothing runs here: the run substitutions do nothing (FileCheck and `not` already
    # do nothing), so a RUN line succeeds exactly when its compiles do.
    runs = ("%libomptarget-run-nvptx64-nvidia-cuda", "%libomptarget-run-fail-nvptx64-nvidia-cuda")
    config.substitutions = [
        (pattern, noop if pattern in runs else replacement)
        for pattern, replacement in config.substitutions
    ]
