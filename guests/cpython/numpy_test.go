package cpython_test

import (
	"bytes"
	"context"
	"errors"
	"github.com/fumehood/fumehood/wasi"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fumehood/fumehood/internal/testenv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/cache"
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
# The integer distributions: Generator's (int64) and RandomState's legacy
# ones (long) are separate copies of the same C functions.
g = np.random.default_rng(2)
assert abs(g.poisson(3.0, 20000).mean() - 3.0) < 0.1
m = g.multinomial(10, [0.2, 0.3, 0.5], size=2000)
assert (m.sum(axis=1) == 10).all() and abs(m[:, 2].mean() - 5) < 0.2
assert abs(g.binomial(10, 0.5, 20000).mean() - 5) < 0.1
assert abs(g.geometric(0.5, 20000).mean() - 2) < 0.1
rs = np.random.RandomState(0)
assert rs.poisson(3.0, 5).tolist() == [5, 6, 2, 0, 7]
assert rs.binomial(10, 0.5, 3).tolist() == [6, 3, 7]
assert rs.multinomial(10, [0.2, 0.3, 0.5]).tolist() == [2, 3, 5]
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

// TestNumpyGuest runs numpyProgram in the numpy variant, compiled as a
// library user compiles it (sandbox.CompilePython with With), with the
// default limits, and the same program through sandbox.Compile of the
// unprepared build with its standard library (numpy's Python files
// included) mounted read-only.
func TestNumpyGuest(t *testing.T) {
	info := builtNumpy(t)
	assert.Equal(t, []string{cpython.Numpy}, info.With)
	assert.Contains(t, info.Builtins, "numpy._core._multiarray_umath")
	ctx := context.Background()
	g := numpyGuest(t)
	py := g.Python()
	assert.Equal(t, cpython.PythonVersion, py.Version)
	assert.Equal(t, info.PreparedSHA256, py.SHA256)
	assert.Equal(t, []string{cpython.Numpy}, py.With)
	// The variant has the default guest's C stack and initial memory
	// (StackSize, InitialMemory): an empty run from _start peaks at its
	// initial memory.
	res, err := g.Exec(ctx, nil, "-c", "pass")
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, int64(cpython.InitialMemory), res.PeakMemory)
	res, err = g.Run(ctx, numpyProgram, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Contains(t, string(res.Stdout), "numpy ok 2.2.5")
	t.Logf("CompilePython: %s", res.Stdout)

	wasm, _, err := cpython.LoadUnprepared(ctx, withNumpy)
	require.NoError(t, err)
	// wasm-ld replaces a call whose type differs from the callee's with a
	// stub that traps, named in the name section.
	if i := bytes.Index(wasm, []byte("signature_mismatch:")); i >= 0 {
		t.Errorf("python.wasm has a signature-mismatch stub: %q", wasm[i:min(i+60, len(wasm))])
	}
	raw, err := sandbox.Compile(ctx, wasm, nil)
	require.NoError(t, err)
	defer raw.Close()
	lib, err := cpython.StdlibFS(ctx, withNumpy)
	require.NoError(t, err)
	s, err := raw.NewSandbox(&sandbox.Config{Mounts: []sandbox.Mount{{Path: cpython.StdlibMountPath, FS: lib, ReadOnly: true}}})
	require.NoError(t, err)
	defer s.Close()
	res, err = s.Exec(ctx, nil, "-c", numpyProgram)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Contains(t, string(res.Stdout), "numpy ok 2.2.5")
}

// TestNumpySession: sessions of the variant (the driver's, as every
// session of the built guest) keep arrays across runs, and forks and
// snapshots carry them; numpy is imported in the image, so importing it
// in a run costs next to nothing.
func TestNumpySession(t *testing.T) {
	ctx := context.Background()
	g := numpyGuest(t)
	res, err := g.Run(ctx, "import numpy as np\nprint(np.__version__)", nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "2.2.5\n", string(res.Stdout))
	assert.Less(t, res.FuelUsed, int64(100_000_000), "numpy's import (1.5 billion) is in the image")

	s, err := g.NewSession(ctx, nil)
	require.NoError(t, err)
	defer s.Close()
	run := func(s *sandbox.Session, code string) string {
		t.Helper()
		res, err := s.Run(ctx, code, nil)
		require.NoError(t, err, "stderr: %s", res.Stderr)
		return res.Value
	}
	run(s, "import numpy as np\nrng = np.random.default_rng(0)\na = rng.standard_normal((200, 200))")
	assert.Equal(t, "(200, 200)", run(s, "a.shape"))
	want := run(s, "float(np.linalg.det(a @ a.T))")

	f, err := s.Fork(ctx)
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, want, run(f, "float(np.linalg.det(a @ a.T))"), "the fork has the array")
	run(f, "a[:] = 0")
	assert.Equal(t, want, run(s, "float(np.linalg.det(a @ a.T))"), "the fork's change is its own")

	var snap bytes.Buffer
	require.NoError(t, s.Snapshot(&snap))
	r, err := g.ResumeSession(ctx, &snap, nil)
	require.NoError(t, err)
	defer r.Close()
	assert.Equal(t, want, run(r, "float(np.linalg.det(a @ a.T))"), "the snapshot has the array")
	// A stopped run rolls back, arrays included.
	res, err = r.Run(ctx, "a[:] = 1\nwhile True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 50_000_000}})
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted, "stderr: %s", res.Stderr)
	assert.Equal(t, want, run(r, "float(np.linalg.det(a @ a.T))"))
}

