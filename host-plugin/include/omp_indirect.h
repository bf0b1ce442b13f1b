/*
 * omp_indirect.h: `declare target indirect` for compilers that do not emit it
 * (clang 16 has no `indirect` clause).
 *
 *   #pragma omp declare target
 *   int add_one(int x) { return x + 1; }
 *   #pragma omp end declare target
 *   OMP_DECLARE_INDIRECT(add_one)      // at file scope, after the definition
 *
 *   #pragma omp target map(to: fp)
 *   r = OMP_INDIRECT_CALL(int (*)(int), fp)(41);  // fp holds &add_one (a host address)
 *
 * OMP_DECLARE_INDIRECT registers the function as an indirect entry: a host offload entry
 * {&fn, "__omp_indirect_fn_<fn>", size 8, flags 0x08} in the section libomptarget 16
 * collects entries from (`omp_offloading_entries`, clang 16's default new offload
 * driver), naming a declare-target pointer that holds the device function's address.
 * That is clang 18's own convention for `declare target indirect`. The design's other
 * convention (size 0, name = the function's own symbol) needs the device image's static
 * symbol table: clang 16 gives every declare-target function hidden visibility, even
 * with an explicit visibility attribute, so no loader finds the function by its name
 * (dlsym cannot); the plugin looks it up in `.symtab`, which a stripped image lacks and
 * where two static functions of one name in different files are ambiguous. The size-8
 * entry works in every case.
 *
 * The plugin finds the pointer, builds the sorted host -> device table and installs it
 * in the device runtime (`__omp_offloading_fptr_map_p` / `_size`), whose
 * `__kmpc_target_translate_fptr` the device side of OMP_INDIRECT_CALL calls.
 *
 * The device image must link the device runtime (libdevice_rtl.a on x86_64), e.g.
 *   clang-16 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu \
 *     -Xoffload-linker-x86_64-pc-linux-gnu --undefined=__kmpc_target_translate_fptr \
 *     -Xoffload-linker-x86_64-pc-linux-gnu <path>/libdevice_rtl.a prog.c
 * (the archive reaches the device link before the objects; `--undefined` pulls the
 * lookup in).
 *
 * libomptarget 16 maps each entry's host address (the host function) to the device
 * function the plugin reports for it, so a function pointer captured by a target region
 * (firstprivate) arrives already translated; pointers passed as data (inside mapped
 * arrays or structs) are what OMP_INDIRECT_CALL translates.
 */
#ifndef OMP_INDIRECT_H
#define OMP_INDIRECT_H

#include <stddef.h>
#include <stdint.h>

/* libomptarget 16's `__tgt_offload_entry`. */
struct omp_indirect_offload_entry {
  void *addr;
  const char *name;
  size_t size;
  int32_t flags;
  int32_t reserved;
};

/* OMP_DECLARE_TARGET_FPTR in the design (OMP_DECLARE_TARGET_INDIRECT in clang 18+). */
#define OMP_DECLARE_TARGET_FPTR 0x08

#ifdef __cplusplus
extern "C" {
#endif

#pragma omp declare target
/* The device runtime's lookup: the device address of a registered host function,
 * anything else (unregistered pointers, null) unchanged. */
void *__kmpc_target_translate_fptr(void *fn);
#pragma omp end declare target

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
/* A namespace-scope const object has internal linkage in C++: keep the holder exported. */
#define OMP_INDIRECT_EXTERN_ extern "C"
#else
#define OMP_INDIRECT_EXTERN_
#endif

#define OMP_INDIRECT_CONCAT2_(a, b) a##b
#define OMP_INDIRECT_CONCAT_(a, b) OMP_INDIRECT_CONCAT2_(a, b)

/* Register `fn` (a declare-target function defined above) as an indirect function; at
 * file scope. The pointer global is declare target, so each device image holds one
 * initialised with the device function's address. */
#define OMP_DECLARE_INDIRECT(fn)                                               \
  _Pragma("omp declare target")                                                \
  OMP_INDIRECT_EXTERN_ __attribute__((used)) void *const                       \
      OMP_INDIRECT_CONCAT_(__omp_indirect_fn_, fn) = (void *)&fn;              \
  _Pragma("omp end declare target")                                            \
  __attribute__((used, section("omp_offloading_entries"), aligned(8)))         \
  static const struct omp_indirect_offload_entry OMP_INDIRECT_CONCAT_(         \
      omp_indirect_entry_, fn) = {(void *)&fn, "__omp_indirect_fn_" #fn,       \
                                  sizeof(void *), OMP_DECLARE_TARGET_FPTR, 0};

/* Translate a host function pointer on the device; the identity on the host. */
#pragma omp declare target
static inline void *omp_indirect_translate(void *fn) { return fn; }
#pragma omp end declare target
#pragma omp begin declare variant match(device = {kind(nohost)})
static inline void *omp_indirect_translate(void *fn) {
  return __kmpc_target_translate_fptr(fn);
}
#pragma omp end declare variant

/* Call through a translated pointer: OMP_INDIRECT_CALL(int (*)(int), fp)(arg). */
#define OMP_INDIRECT_CALL(type, fp) ((type)omp_indirect_translate((void *)(fp)))

#endif /* OMP_INDIRECT_H */
