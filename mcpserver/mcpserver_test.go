package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/mcpserver"
	"github.com/fumehood/fumehood/sandbox"
)

// TestStreamableHTTP serves the tools over streamable HTTP and calls them
// with the SDK's client.
func TestStreamableHTTP(t *testing.T) {
	py := sandboxtest.Python(t)
	srv, err := mcpserver.New(py, &mcpserver.Options{MaxSessions: 1})
	require.NoError(t, err)
	defer srv.Close()
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.MCP() }, nil))
	defer hs.Close()

	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL}, nil)
	require.NoError(t, err)
	defer cs.Close()

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "6 * 7"}})
	require.NoError(t, err)
	assert.False(t, res.IsError)
	assert.Contains(t, res.Content[0].(*mcp.TextContent).Text, "value: 42")

	// Without a snapshot directory there are no snapshot tools.
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "session_snapshot", Arguments: map[string]any{"name": "x"}})
	assert.Error(t, err)

	// MaxSessions bounds the open sessions.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "session_create"})
	require.NoError(t, err)
	assert.False(t, res.IsError)
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "session_create"})
	require.NoError(t, err)
	assert.True(t, res.IsError)
	assert.Contains(t, res.Content[0].(*mcp.TextContent).Text, "the most this server allows")
}

// TestClientWithSessionsNotEvicted: a client that owns sessions, or
// snapshots, is not evicted to make room past MaxClients (it was, and its
// sessions were closed): the new client is refused; once the owner closed
// its sessions, it is evicted for the next.
func TestClientWithSessionsNotEvicted(t *testing.T) {
	srv, url := serveHTTP(t, &mcpserver.Options{MaxClients: 1})
	first := dialHTTP(t, url)
	id := create(t, first)
	runIn(t, first, id, "x = 42")

	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	_, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	require.Error(t, err, "the new client is refused")
	assert.Equal(t, "value: 42\n", runIn(t, first, id, "x"))
	assert.Equal(t, 1, srv.OpenSessions())

	res := call(t, first, "session_close", map[string]any{"session_id": id}, nil)
	require.False(t, res.IsError, text(res))
	second := dialHTTP(t, url)
	_, err = first.ListTools(context.Background(), nil)
	assert.Error(t, err, "the client without sessions made room")
	create(t, second)

	// A client whose snapshots only its ID reaches owns state too.
	_, url = serveHTTP(t, &mcpserver.Options{MaxClients: 1, SnapshotDir: t.TempDir()})
	first = dialHTTP(t, url)
	id = create(t, first)
	runIn(t, first, id, "x = 42")
	res = call(t, first, "session_snapshot", map[string]any{"session_id": id, "name": "s"}, nil)
	require.False(t, res.IsError, text(res))
	res = call(t, first, "session_close", map[string]any{"session_id": id}, nil)
	require.False(t, res.IsError, text(res))
	_, err = client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	require.Error(t, err, "the new client is refused")
	var ref sessionRef
	res = call(t, first, "session_restore", map[string]any{"name": "s"}, &ref)
	require.False(t, res.IsError, text(res))
	assert.Equal(t, "value: 42\n", runIn(t, first, ref.SessionID, "x"))
}

// dialHTTP connects a client to the streamable HTTP server at url, and
// closes it at the end of the test.
func dialHTTP(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	return cs
}

// connect connects a client to srv over the SDK's in-memory transports.
func connect(t testing.TB, srv *mcpserver.Server) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(context.Background(), st, nil)
	require.NoError(t, err)
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := client.Connect(context.Background(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

// call calls a tool, which must answer with a result, and decodes its
// structured content into out.
func call(t testing.TB, cs *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, "a tool's failure is a result, not a protocol error")
	if out != nil && res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, out))
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

type sessionRef struct {
	SessionID string `json:"session_id"`
}

