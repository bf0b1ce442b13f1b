// Asynchronous target regions: several `target nowait` regions in flight at once, then
// one `taskwait` (part 1); two host threads, each with its own nowait regions and its
// own taskwait (part 2). libomptarget 16 gives each deferred region its own async info,
// so on a GPU each runs on a queue (a stream) of its own and nothing waits until the
// taskwait; each region calls an indirect function, and every result is checked on the
// host after the wait.
//
// Built by `cargo xtask gpu-bundle` with clang-16 for sm_90 (the device RTL linked by
// nvlink; see xtask/src/nvptx_program.rs) and run by the kit's run.sh.
#include <stdint.h>

#include "kit_program.h"
#include "omp_indirect.h"

#pragma omp declare target
int bias = 1000; // device copy; the host sets its own to 0
#pragma omp end declare target

// Each function gives another result, and the device version 1000 more (its bias).
#pragma omp declare target
int twice(int x) { return 2 * x + bias; }
int thrice_plus_one(int x) { return 3 * x + 1 + bias; }
int minus_seven(int x) { return x - 7 + bias; }
int squared_low(int x) { return (x & 0xff) * (x & 0xff) + bias; }
#pragma omp end declare target
OMP_DECLARE_INDIRECT(twice)
OMP_DECLARE_INDIRECT(thrice_plus_one)
OMP_DECLARE_INDIRECT(minus_seven)
OMP_DECLARE_INDIRECT(squared_low)

typedef int (*unary_fn)(int);
#define NFN 4
#define N (1 << 16)
// Part 1: regions in flight at once.
#define REGIONS 8
// Part 2: host threads, and regions each.
#define THREADS 2
#define PER_THREAD 4

static unary_fn fns[NFN] = {twice, thrice_plus_one, minus_seven, squared_low};

// Count (and print the first few of) the wrong results of one region: out[i] must be
// fn(i + base) plus the bias of where it ran.
static long check(const char *part, int region, const int *out, unary_fn fn, int base,
                  int bias_ran) {
  long wrong = 0;
  for (int i = 0; i < N; ++i) {
    int want = fn(i + base) + bias_ran;
    if (out[i] != want && wrong++ < 3)
      printf("nowait: WRONG: %s, region %d, i %d: got %d, want %d\n", part, region, i,
             out[i], want);
  }
  return wrong;
}

int main(void) {
  bias = 0;
  static int out[REGIONS][N];
  static int per_thread[THREADS][PER_THREAD][N];
  int on_host = 1;
#pragma omp target map(from : on_host)
  on_host = omp_is_initial_device();
  long failures = kit_report_placement("nowait", on_host);
  long checked = 0;
  int bias_ran = on_host ? 0 : 1000;

  // Part 1: every region is deferred; none has to finish before the taskwait.
  for (int k = 0; k < REGIONS; ++k)
    for (int i = 0; i < N; ++i)
      out[k][i] = -1;
  double start = omp_get_wtime();
  for (int k = 0; k < REGIONS; ++k) {
    int *o = out[k];
    int which = k % NFN, base = 1000 * k;
    // The host addresses travel as data (mapped), as a program's function pointers do.
#pragma omp target teams distribute parallel for nowait map(to : fns[0 : NFN])          \
    map(from : o[0 : N]) firstprivate(which, base)
    for (int i = 0; i < N; ++i)
      o[i] = OMP_INDIRECT_CALL(unary_fn, fns[which])(i + base);
  }
#pragma omp taskwait
  double seconds = omp_get_wtime() - start;
  long wrong = 0;
  for (int k = 0; k < REGIONS; ++k)
    wrong += check("nowait regions", k, out[k], fns[k % NFN], 1000 * k, bias_ran);
  printf("nowait: %d nowait regions of %d calls, one taskwait, %.3f s: %ld wrong\n",
         REGIONS, N, seconds, wrong);
  checked += (long)REGIONS * N;
  failures += wrong;

  // Part 2: two host threads, each with its own deferred regions and its own wait (each
  // region has an async info, and so a queue, of its own).
  long thread_wrong[THREADS] = {0};
  int threads_seen = 0;
#pragma omp parallel num_threads(THREADS)
  {
#pragma omp single
    threads_seen = omp_get_num_threads();
    for (int t = omp_get_thread_num(); t < THREADS; t += omp_get_num_threads()) {
      for (int k = 0; k < PER_THREAD; ++k) {
        int *o = per_thread[t][k];
        for (int i = 0; i < N; ++i)
          o[i] = -1;
        int which = (t + k) % NFN, base = 100000 * (t + 1) + k;
#pragma omp target teams distribute parallel for nowait map(to : fns[0 : NFN])          \
    map(from : o[0 : N]) firstprivate(which, base)
        for (int i = 0; i < N; ++i)
          o[i] = OMP_INDIRECT_CALL(unary_fn, fns[which])(i + base);
      }
#pragma omp taskwait
      for (int k = 0; k < PER_THREAD; ++k)
        thread_wrong[t] += check(t == 0 ? "thread 0" : "thread 1", k, per_thread[t][k],
                                 fns[(t + k) % NFN], 100000 * (t + 1) + k, bias_ran);
    }
  }
  for (int t = 0; t < THREADS; ++t) {
    printf("nowait: host thread %d of %d: %d nowait regions, own taskwait: %ld wrong\n",
           t, threads_seen, PER_THREAD, thread_wrong[t]);
    failures += thread_wrong[t];
  }
  checked += (long)THREADS * PER_THREAD * N;
  return kit_finish("nowait", checked, failures);
}