// numpyGuest compiles the numpy variant through the public API:
// sandbox.CompilePython with With.
func numpyGuest(t *testing.T) *sandbox.Guest {
	t.Helper()
	builtNumpy(t)
	g, err := sandbox.CompilePython(context.Background(), &sandbox.Options{With: []string{cpython.Numpy}})
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	return g
}

// numpySandbox starts a sandbox of the numpy variant (numpyGuest) with
// cfg; the standard library, numpy's Python files included, is mounted
// read-only at /usr.
func numpySandbox(t *testing.T, cfg sandbox.Config) *sandbox.Sandbox {
	t.Helper()
	s, err := numpyGuest(t).NewSandbox(&cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestNumpyBounds checks that numpy's C loops are bounded like any guest
// code: one matmul call (27e9 multiply-adds) stops on fuel, and on the
// deadline with fuel unlimited; an array bigger than the memory limit
// (np.ones(10**8) is 763 MiB, np.ones(10**9, dtype=np.uint8) 954 MiB) is a
// MemoryError in the guest, the run marked as having hit the limit, and
// np.ones(10**9) (8e9 bytes, past wasm32's 4 GiB) numpy's ValueError; and
// the sandbox runs numpy normally afterwards.
func TestNumpyBounds(t *testing.T) {
	// The sandbox's fuel is unlimited so that a run may lift it (a run
	// may only lower its sandbox's limits).
	s := numpySandbox(t, sandbox.Config{Limits: sandbox.Limits{Fuel: sandbox.UnlimitedFuel, Timeout: 5 * time.Minute}})
	ctx := context.Background()
	res, err := s.Exec(ctx, nil, "-c", "import numpy")
	require.NoError(t, err, "stderr: %s", res.Stderr)
	importFuel := res.FuelUsed
	require.Positive(t, importFuel)

	start := time.Now()
	res, err = s.Exec(ctx, &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: importFuel + 2_000_000_000}}, "-c", "import numpy as np; a = np.ones((3000, 3000)); print((a @ a)[0, 0])")
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted, "stderr: %s", res.Stderr)
	assert.Empty(t, res.Stdout)
	t.Logf("matmul stopped on fuel after %v", time.Since(start))

	start = time.Now()
	res, err = s.Exec(ctx, &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: sandbox.UnlimitedFuel, Timeout: 3 * time.Second}},
		"-c", "import numpy as np; a = np.ones((3000, 3000)); print((a @ a)[0, 0])")
	require.ErrorIs(t, err, context.DeadlineExceeded, "stderr: %s", res.Stderr)
	assert.Empty(t, res.Stdout)
	t.Logf("matmul stopped on the deadline after %v", time.Since(start))

	for n, msg := range map[string]string{"10**8": "Unable to allocate 763. MiB", "10**9, dtype=np.uint8": "Unable to allocate 954. MiB"} {
		res, err = s.Exec(ctx, nil, "-c", "import numpy as np; a = np.ones("+n+"); print(a.sum())")
		require.Error(t, err, n)
		assert.ErrorIs(t, err, sandbox.ErrMemoryLimit, n)
		assert.True(t, res.MemoryLimitHit, n)
		assert.Contains(t, string(res.Stderr), msg)
		assert.Empty(t, res.Stdout, n)
	}
	// np.ones(10**9) of float64 is 8e9 bytes, past what wasm32 can
	// address: numpy refuses it before allocating anything.
	res, err = s.Exec(ctx, nil, "-c", "import numpy as np; a = np.ones(10**9); print(a.sum())")
	require.Error(t, err)
	assert.False(t, res.MemoryLimitHit)
	assert.Contains(t, string(res.Stderr), "ValueError: array is too big")
	assert.Empty(t, res.Stdout)

	res, err = s.Exec(ctx, nil, "-c", "import numpy as np; print(int(np.ones(10**6).sum()))")
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "1000000\n", string(res.Stdout), "the sandbox is usable after the limits stopped runs")
}

