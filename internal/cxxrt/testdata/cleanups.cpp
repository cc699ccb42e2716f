// A loop of calls to a function with a destructor, built with and without
// exceptions: with them, each call enters a try_table (a cleanup landing
// pad), which cxxrt's benchmark measures.
#include <cstdio>
#include <cstdlib>

struct Counter {
  int *n;
  ~Counter() { (*n)++; }
};

__attribute__((noinline)) void check(int i) {
  if (i < 0) {
#ifdef __cpp_exceptions
    throw i;
#else
    abort();
#endif
  }
}

__attribute__((noinline)) int step(int i, int *n) {
  Counter c{n};
  check(i);
  return *n & 7;
}

int main(int argc, char **argv) {
  int calls = argc > 1 ? atoi(argv[1]) : 0, n = 0;
  long sum = 0;
  for (int i = 0; i < calls; i++) sum += step(i, &n);
  printf("%ld %d\n", sum, n);
  return 0;
}
