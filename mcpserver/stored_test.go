package mcpserver_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/mcpserver"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
	"github.com/fumehood/fumehood/sessionstore"
	_ "github.com/fumehood/fumehood/sessionstore/natsstore" // nats:// URLs
	"github.com/fumehood/fumehood/sessionstore/natsstore/natstest"
)

// storeKey is the replicas' operator key.
var storeKey = []byte("mcpserver replicas key, 32 bytes")

// storeURLs are the stores the replica tests share: a directory and a
// real NATS server in this process.
func storeURLs(t *testing.T) map[string]string {
	return map[string]string{"dir": t.TempDir(), "nats": natstest.Run(t).URL()}
}

// replica is a server on its own connection to the store at url.
func replica(t testing.TB, url string, o *mcpserver.Options) *mcpserver.Server {
	t.Helper()
	st, err := sessionstore.Open(context.Background(), url, &sessionstore.Options{Key: storeKey})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	var opts mcpserver.Options
	if o != nil {
		opts = *o
	}
	opts.Store = st
	srv, err := mcpserver.New(sandboxtest.Python(t), &opts)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv
}

// runIn runs code in a session, which must succeed, and returns the text.
func runIn(t *testing.T, cs *mcp.ClientSession, id, code string) string {
	t.Helper()
	res := call(t, cs, "session_run", map[string]any{"session_id": id, "code": code}, nil)
	require.False(t, res.IsError, text(res))
	return text(res)
}

// TestStoredReplicas: two servers sharing a store (a directory, NATS),
// each with its own connection to it and its own client, serve the same
// sessions: one created on A runs on B; 20 calls of x += 1 alternating
// between them count 20; a file written on one is read on the other; an
// ID that was not issued (another client's, guessed) reaches nothing; a
// session closed on B is gone on A.
func TestStoredReplicas(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			a, b := replica(t, url, nil), replica(t, url, nil)
			ca, cb := connect(t, a), connect(t, b)
			id := create(t, ca)
			runIn(t, ca, id, "x = 41")
			assert.Equal(t, "value: 42\n", runIn(t, cb, id, "x + 1"))

			runIn(t, cb, id, "x = 0")
			for i := range 20 {
				cs := ca
				if i%2 == 1 {
					cs = cb
				}
				runIn(t, cs, id, "x += 1")
			}
			assert.Equal(t, "value: 20\n", runIn(t, ca, id, "x"))

			res := call(t, ca, "session_files", map[string]any{"session_id": id, "op": "write", "path": "/work/a.txt", "content": "from A"}, nil)
			require.False(t, res.IsError, text(res))
			res = call(t, cb, "session_files", map[string]any{"session_id": id, "op": "read", "path": "/work/a.txt"}, nil)
			require.False(t, res.IsError, text(res))
			assert.Equal(t, "from A", text(res))
			assert.Equal(t, "value: 'from A'\n", runIn(t, cb, id, "open('/work/a.txt').read()"))

			// Another client's session, or a guess: 128 random bits; and
			// strings that are no ID at all.
			var guess [16]byte
			rand.Read(guess[:])
			for _, other := range []string{hex.EncodeToString(guess[:]), "", "../" + id, strings.ToUpper(id), id + "0", "mcp-" + id} {
				for tool, args := range map[string]map[string]any{
					"session_run":   {"session_id": other, "code": "x"},
					"session_files": {"session_id": other, "op": "list", "path": "/work"},
					"session_close": {"session_id": other},
				} {
					res := call(t, cb, tool, args, nil)
					assert.True(t, res.IsError, "%s %q", tool, other)
					assert.Contains(t, text(res), "no session", "%s %q", tool, other)
				}
			}

			res = call(t, cb, "session_close", map[string]any{"session_id": id}, nil)
			require.False(t, res.IsError, text(res))
			res = call(t, ca, "session_run", map[string]any{"session_id": id, "code": "x"}, nil)
			assert.True(t, res.IsError)
			assert.Contains(t, text(res), "no session")
			assert.Zero(t, a.Stats().Sessions, "A's live session of the closed session was closed")
		})
	}
}

// TestStoredNameHidesID: the store keys a session by the SHA-256 of its
// ID, never the ID itself, so that a reader of the store (shared
// infrastructure) cannot call another client's session.
func TestStoredNameHidesID(t *testing.T) {
	dir := t.TempDir()
	cs := connect(t, replica(t, dir, nil))
	id := create(t, cs)
	runIn(t, cs, id, "secret = 1")
	heads, err := os.ReadDir(filepath.Join(dir, "heads"))
	require.NoError(t, err)
	require.Len(t, heads, 1)
	assert.True(t, strings.HasPrefix(heads[0].Name(), "mcp-"), heads[0].Name())
	assert.NotContains(t, heads[0].Name(), id)
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		require.NoError(t, err)
		assert.NotContains(t, path, id)
		if !d.IsDir() {
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.NotContains(t, string(data), id, path)
		}
		return nil
	})
	require.NoError(t, err)
}

