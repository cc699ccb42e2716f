package sandbox_test

import (
	"bytes"
	"context"
	encjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/hostcall"
	"github.com/fumehood/fumehood/netpolicy"
	"github.com/fumehood/fumehood/sandbox"
)

type addArgs struct {
	A, B int
	Tag  string `json:"tag"`
}

type addResult struct {
	Sum int    `json:"sum"`
	Tag string `json:"tag"`
}

func TestHostCallTypedArgsAndResult(t *testing.T) {
	var logs bytes.Buffer
	sb := newSandbox(t, &sandbox.Config{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		HostCalls: &hostcall.Config{Funcs: map[string]hostcall.Handler{
			"add": hostcall.Func(func(ctx context.Context, a addArgs) (addResult, error) {
				return addResult{Sum: a.A + a.B, Tag: strings.ToUpper(a.Tag)}, nil
			}),
		}},
	})
	res, err := sb.Run(context.Background(), `
import fumehood
r = fumehood.call("add", A=40, B=2, tag="ok")
print(r["sum"], r["tag"], type(r).__name__)
print(fumehood.call("add", A=1, B=1)["sum"])
`, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "42 OK dict\n2\n", string(res.Stdout))
	assert.Equal(t, 2, res.HostCalls)
	assert.Equal(t, 2, strings.Count(logs.String(), "fumehood host call"), "every call is logged: %s", logs.String())
	assert.Contains(t, logs.String(), "function=add")
}

func TestHostCallErrorsArePythonExceptions(t *testing.T) {
	sb := newSandbox(t, &sandbox.Config{HostCalls: &hostcall.Config{Funcs: map[string]hostcall.Handler{
		"fail": func(ctx context.Context, _ encjson.RawMessage) (any, error) {
			return nil, errors.New("the database is down")
		},
		"add":  hostcall.Func(func(ctx context.Context, a addArgs) (int, error) { return a.A + a.B, nil }),
		"boom": func(ctx context.Context, _ encjson.RawMessage) (any, error) { panic("nil map write") },
	}}})
	res, err := sb.Run(context.Background(), `
import fumehood
for name, kw in [("fail", {}), ("missing", {}), ("add", {"A": "x"}), ("add", {"C": 1}), ("boom", {})]:
    try:
        fumehood.call(name, **kw)
    except fumehood.CallError as e:
        print(e.function, e.kind, "|", e)
print(fumehood.call("add", A=2, B=3), "after a panic")
`, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	require.Len(t, lines, 6, "stdout: %s", res.Stdout)
	assert.Equal(t, "fail error | the database is down", lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "missing unknown | "), lines[1])
	assert.True(t, strings.HasPrefix(lines[2], "add arguments | "), lines[2])
	assert.Contains(t, lines[3], `unknown field "C"`)
	assert.True(t, strings.HasPrefix(lines[4], "boom panic | "), lines[4])
	assert.NotContains(t, string(res.Stdout)+string(res.Stderr), "nil map write", "the panic's value stays in the host's log")
	assert.Equal(t, "5 after a panic", lines[5], "a panicking host function does not crash the host or the run")
	assert.Equal(t, 6, res.HostCalls)
}