// create opens a session, which must succeed, and returns its ID.
func create(t testing.TB, cs *mcp.ClientSession) string {
	t.Helper()
	var ref sessionRef
	res := call(t, cs, "session_create", nil, &ref)
	require.False(t, res.IsError, text(res))
	require.NotEmpty(t, ref.SessionID)
	return ref.SessionID
}

// TestCallLimitsNeverRaise: a call's timeout_ms and fuel only ever lower
// the server's limits. A timeout_ms whose nanoseconds overflow used to be
// a negative duration, that is no deadline at all (time.sleep(8) finished
// under --timeout 3s); a fuel of 10**18 used to replace the default when
// the server set none.
func TestCallLimitsNeverRaise(t *testing.T) {
	py := sandboxtest.Python(t)
	srv, err := mcpserver.New(py, &mcpserver.Options{Limits: sandbox.Limits{Timeout: time.Second}})
	require.NoError(t, err)
	defer srv.Close()

	// The server's defaults apply before the call's limits are compared.
	c, err := srv.Config(9223372036854, 1_000_000_000_000_000_000)
	require.NoError(t, err)
	assert.Equal(t, time.Second, c.Limits.Timeout)
	assert.Equal(t, int64(sandbox.DefaultFuelPerSecond), c.Limits.Fuel, "no --fuel: the call is capped by the default of its 1 s")
	assert.Equal(t, sandbox.DefaultMaxOutput, c.Limits.MaxOutput)
	c, err = srv.Config(250, 1000)
	require.NoError(t, err)
	assert.Equal(t, 250*time.Millisecond, c.Limits.Timeout)
	assert.Equal(t, int64(1000), c.Limits.Fuel)

	cs := connect(t, srv)
	var out struct {
		StoppedBy string `json:"stopped_by"`
	}
	// The largest timeout_ms and fuel there are: the server's deadline
	// still stops the loop.
	res := call(t, cs, "run_python", map[string]any{"code": "while True: pass",
		"timeout_ms": int64(9223372036854), "fuel": int64(1_000_000_000_000_000_000)}, &out)
	assert.True(t, res.IsError)
	assert.Equal(t, "deadline", out.StoppedBy, text(res))

	// Out of range, negative or not an integer: an error naming the
	// argument, and nothing runs.
	id := create(t, cs)
	for _, bad := range []map[string]any{
		{"timeout_ms": int64(9223372036855)},
		{"timeout_ms": int64(-5)},
		{"timeout_ms": 1.5},
		{"timeout_ms": 1e30},
		{"fuel": int64(-1)},
		{"fuel": 2.5},
		{"fuel": 1e30},
	} {
		for _, tool := range []string{"run_python", "session_run"} {
			args := map[string]any{"code": "import time\ntime.sleep(3)\nprint('finished')"}
			if tool == "session_run" {
				args["session_id"] = id
			}
			for k, v := range bad {
				args[k] = v
			}
			res := call(t, cs, tool, args, nil)
			assert.True(t, res.IsError, "%s %v: %s", tool, bad, text(res))
			assert.NotContains(t, text(res), "finished")
			for k := range bad {
				assert.Contains(t, text(res), k, "%s %v", tool, bad)
			}
			assert.NotContains(t, text(res), "additional properties")
		}
	}
}

