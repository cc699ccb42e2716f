package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// soakRuns is how many runs a soak test makes: short in `go test`, the
// number in the environment variable env when set (as `make soak` does).
func soakRuns(t *testing.T, env string, short int) int {
	t.Helper()
	s := os.Getenv(env)
	if s == "" {
		return short
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, env)
	return n
}

// soak calls oneRun warmup times, then runs times, and checks that the
// goroutines and live heap of the process did not grow over the second lot.
func soak(t *testing.T, what string, warmup, runs int, oneRun func(i int)) {
	t.Helper()
	for i := range warmup { // wazero and the runtime fill their caches
		oneRun(i)
	}
	before := measure()
	start := time.Now()
	for i := range runs {
		oneRun(i)
	}
	elapsed := time.Since(start)
	after := measure()
	// Goroutines that end asynchronously (a deadline's timer) get a moment.
	for deadline := time.Now().Add(5 * time.Second); after.goroutines > before.goroutines && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		after = measure()
	}
	t.Logf("%d %s runs in %v (%v a run): goroutines %d -> %d, live heap %.1f -> %.1f MiB",
		runs, what, elapsed.Round(time.Millisecond), (elapsed / time.Duration(runs)).Round(time.Microsecond),
		before.goroutines, after.goroutines, mib(before.heap), mib(after.heap))
	assert.LessOrEqual(t, after.goroutines, before.goroutines)
	assert.LessOrEqual(t, after.heap, before.heap+soakNoise)
}

// usage is what the process holds: goroutines and live heap after a
// collection.
type usage struct {
	goroutines int
	heap       uint64
}

func measure() usage {
	runtime.GC()
	runtime.GC() // the first may leave finalizers' garbage behind
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return usage{goroutines: runtime.NumGoroutine(), heap: m.HeapAlloc}
}

// soakNoise is the heap growth tolerated over a soak: the runtime's and
// wazero's caches settle during the first runs, whatever their number. A
// leak of one KiB a run would exceed it within the 10,000 runs of `make soak`.
const soakNoise = 8 << 20

// TestSoakOneShot runs the WASI test guest many times, one fresh sandbox a
// run, through every way a run ends (success, exit status, fuel, deadline,
// output limit, stdin, files), and checks that the goroutines and live heap
// of the process do not grow.
func TestSoakOneShot(t *testing.T) {
	g := goGuest(t)
	ctx := context.Background()
	runs := soakRuns(t, "FUMEHOOD_SOAK_RUNS", 200)
	oneRun := func(i int) {
		var err error
		var res *sandbox.Result
		switch i % 6 {
		case 0:
			res, err = g.Exec(ctx, nil, "args", strconv.Itoa(i))
			require.NoError(t, err)
			require.Equal(t, strconv.Itoa(i)+"\n", string(res.Stdout))
		case 1:
			_, err = g.Exec(ctx, nil, "exit", "3")
			var exit *sandbox.ExitError
			require.ErrorAs(t, err, &exit)
		case 2:
			_, err = g.Exec(ctx, &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 5_000_000}}, "spin")
			require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
		case 3:
			_, err = g.Exec(ctx, &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: time.Millisecond, Fuel: sandbox.UnlimitedFuel}}, "spin")
			require.ErrorIs(t, err, context.DeadlineExceeded)
		case 4:
			_, err = g.Exec(ctx, &sandbox.RunOptions{StopAtOutputLimit: true, Limits: sandbox.Limits{MaxOutput: 100}}, "write", "5000")
			require.ErrorIs(t, err, sandbox.ErrOutputLimit)
		case 5:
			s, err := g.NewSandbox(nil)
			require.NoError(t, err)
			require.NoError(t, s.Files().WriteFile("/work/in", []byte("x")))
			res, err = s.Exec(ctx, &sandbox.RunOptions{Stdin: io.MultiReader(strings.NewReader("a"))}, "ls", "/work")
			require.NoError(t, err)
			require.Equal(t, "in\n", string(res.Stdout))
			s.Close()
		}
	}
	soak(t, "one-shot", 60, runs, oneRun)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// TestSoakSessions runs one session through many runs in one process,
