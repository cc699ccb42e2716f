package main

import (
	"bufio"
	"context"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sessionstore/natsstore/natstest"
)

// mcpHTTPReplica starts `fumehood mcp --http 127.0.0.1:0 ARGS` as a
// subprocess and returns its URL.
func mcpHTTPReplica(t *testing.T, args ...string) *url.URL {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, append([]string{"mcp", "--http", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "FUMEHOOD_TEST_MAIN=1")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		if _, rest, ok := strings.Cut(lines.Text(), "streamable HTTP at "); ok {
			u, err := url.Parse(strings.TrimSuffix(strings.Fields(rest)[0], ","))
			require.NoError(t, err)
			go func() {
				for lines.Scan() {
				}
			}()
			return u
		}
	}
	t.Fatalf("the replica did not say where it serves: %v", lines.Err())
	return nil
}

// sessionRun runs code in a session, which must succeed, and returns the
// text of its result.
func sessionRun(t *testing.T, cs *mcp.ClientSession, id, code string) string {
	t.Helper()
	res := call(t, cs, "session_run", map[string]any{"session_id": id, "code": code}, nil)
	require.False(t, res.IsError, text(res))
	return text(res)
}

// TestMCPStore: `fumehood mcp --store URL` keeps sessions in the store
// (a directory, NATS), with the key in $FUMEHOOD_STORE_KEY: a session made
// over stdio by one process runs in the next; two processes serving HTTP
// behind one address that alternates between them (a load balancer
// without affinity) serve one client's session, x += 1 twenty times
// across both counting 20; a session closed is gone on both.
func TestMCPStore(t *testing.T) {
	needSessions(t)
	t.Setenv(storeKeyEnv, "the operator's key, 32 bytes....")
	for name, store := range map[string]string{"dir": t.TempDir(), "nats": natstest.Run(t).URL()} {
		t.Run(name, func(t *testing.T) {
			first := mcpClient(t, "--store", store)
			var ref struct {
				SessionID string `json:"session_id"`
			}
			res := call(t, first, "session_create", nil, &ref)
			require.False(t, res.IsError, text(res))
			id := ref.SessionID
			sessionRun(t, first, id, "x = 41")
			first.Close()
			second := mcpClient(t, "--store", store)
			assert.Equal(t, "value: 42\n", sessionRun(t, second, id, "x + 1"))
			second.Close()

			backends := []*url.URL{mcpHTTPReplica(t, "--store", store), mcpHTTPReplica(t, "--store", store)}
			var next atomic.Int64
			lb := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
				r.SetURL(backends[next.Add(1)%2])
			}})
			t.Cleanup(lb.Close)
			client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
			cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: lb.URL}, nil)
			require.NoError(t, err)
			defer cs.Close()
			sessionRun(t, cs, id, "x = 0")
			for range 20 {
				sessionRun(t, cs, id, "x += 1")
			}
			assert.Equal(t, "value: 20\n", sessionRun(t, cs, id, "x"))
			res = call(t, cs, "session_close", map[string]any{"session_id": id}, nil)
			require.False(t, res.IsError, text(res))
			for range 2 { // one call on each replica
				res = call(t, cs, "session_run", map[string]any{"session_id": id, "code": "x"}, nil)
				assert.True(t, res.IsError)
				assert.Contains(t, text(res), "no session")
			}
		})
	}
	code, _, errs := fumehood(t, "", "mcp", "--store", t.TempDir(), "--snapshot-dir", t.TempDir())
	assert.Equal(t, exitUsage, code, errs)
	code, _, errs = fumehood(t, "", "mcp", "--store", "redis://localhost")
	assert.Equal(t, exitUsage, code, errs)
}
