package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// clients bounds the MCP sessions (the SDK's ServerSessions) a server
// holds: at most Options.MaxClients, whatever the transport. A session
// counts from its first request that makes it last (initialize, or any
// request of the sessionless protocol, which carries its initialization),
// until it ends. A session past the bound evicts the least recently used
// one that is idle (no request in progress, running or waiting) and owns
// no sandbox session; when there is none, it is refused: one client never
// ends another's state to make room.
type clients struct {
	max int

	mu      sync.Mutex
	clock   uint64 // counts requests: the recency of use
	live    map[*mcp.ServerSession]*client
	n       int                 // live sessions not evicted
	evicted map[string]struct{} // the IDs of the last evictedKept sessions evicted
	order   []string            // those IDs, oldest first
}

// evictedKept is how many evicted sessions are remembered, to tell their
// clients why they ended: about 200 KB.
const evictedKept = 4096

type client struct {
	busy    int    // requests in progress
	used    uint64 // clock at the last request's start or end
	evicted bool   // ended to make room; forgotten when its end is seen
}

func newClients(max int) *clients {
	return &clients{max: max, live: map[*mcp.ServerSession]*client{}, evicted: map[string]struct{}{}}
}

// middleware counts the requests of each lasting MCP session, admitting
// the session at its first one.
func (s *Server) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, ok := req.GetSession().(*mcp.ServerSession)
		// A session that is not initialized after this request (such as a
		// ping before initialize) ends with it: the SDK closes it.
		if ok && (method == "initialize" || ss.InitializeParams() != nil) {
			done, err := s.use(ss)
			if err != nil {
				return nil, err
			}
			defer done()
		}
		return next(ctx, method, req)
	}
}

// use records a request of ss, admitting ss if it is new: past MaxClients
// it evicts the least recently used idle session, or refuses ss when none
// is idle. The request is done when done is called.
func (s *Server) use(ss *mcp.ServerSession) (done func(), err error) {
	c := s.clients
	c.mu.Lock()
	cl := c.live[ss]
	var victim *mcp.ServerSession
	switch {
	case cl == nil:
		if c.n >= c.max {
			// Lock order: c.mu, then s.mu.
			if victim = c.victimLocked(s.ownsSessions); victim == nil {
				c.mu.Unlock()
				go ss.Close() // one initialized by the sessionless protocol would last
				return nil, c.fullError()
			}
		}
		cl = &client{}
		c.live[ss] = cl
		c.n++
		// Forget it when it ends, however it ends: DELETE, the idle
		// timeout, eviction, the end of its connection.
		go func() {
			ss.Wait()
			c.gone(ss)
		}()
	case cl.evicted:
		c.mu.Unlock()
		return nil, errEvicted
	}
	c.clock++
	cl.busy++
	cl.used = c.clock
	c.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.clock++
		cl.busy--
		cl.used = c.clock
	}, nil
}

// errServerFull is the error of a new client when the server holds
// MaxClients MCP sessions and none can be evicted: each has a request in
// progress (running or waiting) or owns sessions. HTTPHandler answers it
// with 503 Service Unavailable and a Retry-After header.
var errServerFull = errors.New("this server holds the most MCP sessions it allows, and each has a request in progress or sessions of its own")

// retryAfter is what HTTPHandler's Retry-After header asks a refused new
// client to wait, in seconds: long enough for a run to end or an idle
// client to go.
const retryAfter = "10"

func (c *clients) fullError() error {
	return fmt.Errorf("%w (%d): try again later", errServerFull, c.max)
}

// candidateLocked returns the session to evict: the least recently used
// one that is not evicted, has no request in progress and does not own a
// sandbox session (owns tells), or nil.
func (c *clients) candidateLocked(owns func(*mcp.ServerSession) bool) (*mcp.ServerSession, *client) {
	var best *mcp.ServerSession
	var bestCl *client
	for ss, cl := range c.live {
		if cl.evicted || cl.busy > 0 || bestCl != nil && cl.used >= bestCl.used || owns(ss) {
			continue
		}
		best, bestCl = ss, cl
	}
	return best, bestCl
}

// full reports whether a new client would be refused now: MaxClients are
// held and none can be evicted.
func (c *clients) full(owns func(*mcp.ServerSession) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n < c.max {
		return false
	}
	ss, _ := c.candidateLocked(owns)
	return ss == nil
}