// TestStoredReplicasHTTP: two replicas serving streamable HTTP behind one
// address, which sends each request to the next replica in turn (as a
// load balancer without affinity does), serve one client of the SDK: its
// session, created on one replica, runs on both. Without a store the
// second request would carry an Mcp-Session-Id the other replica never
// issued, and be answered 404.
func TestStoredReplicasHTTP(t *testing.T) {
	dir := t.TempDir()
	var backends []*url.URL
	for range 2 {
		hs := httptest.NewServer(replica(t, dir, nil).HTTPHandler())
		t.Cleanup(hs.Close)
		u, err := url.Parse(hs.URL)
		require.NoError(t, err)
		backends = append(backends, u)
	}
	var next, served atomic.Int64
	lb := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(backends[next.Add(1)%2])
		served.Add(1)
	}})
	t.Cleanup(lb.Close)

	cs := dialHTTP(t, lb.URL)
	id := create(t, cs)
	runIn(t, cs, id, "x = 41")
	assert.Equal(t, "value: 42\n", runIn(t, cs, id, "x + 1"))
	for range 4 {
		runIn(t, cs, id, "x += 1")
	}
	assert.Equal(t, "value: 45\n", runIn(t, cs, id, "x"))
	assert.GreaterOrEqual(t, served.Load(), int64(8), "requests went to both replicas")

	// No MCP session is kept: no Mcp-Session-Id is issued.
	resp, err := http.Post(backends[0].String(), "application/json", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Empty(t, resp.Header.Get("Mcp-Session-Id"))
}

// TestStoredBounds: with a store, MaxSessions bounds the sessions kept
// live in the process, not those in the store: a third session past
// MaxSessions 2 is created, the least recently used live one is closed
// and resumed from the store on its next call. SnapshotDir with a store
// is refused.
func TestStoredBounds(t *testing.T) {
	dir := t.TempDir()
	srv := replica(t, dir, &mcpserver.Options{MaxSessions: 2})
	cs := connect(t, srv)
	var ids []string
	for i := range 3 {
		id := create(t, cs)
		runIn(t, cs, id, "x = "+string(rune('0'+i)))
		ids = append(ids, id)
	}
	assert.LessOrEqual(t, srv.Stats().Sessions, 2)
	for i, id := range ids {
		assert.Equal(t, "value: "+string(rune('0'+i))+"\n", runIn(t, cs, id, "x"))
	}

	st, err := sessionstore.Open(context.Background(), dir, nil)
	require.NoError(t, err)
	defer st.Close()
	_, err = mcpserver.New(sandboxtest.Python(t), &mcpserver.Options{Store: st, SnapshotDir: t.TempDir()})
	assert.ErrorContains(t, err, "SnapshotDir")
}

// TestStoredReplicasRace: two clients call one session at once, one on
// each replica: every call acknowledged is counted exactly once, and one
// that is not (busy) counted not at all.
func TestStoredReplicasRace(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			ca, cb := connect(t, replica(t, url, nil)), connect(t, replica(t, url, nil))
			id := create(t, ca)
			runIn(t, ca, id, "x = 0")
			const each = 10
			var acked atomic.Int64
			var wg sync.WaitGroup
			for _, cs := range []*mcp.ClientSession{ca, cb} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_run",
							Arguments: map[string]any{"session_id": id, "code": "x += 1"}})
						if err == nil && !res.IsError {
							acked.Add(1)
						} else if err == nil {
							assert.Contains(t, text(res), "busy")
						}
					}
				}()
			}
			wg.Wait()
			assert.Positive(t, acked.Load())
			assert.Equal(t, fmt.Sprintf("value: %d\n", acked.Load()), runIn(t, cb, id, "x"))
		})
	}
}

// BenchmarkSessionRun: a session_run of x += 1 through the MCP server (in
// memory, over the SDK's in-memory transports): without a store; with a
// store on one replica (the live session's fast path); and alternating
// between two replicas (each call resumes the other's commit).
func BenchmarkSessionRun(b *testing.B) {
	py := sandboxtest.Python(b)
	bench := func(b *testing.B, clients []*mcp.ClientSession) {
		id := create(b, clients[0])
		b.ResetTimer()
		for i := range b.N {
			res, err := clients[i%len(clients)].CallTool(context.Background(), &mcp.CallToolParams{Name: "session_run",
				Arguments: map[string]any{"session_id": id, "code": "x = globals().get('x', 0) + 1"}})
			if err != nil || res.IsError {
				b.Fatal(err, res)
			}
		}
	}
	b.Run("memory", func(b *testing.B) {
		srv, err := mcpserver.New(py, nil)
		require.NoError(b, err)
		defer srv.Close()
		bench(b, []*mcp.ClientSession{connect(b, srv)})
	})
	for name, url := range map[string]string{"dir": b.TempDir(), "nats": natstest.Run(b).URL()} {
		var clients []*mcp.ClientSession
		for range 2 {
			clients = append(clients, connect(b, replica(b, url, nil)))
		}
		b.Run(name+"/one-replica", func(b *testing.B) { bench(b, clients[:1]) })
		b.Run(name+"/two-replicas", func(b *testing.B) { bench(b, clients) })
	}
}
