package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// clients bounds the MCP sessions (the SDK's ServerSessions) a server
// holds: at most Options.MaxClients, whatever the transport. A session
// counts from its first request that makes it last (initialize, or any
// request of the sessionless protocol, which carries its initialization),
// until it ends. A session past the bound evicts the least recently used
// idle one, preferring one that owns no sandbox session; when every
// session has a request in progress, it is refused.
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
			if victim = c.victimLocked(s.ownerSet()); victim == nil {
				c.mu.Unlock()
				go ss.Close() // one initialized by the sessionless protocol would last
				return nil, fmt.Errorf("this server holds %d MCP sessions, its most, and each has a request in progress: try again later", c.max)
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

// victimLocked chooses the session to evict and marks it evicted: the
// least recently used one without a request in progress, among those that
// own no sandbox session if there are any (at most MaxSessions sessions
// own one, so with more clients than that a stream of new clients never
// closes another's sandbox sessions while one of them is idle), or nil.
func (c *clients) victimLocked(owners map[*mcp.ServerSession]bool) *mcp.ServerSession {
	var best *mcp.ServerSession
	var bestCl *client
	for ss, cl := range c.live {
		if cl.evicted || cl.busy > 0 {
			continue
		}
		if bestCl == nil || owners[best] && !owners[ss] || owners[best] == owners[ss] && cl.used < bestCl.used {
			best, bestCl = ss, cl
		}
	}
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

// gone forgets a session that ended.
// count returns how many MCP sessions are held.
func (c *clients) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

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

// ownerSet returns the MCP sessions that own a sandbox session.
func (s *Server) ownerSet() map[*mcp.ServerSession]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	owners := make(map[*mcp.ServerSession]bool, len(s.owners))
	for o := range s.owners {
		owners[o] = true
	}
	return owners
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
// used idle one (its next request is answered 404 Not Found, with a
// JSON-RPC error saying so, as for any MCP session that ended, so that
// the client initializes anew).
//
// With Options.Store the handler is stateless (the SDK's
// StreamableHTTPOptions.Stateless): it issues no Mcp-Session-Id and keeps
// nothing between requests, so that any replica behind one address
// answers any request; sessions are reached by their IDs, and neither
// IdleTimeout nor eviction ends them (the store's TTL does).
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
		if id := r.Header.Get("Mcp-Session-Id"); id != "" && s.clients.wasEvicted(id) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": nil,
				"error": map[string]any{"code": codeSessionEnded, "message": errEvicted.Error()}})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// codeSessionEnded is the JSON-RPC error code of a request of an MCP
// session that ended, as other MCP servers answer it ("Session not found").
const codeSessionEnded = -32001
