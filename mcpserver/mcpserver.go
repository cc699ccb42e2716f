// Package mcpserver serves fumehood's sandboxes to MCP clients (the Model
// Context Protocol): tools that run Python, in one-shot sandboxes or in
// sessions that keep their state, with the limits and network policy the
// server was given. The command `fumehood mcp` runs it over stdio or HTTP;
// a Go program can serve it on any transport of the MCP Go SDK:
//
//	py, _ := sandbox.CompilePython(ctx, &sandbox.Options{Sessions: true})
//	srv, _ := mcpserver.New(py, &mcpserver.Options{SnapshotDir: dir})
//	defer srv.Close()
//	srv.MCP().Run(ctx, &mcp.StdioTransport{})
//
// A Python exception, a limit hit or a bad argument is a tool result with
// isError set, which the model reads and can act on, never a protocol error.
package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/wasi/netpolicy"
)

// Options configure a server. The zero value serves the sandbox package's
// defaults with no network and no snapshots.
type Options struct {
	// Timeout, Fuel, MemoryLimit and MaxOutput bound every run; zero means
	// the sandbox package's default. A tool call may ask for a lower
	// timeout or fuel, never a higher one.
	Timeout     time.Duration
	Fuel        int64
	MemoryLimit int64
	MaxOutput   int
	// Network is the policy of every sandbox and session; nil is no network.
	Network *netpolicy.Policy
	// SnapshotDir is where session_snapshot writes and session_restore
	// reads snapshots; empty disables both tools.
	SnapshotDir string
	// MaxSessions bounds the sessions open at once; 0 means 16.
	MaxSessions int
	// Name and Version identify the server to clients.
	Name, Version string
}

// Server holds the compiled guest and the open sessions.
type Server struct {
	py   *sandbox.Guest
	opts Options
	mcp  *mcp.Server

	mu       sync.Mutex
	sessions map[string]*session
}

type session struct {
	mu sync.Mutex // one call at a time
	s  *sandbox.Session
}

// New returns a server that runs code on py, which must be the session
// build of the Python guest (sandbox.Options.Sessions).
func New(py *sandbox.Guest, opts *Options) (*Server, error) {
	if !py.IsPython() {
		return nil, sandbox.ErrNotPython
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = 16
	}
	if o.Name == "" {
		o.Name = "fumehood"
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	s := &Server{py: py, opts: o, sessions: map[string]*session{}}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: o.Name, Version: o.Version}, &mcp.ServerOptions{
		Instructions: "Run Python 3.12 code in a sandbox: no network unless allowed, an in-memory filesystem, " +
			"limits on time, CPU (fuel), memory and output. run_python is a fresh interpreter each time; " +
			"sessions keep variables, imports and files from one call to the next.",
	})
	s.addTools()
	return s, nil
}

// MCP returns the MCP server, to run on a transport.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Close closes every open session.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ss := range s.sessions {
		ss.s.Close()
		delete(s.sessions, id)
	}
	return nil
}

// Limits are the optional limits of a tool call.
type Limits struct {
	TimeoutMS int64 `json:"timeout_ms,omitempty" jsonschema:"wall-time limit in milliseconds (at most the server's)"`
	Fuel      int64 `json:"fuel,omitempty" jsonschema:"CPU budget in WebAssembly instructions (at most the server's)"`
}

// RunInput is the input of run_python.
type RunInput struct {
	Code  string            `json:"code" jsonschema:"Python source code to run"`
	Files map[string]string `json:"files,omitempty" jsonschema:"files to create before the run: absolute guest path to text content"`
	Limits
}

// SessionRunInput is the input of session_run.
type SessionRunInput struct {
	SessionID string `json:"session_id" jsonschema:"the session, from session_create or session_restore"`
	Code      string `json:"code" jsonschema:"Python source code to run in the session"`
	Limits
}

// Exception is a Python exception in a tool result.
type Exception struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback"`
}

// RunOutput is the result of run_python and session_run.
type RunOutput struct {
	Stdout    string     `json:"stdout"`
	Stderr    string     `json:"stderr"`
	Value     *string    `json:"value,omitempty" jsonschema:"repr of the final expression's value, if the code ends in one"`
	Exception *Exception `json:"exception,omitempty"`
	ExitCode  int        `json:"exit_code"`
	StoppedBy string     `json:"stopped_by,omitempty" jsonschema:"the limit that stopped the run: deadline, fuel, memory or output"`
	FuelUsed  int64      `json:"fuel_used"`
	WallMS    float64    `json:"wall_ms"`
	Truncated bool       `json:"truncated,omitempty" jsonschema:"output past the limit was dropped"`
}

