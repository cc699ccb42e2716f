// Package mcpserver serves fumehood's sandboxes to MCP clients (the Model
// Context Protocol): tools that run Python, in one-shot sandboxes or in
// sessions that keep their state, with the limits and network policy the
// server was given. The command `fumehood mcp` runs it over stdio or HTTP;
// a Go program can serve it on any transport of the MCP Go SDK:
//
//	py, _ := sandbox.CompilePython(ctx, nil)
//	srv, _ := mcpserver.New(py, &mcpserver.Options{SnapshotDir: dir})
//	defer srv.Close()
//	srv.MCP().Run(ctx, &mcpserver.IOTransport{Reader: os.Stdin, Writer: os.Stdout})
//
// A Python exception, a limit hit or a bad argument is a tool result with
// isError set, which the model reads and can act on, never a protocol error.
//
// Clients are untrusted. A call only lowers the server's limits; runs,
// sessions and guest memory are bounded over all clients together
// (Options.MaxRuns, MaxSessions, MemoryBudget), and so are the MCP
// sessions held (MaxClients); every text of a result is cut to
// Options.MaxOutput. No client can end or starve another: one holds at
// most MaxSessionsPerClient sessions (4 by default; with a Store, it has
// at most MaxStoredSessionsPerClient, 64, in the store), at most
// MaxWaitingRuns calls wait for a run slot (64, MaxWaitingRunsPerClient,
// 4, of one client; past them a call is refused at once) and each waits
// at most its run's timeout; a client with a call in progress or waiting,
// or with sessions, is never evicted to make room past MaxClients, and
// when every client is such a one a new client is refused (HTTPHandler:
// 503 Service Unavailable with Retry-After). A session belongs to the MCP
// session (the SDK's ServerSession) that made it: other clients cannot
// see it, and it is closed when its MCP session ends. Serve streamable HTTP with
// Server.HTTPHandler, whose MCP sessions end after Options.IdleTimeout
// without a request, so that those of clients that vanish end too; in the
// SDK's stateless HTTP mode every request is an MCP session of its own,
// so a session ends with the call that made it.
//
// With Options.Store the sessions live in a store instead (a directory,
// NATS JetStream: package sessionstore), so that several servers sharing
// it, behind one address, serve the same sessions, and a session outlives
// the process that made it. Its ID is then a capability, 128 random bits
// that reach the session from any client and any replica, and
// HTTPHandler serves stateless HTTP, keeping nothing between requests.
package mcpserver

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fumehood/fumehood/internal/runtool"
	"github.com/fumehood/fumehood/internal/sessionpool"
	"github.com/fumehood/fumehood/internal/textcut"
	"github.com/fumehood/fumehood/netpolicy"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sessionstore"
)

// Options configure a server. The zero value serves the sandbox package's
// defaults with no network and no snapshots.
type Options struct {
	// Limits bound every run and session; zero fields mean the sandbox
	// package's defaults (DefaultTimeout, DefaultFuel, DefaultMemoryLimit,
	// DefaultMaxOutput) and a negative Timeout means no deadline beyond
	// the call's. A tool call may ask for a lower timeout or fuel, never a
	// higher one (sandbox.Limits.Lower). MaxOutput also bounds every text
	// field of a result (stdout, stderr, the value, the exception's type,
	// message and traceback, a file read) in bytes.
	Limits sandbox.Limits
	// Network is the policy of every sandbox and session; nil is no network.
	Network *netpolicy.Policy
	// Mounts are host directories mounted in every sandbox and session the
	// server makes (run_python, session_create, session_restore), as
	// sandbox.Config.Mounts: read-only ones as they are, read-write
	// ones shared by all of them, each within its Quota, which each
	// sandbox counts from what the directory holds when it starts (so the
	// sandboxes open at once may together add that many quotas). The
	// instructions name them.
	Mounts []sandbox.Mount
	// SnapshotDir is where session_snapshot writes and session_restore
	// reads snapshots; empty disables both tools. Each MCP session that
	// has an ID (streamable HTTP) has its own subdirectory; a transport
	// without session IDs (stdio) uses the directory itself.
	SnapshotDir string
	// MaxSessions bounds the sessions open at once, over all clients; 0
	// means 16.
	MaxSessions int
	// MaxRuns bounds the runs (run_python and session_run calls) that
	// execute at once, over all clients; 0 means GOMAXPROCS, at least 2. A
	// call past it waits for a run to end, or for its own context to end.
	MaxRuns int
	// MemoryBudget bounds the host memory the server's guests hold: every
	// open session and every run_python in progress holds what one session
	// can hold of it (sandbox.Config.SessionHostMemory: twice Limits.Memory
	// and twice the in-memory root's quota, 1.25 GiB with the defaults). A
	// session_create or session_restore past it is refused, as is a
	// run_python when open sessions hold the budget; a run_python that
	// only other run_python calls are in the way of waits for them. 0
	// means (MaxSessions + MaxRuns) times that, which MaxSessions and
	// MaxRuns reach first: run_python stays possible with every session
	// open.
	MemoryBudget int64
	// MaxClients bounds the MCP sessions (clients, over streamable HTTP:
	// each Mcp-Session-Id) the server holds at once, over every transport;
	// 0 means DefaultMaxClients. An idle one holds about 20 KB of host
	// memory. Past it, a new client evicts the least recently used MCP
	// session that has no request in progress (running or waiting) and
	// owns no session and no snapshot; when there is none, the new client is refused
	// (HTTPHandler answers 503 Service Unavailable with a Retry-After
	// header), and no client's sessions are ever ended to make room.
	MaxClients int
	// MaxSessionsPerClient bounds the sessions one client (MCP session)
	// holds open at once; 0 means DefaultMaxSessionsPerClient. With
	// MaxSessions it keeps one client from taking every session.
	MaxSessionsPerClient int
	// MaxStoredSessionsPerClient bounds, with a Store, the sessions one
	// client has created through this server that are still in the store
	// (neither closed nor expired: at the bound, the store is asked, at
	// most once a second per client); 0 means
	// DefaultMaxStoredSessionsPerClient. Over stateless HTTP a client is
	// what ClientKey returns for its requests.
	MaxStoredSessionsPerClient int
	// MaxWaitingRuns bounds the calls (run_python, session_run) waiting
	// for one of the MaxRuns run slots, over all clients, and
	// MaxWaitingRunsPerClient those of one client; 0 means
	// DefaultMaxWaitingRuns and DefaultMaxWaitingRunsPerClient. A call
	// past either is refused at once; a call waits at most its run's
	// timeout (the call's timeout_ms, else Limits.Timeout), and is then
	// refused. A client's waiting calls count it as busy: it is not
	// evicted while one waits.
	MaxWaitingRuns, MaxWaitingRunsPerClient int
	// ClientKey names the client of a request of HTTPHandler's stateless
	// HTTP (with a Store), where no MCP session outlives a request, for
	// MaxStoredSessionsPerClient and MaxWaitingRunsPerClient. nil means
	// the authenticated user (auth.TokenInfo's UserID) if there is one,
	// else the request's remote IP address, which clients behind one
	// proxy share. Other transports' clients are their MCP sessions.
	ClientKey func(*http.Request) string
	// IdleTimeout ends an MCP session of HTTPHandler after this long
	// without a request, and closes its sessions; 0 means 30 minutes and a
	// negative value never.
	IdleTimeout time.Duration
	// Name and Version identify the server to clients.
	Name, Version string
	// Store, if set, keeps the sessions, so that any server sharing it (a
	// replica behind the same address, a restarted process) serves any
	// of them: every session_run, session_files and session_close takes
	// the session's lease in the store, runs on the session (live here if
	// its state has not moved, else resumed from the store) and commits
	// it (sessionstore.Sessions). A session ID is then a capability: 128
	// random bits, which the store never holds (it keys the session by
	// the ID's SHA-256), and any client that presents it reaches the
	// session; HTTPHandler serves stateless streamable HTTP, so that any
	// replica answers any request. MaxSessions bounds the sessions kept
	// live in this process between calls (with the memory budget), not
	// the sessions in the store, which its TTL expires; IdleTimeout does
	// not apply, and SnapshotDir may not be set (the store keeps every
	// session across restarts already). The server does not close the
	// store.
	Store sessionstore.Store
	// LeaseTTL is how long a call holds its session in the Store without
	// renewing it (sessionstore.SessionsOptions.LeaseTTL); 0 means
	// sessionstore.DefaultLeaseTTL.
	LeaseTTL time.Duration
}

