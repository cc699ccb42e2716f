package codetool_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fumehood/fumehood/codetool"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
	"github.com/fumehood/fumehood/sessionstore"
	"github.com/fumehood/fumehood/sessionstore/natsstore/natstest"
)

// BenchmarkStoreCall: one call of x += 1, side by side: in memory (no
// store), and through a directory store and a local NATS server, on the
// fast path (the replica's live session is at the head) and resuming
// (two replicas take turns, so every call resumes the other's commit).
// It reports the p50 and p99 of a call and the snapshot's size.
//
//	go test ./codetool -run '^$' -bench BenchmarkStoreCall -benchtime 200x
func BenchmarkStoreCall(b *testing.B) {
	ctx := context.Background()
	urls := map[string]string{"dir": b.TempDir(), "nats": natstest.Run(b).URL()}
	tools := func(b *testing.B, url string, n int) []*codetool.Tool {
		var out []*codetool.Tool
		for range n {
			o := &codetool.Options{}
			if url != "" {
				st, err := sessionstore.Open(ctx, url, &sessionstore.Options{Key: storeKey})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { st.Close() })
				o.Store = st
			}
			tool, err := codetool.New(sandboxtest.PythonSessions(b), o)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { tool.Close() })
			out = append(out, tool)
		}
		return out
	}
	cases := []struct {
		name, url string
		replicas  int
	}{
		{"memory", "", 1},
		{"dir/fast", urls["dir"], 1},
		{"dir/resume", urls["dir"], 2},
		{"nats/fast", urls["nats"], 1},
		{"nats/resume", urls["nats"], 2},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ts := tools(b, c.url, c.replicas)
			conv := "bench-" + strings.ReplaceAll(c.name, "/", "-")
			// A session of some size: a quarter MB of state.
			if r := ts[0].Call(ctx, conv, args("blob = bytes(range(256)) * 1024; x = 0")); r.IsError {
				b.Fatal(r.Text())
			}
			times := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				r := ts[i%len(ts)].Call(ctx, conv, args("x += 1"))
				times = append(times, time.Since(start))
				if r.IsError {
					b.Fatal(r.Text())
				}
			}
			b.StopTimer()
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(times[len(times)*99/100].Microseconds())/1000, "p99-ms")
			if c.url != "" {
				st, err := sessionstore.Open(ctx, c.url, &sessionstore.Options{Key: storeKey})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				h, err := st.Load(ctx, conv)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(h.Size), "snapshot-bytes")
			}
		})
	}
}
