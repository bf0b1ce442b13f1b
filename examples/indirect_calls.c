// Indirect calls on an offload device through host function pointers, with clang 16
// (no `indirect` clause) and host-plugin/include/omp_indirect.h.
//
// Each function adds `bias`, a declare-target global whose host copy is 0 and whose device
// copy is 1000 (its initial value: the host sets its own copy to 0 and never updates the
// device's), so every result says which version ran: device versions give >= 1000.
//
// Build (what `cargo xtask demo` does):
//   clang-16 -O1 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -I host-plugin/include \
//     -Xoffload-linker-x86_64-pc-linux-gnu --undefined=__kmpc_target_translate_fptr \
//     -Xoffload-linker-x86_64-pc-linux-gnu \
//     target/device/x86_64-unknown-linux-gnu/libdevice_rtl.a \
//     examples/indirect_calls.c -o indirect_calls
// clang 16's linker wrapper links the x86_64 device image as
// `clang -shared ... -Wl,<each -Xoffload-linker arg> <device objects>`: the archive lands
// before the objects, so `--undefined` is what makes the linker take the lookup from it.
// For an NVIDIA GPU (what `cargo xtask demo` does when nvidia-smi reports one): clang-16
// -fopenmp-targets=nvptx64-nvidia-cuda -Xopenmp-target -march=sm_90, with the device
// RTL's cubin packed by clang-offload-packager and embedded in a host object that is
// linked in (nvlink takes it from there; see harness/src/demo.rs).
// Where no offload device exists, libomptarget runs the region on the host: that counts
// as a failure unless OMPTARGET_RS_ALLOW_HOST_FALLBACK=1 (the GPU kit sets it in a bare
// root without a GPU), and then the host versions must give the results.
// Run through our plugin:
//   LD_LIBRARY_PATH=target/plugin LIBOMPTARGET_INFO=16 ./indirect_calls
// (target/plugin must hold the .nextgen.so names too: libomptarget 16 tries those first,
// and LLVM's own libomptarget.rtl.x86_64.nextgen.so would win through the rpath.)
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omp_indirect.h"

#pragma omp declare target
int bias = 1000;
int add_one(int x) { return x + 1 + bias; }
int twice(int x) { return 2 * x + bias; }
int square(int x) { return x * x + bias; }
#pragma omp end declare target

OMP_DECLARE_INDIRECT(add_one)
OMP_DECLARE_INDIRECT(twice)
OMP_DECLARE_INDIRECT(square)

// Not registered: its pointer must come back from the lookup unchanged.
int host_only(int x) { return -x; }

typedef int (*unary_fn)(int);
#define N 3

int main(void) {
  bias = 0; // the host copy only
  unary_fn fns[N] = {add_one, twice, square};
  const char *names[N] = {"add_one", "twice", "square"};
  int results[N] = {0};
  uint64_t translated[N] = {0};
  uint64_t host_only_addr = (uint64_t)(uintptr_t)&host_only;
  uint64_t unregistered_out = 0;
  uint64_t null_out = 1;
  int on_host = 1;

#pragma omp target map(to : fns[0 : N]) map(from : results[0 : N], translated[0 : N])  \
    map(from : unregistered_out, null_out, on_host)
  {
    on_host = omp_is_initial_device();
    for (int i = 0; i < N; ++i) {
      translated[i] = (uint64_t)(uintptr_t)omp_indirect_translate((void *)fns[i]);
      results[i] = OMP_INDIRECT_CALL(unary_fn, fns[i])(i + 2);
    }
    unregistered_out = (uint64_t)(uintptr_t)omp_indirect_translate(
        (void *)(uintptr_t)host_only_addr);
    null_out = (uint64_t)(uintptr_t)omp_indirect_translate(NULL);
  }

  int failures = 0;
  const char *allow = getenv("OMPTARGET_RS_ALLOW_HOST_FALLBACK");
  int fallback_allowed = allow != NULL && strcmp(allow, "1") == 0;
  printf("offload devices: %d; target region ran on %s\n", omp_get_num_devices(),
         on_host ? (fallback_allowed ? "the host (fallback, allowed)" : "the host (fallback!)")
                 : "offload device 0");
  failures += on_host && !fallback_allowed;
  // The version that ran adds its copy of `bias`: 1000 on the device, 0 on the host.
  int bias_ran = on_host ? 0 : 1000;
  for (int i = 0; i < N; ++i) {
    int host_result = fns[i](i + 2);
    int ok = results[i] == host_result + bias_ran;
    printf("%-8s host %p -> device %#llx: device result %d, host result %d: %s\n",
           names[i], (void *)fns[i], (unsigned long long)translated[i], results[i],
           host_result,
           ok ? (on_host ? "host version (fallback)" : "device version") : "WRONG");
    failures += !ok;
  }
  int pass_through = unregistered_out == host_only_addr;
  printf("unregistered %p -> %#llx: %s\n", (void *)&host_only,
         (unsigned long long)unregistered_out, pass_through ? "unchanged" : "WRONG");
  printf("null -> %#llx: %s\n", (unsigned long long)null_out,
         null_out == 0 ? "unchanged" : "WRONG");
  failures += !pass_through + (null_out != 0);
  printf("%s\n", failures ? "FAILED" : "PASSED");
  return failures != 0;
}
