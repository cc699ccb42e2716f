package sandbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/wasmbin"
	"github.com/fumehood/fumehood/sandbox"
)

// stackModule encodes a WASI command laid out as wasm-ld --stack-first
// lays out C programs: global 0 is the stack pointer, starting at 32 KiB
// and growing down, and static data lies above it. _start calls function
// 1, whose body is body.
func stackModule(body []byte) []byte {
	sec := func(id byte, payload []byte) []byte {
		return append(wasmbin.AppendU32([]byte{id}, uint32(len(payload))), payload...)
	}
	fn := func(code []byte) []byte {
		code = append([]byte{0}, code...) // no locals
		return append(wasmbin.AppendU32(nil, uint32(len(code))), code...)
	}
	m := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	m = append(m, sec(1, []byte{1, 0x60, 0, 0})...)                            // type 0: () -> ()
	m = append(m, sec(3, []byte{2, 0, 0})...)                                  // two functions of type 0
	m = append(m, sec(5, []byte{1, 0, 1})...)                                  // memory: 1 page
	m = append(m, sec(6, []byte{1, 0x7F, 1, 0x41, 0x80, 0x80, 0x02, 0x0B})...) // mut i32 = 32768
	m = append(m, sec(7, []byte{2, 6, 'm', 'e', 'm', 'o', 'r', 'y', 2, 0, 6, '_', 's', 't', 'a', 'r', 't', 0, 0})...)
	code := []byte{2}
	code = append(code, fn([]byte{0x10, 1, 0x0B})...) // _start: call 1
	code = append(code, fn(append(body, 0x0B))...)
	m = append(m, sec(10, code)...)
	m = append(m, sec(11, []byte{1, 0, 0x41, 0x80, 0x80, 0x02, 0x0B, 1, 'x'})...) // data at 32768
	return m
}

var (
	// overflowBody takes a 1 KiB frame, stores into it and recurses: the
	// stack pointer goes below zero after 32 calls and the store traps.
	overflowBody = []byte{
		0x23, 0, 0x41, 0x80, 0x08, 0x6B, 0x24, 0, // sp = sp - 1024
		0x23, 0, 0x41, 0, 0x36, 2, 0, // i32.store [sp] = 0
		0x10, 1, // call 1
	}
	// wildStoreBody stores far outside memory with the stack untouched.
	wildStoreBody = []byte{0x41, 0x80, 0x80, 0x10, 0x41, 0, 0x36, 2, 0} // [262144] = 0
	// deepCallBody recurses without touching memory: the runtime's call
	// stack runs out.
	deepCallBody = []byte{0x10, 1}
)

// TestStackOverflowIsItsOwnError checks that a guest whose C stack runs
// out (a trap with the stack pointer below the stack) or whose call stack
// runs out reports ErrStackOverflow inside a *TrapError, and that another
// out-of-bounds trap does not.
func TestStackOverflowIsItsOwnError(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		body     []byte
		overflow bool
	}{
		{"C stack", overflowBody, true},
		{"call stack", deepCallBody, true},
		{"wild store", wildStoreBody, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := sandbox.Compile(ctx, stackModule(tc.body), nil)
			require.NoError(t, err)
			defer g.Close()
			res, err := g.Exec(ctx, nil)
			require.Error(t, err)
			var trap *sandbox.TrapError
			require.ErrorAs(t, err, &trap)
			assert.Equal(t, tc.overflow, errors.Is(err, sandbox.ErrStackOverflow), "%v", err)
			if tc.overflow {
				assert.Equal(t, sandbox.StopStack, res.Stop)
			} else {
				assert.Equal(t, sandbox.StopTrap, res.Stop)
			}
		})
	}
}

// deepLRU recurses through lru_cache's C wrapper: every level is a level of
// C recursion.
const deepLRU = "import functools, sys\nsys.setrecursionlimit(100000)\n" +
	"@functools.lru_cache(None)\ndef f(n): return 0 if n == 0 else f(n - 1) + 1\nprint(f(20000))\n"

// TestPythonStackOverflow runs, in the npm guest (a 512 KiB C stack, too
// small for CPython's C recursion limit), recursion through C that runs
// the stack out: the run reports ErrStackOverflow, not a bare trap.
func TestPythonStackOverflow(t *testing.T) {
	ctx := context.Background()
	g, err := sandbox.CompilePython(ctx, &sandbox.Options{Guest: sandbox.GuestNPM})
	require.NoError(t, err, "the npm guest is needed; `make test` installs it")
	defer g.Close()
	res, err := g.Run(ctx, deepLRU, nil)
	require.Error(t, err)
	require.ErrorIs(t, err, sandbox.ErrStackOverflow)
	var trap *sandbox.TrapError
	require.ErrorAs(t, err, &trap)
	assert.Equal(t, sandbox.StopStack, res.Stop)
	assert.Equal(t, "stack", res.Stop.String())
}

// TestPythonStackOverflowInSession: in a session of the npm guest, the same
// overflow is ErrStackOverflow with StopStack, and the session goes on from
// the state before the run.
func TestPythonStackOverflowInSession(t *testing.T) {
	ctx := context.Background()
	g, err := sandbox.CompilePython(ctx, &sandbox.Options{Guest: sandbox.GuestNPM, Sessions: true})
	require.NoError(t, err, "the npm guest's session build is needed; `make test` prepares it")
	defer g.Close()
	s, err := g.NewSession(ctx, nil)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Run(ctx, "x = 41", nil)
	require.NoError(t, err)
	res, err := s.Run(ctx, deepLRU, nil)
	require.ErrorIs(t, err, sandbox.ErrStackOverflow)
	require.NotNil(t, res)
	assert.Equal(t, sandbox.StopStack, res.Stop)
	res, err = s.Run(ctx, "x + 1", nil)
	require.NoError(t, err)
	assert.Equal(t, "42", res.Value)
}

// runtimeOverflows recurse in C code that counts no recursion, a million
// calls deep: the runtime's call stack runs out before the C stack does.
var runtimeOverflows = []struct{ name, code string }{
	{"hash of a deep tuple", "t = ()\nfor _ in range(10**6):\n    t = (t,)\nhash(t)\n"},
	{"chained maps", "m = iter([1])\nfor _ in range(10**6):\n    m = map(abs, m)\nnext(m)\n"},
}

// TestRuntimeStackOverflowIsStopStack runs, on the tests' Python guest,
// programs that run the runtime's call stack out inside the interpreter's
// C code: each is ErrStackOverflow in a *TrapError with StopStack, in
// one-shot runs and in a session, which goes on from the state before the
// run. (The built guest's driver wraps the runtime's error, and a prefix
// match on its text made these plain traps.)
func TestRuntimeStackOverflowIsStopStack(t *testing.T) {
	oneShotAndSession(t, func(t *testing.T, run func(code string) (*sandbox.Result, error)) {
		for _, tc := range runtimeOverflows {
			res, err := run(tc.code)
			require.NotNil(t, res, "%s: %v", tc.name, err)
			assert.ErrorIs(t, err, sandbox.ErrStackOverflow, tc.name)
			var trap *sandbox.TrapError
			assert.ErrorAs(t, err, &trap, tc.name)
			assert.Equal(t, sandbox.StopStack, res.Stop, "%s: %v", tc.name, err)
			assert.Equal(t, -1, res.ExitCode, tc.name)
		}
	})
}
