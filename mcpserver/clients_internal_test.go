package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bareServer returns a server without the guest, whose one tool, wait,
// returns when release is closed, after telling entered.
func bareServer(t *testing.T, o Options) (s *Server, entered chan struct{}, release chan struct{}) {
	t.Helper()
	_, err := o.resolve()
	require.NoError(t, err)
	s = newServer(o, "test")
	entered, release = make(chan struct{}, 16), make(chan struct{})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "wait"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, struct{}, error) {
		entered <- struct{}{}
		<-release
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, struct{}{}, nil
	})
	return s, entered, release
}

// held returns the MCP sessions the server counts and the initialized
// ones the SDK holds. (Besides, the SDK makes an MCP session for each
// request without an Mcp-Session-Id, such as a protocol probe, and closes
// it after the request unless the request initialized it.)
func held(s *Server) (counted, sdk int) {
	s.clients.mu.Lock()
	counted = s.clients.n
	s.clients.mu.Unlock()
	for ss := range s.mcp.Sessions() {
		if ss.InitializeParams() != nil {
			sdk++
		}
	}
	return counted, sdk
}

// connectHTTP initializes a client of the streamable HTTP server at url.
func connectHTTP(t *testing.T, url string) (*mcp.ClientSession, error) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

// sessionOf returns the server's side of a client's MCP session.
func sessionOf(t *testing.T, s *Server, cs *mcp.ClientSession) *mcp.ServerSession {
	t.Helper()
	for ss := range s.mcp.Sessions() {
		if ss.ID() == cs.ID() {
			return ss
		}
	}
	t.Fatalf("no MCP session %s", cs.ID())
	return nil
}

