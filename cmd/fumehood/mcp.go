package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/fumehood/fumehood/internal/cache"
	"github.com/fumehood/fumehood/mcpserver"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sessionstore"
)

// cmdMCP serves the sandbox to MCP clients over stdio, or streamable HTTP
// with --http.
func cmdMCP(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: fumehood mcp [flags]\n\nServes the tools run_python, session_create, session_run, session_files,\n"+
			"session_close (and session_snapshot, session_restore with --snapshot-dir)\nover stdio, or streamable HTTP with --http.\n\n"+
			"A call may lower --timeout and --fuel, never raise them. --max-sessions, --max-runs\n"+
			"and --memory-budget bound all clients together; over HTTP each client sees only\n"+
			"its own sessions and snapshots, --max-clients bounds the clients held, and the\n"+
			"-per-client flags what one client may hold, so that none starves the others. --mount\n"+
			"and --volume directories are in every sandbox and session, shared by all of them\n"+
			"(a read-write one within its quota, counted per sandbox).\n\n"+
			"With --store, sessions are kept in the store (key: $"+storeKeyEnv+") and any server\n"+
			"sharing it serves any of them: over HTTP, several replicas behind one address.\n"+
			"A session ID is then the only proof of ownership: keep it secret.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	timeout := fs.Duration("timeout", sandbox.DefaultTimeout, "wall-time limit of a run (a call may ask for less)")
	fuel := fs.Int64("fuel", 0, "fuel budget of a run; 0 means the default (a call may ask for less)")
	memory := fs.String("memory", "", "memory limit of a sandbox or session, such as 64MiB (default 256MiB)")
	maxOutput := fs.String("max-output", "", "bytes kept of each text of a result: stdout, stderr, value, exception, file read (default 1MiB)")
	snapshotDir := fs.String("snapshot-dir", "", "directory of session snapshots; enables session_snapshot and session_restore")
	store := fs.String("store", "", "keep sessions in this store, shared by every replica: a directory, file:///DIR or nats://HOST:PORT (key: $"+storeKeyEnv+"); not with --snapshot-dir")
	leaseTTL := fs.Duration("lease-ttl", sessionstore.DefaultLeaseTTL, "with --store, how long a call holds its session in the store unrenewed: a replica that dies mid-call holds it that long")
	maxSessions := fs.Int("max-sessions", 16, "sessions open at once, over all clients, at most")
	maxRuns := fs.Int("max-runs", 0, "runs executing at once, over all clients; a call past it waits (default GOMAXPROCS, at least 2)")
	budget := fs.String("memory-budget", "", "host memory of the server's guests: each open session and each run_python in progress holds twice --memory and twice the 128 MiB root quota of it (default (--max-sessions + --max-runs) times that)")
	idle := fs.Duration("idle-timeout", mcpserver.DefaultIdleTimeout, "with --http, end a client's MCP session, and close its sessions, after this long without a request; 0 never")
	maxClients := fs.Int("max-clients", mcpserver.DefaultMaxClients, "with --http, MCP sessions (clients) held at once; past it a new client ends the least recently used idle one that has no sessions, and is refused (503) if there is none")
	perClient := fs.Int("max-sessions-per-client", mcpserver.DefaultMaxSessionsPerClient, "sessions one client holds open at once (over stdio, its one client: --max-sessions unless set)")
	storedPerClient := fs.Int("max-stored-sessions-per-client", mcpserver.DefaultMaxStoredSessionsPerClient, "with --store, sessions one client created through this server that are still in the store (over HTTP a client is its IP address)")
	maxWaiting := fs.Int("max-waiting-runs", mcpserver.DefaultMaxWaitingRuns, "calls waiting for a run slot, over all clients; past it a call is refused at once, and each waits at most its run's timeout")
	waitingPerClient := fs.Int("max-waiting-runs-per-client", mcpserver.DefaultMaxWaitingRunsPerClient, "calls of one client waiting for a run slot (over stdio, its one client: --max-waiting-runs unless set)")
	addr := fs.String("http", "", "serve streamable HTTP on this address (such as 127.0.0.1:8080) instead of stdio; no authentication: keep it on loopback")
	cacheDir := fs.String("cache-dir", "", "cache directory (default $"+cache.DirEnv+" or the user cache directory)")
	with := withFlag(fs)
	var network networkFlags
	network.register(fs)
	var mounts mountFlags
	mounts.register(fs)
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{"mcp takes no arguments"}
	}
	opts := &mcpserver.Options{Limits: sandbox.Limits{Timeout: *timeout, Fuel: *fuel}, Network: network.policy(), Mounts: mounts,
		SnapshotDir: *snapshotDir, MaxSessions: *maxSessions, MaxRuns: *maxRuns, MaxClients: *maxClients, IdleTimeout: *idle,
		MaxSessionsPerClient: *perClient, MaxStoredSessionsPerClient: *storedPerClient,
		MaxWaitingRuns: *maxWaiting, MaxWaitingRunsPerClient: *waitingPerClient}
	if *addr == "" {
		// Over stdio there is one client: it has nobody to leave room for.
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["max-sessions-per-client"] {
			opts.MaxSessionsPerClient = *maxSessions
		}
		if !set["max-waiting-runs-per-client"] {
			opts.MaxWaitingRunsPerClient = *maxWaiting
		}
	}
	if *timeout == 0 {
		opts.Limits.Timeout = -1
	}
	if *idle == 0 {
		opts.IdleTimeout = -1
	}
	if *leaseTTL <= 0 {
		return &usageError{"--lease-ttl must be positive"}
	}
	if *fuel < 0 || *maxSessions <= 0 || *maxRuns < 0 || *idle < 0 || *maxClients <= 0 {
		return &usageError{"--fuel, --max-runs and --idle-timeout must not be negative and --max-sessions and --max-clients must be positive"}
	}
	if *perClient <= 0 || *storedPerClient <= 0 || *maxWaiting <= 0 || *waitingPerClient <= 0 {
		return &usageError{"--max-sessions-per-client, --max-stored-sessions-per-client, --max-waiting-runs and --max-waiting-runs-per-client must be positive"}
	}
	if *memory != "" {
		n, err := parseSize(*memory)
		if err != nil {
			return &usageError{err.Error()}
		}
		opts.Limits.Memory = n
	}
	if *maxOutput != "" {
		n, err := parseSize(*maxOutput)
		if err != nil || n <= 0 || n > math.MaxInt32 {
			return &usageError{fmt.Sprintf("invalid --max-output %q", *maxOutput)}
		}
		opts.Limits.MaxOutput = int(n)
	}
	if *budget != "" {
		n, err := parseSize(*budget)
		if err != nil || n <= 0 {
			return &usageError{fmt.Sprintf("invalid --memory-budget %q", *budget)}
		}
		opts.MemoryBudget = n
	}
	if *store != "" {
		if *snapshotDir != "" {
			return &usageError{"--store keeps every session across restarts already: drop --snapshot-dir"}
		}
		st, err := openStore(ctx, *store)
		if err != nil {
			return err
		}
		defer st.Close()
		opts.Store, opts.LeaseTTL = st, *leaseTTL
	}
	c := common{cacheDir: cacheDir, with: with}
	var m *metrics
	if *addr != "" {
		m = newMetrics()
		c.onRun = m.observe
	}
	py, err := c.compile(ctx)
	if err != nil {
		return err
	}
	defer py.Close()
	srv, err := mcpserver.New(py, opts)
	if err != nil {
		return &usageError{err.Error()}
	}
	defer srv.Close()

	if *addr == "" {
		// A malformed line is answered and skipped, not the end of the
		// connection and of every session.
		err := srv.MCP().Run(ctx, &mcpserver.IOTransport{Reader: stdin, Writer: stdout})
		if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "fumehood: MCP over streamable HTTP at http://%s/, Prometheus metrics at http://%s/metrics\n", ln.Addr(), ln.Addr())
	// Each client has its own MCP session (Mcp-Session-Id), which owns its
	// sessions and snapshots; when it ends (DELETE, idle past
	// --idle-timeout, or evicted past --max-clients) its sessions are
	// closed. With --store, no MCP session is kept (stateless HTTP): the
	// sessions are in the store, and any replica serves any request.
	m.watch(srv)
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.handler())
	mux.Handle("/", srv.HTTPHandler())
	// A client that is slow to send its headers holds a connection for at
	// most ReadHeaderTimeout.
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
