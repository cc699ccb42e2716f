// Package testenv gives tests what they build at test time: Go programs
// compiled for WASI, and the module's root. The Python guest comes from
// package sandbox/sandboxtest.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var builds sync.Map // package path -> *build

type build struct {
	once sync.Once
	wasm []byte
	err  error
}

// BuildGo compiles the Go main package at pkg (a path relative to the
// module root, such as "guests/testguest") with GOOS=wasip1 GOARCH=wasm and
// returns the binary. Each package is built once per test binary.
func BuildGo(t testing.TB, pkg string) []byte {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, &build{})
	b := v.(*build)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "fumehood-wasip1-")
		if err != nil {
			b.err = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "guest.wasm")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", out, "./"+pkg)
		cmd.Dir = ModuleRoot(t)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = &buildError{pkg: pkg, out: string(msg), err: err}
			return
		}
		b.wasm, b.err = os.ReadFile(out)
	})
	require.NoError(t, b.err)
	return b.wasm
}

type buildError struct {
	pkg, out string
	err      error
}

func (e *buildError) Error() string {
	return "building " + e.pkg + " for wasip1: " + e.err.Error() + "\n" + e.out
}

// ModuleRoot returns the directory holding go.mod.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test's directory")
		dir = parent
	}
}

// Median times f n times and returns the median: the benchmarks' figure
// on a shared, noisy machine.
func Median(n int, f func()) time.Duration {
	d := make([]time.Duration, n)
	for i := range d {
		t0 := time.Now()
		f()
		d[i] = time.Since(t0)
	}
	slices.Sort(d)
	return d[n/2]
}