// SessionRef names a session.
type SessionRef struct {
	SessionID string `json:"session_id" jsonschema:"the session"`
}

// CreateInput is the input of session_create.
type CreateInput struct {
	Env map[string]string `json:"env,omitempty" jsonschema:"the session's environment variables"`
}

// FilesInput is the input of session_files.
type FilesInput struct {
	SessionID string `json:"session_id" jsonschema:"the session"`
	Op        string `json:"op" jsonschema:"read, write or list"`
	Path      string `json:"path" jsonschema:"absolute guest path"`
	Content   string `json:"content,omitempty" jsonschema:"text to write (op write)"`
}

// FilesOutput is the result of session_files.
type FilesOutput struct {
	Content *string  `json:"content,omitempty"`
	Entries []string `json:"entries,omitempty" jsonschema:"names in the directory; directories end in /"`
}

// SnapshotInput is the input of session_snapshot and session_restore.
type SnapshotInput struct {
	SessionID string `json:"session_id,omitempty" jsonschema:"the session to save (session_snapshot)"`
	Name      string `json:"name" jsonschema:"the snapshot's name: letters, digits, '-', '_' and '.'"`
}

// SnapshotOutput is the result of session_snapshot.
type SnapshotOutput struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

func (s *Server) addTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "run_python",
		Description: "Run Python code in a fresh sandboxed interpreter and return stdout, stderr, the final expression's value and any exception."},
		s.runPython)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "session_create",
		Description: "Start a Python session whose variables, imports and files last between session_run calls."},
		s.sessionCreate)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "session_run",
		Description: "Run Python code in a session; a run stopped by a limit leaves the session as it was before."},
		s.sessionRun)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "session_files",
		Description: "Read, write or list files in a session's filesystem."},
		s.sessionFiles)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "session_close",
		Description: "Close a session and free its memory."},
		s.sessionClose)
	if s.opts.SnapshotDir != "" {
		mcp.AddTool(s.mcp, &mcp.Tool{Name: "session_snapshot",
			Description: "Save a session under a name, to restore later, even after the server restarts."},
			s.sessionSnapshot)
		mcp.AddTool(s.mcp, &mcp.Tool{Name: "session_restore",
			Description: "Start a session from a snapshot saved with session_snapshot."},
			s.sessionRestore)
	}
}

// config returns a run's limits: the server's, lowered by the call's.
func (s *Server) config(l Limits) *sandbox.Config {
	c := &sandbox.Config{Timeout: s.opts.Timeout, Fuel: s.opts.Fuel, MaxOutput: s.opts.MaxOutput}
	if l.TimeoutMS > 0 {
		t := time.Duration(l.TimeoutMS) * time.Millisecond
		if c.Timeout <= 0 || t < c.Timeout {
			c.Timeout = t
		}
	}
	if l.Fuel > 0 && (c.Fuel == 0 || l.Fuel < c.Fuel) {
		c.Fuel = l.Fuel
	}
	return c
}

func (s *Server) sessionConfig(env map[string]string) *sandbox.SessionConfig {
	return &sandbox.SessionConfig{Env: env, MemoryLimit: s.opts.MemoryLimit, Network: s.opts.Network}
}

// stops are the limits a run can hit, in the words of RunOutput.StoppedBy.
var stops = []struct {
	err   error
	words string
}{
	{context.DeadlineExceeded, "deadline"},
	{sandbox.ErrFuelExhausted, "fuel"},
	{sandbox.ErrMemoryLimit, "memory"},
	{sandbox.ErrOutputLimit, "output"},
}

