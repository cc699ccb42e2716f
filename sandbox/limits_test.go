package sandbox_test

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// healthy checks that the compiled guest still runs code correctly.
func healthy(t *testing.T, py *sandbox.Guest) {
	t.Helper()
	res, err := py.Run(context.Background(), "print(sum(range(101)))", nil)
	require.NoError(t, err)
	assert.Equal(t, "5050\n", string(res.Stdout))
}

func TestFuelStopsInfiniteLoop(t *testing.T) {
	py := sandboxtest.Python(t)
	res, err := py.Run(context.Background(), "while True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 1_000_000_000}})
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
	assert.Equal(t, -1, res.ExitCode)
	assert.Equal(t, int64(1_000_000_000), res.FuelUsed)
	healthy(t, py)
}

func TestFuelUsedIsReported(t *testing.T) {
	py := sandboxtest.Python(t)
	small, err := py.Run(context.Background(), "pass", nil)
	require.NoError(t, err)
	big, err := py.Run(context.Background(), "sum(range(10**6))", nil)
	require.NoError(t, err)
	assert.Positive(t, small.FuelUsed)
	assert.Greater(t, big.FuelUsed, small.FuelUsed+100_000_000, "a million additions cost fuel")
}

func TestRefillLetsComputationFinish(t *testing.T) {
	py := sandboxtest.Python(t)
	var calls int
	var lastUsed int64
	res, err := py.Run(context.Background(), "print(sum(i*i for i in range(300000)))", &sandbox.RunOptions{
		Limits: sandbox.Limits{Fuel: 200_000_000},
		Refill: func(used int64) int64 {
			calls++
			lastUsed = used
			return 200_000_000
		},
	})
	require.NoError(t, err)
	assert.Equal(t, "8999955000050000\n", string(res.Stdout))
	assert.Positive(t, calls, "the budget alone was too small")
	assert.GreaterOrEqual(t, lastUsed, int64(200_000_000))
	assert.Greater(t, res.FuelUsed, int64(200_000_000))

	// A refill that declines ends the run.
	calls = 0
	_, err = py.Run(context.Background(), "print(sum(i*i for i in range(300000)))", &sandbox.RunOptions{
		Limits: sandbox.Limits{Fuel: 200_000_000},
		Refill: func(int64) int64 { calls++; return 0 },
	})
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
	assert.Equal(t, 1, calls)
}

func TestDeepRecursionEndsCleanly(t *testing.T) {
	py := sandboxtest.Python(t)
	res, err := py.Run(context.Background(), `
import sys
sys.setrecursionlimit(10**6)
def f(n): return f(n + 1)
f(0)
`, &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 5_000_000_000}})
	require.Error(t, err)
	assert.NotEqual(t, 0, res.ExitCode)
	healthy(t, py)

	// Deep nesting in C code paths: the parser and the JSON decoder.
	res, err = py.Run(context.Background(), "import json\njson.loads('[' * 10**6)", &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 5_000_000_000}})
	require.Error(t, err)
	assert.Contains(t, string(res.Stderr), "RecursionError")
	healthy(t, py)
}

