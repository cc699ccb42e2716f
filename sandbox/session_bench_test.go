package sandbox_test

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fumehood/fumehood/internal/testenv"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// median times f n times and returns the median.
var median = testenv.Median

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// BenchmarkSessions measures the session operations against a cold start
// (a one-shot run of `pass`: instantiation and CPython's start-up) in the
// same run, and reports medians:
//
//	go test ./sandbox -run '^$' -bench Sessions -benchtime 1x
func BenchmarkSessions(b *testing.B) {
	g := sandboxtest.Python(b)
	ctx := context.Background()
	const n = 21
	for b.Loop() {
		cold := median(n, func() {
			_, err := g.Run(ctx, "pass", nil)
			require.NoError(b, err)
		})
		s, err := g.NewSession(ctx, nil) // builds the base image once
		require.NoError(b, err)
		s.Close()
		newSession := median(n, func() {
			s, err := g.NewSession(ctx, nil)
			require.NoError(b, err)
			s.Close()
		})
		s, err = g.NewSession(ctx, nil)
		require.NoError(b, err)
		_, err = s.Run(ctx, "x = 0", nil)
		require.NoError(b, err)
		roundTrip := median(5*n, func() {
			_, err := s.Run(ctx, "x += 1", nil)
			require.NoError(b, err)
		})
		// A small session: a few variables, a function, an import, a file.
		_, err = s.Run(ctx, "import json\ndata = {'k%d' % i: i for i in range(1000)}\ndef f(v): return v * 2\nopen('/work/a', 'w').write('x' * 1000)", nil)
		require.NoError(b, err)
		var snap []byte
		snapshot := median(n, func() {
			var buf bytes.Buffer
			require.NoError(b, s.Snapshot(&buf))
			snap = buf.Bytes()
		})
		resume := median(n, func() {
			r, err := g.ResumeSession(ctx, bytes.NewReader(snap), nil)
			require.NoError(b, err)
			r.Close()
		})
		fork := median(n, func() {
			f, err := s.Fork(ctx)
			require.NoError(b, err)
			f.Close()
		})
		s.Close()

		b.ReportMetric(ms(cold), "cold-ms")
		b.ReportMetric(ms(newSession), "new-ms")
		b.ReportMetric(float64(cold)/float64(newSession), "cold/new")
		b.ReportMetric(ms(roundTrip), "run-x+=1-ms")
		b.ReportMetric(ms(snapshot), "snapshot-ms")
		b.ReportMetric(float64(len(snap))/1e6, "snapshot-MB")
		b.ReportMetric(ms(resume), "resume-ms")
		b.ReportMetric(ms(fork), "fork-ms")
	}
}

// rss returns the process's resident memory in bytes.
func rss(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		b.Skip("no /proc/self/statm")
	}
	f := strings.Fields(string(data))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(b, err)
	return pages * int64(os.Getpagesize())
}

// heap returns the live Go heap after a collection.
func heap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkIdleSessions measures the resident memory 1, 10 and 100 idle
// sessions (each after one run) add to the process, live and hibernated:
//
//	go test ./sandbox -run '^$' -bench IdleSessions -benchtime 1x
func BenchmarkIdleSessions(b *testing.B) {
	g := sandboxtest.Python(b)
	ctx := context.Background()
	for b.Loop() {
		warm, err := g.NewSession(ctx, nil)
		require.NoError(b, err)
		warm.Close()
		runtime.GC()
		before, heapBefore := rss(b), heap()
		var all []*sandbox.Session
		for _, count := range []int{1, 10, 100} {
			for len(all) < count {
				s, err := g.NewSession(ctx, nil)
				require.NoError(b, err)
				_, err = s.Run(ctx, "x = [i for i in range(1000)]", nil)
				require.NoError(b, err)
				all = append(all, s)
			}
			runtime.GC()
			b.ReportMetric(float64(rss(b)-before)/float64(count)/1e6, "MB/session@"+strconv.Itoa(count))
		}
		// The same once the Go runtime has given back the memory it
		// freed, as its scavenger does by itself within minutes on an
		// idle process: what the sessions hold, without the garbage their
		// creation left.
		debug.FreeOSMemory()
		b.ReportMetric(float64(rss(b)-before)/float64(len(all))/1e6, "MB/session@100-scavenged")
		for _, s := range all {
			require.NoError(b, s.Hibernate())
		}
		runtime.GC()
		debug.FreeOSMemory()
		b.ReportMetric(float64(rss(b)-before)/float64(len(all))/1e6, "MB/hibernated@100")
		hibernated := heap()
		b.ReportMetric(float64(hibernated-heapBefore)/float64(len(all))/1e6, "heap-MB/hibernated@100")
		for _, s := range all {
			s.Close()
		}
		// The same without what the guest keeps for all its sessions
		// (pooled memories, images): the heap once they are closed.
		b.ReportMetric(float64(hibernated-heap())/float64(len(all))/1e6, "own-heap-MB/hibernated@100")
	}
}

// BenchmarkDescribeOpenFiles times what every successful session run now
// adds: listing and describing the open descriptors (here a sqlite3
// connection, a log file and a plain file).
func BenchmarkDescribeOpenFiles(b *testing.B) {
	s, err := sandboxtest.Python(b).NewSession(context.Background(), nil)
	require.NoError(b, err)
	defer s.Close()
	_, err = s.Run(context.Background(), "import sqlite3, logging\ndb = sqlite3.connect('/work/a.db')\ndb.execute('create table t (v)')\nlogging.basicConfig(filename='/tmp/l.log')\nlogging.warning('x')\nf = open('/work/f', 'w')", nil)
	require.NoError(b, err)
	n, err := sandbox.DescribeOpenFiles(s)
	require.NoError(b, err)
	require.Equal(b, 3, n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := sandbox.DescribeOpenFiles(s); err != nil {
			b.Fatal(err)
		}
	}
}