// TestRunsBounded: no more than MaxRuns run_python and session_run calls
// execute at once; the others wait for a slot. Twelve parallel calls used
// to run at once whatever the server's bounds (5.6 GB with 200 MB each).
func TestRunsBounded(t *testing.T) {
	py := sandboxtest.Python(t)
	// One client waits with all its calls: MaxWaitingRunsPerClient lets it.
	srv, err := mcpserver.New(py, &mcpserver.Options{MaxRuns: 2, MaxSessions: 2, MaxWaitingRunsPerClient: 8})
	require.NoError(t, err)
	defer srv.Close()
	var mu sync.Mutex
	most, runs := 0, 0
	srv.OnRun(func(running int) {
		mu.Lock()
		defer mu.Unlock()
		most, runs = max(most, running), runs+1
	})
	cs := connect(t, srv)
	ids := []string{create(t, cs), create(t, cs)}

	var wg sync.WaitGroup
	const n = 8
	errs := make([]string, n)
	for i := range n {
		wg.Go(func() {
			args := map[string]any{"code": "import time\ntime.sleep(0.1)\n1"}
			tool := "run_python"
			if i < len(ids) {
				tool, args["session_id"] = "session_run", ids[i]
			}
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
			if err != nil {
				errs[i] = err.Error()
			} else if res.IsError {
				errs[i] = text(res)
			}
		})
	}
	wg.Wait()
	for i, e := range errs {
		assert.Empty(t, e, "call %d", i)
	}
	assert.Equal(t, n, runs)
	assert.LessOrEqual(t, most, 2, "runs executing at once")
	assert.Positive(t, most)
}

// TestSessionCreateAtomic: parallel session_create calls never open more
// than MaxSessions sessions. Checking and adding used to be two steps:
// parallel calls opened 21 and 40 sessions with a cap of 2.
func TestSessionCreateAtomic(t *testing.T) {
	py := sandboxtest.Python(t)
	srv, err := mcpserver.New(py, &mcpserver.Options{MaxSessions: 2})
	require.NoError(t, err)
	defer srv.Close()
	cs := connect(t, srv)

	var wg sync.WaitGroup
	var mu sync.Mutex
	opened, refused := 0, 0
	for range 12 {
		wg.Go(func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_create"})
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if res.IsError {
				assert.Contains(t, text(res), "the most this server allows")
				refused++
			} else {
				opened++
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 2, opened)
	assert.Equal(t, 10, refused)
	assert.Equal(t, 2, srv.OpenSessions())
}

// TestMemoryBudget: open sessions and run_python calls in progress each
// hold what one session can hold of MemoryBudget (SessionHostMemory, twice
// the memory limit and the root quota: it used to be the memory limit,
// a third of what a session and its restore cost); past it a call is
// refused.
func TestMemoryBudget(t *testing.T) {
	py := sandboxtest.Python(t)
	limits := sandbox.Limits{Memory: 64 << 20}
	charge, err := (&sandbox.Config{Limits: limits}).SessionHostMemory()
	require.NoError(t, err)
	require.Equal(t, int64(2*(64+128)<<20), charge)
	srv, err := mcpserver.New(py, &mcpserver.Options{MaxSessions: 8, Limits: limits, MemoryBudget: 2 * charge})
	require.NoError(t, err)
	defer srv.Close()
	cs := connect(t, srv)

	a := create(t, cs)
	res := call(t, cs, "run_python", map[string]any{"code": "1"}, nil)
	require.False(t, res.IsError, "one session and one run fit: %s", text(res))
	create(t, cs)
	res = call(t, cs, "session_create", nil, nil)
	assert.True(t, res.IsError)
	assert.Contains(t, text(res), "memory budget")
	res = call(t, cs, "run_python", map[string]any{"code": "1"}, nil)
	assert.True(t, res.IsError)
	assert.Contains(t, text(res), "memory budget")
	assert.Equal(t, 2, srv.OpenSessions())

	res = call(t, cs, "session_close", map[string]any{"session_id": a}, nil)
	require.False(t, res.IsError, text(res))
	res = call(t, cs, "run_python", map[string]any{"code": "1"}, nil)
	assert.False(t, res.IsError, text(res))

	_, err = mcpserver.New(py, &mcpserver.Options{Limits: limits, MemoryBudget: charge - 1})
	assert.ErrorContains(t, err, "MemoryBudget")

	// A run_python that only other run_python calls are in the way of
	// waits for them: with room for one, three in parallel all run, one at
	// a time.
	one, err := mcpserver.New(py, &mcpserver.Options{MaxRuns: 3, Limits: limits, MemoryBudget: charge})
	require.NoError(t, err)
	defer one.Close()
	cs = connect(t, one)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_python",
				Arguments: map[string]any{"code": "import time\ntime.sleep(0.05)\n1"}})
			if assert.NoError(t, err) {
				assert.False(t, res.IsError, text(res))
			}
		})
	}
	wg.Wait()
}