func TestMemoryLimit(t *testing.T) {
	py := sandboxtest.Python(t)
	res, err := py.Run(context.Background(), "x = bytearray(2**30)", nil)
	require.ErrorIs(t, err, sandbox.ErrMemoryLimit)
	var exc *sandbox.Exception
	require.ErrorAs(t, err, &exc, "the guest itself failed, with a MemoryError")
	assert.Equal(t, "MemoryError", exc.Type)
	assert.Equal(t, sandbox.StopMemory, res.Stop)
	assert.Equal(t, 1, res.ExitCode)
	assert.Contains(t, string(res.Stderr), "MemoryError")
	assert.True(t, res.MemoryLimitHit)
	assert.LessOrEqual(t, res.PeakMemory, int64(sandbox.DefaultMemoryLimit))

	// 2**31 is past what a 32-bit guest can index: a clean Python error.
	_, err = py.Run(context.Background(), "x = bytearray(2**31)", nil)
	require.ErrorAs(t, err, &exc)
	assert.NotErrorIs(t, err, sandbox.ErrMemoryLimit)

	// Growing a list until memory runs out.
	res, err = py.Run(context.Background(), "l = []\nwhile True: l.append('x' * 100000)", &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 64 << 20}})
	require.ErrorIs(t, err, sandbox.ErrMemoryLimit)
	assert.LessOrEqual(t, res.PeakMemory, int64(64<<20))

	// A guest that catches MemoryError goes on, and the run succeeds.
	res, err = py.Run(context.Background(), `
try:
    x = bytearray(100 * 2**20)
except MemoryError:
    print("refused")
print(len(bytearray(2**20)))
`, &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 64 << 20}})
	require.NoError(t, err)
	assert.Equal(t, "refused\n1048576\n", string(res.Stdout))
	assert.True(t, res.MemoryLimitHit)

	// A larger limit allows more.
	res, err = py.Run(context.Background(), "print(len(bytearray(300 * 2**20)))", &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 512 << 20}})
	require.NoError(t, err)
	assert.Equal(t, "314572800\n", string(res.Stdout))
	assert.Greater(t, res.PeakMemory, int64(300<<20))

	// A limit below what the guest needs to start is refused up front.
	_, err = py.Run(context.Background(), "pass", &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 1 << 20}})
	require.ErrorIs(t, err, sandbox.ErrMemoryLimit)
	healthy(t, py)
}

func TestOutputLimit(t *testing.T) {
	py := sandboxtest.Python(t)
	res, err := py.Run(context.Background(), "for i in range(100000): print(i)", &sandbox.RunOptions{Limits: sandbox.Limits{MaxOutput: 1000}})
	require.NoError(t, err, "by default output past the bound is dropped")
	assert.Len(t, res.Stdout, 1000)
	assert.True(t, res.StdoutTruncated)
	assert.Greater(t, res.StdoutBytes, int64(500_000))

	var streamed strings.Builder
	res, err = py.Run(context.Background(), "while True: print('spam')", &sandbox.RunOptions{StopAtOutputLimit: true, Stdout: &streamed, Limits: sandbox.Limits{MaxOutput: 1000}})
	require.ErrorIs(t, err, sandbox.ErrOutputLimit)
	assert.Len(t, res.Stdout, 1000)
	assert.Equal(t, string(res.Stdout), streamed.String(), "the stream is bounded too")

	res, err = py.Run(context.Background(), "import sys\nwhile True: sys.stderr.write('e' * 100)", &sandbox.RunOptions{StopAtOutputLimit: true, Limits: sandbox.Limits{MaxOutput: 1000}})
	require.ErrorIs(t, err, sandbox.ErrOutputLimit)
	assert.True(t, res.StderrTruncated)
	healthy(t, py)
}

const deterministicProgram = `
import time, random, os
print(time.time(), time.monotonic_ns() > 0)
print(random.random(), os.urandom(4).hex())
print(hash("fumehood"), list({"a", "b", "c", "d"}))
print(sum(range(10**5)))
print(time.time())
`

// runDeterministic runs code in a fresh deterministic sandbox seeded with
// seed.
func runDeterministic(t *testing.T, py *sandbox.Guest, code string, seed uint64) (*sandbox.Result, error) {
	t.Helper()
	s, err := py.NewSandbox(&sandbox.Config{Deterministic: true, Seed: seed})
	require.NoError(t, err)
	defer s.Close()
	return s.Run(context.Background(), code, nil)
}