// The defaults of Options.MaxClients, IdleTimeout and the bounds of one
// client and of the calls waiting for a run.
const (
	DefaultMaxClients                 = 256
	DefaultIdleTimeout                = 30 * time.Minute
	DefaultMaxSessionsPerClient       = 4
	DefaultMaxStoredSessionsPerClient = 64
	DefaultMaxWaitingRuns             = 64
	DefaultMaxWaitingRunsPerClient    = 4
)

// Server holds the compiled guest and the open sessions.
type Server struct {
	py           *sandbox.Guest
	opts         Options // with the defaults applied
	mcp          *mcp.Server
	instructions string // runtool.InstructionsFor the guest, network and mounts

	stored *sessionstore.Sessions // with Options.Store; nil without
	kept   int                    // with a Store: the sessions kept live between calls, at most

	runs    chan struct{} // a slot per run that may execute at once
	onRun   func(running int)
	clients *clients // the MCP sessions held

	charge int64 // what a session or a run holds of the memory budget

	// live holds the sessions (without a Store), each owned by the MCP
	// session that made it: at most MaxSessions, open or being opened.
	live *sessionpool.Pool[*mcp.ServerSession]

	mu      sync.Mutex
	closed  bool
	owners  map[*mcp.ServerSession]bool // the MCP sessions watched for their end
	nTemp   int                         // run_python calls holding memory
	running int                         // runs executing
	freed   chan struct{}               // closed when memory is released

	// What each client holds (clients.go): the IDs of its open sessions
	// (without a Store), the sessions it created in the Store, its calls
	// waiting for a run slot.
	owned       map[*mcp.ServerSession]map[string]struct{}
	snapshotted map[*mcp.ServerSession]bool // MCP sessions with an ID that saved a snapshot
	created     map[any]*storedBy
	waiting     int
	waitingBy   map[any]int
}

// New returns a server that runs code on py, which must be the Python
// guest (sandbox.CompilePython). It probes the
// guest once per process (runtool.Probe) for its instructions.
func New(py *sandbox.Guest, opts *Options) (*Server, error) {
	if !py.IsPython() {
		return nil, sandbox.ErrNotPython
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	charge, err := o.resolve()
	if err != nil {
		return nil, err
	}
	info, err := runtool.Probe(context.Background(), py)
	if err != nil {
		return nil, err
	}
	s := newServer(o, runtool.InstructionsFor(info, o.Network, o.Mounts))
	s.py, s.charge = py, charge
	if o.Store != nil {
		s.startStore()
	}
	if err := s.addTools(); err != nil {
		return nil, err
	}
	return s, nil
}

// newServer returns a server with no tools, its options resolved.
func newServer(o Options, instructions string) *Server {
	s := &Server{opts: o, owners: map[*mcp.ServerSession]bool{},
		owned: map[*mcp.ServerSession]map[string]struct{}{}, snapshotted: map[*mcp.ServerSession]bool{},
		created: map[any]*storedBy{}, waitingBy: map[any]int{},
		runs: make(chan struct{}, o.MaxRuns), freed: make(chan struct{}),
		instructions: instructions, clients: newClients(o.MaxClients)}
	s.live = sessionpool.New[*mcp.ServerSession](sessionpool.Options{Max: o.MaxSessions, OnFree: s.freeMemory})
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: o.Name, Version: o.Version}, &mcp.ServerOptions{
		Instructions: s.instructions + " " + toolsNote,
	})
	s.mcp.AddReceivingMiddleware(s.middleware)
	return s
}