// result turns a run's outcome into a tool result. A Python exception or
// a limit is an error result the model sees; other errors are too, with
// their message.
func result(res *sandbox.Result, err error) (*mcp.CallToolResult, RunOutput, error) {
	var out RunOutput
	if res == nil {
		if err == nil {
			err = errors.New("no result")
		}
		return nil, out, err
	}
	out = RunOutput{
		Stdout: string(res.Stdout), Stderr: string(res.Stderr), ExitCode: res.ExitCode,
		FuelUsed: res.FuelUsed, WallMS: float64(res.Duration.Microseconds()) / 1000,
		Truncated: res.StdoutTruncated || res.StderrTruncated,
	}
	if res.HasValue {
		v := res.Value
		out.Value = &v
	}
	if e := res.Exception; e != nil {
		out.Exception = &Exception{Type: e.Type, Message: e.Message, Traceback: e.Traceback}
	}
	for _, st := range stops {
		if errors.Is(err, st.err) {
			out.StoppedBy = st.words
			break
		}
	}
	tr := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: summary(&out, err)}}}
	tr.IsError = err != nil
	return tr, out, nil
}

// summary is the text content of a run's result, for the model to read.
func summary(out *RunOutput, err error) string {
	var b strings.Builder
	if out.Stdout != "" {
		fmt.Fprintf(&b, "stdout:\n%s", out.Stdout)
		if !strings.HasSuffix(out.Stdout, "\n") {
			b.WriteByte('\n')
		}
	}
	if out.Stderr != "" {
		fmt.Fprintf(&b, "stderr:\n%s", out.Stderr)
		if !strings.HasSuffix(out.Stderr, "\n") {
			b.WriteByte('\n')
		}
	}
	if out.Value != nil {
		fmt.Fprintf(&b, "value: %s\n", *out.Value)
	}
	switch {
	case out.Exception != nil:
		fmt.Fprintf(&b, "exception: %s: %s\n", out.Exception.Type, out.Exception.Message)
	case out.StoppedBy != "":
		fmt.Fprintf(&b, "stopped: %s limit (%v)\n", out.StoppedBy, err)
	case err != nil:
		fmt.Fprintf(&b, "error: %v\n", err)
	}
	if b.Len() == 0 {
		b.WriteString("(no output)\n")
	}
	return b.String()
}

func (s *Server) runPython(ctx context.Context, _ *mcp.CallToolRequest, in RunInput) (*mcp.CallToolResult, RunOutput, error) {
	// A throw-away session: a fresh interpreter from the base image that,
	// unlike a one-shot run, reports the value and the exception.
	ss, err := s.py.NewSession(ctx, s.sessionConfig(nil))
	if err != nil {
		return nil, RunOutput{}, err
	}
	defer ss.Close()
	for _, name := range slices.Sorted(maps.Keys(in.Files)) {
		if err := writeFile(ss.Sandbox(), name, in.Files[name]); err != nil {
			return nil, RunOutput{}, err
		}
	}
	return result(ss.Run(ctx, in.Code, s.config(in.Limits)))
}

func writeFile(sb *sandbox.Sandbox, name, content string) error {
	if i := strings.LastIndexByte(name, '/'); i > 0 {
		if err := sb.MkdirAll(name[:i]); err != nil {
			return err
		}
	}
	return sb.WriteFile(name, []byte(content))
}

func (s *Server) sessionCreate(ctx context.Context, _ *mcp.CallToolRequest, in CreateInput) (*mcp.CallToolResult, SessionRef, error) {
	if err := s.room(); err != nil {
		return nil, SessionRef{}, err
	}
	ss, err := s.py.NewSession(ctx, s.sessionConfig(in.Env))
	if err != nil {
		return nil, SessionRef{}, err
	}
	return nil, SessionRef{SessionID: s.add(ss)}, nil
}

// room refuses a new session when MaxSessions are open.
func (s *Server) room() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sessions) >= s.opts.MaxSessions {
		return fmt.Errorf("%d sessions are open, the most this server allows: close one with session_close", len(s.sessions))
	}
	return nil
}

func (s *Server) add(ss *sandbox.Session) string {
	var b [8]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	s.mu.Lock()
	s.sessions[id] = &session{s: ss}
	s.mu.Unlock()
	return id
}

// get finds a session and locks it for one call.
func (s *Server) get(id string) (*session, func(), error) {
	s.mu.Lock()
	ss := s.sessions[id]
	s.mu.Unlock()
	if ss == nil {
		return nil, nil, fmt.Errorf("no session %q: it was closed, or never created (session_create)", id)
	}
	ss.mu.Lock()
	return ss, ss.mu.Unlock, nil
}

