package mcpserver_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/mcpserver"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// sleeper starts calls of tool that sleep until the test ends them
// (cancel), and collects their outcomes.
type sleeper struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newSleeper(t *testing.T) *sleeper {
	ctx, cancel := context.WithCancel(context.Background())
	return &sleeper{ctx: ctx, cancel: cancel}
}

// start calls run_python with a run that sleeps a minute, until stop.
func (sl *sleeper) start(cs *mcp.ClientSession) {
	sl.wg.Go(func() {
		cs.CallTool(sl.ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "import time\ntime.sleep(60)"}})
	})
}

// stop cancels the calls (the client tells the server) and waits for
// them. Call it before the test ends: the clients' cleanups wait for
// their calls.
func (sl *sleeper) stop() {
	sl.cancel()
	sl.wg.Wait()
}

// waitStats waits until the server's stats satisfy ok.
func waitStats(t *testing.T, srv *mcpserver.Server, ok func(mcpserver.Stats) bool) {
	t.Helper()
	require.Eventually(t, func() bool { return ok(srv.Stats()) }, 30*time.Second, 5*time.Millisecond, "%+v", srv.Stats())
}

// TestVictimSurvivesWaitingClients: a client fills the server with
// clients that each have a call waiting for a run slot, then opens 260
// more: each is refused with 503 and Retry-After, and the one idle
// client, which owns a session, keeps it. The first of them used to evict
// it with its session (x = 42 gone).
func TestVictimSurvivesWaitingClients(t *testing.T) {
	srv, url := serveHTTP(t, &mcpserver.Options{MaxClients: 8, MaxRuns: 1, MaxWaitingRuns: 16,
		Limits: sandbox.Limits{Timeout: time.Minute}})
	victim := dialHTTP(t, url)
	id := create(t, victim)
	runIn(t, victim, id, "x = 42")

	sl := newSleeper(t)
	var attackers []*mcp.ClientSession
	for range 7 {
		cs := dialHTTP(t, url)
		attackers = append(attackers, cs)
		sl.start(cs)
	}
	waitStats(t, srv, func(st mcpserver.Stats) bool { return st.Runs == 1 && st.WaitingRuns == 6 })
	client := &http.Client{}
	for i := range 260 {
		resp := mcpserver.InitializeHTTP(t, client, url)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "new client %d", i)
		require.NotEmpty(t, resp.Header.Get("Retry-After"))
	}
	assert.Equal(t, 8, srv.Stats().Clients)

	sl.stop()
	assert.Equal(t, "value: 42\n", runIn(t, victim, id, "x"), "the victim's session is intact")
	// Idle now, a client without sessions makes room for a new one.
	waitStats(t, srv, func(st mcpserver.Stats) bool { return st.Runs == 0 && st.WaitingRuns == 0 })
	dialHTTP(t, url)
	assert.Equal(t, "value: 42\n", runIn(t, victim, id, "x"))
	evicted := 0
	for _, cs := range attackers {
		if _, err := cs.ListTools(context.Background(), nil); err != nil {
			evicted++
		}
	}
	assert.Equal(t, 1, evicted)
}

// serve returns a server with options o, closed at the end of the test.
func serve(t *testing.T, o *mcpserver.Options) *mcpserver.Server {
	t.Helper()
	srv, err := mcpserver.New(sandboxtest.Python(t), o)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv
}

// serveHTTP returns a server with options o and the URL of its
// HTTPHandler, both closed at the end of the test.
func serveHTTP(t *testing.T, o *mcpserver.Options) (*mcpserver.Server, string) {
	t.Helper()
	srv := serve(t, o)
	hs := httptest.NewServer(srv.HTTPHandler())
	t.Cleanup(hs.Close)
	return srv, hs.URL
}

// TestWaitingRunsBounded: past MaxWaitingRunsPerClient calls of one
// client, or MaxWaitingRuns of all, waiting for a run slot, a call is
// refused at once with a clear error; such calls used to wait without
// bound, each holding its client busy.
func TestWaitingRunsBounded(t *testing.T) {
	srv := serve(t, &mcpserver.Options{MaxRuns: 1, MaxWaitingRuns: 3, MaxWaitingRunsPerClient: 2,
		Limits: sandbox.Limits{Timeout: time.Minute}})
	sl := newSleeper(t)
	sl.start(connect(t, srv))
	waitStats(t, srv, func(st mcpserver.Stats) bool { return st.Runs == 1 })
	b := connect(t, srv)
	sl.start(b)
	sl.start(b)
	waitStats(t, srv, func(st mcpserver.Stats) bool { return st.WaitingRuns == 2 })

	refused := func(cs *mcp.ClientSession, tool string, args map[string]any, why string) {
		t.Helper()
		start := time.Now()
		res := call(t, cs, tool, args, nil)
		assert.True(t, res.IsError, text(res))
		assert.Contains(t, text(res), why)
		assert.Less(t, time.Since(start), 5*time.Second, "refused at once")
	}
	refused(b, "run_python", map[string]any{"code": "1"}, "this client has the most calls waiting for one (2)")
	c := connect(t, srv)
	sl.start(c)
	waitStats(t, srv, func(st mcpserver.Stats) bool { return st.WaitingRuns == 3 })
	d := connect(t, srv)
	refused(d, "run_python", map[string]any{"code": "1"}, "the most calls wait for one (3, over all clients)")
	refused(d, "session_run", map[string]any{"session_id": create(t, d), "code": "1"}, "the most calls wait for one (3, over all clients)")
	assert.Equal(t, 3, srv.Stats().WaitingRuns)

	sl.stop()
	waitStats(t, srv, func(st mcpserver.Stats) bool { return st.Runs == 0 && st.WaitingRuns == 0 })
	res := call(t, d, "run_python", map[string]any{"code": "6 * 7"}, nil)
	assert.False(t, res.IsError, text(res))
}