// Stats is what a Server holds at one moment, for an operator's metrics
// (fumehood mcp --http serves them at /metrics).
type Stats struct {
	// Sessions are the sessions open (or being opened), of all clients;
	// Hibernated those of them between calls, which hold only the memory
	// pages their code changed. With Options.Store, Sessions are the
	// sessions this process keeps live between calls, and Hibernated is 0.
	Sessions, Hibernated int
	// Runs are the runs executing; TempRuns the run_python calls holding
	// memory (running, or about to); WaitingRuns the calls
	// waiting for a run slot (MaxWaitingRuns bounds them).
	Runs, TempRuns, WaitingRuns int
	// Clients are the MCP sessions held over HTTP (MaxClients bounds them).
	Clients int
	// MemoryHeld is what open sessions and run_python calls hold of
	// MemoryBudget: each what a session can cost the host
	// (sandbox.Config.SessionHostMemory).
	MemoryHeld, MemoryBudget int64
}

// Stats returns what the server holds now.
func (s *Server) Stats() Stats {
	st := Stats{Clients: s.clients.count(), MemoryBudget: s.opts.MemoryBudget}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.Sessions, st.TempRuns, st.Runs, st.WaitingRuns = s.live.Len(), s.nTemp, s.running, s.waiting
	st.Hibernated = s.live.Idle()
	if s.stored != nil {
		st.Sessions = s.stored.Live()
	}
	st.MemoryHeld = int64(st.Sessions+s.nTemp) * s.charge
	return st
}

// toolsNote ends the server's instructions: how its tools differ.
const toolsNote = "run_python is a fresh interpreter each time; " +
	"sessions (session_create, then session_run) keep variables, imports and files from one call to the next."

