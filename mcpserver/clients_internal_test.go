package mcpserver

import (
	"context"
	"encoding/json"
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
	req, err := http.NewRequest("POST", hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", all[0].ID())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	var body struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Equal(t, codeSessionEnded, body.Error.Code)
	assert.Contains(t, body.Error.Message, "ended to make room for a new client")
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
	assert.Contains(t, err.Error(), "2 MCP sessions, its most, and each has a request in progress")
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
	s.mu.Lock()
	s.owners[sessionOf(t, s, owner)] = true
	s.mu.Unlock()
	// Each client's notifications/initialized, which it does not wait
	// for, handled: both idle.
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

	_, err = connectHTTP(t, hs.URL)
	require.NoError(t, err)
	_, err = owner.ListTools(context.Background(), nil)
	assert.NoError(t, err, "the owner of a session, least recently used, stays")
	_, err = other.ListTools(context.Background(), nil)
	assert.Error(t, err, "the one without sessions was evicted")
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
	for _, n := range []int{-1, 1<<20 + 1} {
		o = Options{MaxClients: n}
		_, err := o.resolve()
		assert.Error(t, err, "%d", n)
	}
}