func TestDeterministicRuns(t *testing.T) {
	py := sandboxtest.Python(t)
	var outs []string
	var fuels []int64
	for range 3 {
		res, err := runDeterministic(t, py, deterministicProgram, 7)
		require.NoError(t, err)
		outs = append(outs, string(res.Stdout))
		fuels = append(fuels, res.FuelUsed)
	}
	assert.Equal(t, outs[0], outs[1])
	assert.Equal(t, outs[0], outs[2])
	assert.Equal(t, fuels[0], fuels[1], "identical fuel")
	assert.Equal(t, fuels[0], fuels[2], "identical fuel")
	assert.True(t, strings.HasPrefix(outs[0], "1704067200."), "the clock starts at the epoch: %s", outs[0])

	other, err := runDeterministic(t, py, deterministicProgram, 8)
	require.NoError(t, err)
	assert.NotEqual(t, outs[0], string(other.Stdout), "another seed, other random numbers")

	real1, err := py.Run(context.Background(), deterministicProgram, nil)
	require.NoError(t, err)
	real2, err := py.Run(context.Background(), deterministicProgram, nil)
	require.NoError(t, err)
	assert.NotEqual(t, string(real1.Stdout), string(real2.Stdout), "by default randomness is real")
}

func TestSleep(t *testing.T) {
	py := sandboxtest.Python(t)
	base, err := py.Run(context.Background(), "import time", nil)
	require.NoError(t, err)
	res, err := py.Run(context.Background(), "import time\nt = time.monotonic()\ntime.sleep(0.3)\nprint(time.monotonic() - t >= 0.3)", nil)
	require.NoError(t, err)
	assert.Equal(t, "True\n", string(res.Stdout))
	assert.GreaterOrEqual(t, res.Duration, 300*time.Millisecond, "sleeping is wall time")
	assert.Less(t, res.FuelUsed, base.FuelUsed+50_000_000, "sleeping costs no fuel")

	// A deadline wakes a sleeping guest.
	res, err = py.Run(context.Background(), "import time\ntime.sleep(60)", &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 300 * time.Millisecond}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, res.Duration, 10*time.Second, "the 60 s sleep was cut short")

	// So does a cancel.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	res, err = py.Run(ctx, "import time\ntime.sleep(60)", nil)
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, res.Duration, 10*time.Second)

	// In deterministic mode the clock moves by exactly the time slept.
	res, err = runDeterministic(t, py, "import time\nt = time.time()\ntime.sleep(0.25)\nprint(round(time.time() - t, 2))", 0)
	require.NoError(t, err)
	assert.Equal(t, "0.25\n", string(res.Stdout))
}

func TestDeadlineWhileBlockedOnStdin(t *testing.T) {
	py := sandboxtest.Python(t)
	pr, pw := io.Pipe()
	defer pw.Close()
	res, err := py.Run(context.Background(), "import sys\nprint('waiting')\nsys.stdin.read()", &sandbox.RunOptions{Stdin: pr, Limits: sandbox.Limits{Timeout: 2 * time.Second}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, "waiting\n", string(res.Stdout))
	assert.Less(t, res.Duration, 10*time.Second)
}

func TestNoGoroutineGrowth(t *testing.T) {
	py := sandboxtest.Python(t)
	g := goGuest(t)
	ctx := context.Background()
	// Warm up, then count.
	_, err := g.Exec(ctx, nil, "args", "x")
	require.NoError(t, err)
	runtime.GC()
	before := runtime.NumGoroutine()
	for i := range 200 {
		switch i % 4 {
		case 0:
			_, err = g.Exec(ctx, nil, "args", "x")
			require.NoError(t, err)
		case 1:
			_, err = g.Exec(ctx, &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 5 * time.Millisecond}}, "spin")
			require.ErrorIs(t, err, context.DeadlineExceeded)
		case 2:
			_, err = g.Exec(ctx, &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 10_000_000}}, "spin")
			require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
		case 3:
			_, err = g.Exec(ctx, &sandbox.RunOptions{Stdin: io.MultiReader(strings.NewReader("a"), strings.NewReader("b"))}, "cat")
			require.NoError(t, err)
		}
	}
	for range 10 {
		_, err = py.Run(ctx, "while True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 20 * time.Millisecond}})
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	// Goroutines that end asynchronously get a moment to do so.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), before)
}

func TestGoGuestLimits(t *testing.T) {
	g := goGuest(t)
	res, err := g.Exec(context.Background(), &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 50_000_000}}, "spin")
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
	assert.Equal(t, int64(50_000_000), res.FuelUsed)

	res, err = g.Exec(context.Background(), &sandbox.RunOptions{Limits: sandbox.Limits{MaxOutput: 100}}, "write", "5000")
	require.NoError(t, err)
	assert.Len(t, res.Stdout, 100)
	assert.Equal(t, int64(5000), res.StdoutBytes)
}