// resolve applies the defaults and checks the options, and returns what
// a session or a run holds of the memory budget.
func (o *Options) resolve() (int64, error) {
	for _, b := range []struct {
		name string
		n    int
	}{{"MaxSessions", o.MaxSessions}, {"MaxRuns", o.MaxRuns}, {"MaxClients", o.MaxClients},
		{"MaxSessionsPerClient", o.MaxSessionsPerClient}, {"MaxStoredSessionsPerClient", o.MaxStoredSessionsPerClient},
		{"MaxWaitingRuns", o.MaxWaitingRuns}, {"MaxWaitingRunsPerClient", o.MaxWaitingRunsPerClient}} {
		if b.n < 0 || b.n > 1<<20 {
			return 0, fmt.Errorf("mcpserver: %s %d is outside 0 to 2^20", b.name, b.n)
		}
	}
	switch {
	case o.MemoryBudget < 0:
		return 0, fmt.Errorf("mcpserver: negative MemoryBudget %d", o.MemoryBudget)
	case o.Store != nil && o.SnapshotDir != "":
		return 0, errors.New("mcpserver: Store and SnapshotDir: a stored session outlives the server already, and a snapshot name would have no owner across replicas")
	}
	// The defaults, applied as every sandbox and session applies them.
	l, err := o.Limits.Lower(sandbox.Limits{})
	if err != nil {
		return 0, fmt.Errorf("mcpserver: %w", err)
	}
	o.Limits = l
	charge, err := (&sandbox.Config{Limits: l, Mounts: o.Mounts}).SessionHostMemory()
	if err != nil {
		return 0, fmt.Errorf("mcpserver: %w", err)
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = 16
	}
	if o.MaxClients == 0 {
		o.MaxClients = DefaultMaxClients
	}
	o.MaxSessionsPerClient = cmp.Or(o.MaxSessionsPerClient, DefaultMaxSessionsPerClient)
	o.MaxStoredSessionsPerClient = cmp.Or(o.MaxStoredSessionsPerClient, DefaultMaxStoredSessionsPerClient)
	o.MaxWaitingRuns = cmp.Or(o.MaxWaitingRuns, DefaultMaxWaitingRuns)
	o.MaxWaitingRunsPerClient = cmp.Or(o.MaxWaitingRunsPerClient, DefaultMaxWaitingRunsPerClient)
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxRuns == 0 {
		o.MaxRuns = max(2, runtime.GOMAXPROCS(0))
	}
	if o.MemoryBudget == 0 {
		o.MemoryBudget = int64(o.MaxSessions+o.MaxRuns) * charge
	}
	if o.MemoryBudget < charge {
		return 0, fmt.Errorf("mcpserver: MemoryBudget %d is less than what one session holds (%d: twice the memory limit and the root quota)", o.MemoryBudget, charge)
	}
	if o.Name == "" {
		o.Name = "fumehood"
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	return charge, nil
}

// MCP returns the MCP server, to run on a transport.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Close closes every open session; later calls that need a sandbox fail.
func (s *Server) Close() error {
	if s.stored != nil {
		s.stored.Close()
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.live.Close()
	return nil
}

// callLimits are the optional limits of a tool call. The schema's
// descriptions give the server's values (addTools).
type callLimits struct {
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	Fuel      int64 `json:"fuel,omitempty"`
}

// runInput is the input of run_python.
type runInput struct {
	Code        string            `json:"code" jsonschema:"Python source code to run; if it ends in an expression, its value is shown"`
	Files       map[string]string `json:"files,omitempty" jsonschema:"text files to create before the run: absolute guest path (such as /work/data.csv) to its text"`
	BinaryFiles map[string]string `json:"binary_files,omitempty" jsonschema:"binary files to create before the run: absolute guest path to its bytes in standard base64"`
	callLimits
}

// sessionRunInput is the input of session_run.
type sessionRunInput struct {
	SessionID string `json:"session_id" jsonschema:"the session, from session_create or session_restore"`
	Code      string `json:"code" jsonschema:"Python source code to run in the session; if it ends in an expression, its value is shown"`
	callLimits
}

// runOutput is the structured result of run_python and session_run: what
// a program reads about the run. The run's texts (stdout, stderr, the
// value, the exception and its traceback) are in the text content only,
// which a model reads, so that they are sent once.
type runOutput struct {
	ExitCode  int     `json:"exit_code"`
	Exception string  `json:"exception,omitempty" jsonschema:"the type of the exception the code raised (its message and traceback are in the text)"`
	StoppedBy string  `json:"stopped_by,omitempty" jsonschema:"the limit that stopped the run: deadline, fuel, memory, output or stack (the guest ran out of stack)"`
	FuelUsed  int64   `json:"fuel_used" jsonschema:"WebAssembly instructions the run executed"`
	WallMS    float64 `json:"wall_ms"`
	// Truncated names the texts cut at the server's output limit.
	Truncated []string `json:"truncated,omitempty" jsonschema:"the texts cut at the server's output limit (stdout, stderr, value, exception, error); the text says so too"`
}

// sessionRef names a session.
type sessionRef struct {
	SessionID string `json:"session_id" jsonschema:"the session, from session_create or session_restore"`
}

// createInput is the input of session_create.
type createInput struct {
	Env map[string]string `json:"env,omitempty" jsonschema:"the session's environment variables (PYTHONPATH entries are added to sys.path)"`
}

// filesInput is the input of session_files.
type filesInput struct {
	SessionID string `json:"session_id" jsonschema:"the session, from session_create or session_restore"`
	Op        string `json:"op" jsonschema:"read a file, write a file (creating its directories) or list a directory"`
	Path      string `json:"path" jsonschema:"absolute guest path, such as /work/chart.png"`
	Content   string `json:"content,omitempty" jsonschema:"what to write (op write): text, or bytes in standard base64 with encoding base64"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"how content is written (op write): utf-8 text (the default) or base64 bytes"`
}

// filesOutput is the structured result of session_files. A read's content
// is sent once, in the content blocks a model reads: a text file as text,
// a PNG, JPEG, GIF or WebP image as MCP image content, any other binary
// file as its bytes in standard base64 text (Encoding says which).
type filesOutput struct {
	Size      *int64   `json:"size,omitempty" jsonschema:"the file's size in bytes (op read)"`
	Encoding  string   `json:"encoding,omitempty" jsonschema:"how the file's content is sent (op read): utf-8 text, or base64 bytes (as image content for an image)"`
	MediaType string   `json:"media_type,omitempty" jsonschema:"the file's media type, for an image (op read)"`
	Entries   []string `json:"entries,omitempty" jsonschema:"names in the directory; directories end in / (op list)"`
	Truncated bool     `json:"truncated,omitempty" jsonschema:"the content or the list was cut at the server's output limit"`
}

// snapshotInput is the input of session_snapshot.
type snapshotInput struct {
	SessionID string `json:"session_id" jsonschema:"the session to save"`
	Name      string `json:"name" jsonschema:"the snapshot's name: letters, digits, '-', '_' and '.'; a snapshot of that name is replaced"`
}

// restoreInput is the input of session_restore.
type restoreInput struct {
	Name string `json:"name" jsonschema:"the name a snapshot was saved under with session_snapshot"`
}

// snapshotOutput is the result of session_snapshot.
type snapshotOutput struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// The closed sets of the tools' inputs.
var (
	fileOps       = []any{"read", "write", "list"}
	fileEncodings = []any{"utf-8", "base64"}
)

// inputSchema is the schema of In, with the descriptions of the limits
// filled in with the server's values and the closed sets as enums.
func (s *Server) inputSchema(schema *jsonschema.Schema) *jsonschema.Schema {
	p := schema.Properties
	if t := p["timeout_ms"]; t != nil {
		t.Description = "optional: a shorter wall-time limit for this run, in milliseconds"
		if s.opts.Limits.Timeout > 0 {
			t.Description += fmt.Sprintf("; the server's limit, and the default, is %d", s.opts.Limits.Timeout.Milliseconds())
		}
		t.Minimum = jsonschema.Ptr(1.0)
	}
	if f := p["fuel"]; f != nil {
		f.Description = fmt.Sprintf("optional: a smaller CPU budget for this run, in WebAssembly instructions; "+
			"the server's limit, and the default, is %d. For scale: print(1) costs about 2 million, "+
			"sum(range(10**6)) about 2.4 billion; a billion takes about half a second", s.opts.Limits.Fuel)
		f.Minimum = jsonschema.Ptr(1.0)
	}
	if o := p["op"]; o != nil {
		o.Enum = fileOps
	}
	if e := p["encoding"]; e != nil {
		e.Enum = fileEncodings
		e.Default = json.RawMessage(`"utf-8"`)
	}
	return schema
}

// addTool adds a tool whose input schema is In's, as inputSchema words it.
func addTool[In, Out any](s *Server, name, description string, h mcp.ToolHandlerFor[In, Out]) error {
	schema, err := jsonschema.For[In](nil)
	if err != nil {
		return fmt.Errorf("mcpserver: the schema of %s: %w", name, err)
	}
	mcp.AddTool(s.mcp, &mcp.Tool{Name: name, Description: description, InputSchema: s.inputSchema(schema)}, h)
	return nil
}

func (s *Server) addTools() error {
	errs := []error{
		addTool(s, "run_python", "Run Python code in a fresh interpreter; nothing is kept after the call "+
			"(use session_create and session_run for state that lasts). "+runtool.ResultShows+" "+runtool.FilesShown+" "+
			s.instructions, s.runPython),
		addTool(s, "session_create", "Start a Python session whose variables, imports and files last between session_run calls, "+
			"as in a notebook; close it with session_close when done.", s.sessionCreate),
		addTool(s, "session_run", "Run Python code in a session. "+runtool.ResultShows+" "+runtool.FilesShown+" "+
			runtool.Rollback, s.sessionRun),
		addTool(s, "session_files", "Read, write or list files in a session's filesystem. A text file is read as text, "+
			"an image (PNG, JPEG, GIF, WebP) as an image, any other binary file as base64; "+
			"write binary data by sending it in base64 with encoding base64.", s.sessionFiles),
		addTool(s, "session_close", "Close a session and free its memory.", s.sessionClose),
	}
	if s.opts.SnapshotDir != "" {
		errs = append(errs,
			addTool(s, "session_snapshot", "Save a session under a name, to restore later, even after the server restarts.", s.sessionSnapshot),
			addTool(s, "session_restore", "Start a new session from a snapshot saved with session_snapshot; it returns the new session's ID.", s.sessionRestore))
	}
	return errors.Join(errs...)
}

// config returns a run's options: the server's limits, lowered by the
// call's. A call never raises one: an unset or larger value leaves the
// server's, and a negative or out-of-range one is an error. The rule is
// the sandbox's (sandbox.Limits.Lower), which every run applies again.
func (s *Server) config(l callLimits) (*sandbox.RunOptions, error) {
	req, err := runtool.CallLimits(l.TimeoutMS, l.Fuel)
	if err != nil {
		return nil, err
	}
	eff, err := s.opts.Limits.Lower(req)
	if err != nil {
		return nil, err
	}
	if eff.Timeout < 0 {
		// No deadline (--timeout 0): the run asks for none. A run's
		// limits are requests, never negative.
		eff.Timeout = 0
	}
	return &sandbox.RunOptions{Limits: eff}, nil
}

// streamProgress sends a run's output, as the code writes it, to a client
// that asked for progress (a progressToken in the call's _meta): one
// notifications/progress a line (or a batch of lines), the text as its
// message, the count of lines so far as its progress. The notifications of
// a call carry at most MaxOutput bytes of text, then one saying the rest
// is in the result; the result holds the output in any case.
func (s *Server) streamProgress(ctx context.Context, req *mcp.CallToolRequest, cfg *sandbox.RunOptions) {
	if req == nil || req.Session == nil || req.Params == nil {
		return
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return
	}
	p := &progress{ctx: ctx, ss: req.Session, token: token, left: s.opts.Limits.MaxOutput}
	cfg.Stdout, cfg.Stderr = p, p
}

// progress sends what is written to it as progress notifications.
type progress struct {
	ctx   context.Context
	ss    *mcp.ServerSession
	token any
	n     float64 // notifications sent
	left  int     // bytes of text that may still be sent
	done  bool
}

func (p *progress) Write(b []byte) (int, error) {
	if p.done {
		return len(b), nil
	}
	text := string(b)
	if len(text) > p.left {
		text, _ = truncate(text, p.left)
		p.done = true
	}
	p.left -= len(text)
	p.n++
	// A client gone or slow to read does not stop the run: its result
	// still comes (or not) as for any call.
	_ = p.ss.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: p.n, Message: text})
	if p.done {
		p.n++
		_ = p.ss.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: p.n,
			Message: "(more output: it is in the result, cut to the output limit)"})
	}
	return len(b), nil
}

