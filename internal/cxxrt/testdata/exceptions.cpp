// The C++ program of cxxrt's tests: it throws and catches in the ways
// pybind11 and matplotlib's C++ code do. Its first argument picks what it
// does; see cxxrt_test.go.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

struct CodedError : std::runtime_error {
  int code;
  CodedError(const std::string &what, int code) : std::runtime_error(what), code(code) {}
};

static int destroyed;  // Guards' destructors run while an exception unwinds.

struct Guard {
  ~Guard() { destroyed++; }
};

__attribute__((noinline)) int deep(int n) {
  Guard g;
  if (n == 0) throw CodedError("deep", 42);
  return deep(n - 1) + 1;
}

// work does n steps of arithmetic the optimiser cannot remove.
__attribute__((noinline)) unsigned work(int n, unsigned h) {
  for (int i = 0; i < n; i++) h = (h ^ (unsigned)i) * 16777619u;
  return h;
}

__attribute__((noinline)) unsigned step(int i, bool raise) {
  std::vector<int> v(4, i);  // an object to destroy on the way out
  if (raise) throw CodedError("step", i);
  return (unsigned)v[3];
}

// iterate runs n iterations, each with work and a step that throws (or
// not) and is caught.
static unsigned iterate(int n, bool raise) {
  unsigned h = 2166136261u;
  for (int i = 0; i < n; i++) {
    h = work(50, h);
    try {
      h += step(i, raise);
    } catch (const CodedError &e) {
      h += (unsigned)e.code;
    }
  }
  return h;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "catch") == 0) {
    int caught = 0;
    try {  // a subclass across frames, caught by a base, past a handler that does not match
      try {
        deep(5);
      } catch (const std::logic_error &) {
        printf("wrong handler\n");
      }
    } catch (const std::exception &e) {
      printf("std::exception %s, %d destroyed\n", e.what(), destroyed);
      caught++;
    }
    try {  // the exact type, rethrown
      try {
        deep(2);
      } catch (CodedError &e) {
        printf("CodedError %d, rethrown\n", e.code);
        caught++;
        throw;
      }
    } catch (const std::runtime_error &e) {
      printf("runtime_error %s\n", e.what());
      caught++;
    }
    try {  // not a class
      throw 7;
    } catch (int v) {
      printf("int %d\n", v);
      caught++;
    }
    try {  // thrown by libc++
      std::string s("abc");
      (void)s.at(10);
    } catch (const std::out_of_range &) {
      printf("out_of_range\n");
      caught++;
    }
    try {  // caught by catch (...)
      deep(1);
    } catch (...) {
      caught++;
    }
    printf("caught %d\n", caught);
    return 0;
  }
  if (strcmp(mode, "iterate") == 0 && argc > 3) {
    printf("%u\n", iterate(atoi(argv[2]), strcmp(argv[3], "throw") == 0));
    return 0;
  }
  if (strcmp(mode, "spin") == 0) {  // forever, throwing and catching
    for (unsigned i = 0;; i++) {
      try {
        step((int)i, true);
      } catch (...) {
      }
    }
  }
  if (strcmp(mode, "uncaught") == 0) {
    printf("before\n");
    fflush(stdout);
    deep(3);
  }
  return 2;
}
