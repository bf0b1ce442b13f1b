// Stress: many teams x threads, each iteration calling a pseudo-random one of 64
// indirect functions through its host address, every result checked on the host; each
// iteration also translates a pointer that is not in the table (null, unregistered
// functions, addresses strictly inside the table's range between two keys, the largest
// address), which must come back unchanged. Three rounds with different seeds.
//
// Built by `cargo xtask gpu-bundle` with clang-16 for sm_90 (the device RTL linked by
// nvlink; see harness/src/nvptx_program.rs) and run by the kit's run.sh.
#include <stdint.h>

#include "kit_program.h"
#include "omp_indirect.h"

#pragma omp declare target
int bias = 1000; // device copy; the host sets its own to 0
#pragma omp end declare target

// f<i>(x) = x * (i % 7 + 2) + (i * 37) % 101 + bias: every function gives another result.
#define DEFINE(i)                                                                      \
  _Pragma("omp declare target") int f##i(int x) {                                     \
    return x * ((i) % 7 + 2) + ((i) * 37) % 101 + bias;                               \
  }                                                                                    \
  _Pragma("omp end declare target") OMP_DECLARE_INDIRECT(f##i)
#define DEFINE8(a)                                                                     \
  DEFINE(a##0) DEFINE(a##1) DEFINE(a##2) DEFINE(a##3) DEFINE(a##4) DEFINE(a##5)        \
  DEFINE(a##6) DEFINE(a##7)
DEFINE8(1) DEFINE8(2) DEFINE8(3) DEFINE8(4) DEFINE8(5) DEFINE8(6) DEFINE8(7) DEFINE8(8)
#define NAME8(a) f##a##0, f##a##1, f##a##2, f##a##3, f##a##4, f##a##5, f##a##6, f##a##7

// Not registered: their addresses must come back unchanged.
int host_only_a(int x) { return x - 1; }
int host_only_b(int x) { return x - 2; }

typedef int (*unary_fn)(int);
#define NFN 64
#define NSTRAY 8
#define N (1 << 20)
#define TEAMS 1024
#define THREADS 256
#define ROUNDS 3

static uint32_t mix(uint32_t x) { // a 32-bit integer hash (lowbias32)
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}
#pragma omp declare target to(mix)

int main(void) {
  bias = 0;
  static unary_fn fns[NFN] = {NAME8(1), NAME8(2), NAME8(3), NAME8(4),
                              NAME8(5), NAME8(6), NAME8(7), NAME8(8)};
  // Keys strictly inside the table's range: one byte past a function's start lies
  // between two keys (no two functions are one byte apart).
  uint64_t lowest = UINT64_MAX, highest = 0;
  for (int k = 0; k < NFN; ++k) {
    uint64_t a = (uint64_t)(uintptr_t)fns[k];
    lowest = a < lowest ? a : lowest;
    highest = a > highest ? a : highest;
  }
  uint64_t strays[NSTRAY] = {0,
                             (uint64_t)(uintptr_t)&host_only_a,
                             (uint64_t)(uintptr_t)&host_only_b,
                             (uint64_t)(uintptr_t)fns[0] + 1,
                             (uint64_t)(uintptr_t)fns[NFN / 2] + 1,
                             lowest + 1,
                             highest - 1,
                             UINT64_MAX};
  static int out[N];
  static uint64_t stray_out[N];
  int on_host = 1;
#pragma omp target map(from : on_host)
  on_host = omp_is_initial_device();
  long failures = kit_report_placement("stress", on_host);
  long checked = 0;
  int bias_ran = on_host ? 0 : 1000;

  for (uint32_t round = 0; round < ROUNDS; ++round) {
    uint32_t seed = 0x9e3779b9U * (round + 1);
    double start = omp_get_wtime();
#pragma omp target teams distribute parallel for num_teams(TEAMS) thread_limit(THREADS) \
    map(to : fns[0 : NFN], strays[0 : NSTRAY]) map(from : out[0 : N], stray_out[0 : N])
    for (int i = 0; i < N; ++i) {
      uint32_t h = mix((uint32_t)i ^ seed);
      out[i] = OMP_INDIRECT_CALL(unary_fn, fns[h % NFN])((int)(h >> 16));
      stray_out[i] = (uint64_t)(uintptr_t)omp_indirect_translate(
          (void *)(uintptr_t)strays[(h >> 8) % NSTRAY]);
    }
    double seconds = omp_get_wtime() - start;
    long wrong_calls = 0, wrong_strays = 0;
    for (int i = 0; i < N; ++i) {
      uint32_t h = mix((uint32_t)i ^ seed);
      int want = fns[h % NFN]((int)(h >> 16)) + bias_ran;
      uint64_t stray = strays[(h >> 8) % NSTRAY];
      if (out[i] != want && wrong_calls++ < 5)
        printf("stress: WRONG: round %u, i %d: fns[%d](%d) gave %d, want %d\n", round,
               i, (int)(h % NFN), (int)(h >> 16), out[i], want);
      if (stray_out[i] != stray && wrong_strays++ < 5)
        printf("stress: WRONG: round %u, i %d: stray %#llx came back as %#llx\n", round,
               i, (unsigned long long)stray, (unsigned long long)stray_out[i]);
    }
    printf("stress: round %u: %d calls over %d functions and %d stray-pointer "
           "translations by %d teams x %d threads in %.3f s: %ld wrong calls, %ld "
           "changed strays\n",
           round, N, NFN, N, TEAMS, THREADS, seconds, wrong_calls, wrong_strays);
    checked += 2L * N;
    failures += wrong_calls + wrong_strays;
  }
  return kit_finish("stress", checked, failures);
}