func (s *Server) sessionConfig(env map[string]string) *sandbox.Config {
	return &sandbox.Config{Env: env, Limits: s.opts.Limits, Network: s.opts.Network, Mounts: s.opts.Mounts}
}

// outputDir is where a run's new and changed files are looked for.
const outputDir = "/work"

// maxImage is the largest image a result attaches: one whose base64 fits
// MaxOutput.
func (s *Server) maxImage() int { return max(1, s.opts.Limits.MaxOutput/4*3) }

// result turns a run's outcome into a tool result, formatted for the
// model as codetool formats it (runtool.Result.Text). A Python exception
// or a limit is an error result the model sees; other errors are too,
// with their message. Every
// text is cut to the server's MaxOutput bytes here, whatever the sandbox
// kept, and sent once: the text content holds at most six of them
// (stdout, stderr, value, exception type and message or error,
// traceback unless stderr holds it) and says what was cut; the structured
// content holds none. With w, the text lists the files the run created or
// changed under /work (at most 64), and the first 8 images among them
// whose base64 fits MaxOutput are attached: PNG and JPEG as image content,
// SVG as text.
func (s *Server) result(res *sandbox.Result, err error, w *runtool.Watch) (*mcp.CallToolResult, runOutput, error) {
	var out runOutput
	if res == nil {
		if err == nil {
			err = errors.New("no result")
		}
		return nil, out, err
	}
	r := runtool.FromRun(res, err, s.opts.Limits.MaxOutput)
	if w != nil {
		var ferr error
		if r.Files, ferr = w.Changed(); ferr != nil {
			r.Cut("files")
		}
	}
	out = runOutput{
		ExitCode: res.ExitCode, FuelUsed: res.FuelUsed, WallMS: float64(res.Duration.Microseconds()) / 1000,
		StoppedBy: r.StoppedBy, Truncated: r.Truncated,
	}
	if e := r.Exception; e != nil {
		out.Exception = trunc(e.Type, 200)
	}
	tr := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: r.Text()}}}
	for _, f := range r.Files {
		if f.Data == nil {
			continue
		}
		if f.IsRaster() {
			tr.Content = append(tr.Content, &mcp.ImageContent{Data: f.Data, MIMEType: f.MediaType})
		} else {
			tr.Content = append(tr.Content, &mcp.TextContent{Text: f.Path + " (" + f.MediaType + "):\n" + trunc(string(f.Data), s.opts.Limits.MaxOutput)})
		}
	}
	tr.IsError = r.IsError
	return tr, out, nil
}

