package mcpserver

import (
	"net/http"
	"testing"

	"github.com/fumehood/fumehood/sandbox"
)

// OnRun sets a hook called, with the number of runs executing, each time
// a run starts executing.
func (s *Server) OnRun(f func(running int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRun = f
}

// OpenSessions returns the number of sessions open or being opened.
func (s *Server) OpenSessions() int { return s.live.Len() }

// Config returns the limits of a call that asks for timeout_ms and fuel.
func (s *Server) Config(timeoutMS, fuel int64) (*sandbox.RunOptions, error) {
	return s.config(callLimits{TimeoutMS: timeoutMS, Fuel: fuel})
}

// InitializeHTTP sends an initialize request of a new client to the
// streamable HTTP server at url.
func InitializeHTTP(t *testing.T, client *http.Client, url string) *http.Response {
	return initializeRaw(t, client, url)
}
