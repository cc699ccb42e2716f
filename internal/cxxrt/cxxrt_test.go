package cxxrt_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/aptfetch"
	"github.com/fumehood/fumehood/internal/cxxrt"
	"github.com/fumehood/fumehood/internal/emeh"
	"github.com/fumehood/fumehood/internal/exnref"
	"github.com/fumehood/fumehood/internal/wasmbin"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// programs are testdata/exceptions.cpp built at each optimisation level
// the tests use, against the runtime (which Build makes once per cache,
// in about two minutes).
var programs struct {
	sync.Once
	wasm map[string][]byte // by optimisation flag
	err  error
}

// levels are the optimisation levels the program is built at: -O0 keeps
// every local in its own slot, so its handlers read many the protected
// code wrote (see internal/exnref's spill.go).
var levels = []string{"-O2", "-O0"}

// exceptions returns the program built with opt (or another build of
// programs.wasm), compiled by sandbox.Compile, which prepares its invokes
// (internal/emeh) and meters fuel, as for every WASI program.
func exceptions(t testing.TB, opt string) *sandbox.Guest {
	t.Helper()
	if testing.Short() {
		t.Skip("cxxrt: builds LLVM's C++ runtime the first time (about two minutes)")
	}
	programs.Do(func() { programs.wasm, programs.err = build(context.Background()) })
	if errors.Is(programs.err, aptfetch.ErrNoMirror) && os.Getenv(sandboxtest.RequireEnv) == "" {
		t.Skipf("cxxrt: no Debian mirror to fetch the toolchain from: %v", programs.err)
	}
	require.NoError(t, programs.err)
	g, err := sandbox.Compile(context.Background(), programs.wasm[opt], &sandbox.Options{CacheDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	return g
}

func build(ctx context.Context) (map[string][]byte, error) {
	rt, err := cxxrt.Build(ctx, nil)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "cxxrt-test-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	tc, err := cxxrt.UnpackToolchain(ctx, nil, filepath.Join(dir, "toolchain"))
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	builds := map[string][]string{
		"cleanups":          {"-O2", "testdata/cleanups.cpp"},
		"cleanups-noexcept": {"-O2", "-fno-exceptions", "testdata/cleanups.cpp"},
		"nesting":           {"-O2", "testdata/nesting.cpp"},
	}
	for _, opt := range levels {
		builds[opt] = []string{opt, "testdata/exceptions.cpp"}
	}
	for name, args := range builds {
		file := filepath.Join(dir, name+".wasm")
		if err := tc.CXX(ctx, rt, append(args, "-o", file)...); err != nil {
			return nil, err
		}
		if out[name], err = os.ReadFile(file); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func TestExceptions(t *testing.T) {
	for _, opt := range levels {
		t.Run(opt, func(t *testing.T) { testExceptions(t, opt) })
	}
}

func testExceptions(t *testing.T, opt string) {
	g := exceptions(t, opt)
	ctx := context.Background()

	// Emscripten-style: invokes, and no WebAssembly exception handling.
	assert.False(t, exnref.Uses(programs.wasm[opt]), "no WebAssembly exception handling")
	m, err := wasmbin.Parse(programs.wasm[opt])
	require.NoError(t, err)
	im, err := emeh.Find(m)
	require.NoError(t, err)
	assert.NotEmpty(t, im.Invokes)
	assert.True(t, im.Unwind)

	res, err := g.Exec(ctx, nil, "catch")
	require.NoError(t, err)
	assert.Equal(t, "std::exception deep, 6 destroyed\n"+
		"CodedError 42, rethrown\n"+
		"runtime_error deep\n"+
		"int 7\n"+
		"out_of_range\n"+
		"caught 6\n", string(res.Stdout))
	assert.Empty(t, res.Stderr)
	assert.Equal(t, sandbox.StopExit, res.Stop)

	again, err := g.Exec(ctx, nil, "catch")
	require.NoError(t, err)
	assert.Equal(t, res.FuelUsed, again.FuelUsed, "the same run uses the same fuel")
	assert.Equal(t, res.Stdout, again.Stdout)
}

// TestExceptionsFuel checks that fuel counts the work around caught
// exceptions exactly: each iteration of "iterate" costs the same, whether
// its exception is caught or none is thrown, so the fuel of n iterations
// is a + b*n, and a thrown exception costs each iteration the same extra.
func TestExceptionsFuel(t *testing.T) {
	g := exceptions(t, "-O2")
	ctx := context.Background()
	fuel := func(n int, mode string) int64 {
		res, err := g.Exec(ctx, nil, "iterate", strconv.Itoa(n), mode)
		require.NoError(t, err)
		return res.FuelUsed
	}
	perIteration := map[string]int64{}
	for _, mode := range []string{"throw", "none"} {
		f100, f200, f300 := fuel(100, mode), fuel(200, mode), fuel(300, mode)
		assert.Equal(t, f200-f100, f300-f200, "%s: each iteration costs the same", mode)
		assert.Equal(t, f200, fuel(200, mode), "%s: the same run uses the same fuel", mode)
		perIteration[mode] = (f300 - f100) / 200
	}
	assert.Greater(t, perIteration["throw"], perIteration["none"], "throwing and catching costs fuel")
	t.Logf("fuel per iteration: %d with a caught exception, %d without", perIteration["throw"], perIteration["none"])
}

func TestExceptionsLimits(t *testing.T) {
	g := exceptions(t, "-O2")
	ctx := context.Background()

	// A loop that throws and catches forever stops on fuel.
	res, err := g.Exec(ctx, &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 5_000_000}}, "spin")
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
	assert.Equal(t, sandbox.StopFuel, res.Stop)

	// An exception no handler catches calls std::terminate, which says
	// so and aborts, as natively: the run ends with a trap.
	res, err = g.Exec(ctx, nil, "uncaught")
	var trap *sandbox.TrapError
	require.ErrorAs(t, err, &trap)
	assert.Equal(t, sandbox.StopTrap, res.Stop)
	assert.Equal(t, "before\n", string(res.Stdout))
	assert.Contains(t, string(res.Stderr), "terminating due to uncaught exception of type CodedError: deep")
}

// TestInvokeNesting checks the bounds on nested invokes: C++ that
// recurses thousands deep through functions with destructors (each call
// an invoke, a nested call on the host) runs, throws from the bottom and
// unwinds every level; a guest that grows the call stack of each level
// before nesting further stops with a stack overflow once the levels
// below the innermost hold sandbox.MaxNestedStack, instead of holding
// wazero's 100 MB per level on the host.
func TestInvokeNesting(t *testing.T) {
	g := exceptions(t, "nesting")
	ctx := context.Background()

	res, err := g.Exec(ctx, nil, "recurse", "3000")
	require.NoError(t, err)
	assert.Equal(t, "bottom 3000\n", string(res.Stdout), "every level's destructor ran")

	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err = g.Exec(ctx, nil, "grow")
	require.ErrorIs(t, err, sandbox.ErrStackOverflow)
	assert.Equal(t, sandbox.StopStack, res.Stop)
	assert.ErrorContains(t, err, "MiB of call stacks")
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("heap grew by %d MB; %s", (after.HeapSys-before.HeapSys)>>20, res.Stderr)
	// Three stacks of wazero's at most (the outermost, the innermost, and
	// MaxNestedStack below it), each doubling as it grows.
	assert.Less(t, after.HeapSys-before.HeapSys, uint64(2*(100<<20)+2*sandbox.MaxNestedStack),
		"the host's heap grew by %d MB", (after.HeapSys-before.HeapSys)>>20)
}

// BenchmarkCleanups measures what an invoke costs: calls of a function
// with a destructor (a cleanup landing pad, so each call of check is an
// invoke, a nested call through the host) against the same program built
// with -fno-exceptions, in one run. It reports the median time of each and
// their ratio.
func BenchmarkCleanups(b *testing.B) {
	ctx := context.Background()
	const calls = "100000"
	guests := map[string]*sandbox.Guest{
		"exceptions": exceptions(b, "cleanups"),
		"noexcept":   exceptions(b, "cleanups-noexcept"),
	}
	opts := &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: sandbox.UnlimitedFuel}}
	times := map[string][]time.Duration{}
	for i := 0; i < b.N; i++ {
		for name, g := range guests {
			start := time.Now()
			_, err := g.Exec(ctx, opts, calls)
			times[name] = append(times[name], time.Since(start))
			require.NoError(b, err)
		}
	}
	median := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	e, n := median(times["exceptions"]), median(times["noexcept"])
	b.ReportMetric(float64(e.Nanoseconds())/1e5, "ns/call-exceptions")
	b.ReportMetric(float64(n.Nanoseconds())/1e5, "ns/call-noexcept")
	b.ReportMetric(float64(e)/float64(n), "ratio")
}