func TestHostCallLimits(t *testing.T) {
	sb := newSandbox(t, &sandbox.Config{HostCalls: &hostcall.Config{
		MaxCalls: 3, MaxRequestBytes: 200, MaxResponseBytes: 100,
		Funcs: map[string]hostcall.Handler{
			"echo": hostcall.Func(func(ctx context.Context, a struct{ S string }) (string, error) { return a.S, nil }),
		},
	}})
	res, err := sb.Run(context.Background(), `
import fumehood
def kind(**kw):
    try:
        return fumehood.call("echo", **kw)
    except fumehood.CallError as e:
        return e.kind + ": " + str(e)
print(kind(S="x" * 300))  # request too large
print(kind(S="y" * 150))  # response too large
print(kind(S="z"))
print(kind(S="z"))
print(kind(S="z"))        # the fourth call
`, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	require.Len(t, lines, 5)
	assert.Contains(t, lines[0], "limit: hostcall: too large: a frame of", "refused before it is decoded")
	assert.Contains(t, lines[1], "limit: hostcall: too large: a result of")
	assert.Equal(t, []string{"z", "z"}, lines[2:4])
	assert.Contains(t, lines[4], "limit: hostcall: too many calls")
	assert.Equal(t, 4, res.HostCalls, "the oversized frame is not a call; the refused fourth call is")
}

func TestHostCallDeadlineStopsTheRun(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	entered := make(chan struct{}, 1)
	sb := newSandbox(t, &sandbox.Config{HostCalls: &hostcall.Config{Funcs: map[string]hostcall.Handler{
		// Ignores its context on purpose: the run must end anyway.
		"hang": func(ctx context.Context, _ encjson.RawMessage) (any, error) {
			entered <- struct{}{}
			<-release
			return nil, nil
		},
	}}})
	res, err := sb.Run(context.Background(), `
import fumehood
print("calling")
try:
    fumehood.call("hang")
except fumehood.CallError as e:
    print("caught", e.kind)
while True:
    pass
`, &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 2 * time.Second}})
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Len(t, entered, 1, "the host function was called")
	assert.Contains(t, string(res.Stdout), "calling\n")
	assert.Equal(t, 1, res.HostCalls)

	// The sandbox serves the next run.
	sb2 := newSandbox(t, &sandbox.Config{HostCalls: &hostcall.Config{Funcs: map[string]hostcall.Handler{
		"ctx": func(ctx context.Context, _ encjson.RawMessage) (any, error) { <-ctx.Done(); return nil, ctx.Err() },
	}}})
	res, err = sb2.Run(context.Background(), "import fumehood\nfumehood.call('ctx')", &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: time.Second}})
	assert.ErrorIs(t, err, context.DeadlineExceeded, "a handler that honours its context ends with the run: %s", res.Stderr)
}

func TestHostModuleOnlyWhenConfigured(t *testing.T) {
	res, err := sandboxtest.Python(t).Run(context.Background(), "import fumehood", nil)
	require.Error(t, err)
	assert.Contains(t, string(res.Stderr), "ModuleNotFoundError: No module named 'fumehood'")

	_, err = sandboxtest.Python(t).NewSandbox(&sandbox.Config{Mounts: []sandbox.Mount{{Path: sandbox.HostMountPath, FS: nil}}})
	assert.Error(t, err)
}

// netServer is a loopback test server that counts its requests and records
// the last one's headers and body.
type netServer struct {
	*httptest.Server
	hits   atomic.Int64
	header atomic.Value // http.Header
	body   atomic.Value // []byte
}

func newNetServer(t *testing.T, h http.HandlerFunc) *netServer {
	s := &netServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.header.Store(r.Header.Clone())
		if b, _ := io.ReadAll(r.Body); len(b) > 0 {
			s.body.Store(b)
		}
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *netServer) port(t *testing.T) int {
	u, err := url.Parse(s.URL)
	require.NoError(t, err)
	p, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	return p
}

func allowLoopback(t *testing.T, servers ...*netServer) *netpolicy.Policy {
	p := &netpolicy.Policy{AllowPrivate: true}
	for _, s := range servers {
		p.Allow = append(p.Allow, netpolicy.Rule{Scheme: "http", Host: "127.0.0.1", Port: s.port(t), Methods: []string{"GET", "POST"}})
	}
	return p
}

func runNet(t *testing.T, p *netpolicy.Policy, code string) (*sandbox.Result, error) {
	t.Helper()
	sb := newSandbox(t, &sandbox.Config{Network: p})
	return sb.Run(context.Background(), code, &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 20 * time.Second}})
}

func TestNetworkAllowedGetAndPost(t *testing.T) {
	srv := newNetServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", r.Method)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
	})
	res, err := runNet(t, allowLoopback(t, srv), fmt.Sprintf(`
import fumehood.http as fh, urllib.request, http.client, json
base = %q
r = fh.get(base + "/a")
print(r.status, r.header("x-seen"), r.text)
r = fh.post(base + "/b", json={"k": 1})
print(r.status, r.text)
with urllib.request.urlopen(base + "/c") as f:
    print(f.status, f.read().decode())
req = urllib.request.Request(base + "/d", data=b"payload", method="POST", headers={"Content-Type": "text/plain"})
print(urllib.request.urlopen(req).read().decode())
c = http.client.HTTPConnection("127.0.0.1", %d)
c.request("GET", "/e")
print(c.getresponse().read().decode())
`, srv.URL, srv.port(t)))
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "200 GET GET /a \n200 POST /b application/json\n200 GET /c \nPOST /d text/plain\nGET /e \n", string(res.Stdout))
	assert.Equal(t, []byte("payload"), srv.body.Load(), "the POST body reached the server")
	assert.EqualValues(t, 5, srv.hits.Load())
	assert.Equal(t, 5, res.HTTPRequests)
}

