// The seed design's other way in: the host hands the plugin a whole table through
// `__tgt_rtl_set_function_ptr_map(device, size, table)` instead of offload entries.
//
// 1. A target region reports the device addresses of three declare-target functions,
//    none of them registered as indirect (no offload entry names them).
// 2. The program finds the plugin libomptarget loaded that has the devices (the cuda
//    plugin on a GPU machine; dl_iterate_phdr), and hands it the table
//    {host address -> device address}.
// 3. Calls through the host addresses must reach the device versions; an unregistered
//    pointer comes back unchanged.
// 4. A second table maps the functions the other way round (neg -> cube's device
//    version, ...): the calls must follow it, so the table in use is the one handed over.
//
// LLVM's own cuda plugin has no __tgt_rtl_set_function_ptr_map: there the program says
// so and fails. Built and run by the GPU kit (cargo xtask gpu-bundle).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>

#include "kit_program.h"
#include "omp_indirect.h"

#pragma omp declare target
int bias = 1000; // device copy; the host sets its own to 0
int neg(int x) { return -x + bias; }
int cube(int x) { return x * x * x + bias; }
int plus7(int x) { return x + 7 + bias; }
#pragma omp end declare target

int host_only(int x) { return x; } // never in any table

typedef int (*unary_fn)(int);
struct fptr_map_entry { // the device RTL's row: {int64 host_ptr; int64 tgt_ptr}
  int64_t host_ptr;
  int64_t tgt_ptr;
};
typedef void (*set_map_fn)(int32_t, uint64_t, struct fptr_map_entry *);
#define N 3

// The loaded plugin that has devices (the one running the program's target regions).
static char plugin_path[4096];
static int find_plugin(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  if (!info->dlpi_name || !strstr(info->dlpi_name, "libomptarget.rtl."))
    return 0;
  void *handle = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  int (*count)(void) =
      handle ? (int (*)(void))dlsym(handle, "__tgt_rtl_number_of_devices") : NULL;
  int devices = count ? count() : 0;
  if (handle)
    dlclose(handle); // drops the reference RTLD_NOLOAD took; libomptarget keeps its own
  if (devices <= 0)
    return 0;
  snprintf(plugin_path, sizeof plugin_path, "%s", info->dlpi_name);
  return 1;
}

// Runs every function through its host address on the device; returns the failures.
static long call_all(const char *label, unary_fn *fns, const unary_fn *expect_fns,
                     int bias_ran, long *checked) {
  int results[N];
  uint64_t stray = (uint64_t)(uintptr_t)&host_only, stray_out = 0;
#pragma omp target map(to : fns[0 : N]) map(from : results[0 : N], stray_out)
  {
    for (int i = 0; i < N; ++i)
      results[i] = OMP_INDIRECT_CALL(unary_fn, fns[i])(i + 3);
    stray_out = (uint64_t)(uintptr_t)omp_indirect_translate((void *)(uintptr_t)stray);
  }
  long failures = 0;
  for (int i = 0; i < N; ++i) {
    int want = expect_fns[i](i + 3) + bias_ran;
    printf("function_ptr_map: %s: call %d through host %p gave %d, want %d: %s\n", label,
           i, (void *)fns[i], results[i], want, results[i] == want ? "ok" : "WRONG");
    failures += results[i] != want;
  }
  printf("function_ptr_map: %s: unregistered %#llx -> %#llx: %s\n", label,
         (unsigned long long)stray, (unsigned long long)stray_out,
         stray_out == stray ? "unchanged" : "WRONG");
  failures += stray_out != stray;
  *checked += N + 1;
  return failures;
}

int main(void) {
  bias = 0;
  unary_fn fns[N] = {neg, cube, plus7};
  uint64_t device_addr[N] = {0};
  int on_host = 1;
#pragma omp target map(from : device_addr[0 : N], on_host)
  {
    on_host = omp_is_initial_device();
    device_addr[0] = (uint64_t)(uintptr_t)&neg;
    device_addr[1] = (uint64_t)(uintptr_t)&cube;
    device_addr[2] = (uint64_t)(uintptr_t)&plus7;
  }
  long checked = 0;
  long failures = kit_report_placement("function_ptr_map", on_host);
  int bias_ran = on_host ? 0 : 1000;

  dl_iterate_phdr(find_plugin, NULL);
  printf("function_ptr_map: plugin with devices: %s\n",
         plugin_path[0] ? plugin_path : "(none)");
  if (on_host) {
    // No device: no table to install; the host versions run through host pointers.
    printf("function_ptr_map: host fallback: no device table to hand over\n");
    failures += call_all("host fallback", fns, fns, bias_ran, &checked);
    return kit_finish("function_ptr_map", checked, failures);
  }
  // Stays open (RTLD_NOLOAD: only the plugin libomptarget loaded) while the map is used.
  void *plugin = plugin_path[0] ? dlopen(plugin_path, RTLD_LAZY | RTLD_NOLOAD) : NULL;
  set_map_fn set_map =
      plugin ? (set_map_fn)dlsym(plugin, "__tgt_rtl_set_function_ptr_map") : NULL;
  if (!set_map) {
    printf("function_ptr_map: WRONG: the plugin with devices has no "
           "__tgt_rtl_set_function_ptr_map\n");
    return kit_finish("function_ptr_map", checked + 1, failures + 1);
  }

  struct fptr_map_entry table[N];
  for (int i = 0; i < N; ++i)
    table[i] = (struct fptr_map_entry){(int64_t)(uintptr_t)fns[i], (int64_t)device_addr[i]};
  set_map(0, N, table);
  failures += call_all("table as built", fns, fns, bias_ran, &checked);

  // Rotate the targets: neg -> cube, cube -> plus7, plus7 -> neg.
  unary_fn rotated[N] = {cube, plus7, neg};
  for (int i = 0; i < N; ++i)
    table[i].tgt_ptr = (int64_t)device_addr[(i + 1) % N];
  set_map(0, N, table);
  failures += call_all("rotated table", fns, rotated, bias_ran, &checked);
  return kit_finish("function_ptr_map", checked, failures);
}