// A deterministic run must not depend on what the process did before: it
// once did, through the device numbers file systems got from a process-wide
// counter (CPython allocates ints past 256, which costs fuel).
func TestDeterministicWhateverCameBefore(t *testing.T) {
	py := sandboxtest.Python(t)
	before, err := runDeterministic(t, py, deterministicProgram, 7)
	require.NoError(t, err)
	for range 300 {
		s, err := py.NewSandbox(nil)
		require.NoError(t, err)
		s.Close()
	}
	after, err := runDeterministic(t, py, deterministicProgram, 7)
	require.NoError(t, err)
	assert.Equal(t, before.FuelUsed, after.FuelUsed)
	assert.Equal(t, string(before.Stdout), string(after.Stdout))
}

// TestRunLimitsOnlyLower: a sandbox's Limits are the ceiling of its runs.
// A run asking for more time, fuel, memory or output than its sandbox gets
// the sandbox's; one asking for less gets less; a sandbox that sets none
// has the defaults before the comparison; a negative request is an error.
func TestRunLimitsOnlyLower(t *testing.T) {
	// A bound of the test's own, so that a run given the run's hour fails
	// instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := goGuest(t)
	s, err := g.NewSandbox(&sandbox.Config{Limits: sandbox.Limits{Timeout: 300 * time.Millisecond, Fuel: 10_000_000, MaxOutput: 100}})
	require.NoError(t, err)
	defer s.Close()
	more := &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: time.Hour, Fuel: sandbox.UnlimitedFuel, MaxOutput: 1 << 20}}

	res, err := s.Exec(ctx, more, "spin")
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
	assert.LessOrEqual(t, res.FuelUsed, int64(10_000_000), "the sandbox's fuel, not the run's")
	res, err = s.Exec(ctx, more, "write", "5000")
	require.NoError(t, err)
	assert.Len(t, res.Stdout, 100, "the sandbox's MaxOutput, not the run's")
	assert.True(t, res.StdoutTruncated)
	res, err = s.Exec(ctx, &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 1_000_000}}, "spin")
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
	assert.LessOrEqual(t, res.FuelUsed, int64(1_000_000), "a lower request lowers")
	res, err = s.Exec(ctx, &sandbox.RunOptions{Limits: sandbox.Limits{MaxOutput: 10}}, "write", "5000")
	require.NoError(t, err)
	assert.Len(t, res.Stdout, 10)

	slow, err := g.NewSandbox(&sandbox.Config{Limits: sandbox.Limits{Timeout: 300 * time.Millisecond, Fuel: sandbox.UnlimitedFuel}})
	require.NoError(t, err)
	defer slow.Close()
	res, err = slow.Exec(ctx, more, "spin")
	require.ErrorIs(t, err, context.DeadlineExceeded, "the sandbox's timeout, not the run's hour")
	assert.Less(t, res.Duration, 10*time.Second)

	// Memory: a module needing 1 MiB does not start under a 512 KiB
	// ceiling, whatever its run asks for.
	h, err := compileHostile(t, hostileModule{memPages: 16}, nil)
	require.NoError(t, err)
	small, err := h.NewSandbox(&sandbox.Config{Limits: sandbox.Limits{Memory: 512 << 10}})
	require.NoError(t, err)
	defer small.Close()
	_, err = small.Exec(ctx, &sandbox.RunOptions{Limits: sandbox.Limits{Memory: 1 << 20}})
	require.ErrorIs(t, err, sandbox.ErrMemoryLimit)

	// No limits set: the defaults are the ceiling.
	zero, err := g.NewSandbox(nil)
	require.NoError(t, err)
	defer zero.Close()
	res, err = zero.Exec(ctx, &sandbox.RunOptions{Limits: sandbox.Limits{MaxOutput: 2 * sandbox.DefaultMaxOutput}}, "write", strconv.Itoa(sandbox.DefaultMaxOutput+10))
	require.NoError(t, err)
	assert.True(t, res.StdoutTruncated, "the default MaxOutput, not the run's")
	assert.LessOrEqual(t, len(res.Stdout), sandbox.DefaultMaxOutput)
	assert.Contains(t, string(res.Stdout), "[... ")
	eff, err := sandbox.Limits{}.Lower(sandbox.Limits{Timeout: time.Hour, Fuel: sandbox.UnlimitedFuel, Memory: 1 << 32, MaxOutput: 1 << 30})
	require.NoError(t, err)
	assert.Equal(t, sandbox.Limits{Timeout: sandbox.DefaultTimeout, Fuel: int64(sandbox.DefaultTimeout/time.Second) * sandbox.DefaultFuelPerSecond,
		Memory: sandbox.DefaultMemoryLimit, MaxOutput: sandbox.DefaultMaxOutput}, eff)
	eff, err = sandbox.Limits{Timeout: -1}.Lower(sandbox.Limits{Timeout: time.Second})
	require.NoError(t, err)
	assert.Equal(t, time.Second, eff.Timeout, "any timeout lowers none")

	for _, bad := range []sandbox.Limits{{Timeout: -1}, {Fuel: -1}, {Memory: -1}, {MaxOutput: -1}} {
		res, err := s.Exec(ctx, &sandbox.RunOptions{Limits: bad}, "args")
		assert.Error(t, err, "%+v", bad)
		assert.Nil(t, res, "%+v", bad)
	}
}