func TestNetworkRefusals(t *testing.T) {
	other := newNetServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "other") })
	srv := newNetServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, other.URL+"/stolen", http.StatusFound)
		case "/big":
			w.Write(bytes.Repeat([]byte("x"), 5000))
		default:
			fmt.Fprint(w, "ok")
		}
	})
	p := allowLoopback(t, srv)
	p.MaxResponseBytes = 1000
	p.MaxRequests = 4
	res, err := runNet(t, p, fmt.Sprintf(`
import fumehood.http as fh, urllib.request
base = %q
def try_(f, *a):
    try:
        r = f(*a)
        print("ok", getattr(r, "status", None))
    except fh.PolicyError as e:
        print("refused", e.rule, "|", e)
try_(fh.get, "http://example.invalid/")       # not on the list: no request
try_(fh.get, base + "/redirect")              # 1: the redirect's target is refused
try_(fh.get, base + "/big")                   # 2: over MaxResponseBytes
try_(urllib.request.urlopen, "http://127.0.0.1:1/")  # port not allowed
try_(fh.get, base + "/")                      # 3
try_(fh.request, "DELETE", base + "/")        # method not allowed
try_(fh.get, base + "/")                      # 4
try_(fh.get, base + "/")                      # over MaxRequests
`, srv.URL))
	require.NoError(t, err, "stderr: %s", res.Stderr)
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	require.Len(t, lines, 8, "stdout: %s", res.Stdout)
	assert.Contains(t, lines[0], "refused allow-list | netpolicy: GET http://example.invalid/ refused by allow-list: no rule allows")
	assert.Contains(t, lines[1], "refused allow-list | netpolicy: GET "+other.URL+"/stolen refused by allow-list")
	assert.Contains(t, lines[2], "refused MaxResponseBytes")
	assert.Contains(t, lines[3], "refused allow-list")
	assert.Equal(t, "ok 200", lines[4])
	assert.Contains(t, lines[5], "refused allow-list | netpolicy: DELETE")
	assert.Equal(t, "ok 200", lines[6])
	assert.Contains(t, lines[7], "refused MaxRequests")
	assert.Zero(t, other.hits.Load(), "the refused redirect target was never contacted")
	assert.EqualValues(t, 4, srv.hits.Load())
	assert.Equal(t, 4, res.HTTPRequests)
}

func TestNetworkPrivateAddressRefusedByDefault(t *testing.T) {
	srv := newNetServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "internal") })
	p := &netpolicy.Policy{
		Allow: []netpolicy.Rule{{Host: "*.corp.example", Port: srv.port(t)}},
		Resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil // what an attacker's DNS might say
		},
	}
	code := fmt.Sprintf(`
import fumehood.http as fh
try:
    print(fh.get("http://db.corp.example:%d/").text)
except fh.PolicyError as e:
    print("refused", e.rule, "|", e)
`, srv.port(t))
	res, err := runNet(t, p, code)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Contains(t, string(res.Stdout), "refused AllowPrivate | ")
	assert.Contains(t, string(res.Stdout), "db.corp.example resolves to address 127.0.0.1 is loopback")
	assert.Zero(t, srv.hits.Load())
	assert.Zero(t, res.HTTPRequests, "nothing was sent")

	p.AllowPrivate = true
	res, err = runNet(t, p, code)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "internal\n", string(res.Stdout), "allowed explicitly, the checked address is dialed")
}