// TestRunWaitEndsAtDeadline: a call waits for a run slot at most its
// run's timeout, then gets an error result saying so; it used to wait
// for as long as the slot was taken.
func TestRunWaitEndsAtDeadline(t *testing.T) {
	srv := serve(t, &mcpserver.Options{MaxRuns: 1, Limits: sandbox.Limits{Timeout: time.Minute}})
	sl := newSleeper(t)
	sl.start(connect(t, srv))
	waitStats(t, srv, func(st mcpserver.Stats) bool { return st.Runs == 1 })

	cs := connect(t, srv)
	start := time.Now()
	res := call(t, cs, "run_python", map[string]any{"code": "1", "timeout_ms": 300}, nil)
	took := time.Since(start)
	assert.True(t, res.IsError)
	assert.Contains(t, text(res), "waited 300ms, this call's timeout, for a run slot")
	assert.GreaterOrEqual(t, took, 300*time.Millisecond)
	assert.Less(t, took, 10*time.Second)
	assert.Zero(t, srv.Stats().WaitingRuns)
	sl.stop()
}

// TestSessionsPerClientCapped: one client holds at most
// MaxSessionsPerClient sessions, so that others still get theirs; one
// client used to be able to hold all MaxSessions.
func TestSessionsPerClientCapped(t *testing.T) {
	srv := serve(t, &mcpserver.Options{MaxSessions: 8, MaxSessionsPerClient: 2})
	a, b := connect(t, srv), connect(t, srv)
	first := create(t, a)
	create(t, a)
	for range 3 {
		res := call(t, a, "session_create", nil, nil)
		assert.True(t, res.IsError)
		assert.Contains(t, text(res), "this client has 2 sessions open, its most")
	}
	create(t, b)
	create(t, b)
	assert.Equal(t, 4, srv.OpenSessions())
	res := call(t, a, "session_close", map[string]any{"session_id": first}, nil)
	require.False(t, res.IsError, text(res))
	create(t, a)
}

// TestStoredSessionsPerClientCapped: with a store, one client (over
// stateless HTTP: one address, whatever MCP session each request makes)
// creates at most MaxStoredSessionsPerClient sessions that are still in
// the store; it used to create them without bound (300 in 3 s). One it
// closes no longer counts, nor one closed through another replica once
// the store is asked again (at most every second).
func TestStoredSessionsPerClientCapped(t *testing.T) {
	dir := t.TempDir()
	srv := replica(t, dir, &mcpserver.Options{MaxSessions: 1, MaxStoredSessionsPerClient: 3})
	hs := httptest.NewServer(srv.HTTPHandler())
	t.Cleanup(hs.Close)
	cs := dialHTTP(t, hs.URL)
	var ids []string
	for range 3 {
		ids = append(ids, create(t, cs))
	}
	for range 2 {
		res := call(t, dialHTTP(t, hs.URL), "session_create", nil, nil)
		assert.True(t, res.IsError)
		assert.Contains(t, text(res), "this client has 3 sessions in the store, its most")
	}
	other := connect(t, srv) // another client: its own count
	create(t, other)

	res := call(t, cs, "session_close", map[string]any{"session_id": ids[0]}, nil)
	require.False(t, res.IsError, text(res))
	ids[0] = create(t, cs)
	res = call(t, connect(t, replica(t, dir, nil)), "session_close", map[string]any{"session_id": ids[1]}, nil)
	require.False(t, res.IsError, text(res))
	// The store is asked again at most every second.
	require.Eventually(t, func() bool {
		return !call(t, cs, "session_create", nil, nil).IsError
	}, 10*time.Second, 50*time.Millisecond, "the session closed through another replica no longer counts")
	res = call(t, cs, "session_create", nil, nil)
	assert.True(t, res.IsError, text(res))
}