func (s *Server) sessionRun(ctx context.Context, _ *mcp.CallToolRequest, in SessionRunInput) (*mcp.CallToolResult, RunOutput, error) {
	ss, unlock, err := s.get(in.SessionID)
	if err != nil {
		return nil, RunOutput{}, err
	}
	defer unlock()
	res, err := ss.s.Run(ctx, in.Code, s.config(in.Limits))
	if errors.Is(err, sandbox.ErrSessionClosed) {
		s.drop(in.SessionID)
	} else {
		// A model takes seconds between calls: idle, a session needs only
		// its changed pages (0.5 MB, not 15). With files held open it
		// stays awake (ErrOpenFiles), which is fine.
		_ = ss.s.Hibernate()
	}
	return result(res, err)
}

func (s *Server) drop(id string) {
	s.mu.Lock()
	if ss := s.sessions[id]; ss != nil {
		ss.s.Close()
		delete(s.sessions, id)
	}
	s.mu.Unlock()
}

func (s *Server) sessionFiles(ctx context.Context, _ *mcp.CallToolRequest, in FilesInput) (*mcp.CallToolResult, FilesOutput, error) {
	ss, unlock, err := s.get(in.SessionID)
	if err != nil {
		return nil, FilesOutput{}, err
	}
	defer unlock()
	sb := ss.s.Sandbox()
	switch in.Op {
	case "read":
		data, err := sb.ReadFile(in.Path)
		if err != nil {
			return nil, FilesOutput{}, err
		}
		text := string(data)
		return nil, FilesOutput{Content: &text}, nil
	case "write":
		return nil, FilesOutput{}, writeFile(sb, in.Path, in.Content)
	case "list":
		entries, err := sb.ReadDir(in.Path)
		if err != nil {
			return nil, FilesOutput{}, err
		}
		out := FilesOutput{Entries: []string{}}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() {
				name += "/"
			}
			out.Entries = append(out.Entries, name)
		}
		return nil, out, nil
	}
	return nil, FilesOutput{}, fmt.Errorf("op must be read, write or list, not %q", in.Op)
}

func (s *Server) sessionClose(ctx context.Context, _ *mcp.CallToolRequest, in SessionRef) (*mcp.CallToolResult, SessionRef, error) {
	s.mu.Lock()
	ss := s.sessions[in.SessionID]
	delete(s.sessions, in.SessionID)
	s.mu.Unlock()
	if ss == nil {
		return nil, SessionRef{}, fmt.Errorf("no session %q", in.SessionID)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return nil, in, ss.s.Close()
}

var snapshotName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$`)

func (s *Server) snapshotPath(name string) (string, error) {
	if !snapshotName.MatchString(name) {
		return "", fmt.Errorf("invalid snapshot name %q: use letters, digits, '-', '_' and '.', 100 at most", name)
	}
	return filepath.Join(s.opts.SnapshotDir, name+".snap"), nil
}

func (s *Server) sessionSnapshot(ctx context.Context, _ *mcp.CallToolRequest, in SnapshotInput) (*mcp.CallToolResult, SnapshotOutput, error) {
	file, err := s.snapshotPath(in.Name)
	if err != nil {
		return nil, SnapshotOutput{}, err
	}
	ss, unlock, err := s.get(in.SessionID)
	if err != nil {
		return nil, SnapshotOutput{}, err
	}
	defer unlock()
	if err := os.MkdirAll(s.opts.SnapshotDir, 0o755); err != nil {
		return nil, SnapshotOutput{}, err
	}
	if err := ss.s.SnapshotFile(file); err != nil {
		return nil, SnapshotOutput{}, err
	}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, SnapshotOutput{}, err
	}
	return nil, SnapshotOutput{Name: in.Name, Bytes: fi.Size()}, nil
}

func (s *Server) sessionRestore(ctx context.Context, _ *mcp.CallToolRequest, in SnapshotInput) (*mcp.CallToolResult, SessionRef, error) {
	file, err := s.snapshotPath(in.Name)
	if err != nil {
		return nil, SessionRef{}, err
	}
	if err := s.room(); err != nil {
		return nil, SessionRef{}, err
	}
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, SessionRef{}, fmt.Errorf("no snapshot named %q", in.Name)
	} else if err != nil {
		return nil, SessionRef{}, err
	}
	ss, err := s.py.ResumeSession(ctx, bytes.NewReader(data), s.sessionConfig(nil))
	if err != nil {
		return nil, SessionRef{}, err
	}
	return nil, SessionRef{SessionID: s.add(ss)}, nil
}