// truncate returns text as valid UTF-8 of at most n bytes, cut at a
// character boundary, and whether it cut (textcut.Cut).
func truncate(text string, n int) (string, bool) { return textcut.Cut(text, n) }

// trunc is truncate without the report.
func trunc(text string, n int) string {
	t, _ := truncate(text, n)
	return t
}

// Errors of the server's bounds, in tool results.
var (
	errServerClosed = errors.New("the server is shutting down")
	errMemoryBudget = errors.New("the server's memory budget is taken by open sessions: close one with session_close")
)

// acquireRun takes a run slot for a call of client whose run may take
// timeout (0: no deadline), waiting for one while MaxWaitingRuns and
// MaxWaitingRunsPerClient allow, at most timeout and until ctx is done.
// The slot is held until release is called.
func (s *Server) acquireRun(ctx context.Context, client any, timeout time.Duration) (release func(), err error) {
	select {
	case s.runs <- struct{}{}:
	default:
		if err := s.waitRun(ctx, client, timeout); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	s.running++
	if s.onRun != nil {
		s.onRun(s.running)
	}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.running--
		s.mu.Unlock()
		<-s.runs
	}, nil
}

// reserve takes s.charge of the memory budget for a throw-away run, or
// checks that a session being opened, which s.live counts already (and
// bounds by MaxSessions), has its charge (forSession), checking and taking
// in one step. When only other throw-away runs are in the way it waits for
// them until ctx is done; when open sessions are, it fails at once. Give a
// run's memory back with release; a session's goes back when it leaves
// s.live (freeMemory).
func (s *Server) reserve(ctx context.Context, forSession bool) error {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return errServerClosed
		}
		sessions := s.live.Len() // with forSession, this one included
		if !forSession {
			sessions++ // the run, as a session
		}
		mem := s.charge
		if int64(sessions+s.kept+s.nTemp)*mem <= s.opts.MemoryBudget {
			if !forSession {
				s.nTemp++
			}
			s.mu.Unlock()
			return nil
		}
		if int64(sessions+s.kept)*mem > s.opts.MemoryBudget {
			s.mu.Unlock()
			return errMemoryBudget
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for memory held by other runs: %w", context.Cause(ctx))
		}
	}
}

// release gives back what reserve took for a throw-away run.
func (s *Server) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nTemp--
	s.freedLocked()
}

// freeMemory tells the calls waiting for memory that a session left
// s.live.
func (s *Server) freeMemory() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.freedLocked()
}

func (s *Server) freedLocked() {
	close(s.freed)
	s.freed = make(chan struct{})
}

func (s *Server) runPython(ctx context.Context, req *mcp.CallToolRequest, in runInput) (*mcp.CallToolResult, runOutput, error) {
	cfg, err := s.config(in.callLimits)
	if err != nil {
		return nil, runOutput{}, err
	}
	s.streamProgress(ctx, req, cfg)
	done, err := s.acquireRun(ctx, s.clientOf(ctx, req), cfg.Limits.Timeout)
	if err != nil {
		return nil, runOutput{}, err
	}
	defer done()
	// Waiting for memory that other runs hold is bounded as waiting for a
	// slot is: by the run's timeout.
	wctx := ctx
	if t := cfg.Limits.Timeout; t > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeoutCause(ctx, t, fmt.Errorf("%w: waited %v, this call's timeout, for memory held by other runs: try again later", errRunWait, t))
		defer cancel()
	}
	if err := s.reserve(wctx, false); err != nil {
		return nil, runOutput{}, err
	}
	defer s.release()
	// A throw-away session: a fresh interpreter from the base image that
	// a one-shot run also starts from, reporting the same value.
	ss, err := s.py.NewSession(ctx, s.sessionConfig(nil))
	if err != nil {
		return nil, runOutput{}, err
	}
	defer ss.Close()
	for _, name := range slices.Sorted(maps.Keys(in.Files)) {
		if err := writeFile(ss.Files(), name, []byte(in.Files[name])); err != nil {
			return nil, runOutput{}, err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(in.BinaryFiles)) {
		data, err := decodeBase64(in.BinaryFiles[name])
		if err != nil {
			return nil, runOutput{}, fmt.Errorf("binary_files[%q]: %w", trunc(name, 200), err)
		}
		if err := writeFile(ss.Files(), name, data); err != nil {
			return nil, runOutput{}, err
		}
	}
	w := runtool.WatchFiles(ss.Files().FS(), outputDir, s.maxImage())
	res, err := ss.Run(ctx, in.Code, cfg)
	return s.result(res, err, w)
}

func writeFile(files *sandbox.Files, name string, content []byte) error {
	if i := strings.LastIndexByte(name, '/'); i > 0 {
		if err := files.MkdirAll(name[:i]); err != nil {
			return err
		}
	}
	return files.WriteFile(name, content)
}

// decodeBase64 decodes standard base64, with or without padding.
func decodeBase64(text string) ([]byte, error) {
	text = strings.TrimRight(text, "=")
	data, err := base64.RawStdEncoding.DecodeString(text)
	if err != nil {
		return nil, fmt.Errorf("not standard base64: %w", err)
	}
	return data, nil
}

func (s *Server) sessionCreate(ctx context.Context, req *mcp.CallToolRequest, in createInput) (*mcp.CallToolResult, sessionRef, error) {
	if s.stored != nil {
		return s.createStored(ctx, s.clientOf(ctx, req), in)
	}
	id, err := s.open(ctx, req.Session, func(ctx context.Context) (*sandbox.Session, error) {
		return s.py.NewSession(ctx, s.sessionConfig(in.Env))
	})
	return nil, sessionRef{SessionID: id}, err
}