// TestClientsOwnTheirSessions serves two clients over streamable HTTP.
// Neither can run code in, read, close, snapshot or restore what the other
// made: it gets the answer of an unknown session or snapshot. Both used to
// share everything. When a client's MCP session ends, its sessions close.
func TestClientsOwnTheirSessions(t *testing.T) {
	py := sandboxtest.Python(t)
	srv, err := mcpserver.New(py, &mcpserver.Options{MaxSessions: 4, SnapshotDir: t.TempDir()})
	require.NoError(t, err)
	defer srv.Close()
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.MCP() }, nil))
	t.Cleanup(hs.Close) // after the clients' Close: cleanups run last first
	dial := func() *mcp.ClientSession { return dialHTTP(t, hs.URL) }
	alice, mallory := dial(), dial()
	value := func(cs *mcp.ClientSession, id, code string) string {
		t.Helper()
		res := call(t, cs, "session_run", map[string]any{"session_id": id, "code": code}, nil)
		require.False(t, res.IsError, text(res))
		return valueOf(t, res)
	}

	a := create(t, alice)
	value(alice, a, "secret = 'alice'\nopen('/work/secret.txt', 'w').write(secret)")
	res := call(t, alice, "session_snapshot", map[string]any{"session_id": a, "name": "mine"}, nil)
	require.False(t, res.IsError, text(res))

	// What mallory gets for alice's session is what an unknown one gets.
	unknown := strings.Repeat("0", len(a))
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"session_run", map[string]any{"code": "secret = 'mallory'"}},
		{"session_files", map[string]any{"op": "read", "path": "/work/secret.txt"}},
		{"session_files", map[string]any{"op": "write", "path": "/work/secret.txt", "content": "mallory"}},
		{"session_snapshot", map[string]any{"name": "mine"}},
		{"session_close", map[string]any{}},
	} {
		args := map[string]any{"session_id": a}
		for k, v := range c.args {
			args[k] = v
		}
		res := call(t, mallory, c.tool, args, nil)
		assert.True(t, res.IsError, "%s: %s", c.tool, text(res))
		args["session_id"] = unknown
		want := call(t, mallory, c.tool, args, nil)
		assert.Equal(t, strings.ReplaceAll(text(want), unknown, a), text(res), c.tool)
	}
	res = call(t, mallory, "session_restore", map[string]any{"name": "mine"}, nil)
	assert.True(t, res.IsError)
	assert.Equal(t, `no snapshot named "mine"`, text(res))

	// Mallory's own snapshot of the same name is hers alone.
	m := create(t, mallory)
	value(mallory, m, "secret = 'mallory'\nsecret")
	res = call(t, mallory, "session_snapshot", map[string]any{"session_id": m, "name": "mine"}, nil)
	require.False(t, res.IsError, text(res))

	// Alice's session and snapshot are untouched.
	assert.Equal(t, "('alice', 'alice')", value(alice, a, "secret, open('/work/secret.txt').read()"))
	var ref sessionRef
	res = call(t, alice, "session_restore", map[string]any{"name": "mine"}, &ref)
	require.False(t, res.IsError, text(res))
	assert.Equal(t, "'alice'", value(alice, ref.SessionID, "secret"))
	assert.Equal(t, 3, srv.OpenSessions())

	// Alice leaves (the client sends DELETE): her two sessions close.
	require.NoError(t, alice.Close())
	require.Eventually(t, func() bool { return srv.OpenSessions() == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "'mallory'", value(mallory, m, "secret"))
}

