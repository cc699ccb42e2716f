package main

import (
	"bufio"
	"context"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"
	"github.com/fumehood/fumehood/sessionstore/natsstore/natstest"
)

// mcpHTTPReplica starts `fumehood mcp --http 127.0.0.1:0 ARGS` as a
// subprocess and returns its URL and process.
func mcpHTTPReplica(t *testing.T, args ...string) (*url.URL, *os.Process) {
	t.Helper()
	sandboxtest.Built(t)
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
			return u, cmd.Process
		}
	}
	t.Fatalf("the replica did not say where it serves: %v", lines.Err())
	return nil, nil
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

			a, _ := mcpHTTPReplica(t, "--store", store)
			b, _ := mcpHTTPReplica(t, "--store", store)
			backends := []*url.URL{a, b}
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

// TestMCPStoreReplicaKilled: a replica killed (SIGKILL) mid-call loses
// that call only: the next call, on another replica, waits for the
// lease to expire (--lease-ttl) and sees the last committed state.
func TestMCPStoreReplicaKilled(t *testing.T) {
	store, vol := t.TempDir(), t.TempDir()
	args := []string{"--store", store, "--lease-ttl", "1s", "--volume", vol + ":/state", "--timeout", "30m"}
	a, proc := mcpHTTPReplica(t, args...)
	b, _ := mcpHTTPReplica(t, args...)
	dial := func(u *url.URL) *mcp.ClientSession {
		client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
		cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: u.String()}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	ca, cb := dial(a), dial(b)
	var ref struct {
		SessionID string `json:"session_id"`
	}
	res := call(t, ca, "session_create", nil, &ref)
	require.False(t, res.IsError, text(res))
	id := ref.SessionID
	sessionRun(t, ca, id, "x = 41")
	go ca.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_run", Arguments: map[string]any{"session_id": id,
		"code": "x = 99\nopen('/state/started', 'w').close()\nimport time\ntime.sleep(600)"}})
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(vol, "started"))
		return err == nil
	}, time.Minute, 10*time.Millisecond, "the call is running on A")
	require.NoError(t, proc.Kill())
	assert.Equal(t, "value: 41\n", sessionRun(t, cb, id, "x"))
	assert.Equal(t, "value: 42\n", sessionRun(t, cb, id, "x += 1; x"))
}
