// Virtual functions through the plugin's vtable path (docs/USER_GUIDE.md: "Indirect entries the
// plugin understands", flag 0x20): each class's vtable is registered with one offload
// entry {host vtable, "__omp_indirect_vtable_<class>", size of the vtable, flags
// 0x08 | 0x20} whose device global holds the device vtable's address; the plugin pairs
// host slot i with device slot i, so every virtual function's host address (what a host
// vtable holds) translates to the device version of the same override.
//
// Objects of three classes are built on the host and mapped to the device. For each
// object the host reads the virtual functions' addresses out of the object's own vtable
// (what the object's vptr points at), and the device calls them through
// OMP_INDIRECT_CALL with the device copy of the object as `this`. Checked:
// - each translated slot equals the device vtable's own slot (read on the device),
// - each call gives the device version's result for that object's dynamic type,
// - a pointer that is in no vtable comes back unchanged.
//
// clang 16 has no `declare target indirect` for classes; this program writes the entries
// itself, the way a compiler would. Built and run by the GPU kit (cargo xtask gpu-bundle).
#include <stdint.h>

#include "kit_program.h"
#include "omp_indirect.h"

#pragma omp declare target
int bias = 1000; // device copy; the host sets its own to 0

struct Shape {
  int k;
  virtual int apply(int x) const;
  virtual int weight() const;
};
struct Scaled : Shape {
  int apply(int x) const override;
  int weight() const override;
};
struct Shifted : Shape {
  int apply(int x) const override;
  int weight() const override;
};
int Shape::apply(int x) const { return x + bias; }
int Shape::weight() const { return 1 + bias; }
int Scaled::apply(int x) const { return k * x + bias; }
int Scaled::weight() const { return 10 * k + bias; }
int Shifted::apply(int x) const { return x - k + bias; }
int Shifted::weight() const { return 100 + k + bias; }
#pragma omp end declare target

// Two virtual functions after the offset-to-top and RTTI words.
#define VTABLE_WORDS 4

// The vtable symbols (Itanium ABI names), host and device alike. Not `declare target`:
// that would make clang 16 emit offload entries of its own for them; each compilation
// defines its own vtables, which is what these names refer to.
#pragma clang diagnostic ignored "-Wopenmp-target"
extern "C" {
extern const void *const shape_vtable[VTABLE_WORDS] __asm__("_ZTV5Shape");
extern const void *const scaled_vtable[VTABLE_WORDS] __asm__("_ZTV6Scaled");
extern const void *const shifted_vtable[VTABLE_WORDS] __asm__("_ZTV7Shifted");
}

// The registration a compiler would emit for `declare target indirect` on a class: a
// device global holding the device vtable, and a host entry flagged indirect vtable.
#define OMP_INDIRECT_VTABLE 0x20
#define DECLARE_INDIRECT_VTABLE(cls, symbol)                                           \
  _Pragma("omp declare target") extern "C" __attribute__((used))                      \
  const void *const __omp_indirect_vtable_##cls = (const void *)symbol;                \
  _Pragma("omp end declare target")                                                    \
  __attribute__((used, section("omp_offloading_entries"), aligned(8)))                 \
  static const struct omp_indirect_offload_entry omp_indirect_vtable_entry_##cls = {   \
      (void *)symbol, "__omp_indirect_vtable_" #cls, sizeof(void *) * VTABLE_WORDS,    \
      OMP_DECLARE_TARGET_FPTR | OMP_INDIRECT_VTABLE, 0};
DECLARE_INDIRECT_VTABLE(Shape, shape_vtable)
DECLARE_INDIRECT_VTABLE(Scaled, scaled_vtable)
DECLARE_INDIRECT_VTABLE(Shifted, shifted_vtable)

typedef int (*apply_fn)(const Shape *, int);
typedef int (*weight_fn)(const Shape *);
#define NOBJ 6
#define NSLOT 2

int host_only(int x) { return x; } // in no vtable