// valueOf returns the value a run's text shows.
func valueOf(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	for line := range strings.Lines(text(res)) {
		if v, ok := strings.CutPrefix(line, "value: "); ok {
			return strings.TrimSuffix(v, "\n")
		}
	}
	require.Fail(t, "no value", text(res))
	return ""
}

// TestOutputCapped: every text of a result is cut to MaxOutput by the
// server, whatever the sandbox returned, and sent once: a 30 MB exception
// message, value or traceback under a 1 KiB limit gives a response of at
// most 6 × 1 KiB plus a few hundred bytes (6 texts of at most MaxOutput
// bytes; escaping could make the JSON up to 6 times as long, not here).
func TestOutputCapped(t *testing.T) {
	py := sandboxtest.Python(t)
	const limit = 1024
	srv, err := mcpserver.New(py, &mcpserver.Options{Limits: sandbox.Limits{MaxOutput: limit}})
	require.NoError(t, err)
	defer srv.Close()
	cs := connect(t, srv)
	id := create(t, cs)

	for _, code := range []string{
		"raise Exception('x' * 30_000_000)",
		"raise type('E' * 30_000, (Exception,), {})('é' * 15_000_000)",
		"print('o' * 3_000_000)\nimport sys\nprint('e' * 3_000_000, file=sys.stderr)\n'v' * 30_000_000",
		"'\\u00e9' * 30_000_000",
	} {
		for _, tool := range []string{"run_python", "session_run"} {
			args := map[string]any{"code": code}
			if tool == "session_run" {
				args["session_id"] = id
			}
			res := call(t, cs, tool, args, nil)
			b, err := json.Marshal(res)
			require.NoError(t, err)
			assert.Less(t, len(b), 6*limit+1024, "%s %.40q", tool, code)
			var out struct {
				Truncated []string `json:"truncated"`
			}
			sc, err := json.Marshal(res.StructuredContent)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(sc, &out), string(sc))
			assert.NotEmpty(t, out.Truncated, "%s %.40q", tool, code)
			assert.Contains(t, text(res), "went past the output limit of 1024 bytes", "%s %.40q", tool, code)
			assert.True(t, json.Valid(b))
		}
	}

	// A file read too.
	res := call(t, cs, "session_run", map[string]any{"session_id": id, "code": "open('/work/big', 'w').write('b' * 5_000_000)"}, nil)
	require.False(t, res.IsError, text(res))
	var file struct {
		Size      int64 `json:"size"`
		Truncated bool  `json:"truncated"`
	}
	res = call(t, cs, "session_files", map[string]any{"session_id": id, "op": "read", "path": "/work/big"}, &file)
	require.False(t, res.IsError, text(res))
	assert.Len(t, res.Content[0].(*mcp.TextContent).Text, limit)
	assert.Contains(t, res.Content[1].(*mcp.TextContent).Text, "/work/big is 5000000 bytes: only its start was sent")
	assert.Equal(t, int64(5_000_000), file.Size)
	assert.True(t, file.Truncated)
}

// rawPeer speaks newline-delimited JSON-RPC to a server through pipes, as
// a client on the server's stdin and stdout would.
type rawPeer struct {
	t     *testing.T
	in    *io.PipeWriter
	lines *bufio.Scanner
}

func (p *rawPeer) send(line string) {
	p.t.Helper()
	_, err := p.in.Write([]byte(line + "\n"))
	require.NoError(p.t, err)
}

// next reads the next message the server wrote.
func (p *rawPeer) next() map[string]any {
	p.t.Helper()
	require.True(p.t, p.lines.Scan(), "the server wrote nothing more: %v", p.lines.Err())
	var m map[string]any
	require.NoError(p.t, json.Unmarshal(p.lines.Bytes(), &m), p.lines.Text())
	return m
}