// TestClientsBoundedOverHTTP: initialize calls over HTTP, each a client
// that never comes back, hold at most MaxClients MCP sessions (they were
// unbounded: 100,000 of them took 1.85 GB for 30 minutes). The newest
// client evicts the least recently used; the evicted client is told so.
func TestClientsBoundedOverHTTP(t *testing.T) {
	const max = 4
	s, _, _ := bareServer(t, Options{MaxClients: max})
	hs := httptest.NewServer(s.HTTPHandler())
	t.Cleanup(hs.Close)

	var all []*mcp.ClientSession
	for i := range 40 {
		cs, err := connectHTTP(t, hs.URL)
		require.NoError(t, err, "client %d", i)
		all = append(all, cs)
		counted, sdk := held(s)
		assert.Equal(t, min(i+1, max), counted, "client %d", i)
		assert.Equal(t, min(i+1, max), sdk, "client %d: MCP sessions the SDK holds", i)
	}
	// The clients served are the recent ones. (Which exactly depends on
	// when the server handled each client's notifications/initialized,
	// which the client does not wait for.)
	served := 0
	for i, cs := range all {
		if _, err := cs.ListTools(context.Background(), nil); err == nil {
			served++
			assert.GreaterOrEqual(t, i, len(all)-2*max, "client %d is served", i)
		}
	}
	assert.Equal(t, max, served)
	_, err := all[len(all)-1].ListTools(context.Background(), nil)
	assert.NoError(t, err, "the newest client is served")

	// What any client of an evicted MCP session is answered.
	resp := post(t, http.DefaultClient, hs.URL, all[0].ID(), `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	code, msg := rpcError(t, resp)
	assert.Equal(t, codeSessionEnded, code)
	assert.Contains(t, msg, "ended to make room for a new client")
}

// TestClientsRefusedWhenAllBusy: when every MCP session has a request in
// progress, a new client is refused with a clear error, not served by
// ending another's call; once one is idle, it is evicted for the next.
func TestClientsRefusedWhenAllBusy(t *testing.T) {
	s, entered, release := bareServer(t, Options{MaxClients: 2})
	hs := httptest.NewServer(s.HTTPHandler())
	t.Cleanup(hs.Close)
	calls := make(chan error, 2)
	for range 2 {
		cs, err := connectHTTP(t, hs.URL)
		require.NoError(t, err)
		go func() {
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait", Arguments: map[string]any{}})
			calls <- err
		}()
		<-entered
	}
	_, err := connectHTTP(t, hs.URL)
	require.Error(t, err)
	expectFull(t, hs.URL)
	counted, _ := held(s)
	assert.Equal(t, 2, counted)

	close(release)
	require.NoError(t, <-calls)
	require.NoError(t, <-calls)
	_, err = connectHTTP(t, hs.URL)
	require.NoError(t, err, "an idle MCP session makes room")
	counted, sdk := held(s)
	assert.Equal(t, 2, counted)
	assert.Equal(t, 2, sdk)
}

// TestClientsEvictionSparesSessionOwners: the least recently used MCP
// session that owns no sandbox session is evicted before one that does.
func TestClientsEvictionSparesSessionOwners(t *testing.T) {
	s, _, _ := bareServer(t, Options{MaxClients: 2})
	hs := httptest.NewServer(s.HTTPHandler())
	t.Cleanup(hs.Close)
	owner, err := connectHTTP(t, hs.URL)
	require.NoError(t, err)
	other, err := connectHTTP(t, hs.URL)
	require.NoError(t, err)
	require.NoError(t, s.own(sessionOf(t, s, owner), "a"))
	waitIdle(t, s)

	_, err = connectHTTP(t, hs.URL)
	require.NoError(t, err)
	_, err = owner.ListTools(context.Background(), nil)
	assert.NoError(t, err, "the owner of a session, least recently used, stays")
	_, err = other.ListTools(context.Background(), nil)
	assert.Error(t, err, "the one without sessions was evicted")
}

// initializeRaw sends an initialize request of a new client to the
// streamable HTTP server at url.
func initializeRaw(t *testing.T, client *http.Client, url string) *http.Response {
	t.Helper()
	return post(t, client, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":`+
		`{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
}

// post sends a JSON-RPC message to the streamable HTTP server at url, in
// the MCP session id if not "".
func post(t *testing.T, client *http.Client, url, id, message string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(message))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if id != "" {
		req.Header.Set("Mcp-Session-Id", id)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	return resp
}

// rpcError decodes the JSON-RPC error of a response's body.
func rpcError(t *testing.T, resp *http.Response) (code int, message string) {
	t.Helper()
	var body struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return body.Error.Code, body.Error.Message
}

// expectFull checks that a new client of the server at url is refused
// with 503 Service Unavailable, a Retry-After header and a JSON-RPC error
// saying why.
func expectFull(t *testing.T, url string) {
	t.Helper()
	resp := initializeRaw(t, http.DefaultClient, url)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, retryAfter, resp.Header.Get("Retry-After"))
	assert.Empty(t, resp.Header.Get("Mcp-Session-Id"))
	code, msg := rpcError(t, resp)
	assert.Equal(t, codeServerFull, code)
	assert.Contains(t, msg, "each has a request in progress or sessions of its own")
}

// TestClientsFullOfOwnersRefuse: when every MCP session held owns
// sessions, a new client is refused with 503 and Retry-After rather than
// ending one (the least recently used owner was evicted, its sessions
// closed); once one owns none, it is evicted for the next.
func TestClientsFullOfOwnersRefuse(t *testing.T) {
	s, _, _ := bareServer(t, Options{MaxClients: 2})
	hs := httptest.NewServer(s.HTTPHandler())
	t.Cleanup(hs.Close)
	var owners []*mcp.ClientSession
	for i := range 2 {
		cs, err := connectHTTP(t, hs.URL)
		require.NoError(t, err)
		require.NoError(t, s.own(sessionOf(t, s, cs), fmt.Sprint(i)))
		owners = append(owners, cs)
	}
	waitIdle(t, s)
	for range 3 {
		expectFull(t, hs.URL)
	}
	// Through the MCP server without HTTPHandler: a JSON-RPC error.
	plain := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, nil))
	t.Cleanup(plain.Close)
	_, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: plain.URL}, nil)
	assert.ErrorContains(t, err, "each has a request in progress or sessions of its own")
	for _, cs := range owners {
		_, err := cs.ListTools(context.Background(), nil)
		assert.NoError(t, err, "the owners are served")
	}

	s.disown(sessionOf(t, s, owners[1]), "1")
	waitIdle(t, s)
	_, err = connectHTTP(t, hs.URL)
	require.NoError(t, err)
	_, err = owners[1].ListTools(context.Background(), nil)
	assert.Error(t, err, "the client without sessions was evicted")
	_, err = owners[0].ListTools(context.Background(), nil)
	assert.NoError(t, err)
}

// waitIdle waits until no MCP session of s has a request in progress
// (such as a client's notifications/initialized, which it does not wait
// for).
func waitIdle(t *testing.T, s *Server) {
	t.Helper()
	require.Eventually(t, func() bool {
		s.clients.mu.Lock()
		defer s.clients.mu.Unlock()
		for _, cl := range s.clients.live {
			if cl.busy > 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, time.Millisecond)
}

// TestIdleClientEnded: an MCP session without a request for IdleTimeout
// ends and stops counting.
func TestIdleClientEnded(t *testing.T) {
	s, _, _ := bareServer(t, Options{IdleTimeout: 50 * time.Millisecond})
	hs := httptest.NewServer(s.HTTPHandler())
	t.Cleanup(hs.Close)
	cs, err := connectHTTP(t, hs.URL)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		counted, sdk := held(s)
		return counted == 0 && sdk == 0
	}, 30*time.Second, 10*time.Millisecond, "the idle MCP session ends")
	_, err = cs.ListTools(context.Background(), nil)
	assert.ErrorIs(t, err, mcp.ErrSessionMissing)
}

// TestClientOptions: the defaults, and the bounds refused.
func TestClientOptions(t *testing.T) {
	var o Options
	_, err := o.resolve()
	require.NoError(t, err)
	assert.Equal(t, DefaultMaxClients, o.MaxClients)
	assert.Equal(t, DefaultIdleTimeout, o.IdleTimeout)
	o = Options{IdleTimeout: -1}
	_, err = o.resolve()
	require.NoError(t, err)
	assert.Negative(t, o.IdleTimeout, "never")
	assert.Equal(t, DefaultMaxSessionsPerClient, o.MaxSessionsPerClient)
	assert.Equal(t, DefaultMaxStoredSessionsPerClient, o.MaxStoredSessionsPerClient)
	assert.Equal(t, DefaultMaxWaitingRuns, o.MaxWaitingRuns)
	assert.Equal(t, DefaultMaxWaitingRunsPerClient, o.MaxWaitingRunsPerClient)
	for _, n := range []int{-1, 1<<20 + 1} {
		for _, o := range []Options{{MaxClients: n}, {MaxSessionsPerClient: n}, {MaxStoredSessionsPerClient: n},
			{MaxWaitingRuns: n}, {MaxWaitingRunsPerClient: n}} {
			_, err := o.resolve()
			assert.Error(t, err, "%d %+v", n, o)
		}
	}
}

// TestRunWaitBounds: a wait for a run slot ends at the run's timeout
// (errRunWait), and past the bounds of waiting calls, of one client or
// of all, a call is refused at once (errRunsWaiting); a slot freed goes
// to a waiting call.
func TestRunWaitBounds(t *testing.T) {
	s, _, _ := bareServer(t, Options{MaxRuns: 1, MaxWaitingRuns: 2, MaxWaitingRunsPerClient: 1})
	ctx := context.Background()
	done, err := s.acquireRun(ctx, "a", 0)
	require.NoError(t, err)
	start := time.Now()
	_, err = s.acquireRun(ctx, "b", 50*time.Millisecond)
	assert.ErrorIs(t, err, errRunWait)
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)

	got := make(chan error, 2)
	wait := func(client string) {
		go func() {
			done, err := s.acquireRun(ctx, client, time.Minute)
			if err == nil {
				done()
			}
			got <- err
		}()
	}
	wait("b")
	require.Eventually(t, func() bool { return s.Stats().WaitingRuns == 1 }, 10*time.Second, time.Millisecond)
	_, err = s.acquireRun(ctx, "b", time.Minute)
	assert.ErrorIs(t, err, errRunsWaiting, "one of b's waits already")
	assert.ErrorContains(t, err, "this client has the most calls waiting for one (1)")
	wait("c")
	require.Eventually(t, func() bool { return s.Stats().WaitingRuns == 2 }, 10*time.Second, time.Millisecond)
	_, err = s.acquireRun(ctx, "d", time.Minute)
	assert.ErrorIs(t, err, errRunsWaiting, "two wait in all")
	assert.ErrorContains(t, err, "the most calls wait for one (2, over all clients)")
	done()
	require.NoError(t, <-got)
	require.NoError(t, <-got)
	assert.Zero(t, s.Stats().WaitingRuns)
	assert.Empty(t, s.waitingBy)
}
