// Test program for the entries/images tests: two `declare target indirect` functions,
// one plain declare-target function (no entry), one global and one target region.
#include <stdio.h>

#pragma omp begin declare target indirect
int add_one(int x) { return x + 1; }
int twice(int x) { return 2 * x; }
#pragma omp end declare target

int not_indirect(int x) { return x; }
#pragma omp declare target to(not_indirect)

int counter = 7;
#pragma omp declare target to(counter)

int main(void) {
  int (*fp)(int) = add_one;
  int r = 0;
#pragma omp target map(from : r)
  { r = fp(41) + counter + not_indirect(0); }
  printf("%d\n", r);
  return 0;
}