// victimLocked chooses the session to evict (candidateLocked) and marks
// it evicted, or returns nil.
func (c *clients) victimLocked(owns func(*mcp.ServerSession) bool) *mcp.ServerSession {
	best, bestCl := c.candidateLocked(owns)
	if best == nil {
		return nil
	}
	bestCl.evicted = true
	c.n--
	if id := best.ID(); id != "" {
		if len(c.order) >= evictedKept {
			delete(c.evicted, c.order[0])
			c.order = c.order[1:]
		}
		c.evicted[id] = struct{}{}
		c.order = append(c.order, id)
	}
	return best
}

// count returns how many MCP sessions are held.
func (c *clients) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// gone forgets a session that ended.
func (c *clients) gone(ss *mcp.ServerSession) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.live[ss]; cl != nil && !cl.evicted {
		c.n--
	}
	delete(c.live, ss)
}

// wasEvicted reports whether the session of this ID was one of the last
// evicted.
func (c *clients) wasEvicted(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.evicted[id]
	return ok
}

// ownsSessions reports whether the MCP session ss owns state: a sandbox
// session open, or a snapshot in its directory of SnapshotDir.
func (s *Server) ownsSessions(ss *mcp.ServerSession) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.owned[ss]) > 0 || s.snapshotted[ss]
}

// errClientSessions is the error of a session_create or session_restore
// of a client that holds MaxSessionsPerClient sessions, or with a Store
// has MaxStoredSessionsPerClient sessions there.
var errClientSessions = errors.New("too many sessions for one client")

// own counts the session id, being opened, for its owner, or refuses it
// past MaxSessionsPerClient. disown uncounts it.
func (s *Server) own(owner *mcp.ServerSession, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.owned[owner]
	if len(ids) >= s.opts.MaxSessionsPerClient {
		return fmt.Errorf("%w: this client has %d sessions open, its most: close one with session_close", errClientSessions, len(ids))
	}
	if ids == nil {
		ids = map[string]struct{}{}
		s.owned[owner] = ids
	}
	ids[id] = struct{}{}
	return nil
}

// disown uncounts a session of owner that was closed (or never opened).
func (s *Server) disown(owner *mcp.ServerSession, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ids := s.owned[owner]; ids != nil {
		delete(ids, id)
		if len(ids) == 0 {
			delete(s.owned, owner)
		}
	}
}

// Errors of a call waiting for a run slot.
var (
	// errRunsWaiting: MaxWaitingRuns calls, or MaxWaitingRunsPerClient of
	// the caller's, wait for a run slot already.
	errRunsWaiting = errors.New("too many calls are waiting for a run")
	// errRunWait: the call waited for a run slot as long as its run may
	// take (its timeout).
	errRunWait = errors.New("gave up waiting for a run")
)

// waitRun waits for a run slot, for a call of client whose run may take
// timeout (0: no deadline), until ctx is done; it refuses at once past
// MaxWaitingRuns or MaxWaitingRunsPerClient. The slot is taken when it
// returns nil.
func (s *Server) waitRun(ctx context.Context, client any, timeout time.Duration) error {
	s.mu.Lock()
	switch {
	case s.waiting >= s.opts.MaxWaitingRuns:
		s.mu.Unlock()
		return fmt.Errorf("%w: every run slot (%d) is taken and the most calls wait for one (%d, over all clients): try again later",
			errRunsWaiting, s.opts.MaxRuns, s.opts.MaxWaitingRuns)
	case s.waitingBy[client] >= s.opts.MaxWaitingRunsPerClient:
		s.mu.Unlock()
		return fmt.Errorf("%w: every run slot (%d) is taken and this client has the most calls waiting for one (%d): wait for them to end",
			errRunsWaiting, s.opts.MaxRuns, s.opts.MaxWaitingRunsPerClient)
	}
	s.waiting++
	s.waitingBy[client]++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.waiting--
		if s.waitingBy[client]--; s.waitingBy[client] == 0 {
			delete(s.waitingBy, client)
		}
	}()
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	select {
	case s.runs <- struct{}{}:
		return nil
	case <-deadline:
		return fmt.Errorf("%w: waited %v, this call's timeout, for a run slot (all %d were taken): try again later",
			errRunWait, timeout, s.opts.MaxRuns)
	case <-ctx.Done():
		return fmt.Errorf("waiting for one of the %d runs this server executes at once: %w", s.opts.MaxRuns, context.Cause(ctx))
	}
}