func TestNetworkSecretHeaderHiddenFromGuest(t *testing.T) {
	const secret = "sk-live-0123456789"
	srv := newNetServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	p := allowLoopback(t, srv)
	p.Secrets = map[string]http.Header{srv.URL: {"X-Api-Key": {secret}}} // the origin, http://127.0.0.1:PORT
	p.SecretsOverHTTP = true                                             // the test server speaks plain http
	res, err := runNet(t, p, fmt.Sprintf(`
import urllib.request, os, fumehood.http as fh
req = urllib.request.Request(%q, headers={"X-Api-Key": "guest-guess"})
resp = urllib.request.urlopen(req)
print(req.header_items(), dict(resp.headers), resp.read())
r = fh.get(%q)
print(r.headers, r.content)
print(dict(os.environ))
`, srv.URL, srv.URL))
	require.NoError(t, err, "stderr: %s", res.Stderr)
	got, _ := srv.header.Load().(http.Header)
	require.NotNil(t, got)
	assert.Equal(t, secret, got.Get("X-Api-Key"), "the server got the host's secret, not the guest's guess")
	assert.Contains(t, string(res.Stdout), "guest-guess")
	assert.NotContains(t, string(res.Stdout)+string(res.Stderr), secret)
}

func TestNetworkOffWithoutPolicy(t *testing.T) {
	sb := newSandbox(t, &sandbox.Config{HostCalls: &hostcall.Config{}})
	res, err := sb.Run(context.Background(), `
import fumehood.http as fh
try:
    fh.get("http://127.0.0.1/")
except fh.PolicyError as e:
    print(e.rule)
`, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "no network policy\n", string(res.Stdout))
}

func TestSessionHostCallsAndNetwork(t *testing.T) {
	srv := newNetServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "pong") })
	cfg := &sandbox.Config{
		Network: allowLoopback(t, srv),
		HostCalls: &hostcall.Config{Funcs: map[string]hostcall.Handler{
			"add": hostcall.Func(func(ctx context.Context, a addArgs) (int, error) { return a.A + a.B, nil }),
		}},
	}
	s := newSession(t, cfg)
	res := run(t, s, "import fumehood\ntotal = fumehood.call('add', A=40, B=2)\ntotal")
	assert.Equal(t, "42", res.Value)
	assert.Equal(t, 1, res.HostCalls)
	res = run(t, s, fmt.Sprintf("import urllib.request\nurllib.request.urlopen(%q).read().decode(), fumehood.call('add', A=total, B=1)", srv.URL))
	assert.Equal(t, "('pong', 43)", res.Value)
	assert.Equal(t, 1, res.HTTPRequests)
	assert.Equal(t, 1, res.HostCalls)

	// The channel is closed between runs, so the session snapshots, and
	// the resumed one calls the host again.
	snap := snapshotOf(t, s)
	r := resume(t, snap, cfg)
	assert.Equal(t, "(42, 5)", run(t, r, "total, fumehood.call('add', A=2, B=3)").Value)
	f, err := r.Fork(context.Background())
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, "7", run(t, f, "fumehood.call('add', A=3, B=4)").Value)

	// Without host functions, the layout differs.
	_, err = sandboxtest.Python(t).ResumeSession(context.Background(), bytes.NewReader(snap), nil)
	assert.ErrorIs(t, err, sandbox.ErrSnapshotLayout)
}

// TestSessionHostMountFilesCarried: a channel and a module file the guest
// holds open itself are open again after a resume.
func TestSessionHostMountFilesCarried(t *testing.T) {
	cfg := &sandbox.Config{HostCalls: &hostcall.Config{Funcs: map[string]hostcall.Handler{
		"add": hostcall.Func(func(ctx context.Context, a addArgs) (int, error) { return a.A + a.B, nil }),
	}}}
	s := newSession(t, cfg)
	run(t, s, "import os, fumehood\nch = os.open('/dev/fumehood/call', os.O_RDWR)\nsrc = open('/dev/fumehood/lib/fumehood/__init__.py')\nhead = src.read(10)")
	r := resume(t, snapshotOf(t, s), cfg)
	assert.Equal(t, "(5, True)", run(t, r, "fumehood._fd = ch\n(fumehood.call('add', A=2, B=3), head + src.read(20) == open('/dev/fumehood/lib/fumehood/__init__.py').read(30))").Value)
}
