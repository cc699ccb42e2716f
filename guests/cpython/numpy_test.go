package cpython_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/guests/python"
	"github.com/fumehood/fumehood/sandbox"
)

var withNumpy = &cpython.Options{With: []string{cpython.Numpy}}

// builtNumpy skips the test when the numpy variant is not in the default
// cache.
func builtNumpy(t *testing.T) cpython.Info {
	t.Helper()
	info, err := cpython.Built(withNumpy)
	if errors.Is(err, cpython.ErrNotBuilt) {
		t.Skipf("the numpy variant is not built (run `%s --with numpy` or `make guest-build-numpy`): %v", cpython.BuildCommand, err)
	}
	require.NoError(t, err)
	return info
}

// numpyProgram is what an agent does first with numpy: array maths,
// reductions, a linear solve, a seeded generator, an FFT, and saving and
// loading an array in the sandbox's in-memory root.
const numpyProgram = `
import sys, time
t0 = time.perf_counter()
import numpy as np
t1 = time.perf_counter()
assert np.__version__ == "2.2.5", np.__version__
assert int(np.arange(10).sum()) == 45
a = np.arange(12, dtype=np.float64).reshape(3, 4)
assert a.shape == (3, 4) and a.T.shape == (4, 3)
assert np.allclose(a.sum(axis=0), [12, 15, 18, 21])
assert np.allclose(a.mean(axis=1), [1.5, 5.5, 9.5])
assert float(a.max()) == 11.0 and int(a.argmin()) == 0
assert np.allclose((a @ a.T)[0], [14, 38, 62])
assert np.allclose(np.sqrt(np.array([4.0, 9.0])), [2, 3])
assert np.allclose(np.cumsum([1, 2, 3]), [1, 3, 6])
assert list(np.sort(np.array([3, 1, 2]))) == [1, 2, 3]
assert float(np.std([1.0, 1.0, 1.0])) == 0.0
A = np.array([[3.0, 1.0], [1.0, 2.0]])
x = np.linalg.solve(A, np.array([9.0, 8.0]))
assert np.allclose(x, [2.0, 3.0]), x
assert np.allclose(np.linalg.inv(A) @ A, np.eye(2))
assert abs(np.linalg.det(A) - 5.0) < 1e-12
rng = np.random.default_rng(0)
r = rng.random(3)
assert np.allclose(r, [0.63696169, 0.26978671, 0.04097352]), r
n = np.random.default_rng(1).standard_normal(10000)
assert abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05
f = np.fft.fft(np.array([1.0, 0.0, 0.0, 0.0]))
assert np.allclose(f, np.ones(4)), f
s = np.sin(np.linspace(0, 2 * np.pi, 64, endpoint=False) * 5)
assert int(np.argmax(np.abs(np.fft.rfft(s)))) == 5
assert np.allclose(np.fft.ifft(np.fft.fft(s)).real, s)
np.save("/tmp/a.npy", a)
b = np.load("/tmp/a.npy")
assert b.dtype == a.dtype and np.array_equal(a, b)
assert "numpy._core._multiarray_umath" in sys.builtin_module_names
np.testing.assert_allclose(x, [2.0, 3.0])
print("numpy ok", np.__version__, "import %.0f ms" % ((t1 - t0) * 1000))
`

// TestNumpyGuest runs numpyProgram in the numpy variant, through
// sandbox.Compile and Exec with its standard library (numpy's Python files
// included) mounted read-only.
func TestNumpyGuest(t *testing.T) {
	info := builtNumpy(t)
	assert.Equal(t, []string{cpython.Numpy}, info.With)
	assert.Contains(t, info.Builtins, "numpy._core._multiarray_umath")
	s := numpySandbox(t)
	ctx := context.Background()
	res, err := s.Exec(ctx, &sandbox.Config{Args: []string{"-c", numpyProgram}, Timeout: 5 * time.Minute})
	require.NoError(t, err, "stderr: %s", res.Stderr)
	require.Equal(t, 0, res.ExitCode, "stderr: %s", res.Stderr)
	assert.Contains(t, string(res.Stdout), "numpy ok 2.2.5")
	t.Logf("%s", res.Stdout)
}