// clientKey is the context key of a stateless HTTP request's client
// (Options.ClientKey).
type clientKey struct{}

// clientOf returns who makes a call, for the bounds of one client: the
// key HTTPHandler's stateless HTTP gave its request, else its MCP
// session.
func (s *Server) clientOf(ctx context.Context, req *mcp.CallToolRequest) any {
	if k, ok := ctx.Value(clientKey{}).(string); ok {
		return k
	}
	if req == nil {
		return nil
	}
	return req.Session
}

// requestClient returns the client of a stateless HTTP request: what
// Options.ClientKey says, or the authenticated user, or the remote IP
// address.
func (s *Server) requestClient(r *http.Request) string {
	if s.opts.ClientKey != nil {
		return "key " + s.opts.ClientKey(r)
	}
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil && ti.UserID != "" {
		return "user " + ti.UserID
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "address " + host
}

// errEvicted is the error of a request of a session evicted while it came
// in.
var errEvicted = errors.New("this MCP session was ended to make room for a new client: " +
	"the server holds a bounded number of MCP sessions and this one was the least recently used; initialize a new one")

// HTTPHandler serves the server over streamable HTTP: each client has its
// own MCP session (its Mcp-Session-Id), which owns the sessions and
// snapshots it makes. A session without a request for
// Options.IdleTimeout ends, and its sandbox sessions are closed; past
// Options.MaxClients MCP sessions, a new client evicts the least recently
// used one that is idle and owns no sandbox session (its next request is
// answered 404 Not Found, with a JSON-RPC error saying so, as for any MCP
// session that ended, so that the client initializes anew). When there
// is none, the new client is answered 503 Service Unavailable, with a
// Retry-After header and a JSON-RPC error saying why.
//
// With Options.Store the handler is stateless (the SDK's
// StreamableHTTPOptions.Stateless): it issues no Mcp-Session-Id and keeps
// nothing between requests, so that any replica behind one address
// answers any request; sessions are reached by their IDs, and neither
// IdleTimeout nor eviction ends them (the store's TTL does). Each request
// is then an MCP session of its own, answered 503 past MaxClients
// requests in progress, and its client, for the bounds of one client, is
// Options.ClientKey's.
//
// A handler made with mcp.NewStreamableHTTPHandler from MCP() is bounded
// by MaxClients too, but has no idle timeout unless its options set one.
func (s *Server) HTTPHandler() http.Handler {
	opts := &mcp.StreamableHTTPOptions{}
	if s.opts.IdleTimeout > 0 {
		opts.SessionTimeout = s.opts.IdleTimeout
	}
	if s.stored != nil {
		// Sessions are in the store, reached by their IDs: no state is
		// kept between requests, and any replica answers any of them.
		opts = &mcp.StreamableHTTPOptions{Stateless: true}
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, opts)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Mcp-Session-Id")
		switch {
		case id != "" && s.clients.wasEvicted(id):
			writeError(w, http.StatusNotFound, codeSessionEnded, errEvicted.Error())
			return
		case (id == "" || s.stored != nil) && s.clients.full(s.ownsSessions):
			// A new client (or, stateless, any request) that would be
			// refused: say so before the SDK makes its MCP session.
			w.Header().Set("Retry-After", retryAfter)
			writeError(w, http.StatusServiceUnavailable, codeServerFull, s.clients.fullError().Error())
			return
		}
		if s.stored != nil {
			r = r.WithContext(context.WithValue(r.Context(), clientKey{}, s.requestClient(r)))
		}
		h.ServeHTTP(w, r)
	})
}

// writeError answers an HTTP request with a JSON-RPC error.
func writeError(w http.ResponseWriter, status int, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": code, "message": message}})
}

// codeServerFull is the JSON-RPC error code of a new client refused
// because the server holds MaxClients MCP sessions, none of which can be
// evicted (an implementation-defined server error).
const codeServerFull = -32002

// codeSessionEnded is the JSON-RPC error code of a request of an MCP
// session that ended, as other MCP servers answer it ("Session not found").
const codeSessionEnded = -32001