// open adds a session that newSession makes, once its memory is
// reserved, owned by the MCP session owner, and returns its ID.
func (s *Server) open(ctx context.Context, owner *mcp.ServerSession, newSession func(context.Context) (*sandbox.Session, error)) (string, error) {
	id := newID()
	if err := s.own(owner, id); err != nil {
		return "", err
	}
	c, err := s.live.Acquire(ctx, id, owner, func(ctx context.Context) (*sandbox.Session, error) {
		if err := s.reserve(ctx, true); err != nil {
			return nil, err
		}
		return newSession(ctx)
	})
	if err != nil {
		s.disown(owner, id)
	}
	switch {
	case errors.Is(err, sessionpool.ErrFull):
		return "", fmt.Errorf("%d sessions are open, the most this server allows: close one with session_close", s.opts.MaxSessions)
	case errors.Is(err, sessionpool.ErrClosed):
		return "", errServerClosed
	case err != nil:
		return "", err
	}
	c.Release(false)
	s.mu.Lock()
	if owner != nil && !s.owners[owner] {
		// The first session of this MCP session: close its sessions when
		// it ends. Added after it ended, the session is closed at once,
		// as Wait returns at once.
		s.owners[owner] = true
		go func() {
			owner.Wait()
			s.ownerGone(owner)
		}()
	}
	s.mu.Unlock()
	return id, nil
}

// ownerGone closes the sessions of an MCP session that ended.
func (s *Server) ownerGone(owner *mcp.ServerSession) {
	s.mu.Lock()
	delete(s.owners, owner)
	delete(s.owned, owner)
	delete(s.snapshotted, owner)
	s.mu.Unlock()
	s.live.RemoveOwner(owner)
}

// noSession is the error for a session that does not exist for the
// caller: never created, closed, or another client's, alike.
func noSession(id string) error {
	return fmt.Errorf("no session %q: it was closed, or never created (session_create)", trunc(id, 100))
}

// get holds a session of owner for one call; release it with the Call's
// Release or Drop. A call waits for the session's turn only as long as its
// caller does: a run in progress may hold it until its own deadline, or
// forever with no timeout.
func (s *Server) get(ctx context.Context, owner *mcp.ServerSession, id string) (*sessionpool.Call[*mcp.ServerSession], error) {
	c, err := s.live.Acquire(ctx, id, owner, nil)
	switch {
	case errors.Is(err, sessionpool.ErrWaiting):
		return nil, fmt.Errorf("waiting for session %q: %w", trunc(id, 100), ctx.Err())
	case err != nil:
		return nil, noSession(id)
	}
	return c, nil
}

func (s *Server) sessionRun(ctx context.Context, req *mcp.CallToolRequest, in sessionRunInput) (*mcp.CallToolResult, runOutput, error) {
	cfg, err := s.config(in.callLimits)
	if err != nil {
		return nil, runOutput{}, err
	}
	s.streamProgress(ctx, req, cfg)
	if s.stored != nil {
		return s.runStored(ctx, s.clientOf(ctx, req), in, cfg)
	}
	c, err := s.get(ctx, req.Session, in.SessionID)
	if err != nil {
		return nil, runOutput{}, err
	}
	// The session's turn first, then a run slot: a call holding a slot
	// never waits for a session's turn, so the two cannot deadlock.
	done, err := s.acquireRun(ctx, s.clientOf(ctx, req), cfg.Limits.Timeout)
	if err != nil {
		c.Release(false)
		return nil, runOutput{}, err
	}
	w := runtool.WatchFiles(c.Session.Files().FS(), outputDir, s.maxImage())
	res, err := c.Session.Run(ctx, in.Code, cfg)
	done()
	if errors.Is(err, sandbox.ErrClosed) {
		// The session closed itself: forget it.
		c.Drop()
		s.disown(req.Session, in.SessionID)
		return s.result(res, err, nil)
	}
	// A model takes seconds between calls: idle, a session needs only its
	// changed pages (0.5 MB, not 15).
	defer c.Release(true)
	return s.result(res, err, w)
}

func (s *Server) sessionFiles(ctx context.Context, req *mcp.CallToolRequest, in filesInput) (*mcp.CallToolResult, filesOutput, error) {
	if s.stored != nil {
		return s.filesStored(ctx, in)
	}
	c, err := s.get(ctx, req.Session, in.SessionID)
	if err != nil {
		return nil, filesOutput{}, err
	}
	defer c.Release(false)
	return s.fileOp(c.Session.Files(), in)
}

// fileOp does a session_files operation on a session's files.
func (s *Server) fileOp(files *sandbox.Files, in filesInput) (*mcp.CallToolResult, filesOutput, error) {
	var err error
	switch in.Op {
	case "read":
		// Only what can be sent is read: a guest can write a sparse file
		// as large as its quota.
		fi, err := files.Stat(in.Path)
		if err != nil {
			return nil, filesOutput{}, err
		}
		data, _, err := files.ReadFileLimit(in.Path, int64(s.opts.Limits.MaxOutput+utf8.UTFMax))
		if err != nil {
			return nil, filesOutput{}, err
		}
		return s.readResult(in.Path, fi.Size(), data)
	case "write":
		content := []byte(in.Content)
		switch in.Encoding {
		case "", "utf-8":
		case "base64":
			if content, err = decodeBase64(in.Content); err != nil {
				return nil, filesOutput{}, fmt.Errorf("content: %w", err)
			}
		default:
			return nil, filesOutput{}, fmt.Errorf("encoding must be utf-8 or base64, not %q", trunc(in.Encoding, 100))
		}
		return nil, filesOutput{}, writeFile(files, in.Path, content)
	case "list":
		entries, err := files.ReadDir(in.Path)
		if err != nil {
			return nil, filesOutput{}, err
		}
		out := filesOutput{Entries: []string{}}
		size := 0
		for _, e := range entries {
			name := strings.ToValidUTF8(e.Name(), "\uFFFD")
			if e.IsDir() {
				name += "/"
			}
			if size += len(name); size > s.opts.Limits.MaxOutput {
				out.Truncated = true
				break
			}
			out.Entries = append(out.Entries, name)
		}
		return nil, out, nil
	}
	return nil, filesOutput{}, fmt.Errorf("op must be read, write or list, not %q", trunc(in.Op, 100))
}