// TestNumpyVariantKey checks that the numpy variant has its own cache key
// and manifest, and that an unknown part is refused.
func TestNumpyVariantKey(t *testing.T) {
	dir := t.TempDir()
	_, err := cpython.Built(&cpython.Options{CacheDir: dir, With: []string{cpython.Numpy}})
	assert.ErrorIs(t, err, cpython.ErrNotBuilt)
	_, err = cpython.Built(&cpython.Options{CacheDir: dir, With: []string{"scipy"}})
	assert.ErrorIs(t, err, cpython.ErrUnknownPart)
	_, err = cpython.Build(context.Background(), &cpython.Options{CacheDir: dir, With: []string{"scipy"}})
	assert.ErrorIs(t, err, cpython.ErrUnknownPart)
}

// TestNumpyInputsChecked checks that a numpy source tarball that is not
// the pinned one is refused before anything is built.
func TestNumpyInputsChecked(t *testing.T) {
	if err := cpython.CheckTools(); err != nil {
		t.Skipf("build tools missing: %v", err)
	}
	dir := t.TempDir()
	bad := dir + "/numpy.tar.xz"
	require.NoError(t, os.WriteFile(bad, []byte("not numpy"), 0o644))
	_, err := cpython.Build(context.Background(), &cpython.Options{CacheDir: dir, With: []string{cpython.Numpy},
		Sources: map[string]string{"numpy": bad}})
	require.Error(t, err)
	assert.True(t, errors.Is(err, cache.ErrIntegrity) || errors.Is(err, cpython.ErrMissingTools), err)
}

// pytestDeps are the directories of Debian's python3-pytest (bookworm:
// pytest 7.2.1, pure Python) and its dependencies, mounted read-only.
var pytestDeps = []string{"_pytest", "pytest", "pluggy", "iniconfig", "packaging", "py", "py.py", "attr", "attrs"}

