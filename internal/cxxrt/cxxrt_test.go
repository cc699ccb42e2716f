package cxxrt_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/aptfetch"
	"github.com/fumehood/fumehood/internal/cxxrt"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

var program struct {
	sync.Once
	wasm []byte
	err  error
}

// exceptions returns testdata/exceptions.cpp built against the runtime
// (which Build makes once per cache, in about two minutes), compiled by
// sandbox.Compile with fuel metering, as every WASI program is.
func exceptions(t *testing.T) *sandbox.Guest {
	t.Helper()
	if testing.Short() {
		t.Skip("cxxrt: builds LLVM's C++ runtime the first time (about two minutes)")
	}
	program.Do(func() {
		ctx := context.Background()
		rt, err := cxxrt.Build(ctx, nil)
		if err != nil {
			program.err = err
			return
		}
		dir, err := os.MkdirTemp("", "cxxrt-test-")
		if err != nil {
			program.err = err
			return
		}
		defer os.RemoveAll(dir)
		tc, err := cxxrt.UnpackToolchain(ctx, nil, filepath.Join(dir, "toolchain"))
		if err != nil {
			program.err = err
			return
		}
		out := filepath.Join(dir, "exceptions.wasm")
		if program.err = tc.CXX(ctx, rt, "-O2", "testdata/exceptions.cpp", "-o", out); program.err != nil {
			return
		}
		program.wasm, program.err = os.ReadFile(out)
	})
	if errors.Is(program.err, aptfetch.ErrNoMirror) && os.Getenv(sandboxtest.RequireEnv) == "" {
		t.Skipf("cxxrt: no Debian mirror to fetch the toolchain from: %v", program.err)
	}
	require.NoError(t, program.err)
	g, err := sandbox.Compile(context.Background(), program.wasm, &sandbox.Options{CacheDir: t.TempDir(), ExceptionHandling: true})
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	return g
}

func TestExceptions(t *testing.T) {
	g := exceptions(t)
	ctx := context.Background()

	_, err := sandbox.Compile(ctx, program.wasm, &sandbox.Options{CacheDir: t.TempDir()})
	require.ErrorIs(t, err, sandbox.ErrInvalidModule, "exception handling is opt-in")
	assert.ErrorContains(t, err, "Options.ExceptionHandling")

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
	g := exceptions(t)
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
	g := exceptions(t)
	ctx := context.Background()

	// A loop that throws and catches forever stops on fuel.
	res, err := g.Exec(ctx, &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 5_000_000}}, "spin")
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
	assert.Equal(t, sandbox.StopFuel, res.Stop)

	// An exception no handler catches ends the run with a trap.
	res, err = g.Exec(ctx, nil, "uncaught")
	var trap *sandbox.TrapError
	require.ErrorAs(t, err, &trap)
	assert.ErrorContains(t, err, "uncaught exception")
	assert.Equal(t, sandbox.StopTrap, res.Stop)
	assert.Equal(t, "before\n", string(res.Stdout))
}
