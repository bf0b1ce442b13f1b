/* omptarget-indirect: glibc's bits/floatn.h as a GPU compile by clang 17 or 18 can
 * read it. Installed configs of those clangs put this folder on the device compile's
 * include path only (-Xarch_device).
 *
 * Why: glibc 2.41 (Debian 13) gives every clang _Float128 on x86_64 and, with it, a
 * complex typedef of mode __TC__. The device side of an OpenMP compile reads the host's
 * headers, and clang 17 and 18 reject that mode for nvptx64 and amdgcn ("unsupported
 * machine mode '__TC__'"), so any target region in a unit that includes <stdlib.h> or
 * <stdio.h> fails to compile. glibc leaves _Float128 out for one compiler it names;
 * here the device compile poses as it while glibc's header is read, and nothing else
 * changes. The GPU code cannot use _Float128 anyway. */
#if !defined __INTEL_LLVM_COMPILER && !defined SYCL_LANGUAGE_VERSION
#define __INTEL_LLVM_COMPILER 1
#define SYCL_LANGUAGE_VERSION 1
#include_next <bits/floatn.h>
#undef __INTEL_LLVM_COMPILER
#undef SYCL_LANGUAGE_VERSION
#else
#include_next <bits/floatn.h>
#endif