// readResult sends a file's content once, in the content blocks: text as
// text, an image as image content, other bytes as base64 text; each at
// most MaxOutput bytes as sent, and a note block when it was cut. data is
// the start of the file, size bytes long: all of it, or at least
// MaxOutput + utf8.UTFMax bytes of it.
func (s *Server) readResult(name string, size int64, data []byte) (*mcp.CallToolResult, filesOutput, error) {
	out := filesOutput{Size: &size, Encoding: "utf-8"}
	limit := s.opts.Limits.MaxOutput
	var block mcp.Content
	if head := data[:min(len(data), limit+utf8.UTFMax)]; looksText(head) {
		text, cut := truncate(string(data[:min(len(data), limit+1)]), limit)
		out.Truncated = cut
		block = &mcp.TextContent{Text: text}
	} else {
		out.Encoding = "base64"
		n := limit / 4 * 3 // the most bytes whose base64 fits the limit
		out.Truncated = len(data) > n
		if mt := imageType(data); mt != "" && !out.Truncated {
			out.MediaType = mt
			block = &mcp.ImageContent{Data: data, MIMEType: mt}
		} else {
			block = &mcp.TextContent{Text: base64.StdEncoding.EncodeToString(data[:min(len(data), n)])}
		}
	}
	tr := &mcp.CallToolResult{Content: []mcp.Content{block}}
	if out.Truncated {
		tr.Content = append(tr.Content, &mcp.TextContent{Text: fmt.Sprintf(
			"(%s is %d bytes: only its start was sent, cut at the server's output limit of %d bytes)", trunc(name, 200), size, limit)})
	}
	return tr, out, nil
}

// looksText reports whether b, the start of a file, is UTF-8 text: valid
// (but for a character cut at its end) and without NUL bytes.
func looksText(b []byte) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return false
	}
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			return !utf8.FullRune(b)
		}
		b = b[n:]
	}
	return true
}

// imageType is the media type of an image model APIs take, by its
// content, or "".
func imageType(data []byte) string {
	switch mt := http.DetectContentType(data); mt {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return mt
	}
	return ""
}

func (s *Server) sessionClose(ctx context.Context, req *mcp.CallToolRequest, in sessionRef) (*mcp.CallToolResult, sessionRef, error) {
	if s.stored != nil {
		return s.closeStored(ctx, s.clientOf(ctx, req), in)
	}
	if err := s.live.Remove(in.SessionID, req.Session); err != nil {
		return nil, sessionRef{}, noSession(in.SessionID)
	}
	s.disown(req.Session, in.SessionID)
	return nil, in, nil
}

// validSnapshotName reports whether name matches
// ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$: 1 to 100 letters, digits, '_', '.'
// and '-', not starting with '.' or '-'. (Not a regexp: compiling that one
// cost every process that links this package a millisecond at start-up.)
func validSnapshotName(name string) bool {
	if len(name) == 0 || len(name) > 100 || name[0] == '.' || name[0] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// snapshotPath returns the file of a snapshot of owner. An MCP session
// with an ID (streamable HTTP) has its own directory, named by a hash of
// the ID so that the ID, which is what proves the owner, is not written
// to disk; one without (stdio: one client per server) uses SnapshotDir.
// A snapshot name cannot hold a '/', so one owner cannot name another's.
func (s *Server) snapshotPath(owner *mcp.ServerSession, name string) (dir, file string, err error) {
	if !validSnapshotName(name) {
		return "", "", fmt.Errorf("invalid snapshot name %q: use letters, digits, '-', '_' and '.', 100 at most", trunc(name, 120))
	}
	dir = s.opts.SnapshotDir
	if owner != nil && owner.ID() != "" {
		sum := sha256.Sum256([]byte(owner.ID()))
		dir = filepath.Join(dir, "client-"+hex.EncodeToString(sum[:16]))
	}
	return dir, filepath.Join(dir, name+".snap"), nil
}

func (s *Server) sessionSnapshot(ctx context.Context, req *mcp.CallToolRequest, in snapshotInput) (*mcp.CallToolResult, snapshotOutput, error) {
	dir, file, err := s.snapshotPath(req.Session, in.Name)
	if err != nil {
		return nil, snapshotOutput{}, err
	}
	c, err := s.get(ctx, req.Session, in.SessionID)
	if err != nil {
		return nil, snapshotOutput{}, err
	}
	defer c.Release(false)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, snapshotOutput{}, err
	}
	if err := c.Session.SnapshotFile(file); err != nil {
		return nil, snapshotOutput{}, err
	}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, snapshotOutput{}, err
	}
	if req.Session != nil && req.Session.ID() != "" {
		// Its snapshots are reached only through its ID: it owns state
		// that evicting it would lose.
		s.mu.Lock()
		s.snapshotted[req.Session] = true
		s.mu.Unlock()
	}
	return nil, snapshotOutput{Name: in.Name, Bytes: fi.Size()}, nil
}

func (s *Server) sessionRestore(ctx context.Context, req *mcp.CallToolRequest, in restoreInput) (*mcp.CallToolResult, sessionRef, error) {
	_, file, err := s.snapshotPath(req.Session, in.Name)
	if err != nil {
		return nil, sessionRef{}, err
	}
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, sessionRef{}, fmt.Errorf("no snapshot named %q", in.Name)
	} else if err != nil {
		return nil, sessionRef{}, err
	}
	defer f.Close()
	// ResumeSession reads no more than the session's limits imply, so a
	// huge file in the snapshot directory costs no more than they do.
	id, err := s.open(ctx, req.Session, func(ctx context.Context) (*sandbox.Session, error) {
		return s.py.ResumeSession(ctx, f, s.sessionConfig(nil))
	})
	return nil, sessionRef{SessionID: id}, err
}