// numpyTestFiles are the files of numpy's own test suite that
// TestNumpyTestSuiteSlice runs, each with the tests left out (and why) and
// the summary pytest must print. The slow ones (15 s to over a minute
// each here) run only with FUMEHOOD_NUMPY_TESTS=all.
var numpyTestFiles = []struct {
	file     string
	deselect []string
	want     string
	slow     bool
}{
	// The .npy/.npz format. test_huge_header[r] memory-maps the file,
	// and WASI has no mmap module.
	{file: "numpy/lib/tests/test_format.py", deselect: []string{"test_huge_header[r]"}, want: "37 passed, 5 skipped, 1 deselected"},
	{file: "numpy/lib/tests/test_shape_base.py", want: "76 passed, 1 skipped"},
	{file: "numpy/lib/tests/test_arraysetops.py", want: "86 passed"},
	{file: "numpy/lib/tests/test_twodim_base.py", want: "37 passed"},
	{file: "numpy/lib/tests/test_index_tricks.py", want: "47 passed"},
	{file: "numpy/lib/tests/test_type_check.py", want: "51 passed"},
	{file: "numpy/lib/tests/test_stride_tricks.py", want: "26 passed"},
	{file: "numpy/lib/tests/test_histograms.py", want: "67 passed, 1 skipped"},
	{file: "numpy/lib/tests/test_arraypad.py", want: "612 passed, 1 xpassed"},
	{file: "numpy/lib/tests/test_loadtxt.py", want: "297 passed, 1 skipped, 3 xfailed"},
	{file: "numpy/fft/tests/test_pocketfft.py", want: "144 passed, 4 skipped"},
	{file: "numpy/fft/tests/test_helper.py", want: "8 passed"},
	{file: "numpy/polynomial/tests/test_polynomial.py", want: "38 passed"},
	{file: "numpy/polynomial/tests/test_classes.py", want: "243 passed"},
	{file: "numpy/matrixlib/tests/test_defmatrix.py", want: "43 passed"},
	{file: "numpy/_core/tests/test_indexing.py", want: "86 passed, 1 skipped"},
	{file: "numpy/_core/tests/test_einsum.py", want: "74 passed"},
	{file: "numpy/_core/tests/test_shape_base.py", want: "211 passed"},
	{file: "numpy/_core/tests/test_datetime.py", want: "451 passed, 8 skipped, 4 xfailed"},
	// ndarray.tofile/fromfile duplicate the file's descriptor (os.dup),
	// which WASI preview 1 does not have.
	{file: "numpy/_core/tests/test_records.py", deselect: []string{"TestPathUsage::test_tofile_fromfile"}, want: "40 passed, 1 deselected"},
	{file: "numpy/random/tests/test_random.py", want: "139 passed, 3 skipped"},
	{file: "numpy/random/tests/test_seed_sequence.py", want: "2 passed"},
	{file: "numpy/random/tests/test_smoke.py", want: "545 passed, 3 skipped"},
	{file: "numpy/random/tests/test_generator_mt19937_regressions.py", want: "18 passed"},
	// test_ctypes needs ctypes, which the guest does not have (no libffi
	// and no dynamic loading in WASI).
	{file: "numpy/random/tests/test_direct.py", deselect: []string{"TestPhilox::test_ctypes", "TestPCG64::test_ctypes",
		"TestPCG64DXSM::test_ctypes", "TestMT19937::test_ctypes", "TestSFC64::test_ctypes"}, want: "89 passed, 5 skipped, 5 deselected"},

	{file: "numpy/lib/tests/test_nanfunctions.py", want: "1192 passed, 86 skipped", slow: true},
	{file: "numpy/linalg/tests/test_linalg.py", want: "416 passed, 21 skipped, 2 xfailed", slow: true},
	{file: "numpy/linalg/tests/test_regression.py", want: "15 passed", slow: true},
	{file: "numpy/random/tests/test_randomstate.py", want: "176 passed, 4 skipped", slow: true},
	// Its peak linear memory is about 360 MB: the sandbox allows 1 GiB.
	{file: "numpy/random/tests/test_generator_mt19937.py", want: "314 passed, 6 skipped", slow: true},
	// WebAssembly has no floating-point exception flags: np.errstate
	// cannot turn an overflow into FloatingPointError.
	{file: "numpy/_core/tests/test_umath.py", deselect: []string{"TestSpecialFloats::test_exp_exceptions", "TestSpecialFloats::test_exp2"},
		want: "4388 passed, 362 skipped, 2 deselected, 5 xpassed", slow: true},
	// test_debug_print captures output with pytest's capfd, which
	// duplicates descriptors.
	{file: "numpy/_core/tests/test_nditer.py", deselect: []string{"test_debug_print"}, want: "909 passed, 1 skipped, 1 deselected", slow: true},
	// np.save of a masked array raises through MaskedArray.tofile; the
	// guest's numpy.lib.format writes through the file object instead
	// (numpySourceEdits), so it writes the data and raises nothing.
	{file: "numpy/ma/tests/test_core.py", deselect: []string{"TestMaskedArray::test_maskedarray_tofile_raises_notimplementederror"},
		want: "4127 passed, 2 skipped, 1 deselected, 2 xfailed", slow: true},
}