// TestLimitBeforeStartHasResult: a run that reached a limit before its
// guest was entered (a context already done, the TotalFuel of its sandbox
// or session spent) returns a Result saying so, as one stopped midway
// does; only invalid arguments and closed objects give none.
func TestLimitBeforeStartHasResult(t *testing.T) {
	g := goGuest(t)
	s, err := g.NewSandbox(&sandbox.Config{TotalFuel: 5_000_000})
	require.NoError(t, err)
	defer s.Close()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		stop sandbox.StopReason
	}{
		{canceled, context.Canceled, sandbox.StopCanceled},
		{expired, context.DeadlineExceeded, sandbox.StopDeadline},
	} {
		res, err := s.Exec(c.ctx, nil, "args", "x")
		require.ErrorIs(t, err, c.err)
		require.NotNil(t, res, "%v", c.err)
		assert.Equal(t, c.stop, res.Stop)
		assert.Equal(t, -1, res.ExitCode)
		assert.Empty(t, res.Stdout, "the guest was not entered")
	}

	// The sandbox's TotalFuel: the spin takes all of it, the next run
	// none.
	res, err := s.Exec(context.Background(), nil, "spin")
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
	assert.Equal(t, sandbox.StopFuel, res.Stop)
	assert.LessOrEqual(t, res.FuelUsed, int64(5_000_000))
	res, err = s.Exec(context.Background(), nil, "args", "x")
	require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
	require.NotNil(t, res)
	assert.Equal(t, sandbox.StopFuel, res.Stop)
	assert.Zero(t, res.FuelUsed)
	assert.Empty(t, res.Stdout)

	// Closed: no Result.
	require.NoError(t, s.Close())
	res, err = s.Exec(context.Background(), nil, "args")
	require.ErrorIs(t, err, sandbox.ErrClosed)
	assert.Nil(t, res)
}

