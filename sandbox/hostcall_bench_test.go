package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/hostcall"
	"github.com/fumehood/fumehood/internal/netclient"
	"github.com/fumehood/fumehood/netpolicy"
	"github.com/fumehood/fumehood/sandbox"
)

// These benchmarks give the host-call and network numbers of bench/README.md:
//
//	go test ./sandbox -run '^$' -bench 'HostCall|GET|RunPrintHost' -benchtime 3x

// medianFromPython runs code, which prints the median of its timings in
// nanoseconds as its last line, in sb, and reports it as metric.
func medianFromPython(b *testing.B, sb *sandbox.Sandbox, code, metric string) {
	var medians []float64
	for b.Loop() {
		res, err := sb.Run(context.Background(), code, nil)
		require.NoError(b, err, "stderr: %s", res.Stderr)
		lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		m, err := strconv.ParseFloat(lines[len(lines)-1], 64)
		require.NoError(b, err)
		medians = append(medians, m)
	}
	b.ReportMetric(medians[len(medians)/2], metric)
}

const timeLoop = `
import time, statistics
def timed(n, f):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        f()
        ts.append(time.perf_counter_ns() - t0)
    print(statistics.median(ts))
`

// BenchmarkHostCallRoundTrip times 1,000 calls of a host function that
// returns its argument, from Python: encoding, the channel, the Go handler,
// decoding.
func BenchmarkHostCallRoundTrip(b *testing.B) {
	sb, err := sandboxtest.Python(b).NewSandbox(&sandbox.Config{Logger: quiet, HostCalls: &hostcall.Config{
		Funcs: map[string]hostcall.Handler{
			"echo": hostcall.Func(func(ctx context.Context, a struct{ X int }) (int, error) { return a.X, nil }),
		},
	}})
	require.NoError(b, err)
	defer sb.Close()
	medianFromPython(b, sb, timeLoop+`
import fumehood
fumehood.call("echo", X=1)  # open the channel
timed(1000, lambda: fumehood.call("echo", X=1))
`, "ns/call")
}

// newLoopback starts a loopback server answering 1 KiB, and a policy
// allowing it.
func newLoopback(b *testing.B) (*httptest.Server, *netpolicy.Policy) {
	body := strings.Repeat("x", 1024)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	b.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	return srv, &netpolicy.Policy{AllowPrivate: true, Allow: []netpolicy.Rule{{Scheme: "http", Host: "127.0.0.1", Port: port}}}
}

var quiet = slog.New(slog.DiscardHandler)

// BenchmarkGETDirect is a plain Go GET of 1 KiB from a loopback server.
func BenchmarkGETDirect(b *testing.B) {
	srv, _ := newLoopback(b)
	c := &http.Client{Transport: &http.Transport{}}
	for b.Loop() {
		resp, err := c.Get(srv.URL)
		require.NoError(b, err)
		_, err = io.ReadAll(resp.Body)
		require.NoError(b, err)
		resp.Body.Close()
	}
}

// BenchmarkGETPolicy is the same GET through the policy's client, as the
// host makes it for a guest: rules, address checks, body caps.
func BenchmarkGETPolicy(b *testing.B) {
	srv, p := newLoopback(b)
	t, err := netpolicy.NewTransport(p)
	require.NoError(b, err)
	p.MaxRequests = 1 << 30
	c := netclient.New(t)
	for b.Loop() {
		_, err := c.Do(context.Background(), &netclient.Request{URL: srv.URL})
		require.NoError(b, err)
	}
}

// BenchmarkGETFromPython is the same GET made by Python code through
// fumehood.http and urllib: the whole path a guest's request takes.
func BenchmarkGETFromPython(b *testing.B) {
	srv, p := newLoopback(b)
	p.MaxRequests = 10_000
	sb, err := sandboxtest.Python(b).NewSandbox(&sandbox.Config{Network: p, Logger: quiet})
	require.NoError(b, err)
	defer sb.Close()
	b.Run("fumehood.http", func(b *testing.B) {
		medianFromPython(b, sb, timeLoop+fmt.Sprintf(`
import fumehood.http as fh
fh.get(%[1]q)
timed(200, lambda: fh.get(%[1]q).content)
`, srv.URL), "ns/GET")
	})
	b.Run("urllib", func(b *testing.B) {
		medianFromPython(b, sb, timeLoop+fmt.Sprintf(`
import urllib.request
urllib.request.urlopen(%[1]q).read()
timed(200, lambda: urllib.request.urlopen(%[1]q).read())
`, srv.URL), "ns/GET")
	})
}

// BenchmarkRunPrintHost is a print(1) run in a sandbox with the host-call
// channel and module mounted, against one without, alternating: the
// start-up cost of the channel for runs that do not use it.
func BenchmarkRunPrintHost(b *testing.B) {
	py := sandboxtest.Python(b)
	plain, err := py.NewSandbox(nil)
	require.NoError(b, err)
	defer plain.Close()
	host, err := py.NewSandbox(&sandbox.Config{HostCalls: &hostcall.Config{}, Network: &netpolicy.Policy{}, Logger: quiet})
	require.NoError(b, err)
	defer host.Close()
	var tp, th []float64
	for b.Loop() {
		for _, sb := range []*sandbox.Sandbox{plain, host} {
			res, err := sb.Run(context.Background(), "print(1)", nil)
			require.NoError(b, err)
			if sb == plain {
				tp = append(tp, float64(res.Duration.Microseconds())/1000)
			} else {
				th = append(th, float64(res.Duration.Microseconds())/1000)
			}
		}
	}
	slices.Sort(tp)
	slices.Sort(th)
	b.ReportMetric(tp[len(tp)/2], "plain-ms")
	b.ReportMetric(th[len(th)/2], "host-ms")
}