int main() {
  bias = 0;
  Shape base;
  Scaled s2, s3;
  Shifted t4, t5;
  Shape base7;
  base.k = 0, s2.k = 2, s3.k = 3, t4.k = 4, t5.k = 5, base7.k = 7;
  const Shape *objects[NOBJ] = {&base, &s2, &s3, &t4, &t5, &base7};
  const void *const *device_vtables[NOBJ];
  // The objects' bytes (vptr included) for the device, and what each one's vtable
  // holds: the host addresses of its class's overrides.
  alignas(Shape) unsigned char copies[NOBJ][sizeof(Shape)];
  uint64_t slots[NOBJ][NSLOT];
  for (int i = 0; i < NOBJ; ++i) {
    memcpy(copies[i], (const void *)objects[i], sizeof(Shape));
    const void *const *vptr = *(const void *const *const *)objects[i];
    for (int s = 0; s < NSLOT; ++s)
      slots[i][s] = (uint64_t)(uintptr_t)vptr[s];
    const void *vt = vptr - 2; // the vtable object starts two words before its vptr
    device_vtables[i] = vt == (const void *)scaled_vtable    ? scaled_vtable
                        : vt == (const void *)shifted_vtable ? shifted_vtable
                                                             : shape_vtable;
  }
  int kinds[NOBJ]; // which vtable each object uses: 0 Shape, 1 Scaled, 2 Shifted
  for (int i = 0; i < NOBJ; ++i)
    kinds[i] = device_vtables[i] == scaled_vtable ? 1 : device_vtables[i] == shifted_vtable ? 2 : 0;

  int applied[NOBJ], weights[NOBJ];
  uint64_t translated[NOBJ][NSLOT], device_slots[NOBJ][NSLOT];
  uint64_t stray = (uint64_t)(uintptr_t)&host_only, stray_out = 0;
  int on_host = 1;
#pragma omp target map(to : copies[0 : NOBJ][0 : sizeof(Shape)], slots[0 : NOBJ][0 : NSLOT], kinds[0 : NOBJ]) \
    map(from : applied[0 : NOBJ], weights[0 : NOBJ], translated[0 : NOBJ][0 : NSLOT],       \
        device_slots[0 : NOBJ][0 : NSLOT], stray_out, on_host)
  {
    on_host = omp_is_initial_device();
    for (int i = 0; i < NOBJ; ++i) {
      // The device's own vtable of the object's class, for comparison.
      const void *const *own = kinds[i] == 1   ? scaled_vtable
                               : kinds[i] == 2 ? shifted_vtable
                                               : shape_vtable;
      for (int s = 0; s < NSLOT; ++s) {
        translated[i][s] =
            (uint64_t)(uintptr_t)omp_indirect_translate((void *)(uintptr_t)slots[i][s]);
        device_slots[i][s] = (uint64_t)(uintptr_t)own[2 + s];
      }
      applied[i] = OMP_INDIRECT_CALL(apply_fn, slots[i][0])((const Shape *)copies[i], 10 + i);
      weights[i] = OMP_INDIRECT_CALL(weight_fn, slots[i][1])((const Shape *)copies[i]);
    }
    stray_out = (uint64_t)(uintptr_t)omp_indirect_translate((void *)(uintptr_t)stray);
  }

  long failures = kit_report_placement("virtual_calls", on_host), checked = 0;
  int bias_ran = on_host ? 0 : 1000;
  const char *class_names[3] = {"Shape", "Scaled", "Shifted"};
  for (int i = 0; i < NOBJ; ++i) {
    int want_apply = objects[i]->apply(10 + i) + bias_ran;
    int want_weight = objects[i]->weight() + bias_ran;
    int slots_ok = translated[i][0] == device_slots[i][0] &&
                   translated[i][1] == device_slots[i][1];
    int ok = applied[i] == want_apply && weights[i] == want_weight && slots_ok;
    printf("virtual_calls: %-7s k=%d: apply %#llx -> %#llx (device vtable %#llx), "
           "weight %#llx -> %#llx (device vtable %#llx); apply(%d) = %d, weight() = %d "
           "(want %d, %d): %s\n",
           class_names[kinds[i]], objects[i]->k, (unsigned long long)slots[i][0],
           (unsigned long long)translated[i][0], (unsigned long long)device_slots[i][0],
           (unsigned long long)slots[i][1], (unsigned long long)translated[i][1],
           (unsigned long long)device_slots[i][1], 10 + i, applied[i], weights[i],
           want_apply, want_weight, ok ? "ok" : "WRONG");
    failures += !ok;
    checked += 1;
  }
  printf("virtual_calls: unregistered %#llx -> %#llx: %s\n", (unsigned long long)stray,
         (unsigned long long)stray_out, stray_out == stray ? "unchanged" : "WRONG");
  failures += stray_out != stray;
  checked += 1;
  return kit_finish("virtual_calls", checked, failures);
}
