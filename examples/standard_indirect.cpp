// Standard OpenMP 5.1 C++, no project header: `declare target indirect` functions called
// through host function pointers, and virtual calls on objects built on the host.
// With stock clang-16 and the installed config (what `cargo xtask demo` does):
//   clang++-16 --config=<prefix>/share/omptarget-indirect/x86_64-pc-linux-gnu.cfg -O2 \
//     examples/standard_indirect.cpp -o standard_indirect
//   LD_LIBRARY_PATH=<prefix>/lib OMPTARGET_RS_ISOLATED=1 ./standard_indirect
// For an NVIDIA GPU: `--config=<prefix>/share/omptarget-indirect/nvptx64-nvidia-cuda.cfg
// --offload-arch=sm_90` instead (clang 16 also wants `--cuda-path`).
//
// Every function adds where(): 1000 on the device, 0 on the host, so each result says
// which version ran. Prints "standard example: N ok, 0 wrong" and exits 0 when every
// call reached the device version.
#include <cstdio>
#include <omp.h>

#pragma omp declare target
inline int where() { return omp_is_initial_device() ? 0 : 1000; }
#pragma omp end declare target

#pragma omp begin declare target indirect
int add_one(int x) { return x + 1 + where(); }
int twice(int x) { return 2 * x + where(); }
#pragma omp end declare target

#pragma omp declare target
struct Shape {
  virtual int area() const = 0;
  virtual ~Shape() {}
};
struct Rectangle : Shape {
  int w, h;
  Rectangle(int w, int h) : w(w), h(h) {}
  int area() const override { return w * h + where(); }
};
struct Square : Rectangle {
  explicit Square(int s) : Rectangle(s, s) {}
  int area() const override { return 10 * w * w + where(); } // not what Rectangle says
};
#pragma omp end declare target

// Mapping polymorphic objects is the point (clang warns they are not trivially copyable).
#pragma clang diagnostic ignored "-Wopenmp-mapping"

int main() {
  int (*functions[2])(int) = {add_one, twice}; // host addresses
  int calls[2] = {0, 0};
#pragma omp target map(to : functions) map(from : calls)
  for (int i = 0; i < 2; ++i)
    calls[i] = functions[i](20);

  Rectangle *rectangle = new Rectangle(3, 4); // built on the host: host vptrs
  Square *square = new Square(2);
  int areas[2] = {0, 0};
#pragma omp target map(to : rectangle[0 : 1], square[0 : 1]) map(from : areas)
  {
    const Shape *shapes[2] = {rectangle, square};
    for (int i = 0; i < 2; ++i)
      areas[i] = shapes[i]->area();
  }

  int ok = 0, wrong = 0;
  auto check = [&](const char *what, int got, int want) {
    bool good = got == want;
    printf("%-34s %5d (want %5d): %s\n", what, got, want, good ? "ok" : "WRONG");
    (good ? ok : wrong) += 1;
  };
  check("add_one(20) through a pointer", calls[0], add_one(20) + 1000);
  check("twice(20) through a pointer", calls[1], twice(20) + 1000);
  check("Rectangle(3, 4).area(), virtual", areas[0], rectangle->area() + 1000);
  check("Square(2).area(), virtual", areas[1], square->area() + 1000);
  delete rectangle;
  delete square;
  printf("standard example: %d ok, %d wrong\n", ok, wrong);
  return wrong == 0 ? 0 : 1;
}
