package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// raceState is what every run of TestSessionSnapshotRacesRun leaves in the
// session: a counter, the list of its values and a MiB of memory (256
// pages, the same ones every run) filled with the counter's last value.
// A state is whole when all three agree.
const (
	raceSetup = "n = 0\nhist = []\ndata = bytearray(1 << 20)"
	raceStep  = "n += 1\nhist.append(n)\ndata[:] = bytes([n % 251]) * len(data)"
	raceCheck = "len(hist) == n and (n == 0 or hist[-1] == n) and data.count(n % 251) == len(data)"
)

// TestSessionSnapshotRacesRun calls Run, Snapshot, Fork and resumes of
// the snapshots on one session from several goroutines, and checks every
// snapshot resumed and every fork: each must hold a whole state (see
// raceState), resume without a checksum failure and run without a trap.
// A snapshot used to be encoded after the session's lock was released,
// from the checkpoint's pages, which the next run's checkpoint overwrote
// in place: torn snapshots (a run's counter with another run's memory,
// traps on resume, zstd checksum failures that the SHA-256 did not catch).
// `make race` runs it under the race detector, which reported the pair.
//
// FUMEHOOD_TEAR_SECONDS=60 runs it for that long instead of a fixed
// number of runs, and logs how many snapshots were torn of how many.
func TestSessionSnapshotRacesRun(t *testing.T) {
	g := sandboxtest.PythonSessions(t)
	ctx := context.Background()
	s := newSession(t, nil)
	run(t, s, raceSetup)

	var until time.Time
	runs := 30
	if v := os.Getenv("FUMEHOOD_TEAR_SECONDS"); v != "" {
		secs, err := strconv.Atoi(v)
		require.NoError(t, err)
		until, runs = time.Now().Add(time.Duration(secs)*time.Second), 0
	}
	var (
		done                   atomic.Bool
		ran, snapped, resumed  atomic.Int64
		torn, forks, forksTorn atomic.Int64
		wg                     sync.WaitGroup
		mu                     sync.Mutex
		failures               []string
	)
	fail := func(counter *atomic.Int64, format string, args ...any) {
		counter.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	// verify checks r, a resumed session or a fork made with err, with
	// raceCheck, counting a failure in torn, and closes it.
	verify := func(what string, r *sandbox.Session, err error, torn *atomic.Int64) {
		if err != nil {
			fail(torn, "%s: %v", what, err)
			return
		}
		defer r.Close()
		res, err := r.Run(ctx, raceCheck, nil)
		switch {
		case err != nil:
			fail(torn, "%s: %v", what, err)
		case res.Value != "True":
			fail(torn, "%s: inconsistent state", what)
		}
	}
	snaps := make(chan []byte, 4)
	// A fork marks every page of the checkpoint shared, which the next
	// checkpoint then copies rather than writes: forks are taken every
	// few runs, so that most checkpoints write in place, as when no fork
	// is taken.
	forkNow := make(chan struct{}, 1)

	wg.Go(func() { // runs
		defer close(forkNow)
		defer done.Store(true)
		for i := 0; ; i++ {
			if i%5 == 4 {
				select {
				case forkNow <- struct{}{}:
				default:
				}
			}
			if (runs > 0 && i >= runs) || (runs == 0 && time.Now().After(until)) {
				return
			}
			if _, err := s.Run(ctx, raceStep, nil); err != nil {
				fail(&torn, "run %d: %v", i, err)
				return
			}
			ran.Add(1)
		}
	})
	wg.Go(func() { // snapshots, resumed by the goroutine below
		defer close(snaps)
		for !done.Load() {
			var buf bytes.Buffer
			if err := s.Snapshot(&buf); err != nil {
				fail(&torn, "snapshot: %v", err)
				return
			}
			snapped.Add(1)
			snaps <- buf.Bytes()
		}
	})
	wg.Go(func() { // resumes
		for snap := range snaps {
			r, err := g.ResumeSession(ctx, bytes.NewReader(snap), nil)
			verify("resumed", r, err, &torn)
			resumed.Add(1)
		}
	})
	wg.Go(func() { // forks
		for range forkNow {
			f, err := s.Fork(ctx)
			verify("fork", f, err, &forksTorn)
			forks.Add(1)
		}
	})
	wg.Wait()
	t.Logf("%d runs, %d snapshots (%d resumed, %d torn), %d forks (%d torn)",
		ran.Load(), snapped.Load(), resumed.Load(), torn.Load(), forks.Load(), forksTorn.Load())
	for _, f := range failures {
		t.Error(f)
	}
	assert.Zero(t, torn.Load(), "torn snapshots")
	assert.Zero(t, forksTorn.Load(), "torn forks")
	assert.Positive(t, snapped.Load())
	assert.Equal(t, "True", run(t, s, raceCheck).Value)
	assert.Equal(t, strconv.FormatInt(ran.Load(), 10), run(t, s, "n").Value)
}
