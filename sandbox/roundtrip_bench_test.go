package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkLiveRoundTrip times x += 1 in a live session of the built guest,
// the round trip of issue 19, in µs (medians of 1,000 runs and 200):
// back to back (b2b-us: each run waits for the last one's checkpoint)
// and 5 ms apart (idle-us: an agent's pace, the checkpoint taken in
// between), and the run's fuel. Compare builds by alternating their test
// binaries:
//
//	go test ./sandbox -run '^$' -bench LiveRoundTrip -benchtime 1x -count 5
func BenchmarkLiveRoundTrip(b *testing.B) {
	g := builtGuest(b)
	for b.Loop() {
		b2b, _ := roundTrips(b, g, 1000, 0)
		idle, fuel := roundTrips(b, g, 200, 5*time.Millisecond)
		b.ReportMetric(float64(b2b.Nanoseconds())/1e3, "b2b-us")
		b.ReportMetric(float64(idle.Nanoseconds())/1e3, "idle-us")
		b.ReportMetric(float64(fuel), "fuel")
	}
}

// roundTrips times n runs of x += 1, each started apart after the last
// one returned, in a new session of g, and returns their median and the
// fuel of a run.
func roundTrips(b *testing.B, g *Guest, n int, apart time.Duration) (time.Duration, int64) {
	ctx := context.Background()
	s, err := g.NewSession(ctx, nil)
	require.NoError(b, err)
	defer s.Close()
	_, err = s.Run(ctx, "x = 0", nil)
	require.NoError(b, err)
	var fuel int64
	d := make([]time.Duration, n)
	for i := range d {
		time.Sleep(apart)
		t0 := time.Now()
		res, err := s.Run(ctx, "x += 1", nil)
		d[i] = time.Since(t0)
		require.NoError(b, err)
		fuel = res.FuelUsed
	}
	return median(d), fuel
}
