package codetool_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fumehood/fumehood/codetool"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
	"github.com/fumehood/fumehood/sessionstore"
	"github.com/fumehood/fumehood/sessionstore/natsstore/natstest"
)

// BenchmarkStoreCall: one call of x += 1, side by side: in memory (no
// store), and through a directory store and a local NATS server, on the
// fast path (the replica's live session is at the head) and resuming
// (two replicas take turns, so every call resumes the other's commit).
// The cases take turns call by call, so that a shared machine's load
// falls on all of them alike. It reports each case's p50 and p99, what
// it adds to the in-memory call's (p50 and p99 of the one less the
// other's), and the snapshot's size.
//
//	go test ./codetool -run '^$' -bench BenchmarkStoreCall -benchtime 200x
func BenchmarkStoreCall(b *testing.B) {
	ctx := context.Background()
	urls := map[string]string{"dir": b.TempDir(), "nats": natstest.Run(b).URL()}
	type bench struct {
		name  string
		url   string
		tools []*codetool.Tool
		times []time.Duration
	}
	var cases []*bench
	for _, c := range []struct {
		name, url string
		replicas  int
	}{
		{"memory", "", 1},
		{"dir-fast", urls["dir"], 1},
		{"dir-resume", urls["dir"], 2},
		{"nats-fast", urls["nats"], 1},
		{"nats-resume", urls["nats"], 2},
	} {
		cases = append(cases, &bench{name: c.name, url: c.url, tools: benchTools(b, c.url, c.replicas, 0)})
	}
	conv := func(c *bench) string { return "bench-" + c.name }
	for _, c := range cases {
		// A session of some size: a quarter MB of state.
		if r := c.tools[0].Call(ctx, conv(c), args("blob = bytes(range(256)) * 1024; x = 0")); r.IsError {
			b.Fatal(r.Text())
		}
	}
	b.ResetTimer()
	for i := range b.N {
		for _, c := range cases {
			start := time.Now()
			r := c.tools[i%len(c.tools)].Call(ctx, conv(c), args("x += 1"))
			c.times = append(c.times, time.Since(start))
			if r.IsError {
				b.Fatal(r.Text())
			}
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	at := func(times []time.Duration, q float64) time.Duration {
		times = slices.Clone(times)
		slices.Sort(times)
		return times[int(float64(len(times)-1)*q)]
	}
	base := cases[0]
	for _, c := range cases {
		b.ReportMetric(ms(at(c.times, 0.5)), c.name+"-p50-ms")
		b.ReportMetric(ms(at(c.times, 0.99)), c.name+"-p99-ms")
		if c == base {
			continue
		}
		b.ReportMetric(ms(at(c.times, 0.5)-at(base.times, 0.5)), c.name+"-added-p50-ms")
		b.ReportMetric(ms(at(c.times, 0.99)-at(base.times, 0.99)), c.name+"-added-p99-ms")
		if c.url != "" && strings.HasSuffix(c.name, "-resume") {
			st, err := sessionstore.Open(ctx, c.url, &sessionstore.Options{Key: storeKey})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			h, err := st.Load(ctx, conv(c))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(h.Size), c.name+"-snapshot-bytes")
		}
	}
}

// BenchmarkStoreThroughput: calls per second of x += 1, four callers at
// once, on one conversation and spread over 100, with one and two
// replicas, each a process of its own (this test binary, as
// TestStoreReplicaProcess) keeping up to 100 sessions live, sharing a
// local NATS server in this process; and one replica process without a
// store. Callers send call i to replica i mod n. With a store it reports
// what the store holds per conversation once the replicas are gone (its
// three streams' bytes: heads, leases, snapshots, with JetStream's own
// overhead, over the conversations: a call replaces its conversation's
// snapshot and leaves nothing else, TestDropLeavesNothing) and what the
// server received per call (bytes in: the snapshot put and every
// request).
//
//	go test ./codetool -run '^$' -bench BenchmarkStoreThroughput -benchtime 400x
func BenchmarkStoreThroughput(b *testing.B) {
	srv := natstest.Run(b)
	for _, c := range []struct {
		name            string
		store           bool
		convs, replicas int
	}{
		{"memory/1conv", false, 1, 1},
		{"memory/100conv", false, 100, 1},
		{"nats/1conv/1replica", true, 1, 1},
		{"nats/1conv/2replicas", true, 1, 2},
		{"nats/100conv/1replica", true, 100, 1},
		{"nats/100conv/2replicas", true, 100, 2},
	} {
		b.Run(c.name, func(b *testing.B) {
			bucket := strings.ReplaceAll(c.name, "/", "-")
			url := "memory"
			if c.store {
				url = srv.URL() + "?heads=h-" + bucket + "&leases=l-" + bucket + "&objects=o-" + bucket
			}
			var reps []*replica
			for range c.replicas {
				cmd := replicaCmd(url, 0)
				cmd.Env = append(cmd.Env, replicaMaxSessions+"=100")
				reps = append(reps, startReplicaCmd(b, cmd))
			}
			conv := func(i int) string { return fmt.Sprintf("tp-%d", i%c.convs) }
			for i := range c.convs {
				if r, err := reps[0].call(conv(i), increment); err != nil || r.IsError {
					b.Fatal(err, r.Error)
				}
			}
			inBefore := varzIn(b, srv)
			var next, failed atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range 4 {
				wg.Go(func() {
					for {
						i := int(next.Add(1)) - 1
						if i >= b.N {
							return
						}
						if r, err := reps[i%len(reps)].call(conv(i), increment); err != nil || r.IsError {
							failed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
			b.ReportMetric(float64(failed.Load()), "failed")
			b.StopTimer()
			if !c.store {
				return
			}
			b.ReportMetric(float64(varzIn(b, srv)-inBefore)/float64(b.N), "in-bytes/call")
			for _, r := range reps {
				r.in.Close() // the replica finishes, closes its tool (and its drops), and exits
				if err := r.cmd.Wait(); err != nil {
					b.Fatal(err)
				}
			}
			var stored uint64
			for _, stream := range []string{"KV_h-" + bucket, "KV_l-" + bucket, "OBJ_o-" + bucket} {
				stored += streamBytes(b, srv.URL(), stream)
			}
			b.ReportMetric(float64(stored)/float64(c.convs), "stored-bytes/conv")
		})
	}
}

// varzIn is the bytes the server has received from its clients.
func varzIn(b *testing.B, srv *natstest.Server) int64 {
	v, err := srv.Varz(nil)
	if err != nil {
		b.Fatal(err)
	}
	return v.InBytes
}

// streamBytes is the bytes a JetStream stream holds.
func streamBytes(b *testing.B, url, stream string) uint64 {
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		b.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return info.State.Bytes
}

// benchTools returns n tools (replicas), each with its own connection to
// the store at url ("": none) and at most maxSessions live sessions.
func benchTools(b *testing.B, url string, n, maxSessions int) []*codetool.Tool {
	var out []*codetool.Tool
	for range n {
		o := &codetool.Options{MaxSessions: maxSessions}
		if url != "" {
			st, err := sessionstore.Open(context.Background(), url, &sessionstore.Options{Key: storeKey})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			o.Store = st
		}
		tool, err := codetool.New(sandboxtest.Python(b), o)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tool.Close() })
		out = append(out, tool)
	}
	return out
}