// TestDeadlineOnlyGetsDeadline: a caller who sets only a deadline gets a
// deadline error, not fuel exhausted first. The default fuel of a timeout
// covers it with room for faster machines: `while True: pass`, the
// fastest fuel burner known, uses under a third of it (measured over a
// short run), and a run of it stops on its deadline.
func TestDeadlineOnlyGetsDeadline(t *testing.T) {
	ctx := context.Background()
	for _, timeout := range []time.Duration{time.Millisecond, 5 * time.Second, time.Hour} {
		// As a sandbox's ceiling, and as a run's request under the default one.
		l, err := sandbox.Limits{Timeout: timeout}.Lower(sandbox.Limits{})
		require.NoError(t, err)
		assert.Equal(t, int64(max(timeout, time.Second)/time.Second)*sandbox.DefaultFuelPerSecond, l.Fuel, timeout)
		l, err = sandbox.Limits{}.Lower(sandbox.Limits{Timeout: timeout})
		require.NoError(t, err)
		assert.GreaterOrEqual(t, l.Fuel, int64(l.Timeout/time.Second)*sandbox.DefaultFuelPerSecond, timeout)
	}
	l, err := sandbox.Limits{Timeout: -1}.Lower(sandbox.Limits{})
	require.NoError(t, err)
	assert.Equal(t, int64(sandbox.DefaultFuel), l.Fuel, "no timeout: the fuel of last resort")
	l, err = sandbox.Limits{Timeout: 1 << 62}.Lower(sandbox.Limits{})
	require.NoError(t, err)
	assert.Equal(t, int64(sandbox.UnlimitedFuel), l.Fuel, "saturates")

	py := sandboxtest.Python(t)
	const timeout = 500 * time.Millisecond
	res, err := py.Run(ctx, "while True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: timeout}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, sandbox.StopDeadline, res.Stop)
	perSecond := float64(res.FuelUsed) / res.Duration.Seconds()
	t.Logf("while True: pass: %.3g fuel a second", perSecond)
	assert.Less(t, 3*perSecond, float64(sandbox.DefaultFuelPerSecond),
		"while True: pass burns %.3g fuel a second: the default per second must outlast it 3x", perSecond)
}

// TestOutputPastLimitKeepsStartAndEnd: a run that prints past MaxOutput
// is not stopped; its Result keeps the start, the count of bytes dropped
// and the end (where the answer usually is), within MaxOutput, and the
// stream the caller passed gets every byte.
func TestOutputPastLimitKeepsStartAndEnd(t *testing.T) {
	var stream bytes.Buffer
	res, err := sandboxtest.Python(t).Run(context.Background(),
		"for i in range(200_000): print(f'line {i}')\nprint('the answer is 42')",
		&sandbox.RunOptions{Stdout: &stream, Limits: sandbox.Limits{MaxOutput: 64 << 10}})
	require.NoError(t, err)
	assert.Equal(t, sandbox.StopExit, res.Stop)
	assert.True(t, res.StdoutTruncated)
	assert.LessOrEqual(t, len(res.Stdout), 64<<10)
	out := string(res.Stdout)
	assert.True(t, strings.HasPrefix(out, "line 0\nline 1\n"), out[:20])
	assert.True(t, strings.HasSuffix(out, "line 199999\nthe answer is 42\n"))
	assert.Regexp(t, `\n\[\.\.\. [0-9]+ bytes dropped \.\.\.\]\n`, out)
	assert.Equal(t, res.StdoutBytes, int64(stream.Len()), "the stream gets all of it")
	assert.True(t, strings.HasSuffix(stream.String(), "the answer is 42\n"))
}

// TestDefaultMemoryFitsDataWork: a program that needs 400 MB, ordinary
// data work, runs under the default limits (it hit the 256 MiB default
// before); past the default it is still MemoryError.
func TestDefaultMemoryFitsDataWork(t *testing.T) {
	py := sandboxtest.Python(t)
	res, err := py.Run(context.Background(), "x = bytearray(400_000_000); print(len(x))", nil)
	require.NoError(t, err)
	assert.Equal(t, "400000000\n", string(res.Stdout))
	assert.Greater(t, res.PeakMemory, int64(400_000_000))
	_, err = py.Run(context.Background(), "x = bytearray(600_000_000)", nil)
	var exc *sandbox.Exception
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "MemoryError", exc.Type)
}
