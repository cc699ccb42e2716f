package sandbox

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fumehood/fumehood/internal/testenv"

	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/guests/cpython"
)

// asyncifyBuilt compiles the built guest's session build (asyncify), the
// way sessions of the built guest ran before the driver: the baseline of
// BenchmarkPreinit. It skips when that build is not prepared
// (`fumehood guest build --session`).
func asyncifyBuilt(b *testing.B) *Guest {
	ctx := context.Background()
	wasm, info, sess, err := cpython.LoadSession(ctx, &cpython.Options{})
	if err != nil {
		b.Skipf("the built guest's session build is not prepared (`fumehood guest build --session`): %v", err)
	}
	g, err := compile(ctx, wasm, &Options{})
	require.NoError(b, err)
	g.python, g.id = true, sess.SHA256
	g.pyInfo = PythonInfo{Guest: GuestBuilt, Version: info.Python, SHA256: sess.SHA256, Sessions: true}
	g.stdlib, err = cpython.StdlibFS(ctx, &cpython.Options{})
	require.NoError(b, err)
	require.NoError(b, g.sessionGlobals(wasm))
	g.sessions = true
	return g
}

// medianOf times f n times and returns the median.
var medianOf = testenv.Median

// BenchmarkPreinit measures the built guest's runs from pre-initialized
// images (the driver's entry points) against the paths they replace, in
// the same run: a one-shot run from _start of the same guest (CPython's
// start-up every time) and sessions of the asyncify session build. It
// reports medians, in ms, and ratios (old/new):
//
//	go test ./sandbox -run '^$' -bench Preinit -benchtime 1x
func BenchmarkPreinit(b *testing.B) {
	ctx := context.Background()
	g := builtGuest(b)
	require.True(b, g.driver)
	old := asyncifyBuilt(b)
	defer old.Close()
	const n = 41

	oneShot := func(start bool) func() {
		return func() {
			sb, err := g.NewSandbox(nil)
			require.NoError(b, err)
			defer sb.Close()
			var res *Result
			if start {
				at := sb.outcomePath()
				res, err = sb.exec(ctx, "python", oneShotArgs("print(1)", "", sb.quotas, at, DefaultMaxOutput, sb.lazyArg()), nil, true)
			} else {
				res, err = sb.Run(ctx, "print(1)", nil)
			}
			require.NoError(b, err)
			require.Equal(b, "1\n", string(res.Stdout))
		}
	}
	newRun := func(g *Guest) func() {
		return func() {
			s, err := g.NewSession(ctx, nil)
			require.NoError(b, err)
			_, err = s.Run(ctx, "x = 1", nil)
			require.NoError(b, err)
			s.Close()
		}
	}
	// roundTrip times x += 1 in a live session: idle, each call after the
	// last one's checkpoint was taken (an agent's pace), or back to back.
	roundTrip := func(g *Guest, idle bool) time.Duration {
		apart := time.Duration(0)
		if idle {
			apart = 5 * time.Millisecond
		}
		d, _ := roundTrips(b, g, 5*n, apart)
		return d
	}
	forkOf := func(g *Guest) time.Duration {
		s, err := g.NewSession(ctx, nil)
		require.NoError(b, err)
		defer s.Close()
		_, err = s.Run(ctx, "import json\ndata = {'k%d' % i: i for i in range(1000)}", nil)
		require.NoError(b, err)
		return medianOf(n, func() {
			f, err := s.Fork(ctx)
			require.NoError(b, err)
			f.Close()
		})
	}
	resumeOf := func(g *Guest) (time.Duration, int) {
		s, err := g.NewSession(ctx, nil)
		require.NoError(b, err)
		defer s.Close()
		_, err = s.Run(ctx, "import json\ndata = {'k%d' % i: i for i in range(1000)}", nil)
		require.NoError(b, err)
		var buf bytes.Buffer
		require.NoError(b, s.Snapshot(&buf))
		return medianOf(n, func() {
			r, err := g.ResumeSession(ctx, bytes.NewReader(buf.Bytes()), nil)
			require.NoError(b, err)
			r.Close()
		}), buf.Len()
	}
	// cpu times a CPU-bound run in a session and one-shot.
	const loop = "s = 0\nfor i in range(300000): s += i * i"
	cpuSession := func(g *Guest) time.Duration {
		s, err := g.NewSession(ctx, nil)
		require.NoError(b, err)
		defer s.Close()
		return medianOf(11, func() {
			_, err := s.Run(ctx, loop, nil)
			require.NoError(b, err)
		})
	}
	// perSecond counts tiny one-shot runs on two goroutines for a second.
	perSecond := func() float64 {
		var count atomic.Int64
		stop := time.Now().Add(time.Second)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					_, err := g.Run(ctx, "pass", nil)
					require.NoError(b, err)
					count.Add(1)
				}
			})
		}
		wg.Wait()
		return float64(count.Load())
	}

	for b.Loop() {
		// Warm: the base images of both builds, wazero's caches.
		oneShot(false)()
		newRun(g)()
		newRun(old)()

		startMs, imageMs := medianOf(n, oneShot(true)), medianOf(n, oneShot(false))
		oldNew, newNew := medianOf(n, newRun(old)), medianOf(n, newRun(g))
		oldRT, newRT := roundTrip(old, false), roundTrip(g, false)
		newIdleRT := roundTrip(g, true)
		// The same with checkpoints that compare all of memory and with
		// ones that compare only the pages written, whatever the kernel's
		// tracking costs this machine (trackAuto picks one of the two).
		trackWrites = trackOff
		fullRT, fullIdleRT := roundTrip(g, false), roundTrip(g, true)
		trackWrites = trackAlways
		trackedRT, trackedIdleRT := roundTrip(g, false), roundTrip(g, true)
		trackWrites = trackAuto
		oldFork, newFork := forkOf(old), forkOf(g)
		oldResume, oldSnap := resumeOf(old)
		newResume, newSnap := resumeOf(g)
		oldCPU, newCPU := cpuSession(old), cpuSession(g)
		oneCPU := medianOf(11, func() {
			_, err := g.Run(ctx, loop, nil)
			require.NoError(b, err)
		})
		runs := perSecond()

		b.ReportMetric(ms(startMs), "oneshot-start-ms")
		b.ReportMetric(ms(imageMs), "oneshot-image-ms")
		b.ReportMetric(float64(startMs)/float64(imageMs), "oneshot-start/image")
		b.ReportMetric(ms(oldNew), "new+run-asyncify-ms")
		b.ReportMetric(ms(newNew), "new+run-driver-ms")
		b.ReportMetric(ms(oldRT), "x+=1-asyncify-ms")
		b.ReportMetric(ms(newRT), "x+=1-driver-ms")
		b.ReportMetric(ms(newIdleRT), "x+=1-driver-idle-ms")
		b.ReportMetric(ms(fullRT), "x+=1-driver-compare-all-ms")
		b.ReportMetric(ms(fullIdleRT), "x+=1-driver-compare-all-idle-ms")
		b.ReportMetric(ms(trackedRT), "x+=1-driver-tracked-ms")
		b.ReportMetric(ms(trackedIdleRT), "x+=1-driver-tracked-idle-ms")
		if openTracker() != nil && trackCost.err == nil {
			b.ReportMetric(float64(trackCost.fault)/1e3, "tracked-fault-us")
			b.ReportMetric(float64(trackCost.compare)/1e3, "page-compare-us")
			tracks := 0.0
			if trackCost.pays() {
				tracks = 1
			}
			b.ReportMetric(tracks, "tracks-writes")
		}
		b.ReportMetric(ms(oldFork), "fork-asyncify-ms")
		b.ReportMetric(ms(newFork), "fork-driver-ms")
		b.ReportMetric(ms(oldResume), "resume-asyncify-ms")
		b.ReportMetric(ms(newResume), "resume-driver-ms")
		b.ReportMetric(float64(oldSnap)/1e6, "snapshot-asyncify-MB")
		b.ReportMetric(float64(newSnap)/1e6, "snapshot-driver-MB")
		b.ReportMetric(ms(oldCPU), "cpu-session-asyncify-ms")
		b.ReportMetric(ms(newCPU), "cpu-session-driver-ms")
		b.ReportMetric(ms(oneCPU), "cpu-oneshot-ms")
		b.ReportMetric(runs, "tiny-runs/s")
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