// numpySandbox starts a sandbox of the numpy variant.
func numpySandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	builtNumpy(t)
	ctx := context.Background()
	wasm, _, err := cpython.LoadUnprepared(ctx, withNumpy)
	require.NoError(t, err)
	g, err := sandbox.Compile(ctx, wasm, nil)
	require.NoError(t, err)
	t.Cleanup(func() { g.Close(ctx) })
	lib, err := cpython.StdlibFS(ctx, withNumpy)
	require.NoError(t, err)
	s, err := g.NewSandbox(&sandbox.SandboxConfig{Mounts: []sandbox.Mount{
		{Path: cpython.StdlibMountPath, FS: lib, ReadOnly: true},
	}})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestNumpyBounds checks that numpy's C loops are bounded like any guest
// code: one matmul call (27e9 multiply-adds) stops on fuel, and an array
// bigger than the memory limit is a MemoryError in the guest, the run
// marked as having hit the limit.
func TestNumpyBounds(t *testing.T) {
	s := numpySandbox(t)
	ctx := context.Background()
	res, err := s.Exec(ctx, &sandbox.Config{Args: []string{"-c", "import numpy"}, Timeout: 5 * time.Minute})
	require.NoError(t, err, "stderr: %s", res.Stderr)
	importFuel := res.FuelUsed
	require.Positive(t, importFuel)

	start := time.Now()
	res, err = s.Exec(ctx, &sandbox.Config{
		Args:    []string{"-c", "import numpy as np; a = np.ones((3000, 3000)); print((a @ a)[0, 0])"},
		Fuel:    importFuel + 2_000_000_000,
		Timeout: 5 * time.Minute,
	})
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted, "stderr: %s", res.Stderr)
	assert.Empty(t, res.Stdout)
	t.Logf("matmul stopped on fuel after %v", time.Since(start))

	res, err = s.Exec(ctx, &sandbox.Config{
		Args:    []string{"-c", "import numpy as np; a = np.ones(10**8); print(a.sum())"},
		Timeout: 5 * time.Minute,
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, sandbox.ErrMemoryLimit)
	assert.True(t, res.MemoryLimitHit)
	assert.Contains(t, string(res.Stderr), "Unable to allocate 763. MiB")
}

// TestNumpyVariantKey checks that the numpy variant has its own cache key
// and manifest, and that an unknown part is refused.
func TestNumpyVariantKey(t *testing.T) {
	dir := t.TempDir()
	_, err := cpython.Built(&cpython.Options{CacheDir: dir, With: []string{cpython.Numpy}})
	assert.ErrorIs(t, err, cpython.ErrNotBuilt)
	_, err = cpython.Built(&cpython.Options{CacheDir: dir, With: []string{"pandas"}})
	assert.ErrorIs(t, err, cpython.ErrUnknownPart)
	_, err = cpython.Build(context.Background(), &cpython.Options{CacheDir: dir, With: []string{"pandas"}})
	assert.ErrorIs(t, err, cpython.ErrUnknownPart)
}

// TestNumpyInputsChecked checks that a numpy source tarball that is not
// the pinned one is refused before anything is built.
func TestNumpyInputsChecked(t *testing.T) {
	if _, err := cpython.CheckTools(); err != nil {
		t.Skipf("build tools missing: %v", err)
	}
	dir := t.TempDir()
	bad := dir + "/numpy.tar.xz"
	require.NoError(t, os.WriteFile(bad, []byte("not numpy"), 0o644))
	_, err := cpython.Build(context.Background(), &cpython.Options{CacheDir: dir, With: []string{cpython.Numpy},
		Sources: map[string]string{"numpy": bad}})
	require.Error(t, err)
	assert.True(t, errors.Is(err, python.ErrIntegrity) || errors.Is(err, cpython.ErrMissingTools), err)
}
