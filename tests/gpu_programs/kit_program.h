/*
 * kit_program.h: what the GPU kit's clang-16 OpenMP programs share.
 *
 * Where a program's target regions ran decides which results are right: each program's
 * declare-target global `bias` keeps 1000 on the device and is set to 0 on the host, so
 * a device version of a function gives 1000 more than the host version.
 *
 * Running on the host (libomptarget found no device and fell back) is a failure unless
 * OMPTARGET_RS_ALLOW_HOST_FALLBACK=1: the kit sets it only where no GPU exists (a bare
 * root on a CPU machine), where the programs still prove that libomptarget 16 and its
 * libraries load and that the host versions give correct results.
 */
#ifndef KIT_PROGRAM_H
#define KIT_PROGRAM_H

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int kit_host_fallback_allowed(void) {
  const char *v = getenv("OMPTARGET_RS_ALLOW_HOST_FALLBACK");
  return v != NULL && strcmp(v, "1") == 0;
}

/* Prints where the target regions ran; returns the number of failures this makes
 * (1 when they ran on the host and that is not allowed). */
static inline int kit_report_placement(const char *program, int on_host) {
  printf("%s: offload devices: %d; target regions ran on %s\n", program,
         omp_get_num_devices(),
         on_host ? "the host (fallback)" : "offload device 0");
  if (on_host && !kit_host_fallback_allowed()) {
    printf("%s: WRONG: host fallback (set OMPTARGET_RS_ALLOW_HOST_FALLBACK=1 only "
           "where no GPU exists)\n",
           program);
    return 1;
  }
  return 0;
}

/* The last line of every program: PASSED or FAILED with the count. */
static inline int kit_finish(const char *program, long checked, long failures) {
  if (failures == 0)
    printf("%s: PASSED (%ld checks)\n", program, checked);
  else
    printf("%s: FAILED (%ld of %ld checks wrong)\n", program, failures, checked);
  return failures != 0;
}

#endif /* KIT_PROGRAM_H */