// through every way a session run ends (success, exception, SystemExit, a
// fuel stop and its rollback) with a fork and a snapshot/resume now and
// then, and checks that goroutines and the live heap do not grow.
// `make soak` runs 1,000.
func TestSoakSessions(t *testing.T) {
	g := sandboxtest.Python(t)
	ctx := context.Background()
	runs := soakRuns(t, "FUMEHOOD_SOAK_SESSION_RUNS", 200)
	s, err := g.NewSession(ctx, nil)
	require.NoError(t, err)
	defer func() { s.Close() }()
	_, err = s.Run(ctx, "n = 0\nlog = []", nil)
	require.NoError(t, err)
	want := 0
	oneRun := func(i int) {
		switch i % 10 {
		case 0, 1, 2, 3, 4:
			res, err := s.Run(ctx, "n += 1\nlog.append(n)\nlog = log[-100:]\nn", nil)
			require.NoError(t, err)
			want++
			require.Equal(t, strconv.Itoa(want), res.Value)
		case 5:
			_, err := s.Run(ctx, "raise ValueError(n)", nil)
			var exc *sandbox.Exception
			require.ErrorAs(t, err, &exc)
		case 6:
			_, err := s.Run(ctx, "import sys\nsys.exit(2)", nil)
			var exit *sandbox.ExitError
			require.ErrorAs(t, err, &exit)
		case 7:
			_, err := s.Run(ctx, "n = -1\nwhile True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 20_000_000}})
			require.ErrorIs(t, err, sandbox.ErrFuelExhausted)
		case 8:
			f, err := s.Fork(ctx)
			require.NoError(t, err)
			res, err := f.Run(ctx, "n", nil)
			require.NoError(t, err)
			require.Equal(t, strconv.Itoa(want), res.Value)
			f.Close()
		case 9:
			if i%50 != 9 {
				return
			}
			var buf bytes.Buffer
			require.NoError(t, s.Snapshot(&buf))
			r, err := g.ResumeSession(ctx, &buf, nil)
			require.NoError(t, err)
			s.Close()
			s = r
		}
	}
	soak(t, "session", 50, runs, oneRun)
}

// TestConcurrentSandboxes runs 100 sandboxes at once on one Guest, each
// with its own files, and checks that each sees exactly its own. `make race`
// runs it under the race detector.
func TestConcurrentSandboxes(t *testing.T) {
	g := goGuest(t)
	ctx := context.Background()
	const n = 100
	before := measure()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = func() error {
				// No deadline: 100 runs at once on a slow machine under
				// -race can take longer than the default.
				s, err := g.NewSandbox(&sandbox.Config{Limits: sandbox.Limits{Timeout: -1}})
				if err != nil {
					return err
				}
				defer s.Close()
				mine := fmt.Sprintf("sandbox-%d", i)
				if err := s.Files().WriteFile("/work/"+mine, []byte(mine)); err != nil {
					return err
				}
				for run := range 3 {
					cfg, args := &sandbox.RunOptions{}, []string{"ls", "/work"}
					if i%10 == 0 && run == 1 { // some runs are stopped meanwhile
						cfg, args = &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: 20_000_000}}, []string{"spin"}
					}
					res, err := s.Exec(ctx, cfg, args...)
					switch {
					case cfg.Limits.Fuel != 0 && !assert.ErrorIs(t, err, sandbox.ErrFuelExhausted):
					case cfg.Limits.Fuel == 0 && err != nil:
						return err
					case cfg.Limits.Fuel == 0 && string(res.Stdout) != mine+"\n":
						return fmt.Errorf("sandbox %d sees %q", i, res.Stdout)
					}
				}
				got, err := s.Files().ReadFile("/work/" + mine)
				if err == nil && string(got) != mine {
					err = fmt.Errorf("sandbox %d reads %q", i, got)
				}
				return err
			}()
		})
	}
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "sandbox %d", i)
	}
	after := measure()
	for deadline := time.Now().Add(5 * time.Second); after.goroutines > before.goroutines && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		after = measure()
	}
	assert.LessOrEqual(t, after.goroutines, before.goroutines)
}
