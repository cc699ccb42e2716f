//go:build unix

package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkSessionPerRequest measures what a server that makes a session
// per request pays for each: a new session, one run and Close, in wall
// time and in the process's CPU time, the background work each leaves
// (the checkpoint of its run, zeroing its memory for reuse) included, since
// the next requests pay for it on a busy host. The baseline, in the same
// run, is a one-shot run per request:
//
//	go test ./sandbox -run '^$' -bench SessionPerRequest -benchtime 3x
func BenchmarkSessionPerRequest(b *testing.B) {
	g, err := CompilePython(context.Background(), nil)
	if err != nil {
		b.Skipf("the built guest is needed: %v", err)
	}
	defer g.Close()
	ctx := context.Background()
	const n = 200
	measure := func(one func()) (wall, cpu time.Duration) {
		g.background.Wait()
		c0, t0 := processCPU(b), time.Now()
		for range n {
			one()
		}
		wall = time.Since(t0)
		g.background.Wait()
		return wall / n, (processCPU(b) - c0) / n
	}
	oneShot := func() {
		_, err := g.Run(ctx, "print(1)", nil)
		require.NoError(b, err)
	}
	session := func() {
		s, err := g.NewSession(ctx, nil)
		require.NoError(b, err)
		_, err = s.Run(ctx, "print(1)", nil)
		require.NoError(b, err)
		require.NoError(b, s.Close())
	}
	oneShot()
	session() // the base image
	for b.Loop() {
		oneWall, oneCPU := measure(oneShot)
		sWall, sCPU := measure(session)
		b.ReportMetric(float64(sWall)/1e6, "session-ms")
		b.ReportMetric(float64(sCPU)/1e6, "session-cpu-ms")
		b.ReportMetric(float64(oneWall)/1e6, "oneshot-ms")
		b.ReportMetric(float64(oneCPU)/1e6, "oneshot-cpu-ms")
		b.ReportMetric(float64(sCPU)/float64(oneCPU), "session/oneshot-cpu")
	}
}