// expectError reads a JSON-RPC error response with the given id and code.
func (p *rawPeer) expectError(id any, code float64) {
	p.t.Helper()
	m := p.next()
	assert.Equal(p.t, id, m["id"], "%v", m)
	require.Contains(p.t, m, "error", "%v", m)
	assert.Equal(p.t, code, m["error"].(map[string]any)["code"], "%v", m)
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",` +
	`"capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

// TestIOTransportSkipsMalformedLines: a line that is not a JSON-RPC
// message gets a JSON-RPC error and the server reads on. The SDK's own
// transport ends the connection on the first such line (and `fumehood
// mcp` exited with all its sessions).
func TestIOTransportSkipsMalformedLines(t *testing.T) {
	py := sandboxtest.Python(t)
	srv, err := mcpserver.New(py, nil)
	require.NoError(t, err)
	defer srv.Close()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := srv.MCP().Run(ctx, &mcpserver.IOTransport{Reader: inR, Writer: outW, MaxLineLength: 1024})
		outW.CloseWithError(fmt.Errorf("the server ended: %v", err)) // no reader waits forever
		done <- err
	}()
	p := &rawPeer{t: t, in: inW, lines: bufio.NewScanner(outR)}

	p.send("this is not JSON")
	p.expectError(nil, -32700)
	p.send(initialize)
	m := p.next()
	assert.Equal(t, 1.0, m["id"])
	assert.Contains(t, m, "result")
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	p.send(`{"jsonrpc":"2.0","id":3,`)
	p.expectError(nil, -32700)
	p.send(strings.Repeat("x", 2000))
	p.expectError(nil, -32700)
	ping := `{"jsonrpc":"2.0","id":5,"method":"ping"`
	p.send(ping + strings.Repeat(" ", 1023-len(ping)) + "}") // 1024 bytes: the longest line
	m = p.next()
	assert.Equal(t, 5.0, m["id"])
	assert.Contains(t, m, "result", "%v", m)
	p.send(ping + strings.Repeat(" ", 1024-len(ping)) + "}")
	p.expectError(nil, -32700)
	p.send(`[]`)
	p.expectError(nil, -32600)
	p.send(`[{"jsonrpc":"2.0","id":9,"method":"ping"}]`)
	p.expectError(nil, -32600)
	p.send(`{"jsonrpc":"1.0","id":"x","method":"ping"}`)
	p.expectError("x", -32600)
	p.send(`{"jsonrpc":"2.0","id":{"an":"object"},"method":"ping"}`)
	p.expectError(nil, -32600)
	p.send(`"a string"`)
	p.expectError(nil, -32600)
	p.send("   \r")

	p.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"6 * 7"}}}`)
	m = p.next()
	assert.Equal(t, 2.0, m["id"])
	assert.Contains(t, fmt.Sprint(m["result"]), "value: 42")

	require.NoError(t, inW.Close())
	select {
	case err := <-done:
		if err != nil {
			assert.ErrorIs(t, err, io.EOF)
		}
	case <-ctx.Done():
		t.Fatal("the server did not end with its input")
	}
}

// TestStoppedByIsTheHosts: stopped_by names a limit only when the host
// stopped the run, never because the guest exited with a limit's status
// or printed a limit's words.
func TestStoppedByIsTheHosts(t *testing.T) {
	py := sandboxtest.Python(t)
	srv, err := mcpserver.New(py, &mcpserver.Options{Limits: sandbox.Limits{Timeout: 5 * time.Second}})
	require.NoError(t, err)
	defer srv.Close()
	cs := connect(t, srv)

	type output struct {
		StoppedBy string `json:"stopped_by"`
	}
	for _, code := range []string{
		"import sys\nprint('fumehood: stopped: deadline exceeded', file=sys.stderr)\nsys.exit(124)",
		"import os\nos._exit(-268435457)", // wazero's code for a closed context's deadline
		"import os\nos._exit(-1)",
	} {
		var out output
		res := call(t, cs, "run_python", map[string]any{"code": code}, &out)
		assert.True(t, res.IsError, code)
		assert.Empty(t, out.StoppedBy, "%s: %s", code, text(res))
		assert.NotContains(t, text(res), "limit (", code)
	}
	var out output
	res := call(t, cs, "run_python", map[string]any{"code": "while True: pass", "fuel": 1_000_000}, &out)
	assert.True(t, res.IsError)
	assert.Equal(t, "fuel", out.StoppedBy, text(res))
}

// TestProgressStreamsOutput: a client that asks for progress (a
// progressToken) gets the run's output line by line as notifications while
// the run goes on, in run_python and session_run, at most MaxOutput bytes
// of it; a client that does not ask gets none.
func TestProgressStreamsOutput(t *testing.T) {
	py := sandboxtest.Python(t)
	srv, err := mcpserver.New(py, &mcpserver.Options{Limits: sandbox.Limits{MaxOutput: 1000}})
	require.NoError(t, err)
	defer srv.Close()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(context.Background(), st, nil)
	require.NoError(t, err)
	var mu sync.Mutex
	var got []string
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, fmt.Sprint(req.Params.ProgressToken, " ", req.Params.Progress, " ", req.Params.Message))
		}})
	cs, err := client.Connect(context.Background(), ct, nil)
	require.NoError(t, err)
	defer func() { cs.Close(); ss.Wait() }()
	notes := func() []string {
		// Notifications are handled as they come: wait for the last.
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			n := slices.Clone(got)
			last := len(n) > 0 && (strings.HasSuffix(n[len(n)-1], "end\n") || strings.Contains(n[len(n)-1], "more output"))
			if last || time.Now().After(deadline) {
				got = nil
			}
			mu.Unlock()
			if last || time.Now().After(deadline) {
				return n
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	params := &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "for i in range(3): print('line', i)\nprint('end')"}}
	params.SetProgressToken("t1")
	res, err := cs.CallTool(context.Background(), params)
	require.NoError(t, err)
	require.False(t, res.IsError)
	assert.Equal(t, []string{"t1 1 line 0\n", "t1 2 line 1\n", "t1 3 line 2\n", "t1 4 end\n"}, notes())

	var created struct {
		SessionID string `json:"session_id"`
	}
	call(t, cs, "session_create", map[string]any{}, &created)
	params = &mcp.CallToolParams{Name: "session_run", Arguments: map[string]any{"session_id": created.SessionID,
		"code": "for i in range(1000): print('x' * 10)\nprint('end')"}}
	params.SetProgressToken(7)
	_, err = cs.CallTool(context.Background(), params)
	require.NoError(t, err)
	n := notes()
	require.NotEmpty(t, n)
	text := 0
	for _, s := range n[:len(n)-1] {
		text += len(s) - len("7 1 ")
	}
	assert.LessOrEqual(t, text, 1000+len(n)*len("7 1 "), "at most MaxOutput bytes of text, then one note")
	assert.Less(t, len(n), 100)
	assert.Contains(t, n[len(n)-1], "more output")

	// No token, no notifications.
	call(t, cs, "run_python", map[string]any{"code": "print('quiet')"}, nil)
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	assert.Empty(t, got)
	mu.Unlock()
}

// TestNoTimeout: a server without a deadline (fumehood mcp --timeout 0)
// runs code: every run failed with "a run's limits may not be negative".
func TestNoTimeout(t *testing.T) {
	py := sandboxtest.Python(t)
	srv, err := mcpserver.New(py, &mcpserver.Options{Limits: sandbox.Limits{Timeout: -1}})
	require.NoError(t, err)
	defer srv.Close()
	cs := connect(t, srv)
	res := call(t, cs, "run_python", map[string]any{"code": "print(6 * 7)"}, nil)
	assert.False(t, res.IsError, text(res))
	assert.Contains(t, text(res), "42")
	c, err := srv.Config(0, 0)
	require.NoError(t, err)
	assert.Zero(t, c.Limits.Timeout, "no deadline is asked")
}