// TestNumpyTestSuiteSlice runs files of numpy's own test suite
// (numpyTestFiles; the slow ones with FUMEHOOD_NUMPY_TESTS=all) in the
// numpy variant under Debian's pytest, both mounted read-only from the
// host, one run per file. It needs Debian's
// python3-pytest (`apt-get install python3-pytest`; `make
// guest-build-numpy` installs it as root) and numpy's source tarball in
// the cache (there after the variant's build).
func TestNumpyTestSuiteSlice(t *testing.T) {
	if testing.Short() {
		t.Skip("runs numpy test files in the guest (minutes)")
	}
	builtNumpy(t)
	const dist = "/usr/lib/python3/dist-packages"
	if _, err := os.Stat(filepath.Join(dist, "_pytest")); err != nil {
		t.Skip("Debian's python3-pytest is not installed: apt-get install python3-pytest (make guest-build-numpy does, as root)")
	}
	tarball := cachedSource(t, cpython.NumpyInputs[0].File, "numpy's")
	dir := t.TempDir()
	tarArgs := []string{"-xf", tarball, "-C", dir}
	seen := map[string]bool{}
	all := os.Getenv("FUMEHOOD_NUMPY_TESTS") == "all"
	for _, f := range numpyTestFiles {
		if d := "numpy-2.2.5/" + filepath.Dir(f.file); !seen[d] {
			seen[d] = true
			tarArgs = append(tarArgs, d)
		}
	}
	out, err := exec.Command("tar", tarArgs...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	copySite(t, dist, dir, pytestDeps)
	host, err := wasi.HostDir(dir)
	require.NoError(t, err)
	s := numpySandbox(t, sandbox.Config{Mounts: []sandbox.Mount{{Path: "/pt", FS: host, ReadOnly: true}},
		Env:    map[string]string{"USER": "sandbox", "HOME": "/tmp"},
		Limits: sandbox.Limits{Fuel: sandbox.UnlimitedFuel, Timeout: 15 * time.Minute, Memory: 1 << 30}})
	for _, f := range numpyTestFiles {
		t.Run(strings.TrimPrefix(f.file, "numpy/"), func(t *testing.T) {
			if f.slow && !all {
				t.Skip("a slow file: FUMEHOOD_NUMPY_TESTS=all runs it")
			}
			args := []string{"--rootdir=/pt/numpy-2.2.5", "-o", "addopts="}
			for _, d := range f.deselect {
				args = append(args, "--deselect", f.file+"::"+d)
			}
			runPytest(t, s, append(args, "/pt/numpy-2.2.5/"+f.file), f.want)
		})
	}
}

// runPytest runs pytest in s with args after the options every slice
// needs, pytest and what it imports being mounted at /pt/site, and checks
// that it passed with want on its last line. pytest's tmp_path asks for the
// user id (WASI has none; files are owned by 0), and its capture and
// faulthandler plugins duplicate descriptors (WASI has no dup), so they
// are off.
func runPytest(t *testing.T, s *sandbox.Sandbox, args []string, want string) {
	t.Helper()
	runPytestWith(t, func(prog string) (*sandbox.Result, error) {
		return s.Exec(context.Background(), nil, "-c", prog)
	}, args, want)
}

// runPytestWith is runPytest with the program run by run.
func runPytestWith(t *testing.T, run func(prog string) (*sandbox.Result, error), args []string, want string) {
	t.Helper()
	args = append([]string{"-q", "-s", "-p", "no:cacheprovider", "-p", "no:faulthandler",
		"--assert=plain", "-W", "ignore::pytest.PytestUnknownMarkWarning", "-rfE", "--tb=short"}, args...)
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	prog := "import os, sys\nsys.path.insert(0, \"/pt/site\")\nos.getuid = lambda: 0\nimport pytest\n" +
		"sys.exit(pytest.main([" + strings.Join(quoted, ", ") + "]))\n"
	start := time.Now()
	res, err := run(prog)
	t.Logf("%v, fuel %.3g:\n%s", time.Since(start).Round(time.Second), float64(res.FuelUsed), lastLines(string(res.Stdout), 25))
	require.NoError(t, err, "stderr: %s", lastLines(string(res.Stderr), 25))
	assert.Contains(t, lastLines(string(res.Stdout), 1), want)
	assert.NotRegexp(t, `\d+ failed|\d+ errors?\b`, string(res.Stdout))
}

// cachedSource returns the path of a source tarball in the cache's
// sources directory (there after a variant's build), skipping the test
// when it is not; what names it in the skip message.
func cachedSource(t *testing.T, file, what string) string {
	t.Helper()
	dir, err := cache.Dir("")
	require.NoError(t, err)
	tarball := filepath.Join(dir, "cpython", "sources", file)
	if _, err := os.Stat(tarball); err != nil {
		t.Skipf("%s source tarball is not in the cache: %v", what, err)
	}
	return tarball
}

// copySite copies the packages of Debian's dist-packages directory dist
// named in pkgs (those installed) into dir/site, which the pytest runs
// put on their path.
func copySite(t *testing.T, dist, dir string, pkgs []string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "site"), 0o755))
	for _, d := range pkgs {
		if _, err := os.Stat(filepath.Join(dist, d)); err == nil {
			out, err := exec.Command("cp", "-r", filepath.Join(dist, d), filepath.Join(dir, "site")).CombinedOutput()
			require.NoError(t, err, "%s", out)
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// BenchmarkNumpyImport measures import numpy in the numpy variant: in a
// one-shot run from _start (the interpreter and numpy imported every
// time), in a one-shot run from the pre-initialized image (numpy imported
// in it) and in a new session from it. Medians, in ms:
//
//	go test ./guests/cpython -run '^$' -bench NumpyImport -benchtime 1x
func BenchmarkNumpyImport(b *testing.B) {
	if _, err := cpython.Built(withNumpy); err != nil {
		b.Skipf("the numpy variant is not built: %v", err)
	}
	ctx := context.Background()
	g, err := sandbox.CompilePython(ctx, &sandbox.Options{With: []string{cpython.Numpy}})
	require.NoError(b, err)
	defer g.Close()
	const code = "import numpy as np\nprint(np.ones(3).sum())"
	median := func(n int, f func()) float64 { return float64(testenv.Median(n, f)) / 1e6 }
	for b.Loop() {
		image := median(21, func() {
			res, err := g.Run(ctx, code, nil)
			require.NoError(b, err, "stderr: %s", res.Stderr)
		})
		session := median(21, func() {
			s, err := g.NewSession(ctx, nil)
			require.NoError(b, err)
			_, err = s.Run(ctx, code, nil)
			require.NoError(b, err)
			s.Close()
		})
		start := median(5, func() {
			res, err := g.Exec(ctx, nil, "-c", code)
			require.NoError(b, err, "stderr: %s", res.Stderr)
		})
		b.ReportMetric(start, "oneshot-start-ms")
		b.ReportMetric(image, "oneshot-image-ms")
		b.ReportMetric(session, "new-session+run-ms")
	}
}
