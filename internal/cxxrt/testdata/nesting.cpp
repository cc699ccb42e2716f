// Invokes nested deep: cxxrt's tests of the bounds on what nested invokes
// hold on the host (sandbox/emeh.go). Its first argument picks the mode.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

static int levels;  // the deepest level reached

struct Guard {
  int level;
  ~Guard() {
    if (level > levels) levels = level;
  }
};

// recurse recurses n deep with a destructor in each frame: each call is an
// invoke, a level of nested calls on the host. It throws at the bottom.
__attribute__((noinline)) int recurse(int n) {
  Guard g{n};
  if (n == 0) throw std::runtime_error("bottom");
  return recurse(n - 1) + 1;
}

static volatile int sink;

int nest(int level);

// plain recurses n deep without a destructor: no invokes, only the call
// stack of the level it runs in grows.
__attribute__((noinline)) int plain(int n, int level) {
  int r = n == 0 ? nest(level + 1) : plain(n - 1, level);
  sink = r;  // work after the call: no tail call, no loop
  return r + 1;
}

// nest grows the call stack of its level, then nests a level deeper.
__attribute__((noinline)) int nest(int level) {
  Guard g{level};
  return plain(200000, level);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "recurse") == 0 && argc > 2) {
    try {
      recurse(atoi(argv[2]));
    } catch (const std::runtime_error &e) {
      printf("%s %d\n", e.what(), levels);
    }
    return 0;
  }
  if (strcmp(mode, "grow") == 0) {
    nest(0);
    return 0;
  }
  return 2;
}
