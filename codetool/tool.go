package codetool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/fumehood/fumehood/internal/runtool"
	"github.com/fumehood/fumehood/internal/sessionpool"
	"github.com/fumehood/fumehood/internal/textcut"
	"github.com/fumehood/fumehood/netpolicy"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sessionstore"
)

// Errors of a Result's Err (errors.Is).
var (
	// ErrBadArguments: the model's arguments were not valid JSON, had an
	// unknown field or the wrong type, lacked the code, held too much of
	// it, or asked for a negative limit.
	ErrBadArguments = runtool.ErrBadArguments
	// ErrTooManySessions: Options.MaxSessions conversations have a call
	// in progress, so none could be closed to make room for another.
	ErrTooManySessions = errors.New("codetool: too many live sessions")
	// ErrClosed: the tool was closed.
	ErrClosed = errors.New("codetool: the tool is closed")
)

// Defaults of Options.
const (
	// DefaultMaxCode is Options.MaxCode's default: 64 KiB of code.
	DefaultMaxCode = 64 << 10
	// DefaultMaxSessions is Options.MaxSessions's default.
	DefaultMaxSessions = 16
	// DefaultIdleTimeout is Options.IdleTimeout's default.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultOutputDir is Options.OutputDir's default.
	DefaultOutputDir = "/work"
	// DefaultMaxImageBytes is Options.MaxImageBytes's default: 1 MiB.
	DefaultMaxImageBytes = 1 << 20
)

// Options configure a Tool. The zero value gives the sandbox package's
// limits, no network and the defaults above.
type Options struct {
	// Limits bound every run (Memory: each session); zero fields mean the
	// sandbox package's defaults. A call may only lower the timeout.
	Limits sandbox.Limits
	// Network is the policy of every session; nil is no network.
	Network *netpolicy.Policy
	// MaxCode bounds the code of a call, in bytes; 0 means DefaultMaxCode.
	MaxCode int
	// MaxSessions bounds the conversations with a live session at once;
	// 0 means DefaultMaxSessions. A call of another conversation past it
	// closes the session of the conversation least recently called that
	// has no call in progress (its next call starts a fresh interpreter and
	// its result says so); when all of them have a call in progress it is
	// an ErrTooManySessions result.
	MaxSessions int
	// IdleTimeout closes a conversation's session once it has had no call
	// for that long; 0 means DefaultIdleTimeout and a negative value
	// never closes it. Between calls a session is hibernated (only the
	// memory pages its code changed stay held).
	IdleTimeout time.Duration
	// OutputDir is the directory whose new and changed files a Result
	// lists; "" means DefaultOutputDir.
	OutputDir string
	// MaxImageBytes bounds an image file a Result carries; 0 means
	// DefaultMaxImageBytes. Larger images are listed without their data,
	// and so are images past the eighth of a run: a Result holds at most
	// 8 × MaxImageBytes of images.
	MaxImageBytes int
	// OnOutput, if set, is given each run's output as the code writes
	// it, a line at a time (stream is "stdout" or "stderr"; see
	// sandbox.RunOptions.Stdout), for a caller that shows progress while a
	// call runs. The Result still holds the output, cut to the limit;
	// OnOutput gets all of it. It is called on the run's goroutine: a
	// slow OnOutput slows the run.
	OnOutput func(conversation, stream, text string)
	// Setup, if set, prepares each new session, before its first run:
	// upload the conversation's data with s.Files().WriteFile.
	Setup func(ctx context.Context, conversation string, s *sandbox.Session) error
	// Store, if set, keeps the conversations: each call takes its
	// conversation's lease, runs on the session of the conversation's
	// latest committed state (resumed from the store unless this tool holds
	// it live), and commits the new state, so that any tool sharing the
	// store, in any process, serves any conversation. A call whose state
	// could not be committed (another call committed first, the lease was
	// lost, the store failed) is an error result and leaves the
	// conversation as it was. IdleTimeout does not apply: the store's TTL
	// does; conversation names must pass sessionstore.CheckName (an
	// ErrBadName result otherwise); MaxSessions bounds the sessions kept
	// live between calls (awake
	// for sessionstore.DefaultHibernateAfter after a call, then
	// hibernated). The tool does not close the store.
	Store sessionstore.Store
	// LeaseTTL is how long a call holds its conversation in the Store
	// without renewing it (sessionstore.SessionsOptions.LeaseTTL); 0 means
	// sessionstore.DefaultLeaseTTL.
	LeaseTTL time.Duration
}

// Tool runs the calls of any number of conversations, each in its own
// Python session. It is safe for concurrent use; the calls of one
// conversation run one at a time.
type Tool struct {
	py     *sandbox.Guest
	opts   Options
	limits sandbox.Limits // Options.Limits with the defaults applied

	instructions string // runtool.InstructionsFor the guest and network

	live   *sessionpool.Pool[struct{}] // without Options.Store
	stored *sessionstore.Sessions      // with Options.Store; nil without

	// Close cancels closing, which stops the calls in progress, and waits
	// for them.
	closing context.Context
	stop    context.CancelCauseFunc
	calls   sync.WaitGroup
	mu      sync.Mutex
	closed  bool
}

// New returns a tool that runs code on py, the Python guest
// (sandbox.CompilePython). It probes the guest once per process (a few
// milliseconds) for its Instructions.
func New(py *sandbox.Guest, opts *Options) (*Tool, error) {
	if py == nil || !py.IsPython() {
		return nil, sandbox.ErrNotPython
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	l, err := o.Limits.Lower(sandbox.Limits{})
	if err != nil {
		return nil, fmt.Errorf("codetool: %w", err)
	}
	switch {
	case o.MaxCode < 0 || o.MaxSessions < 0 || o.MaxImageBytes < 0:
		return nil, errors.New("codetool: negative MaxCode, MaxSessions or MaxImageBytes")
	case o.OutputDir != "" && (!path.IsAbs(o.OutputDir) || path.Clean(o.OutputDir) != o.OutputDir):
		return nil, fmt.Errorf("codetool: OutputDir %q is not an absolute, clean path", o.OutputDir)
	}
	if o.MaxCode == 0 {
		o.MaxCode = DefaultMaxCode
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.OutputDir == "" {
		o.OutputDir = DefaultOutputDir
	}
	if o.MaxImageBytes == 0 {
		o.MaxImageBytes = DefaultMaxImageBytes
	}
	info, err := runtool.Probe(context.Background(), py)
	if err != nil {
		return nil, err
	}
	idle := o.IdleTimeout
	if o.Store != nil {
		idle = 0 // the store's TTL applies, which the tool does not know
	}
	t := &Tool{py: py, opts: o, limits: l, instructions: runtool.InstructionsFor(info, o.Network, nil) + " " + limitsText(l, idle)}
	t.closing, t.stop = context.WithCancelCause(context.Background())
	if o.Store != nil {
		t.stored = sessionstore.NewSessions(o.Store, py, &sessionstore.SessionsOptions{
			Config:   &sandbox.Config{Network: o.Network, Limits: o.Limits},
			LeaseTTL: o.LeaseTTL, MaxLive: o.MaxSessions})
	} else {
		t.live = sessionpool.New[struct{}](sessionpool.Options{Max: o.MaxSessions, Evict: true, IdleTimeout: o.IdleTimeout})
	}
	return t, nil
}

// Instructions says what this tool's sandbox has and lacks, for a model:
// what the tool's guest offers and its network allows, then the limits of each run
// (wall time, CPU, memory, output) and of an idle conversation, so that a
// model can plan its work within them. Give it as the system
// prompt's part on the tool, or use Description, which holds it.
func (t *Tool) Instructions() string { return t.instructions }

// Description is the tool's description for a model, as the package's
// Description, with the Instructions of this tool's guest and network.
func (t *Tool) Description() string { return describe(t.instructions) }

// Input is the tool's input, as the model sends it.
type Input struct {
	// Code is the Python source to run.
	Code string `json:"code"`
	// TimeoutMS asks for a shorter wall-time limit, in milliseconds.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// ParseInput decodes a model's arguments strictly: one JSON object, no
// unknown field, a non-empty code of at most maxCode bytes. Its errors
// wrap ErrBadArguments and say what was wrong in words a model can act on.
func ParseInput(arguments []byte, maxCode int) (Input, error) {
	var in Input
	// JSON escapes (\u0000) take at most six bytes per byte of code.
	if len(arguments) > 6*maxCode+4096 {
		return in, fmt.Errorf("%w: the arguments are %d bytes: send at most %d bytes of code", ErrBadArguments, len(arguments), maxCode)
	}
	d := json.NewDecoder(bytes.NewReader(arguments))
	d.DisallowUnknownFields()
	if err := d.Decode(&in); err != nil {
		return Input{}, fmt.Errorf(`%w: the arguments are not {"code": "<python>", "timeout_ms": <optional integer>}: %s`,
			ErrBadArguments, trimJSONError(err))
	}
	if _, err := d.Token(); err != io.EOF {
		return Input{}, fmt.Errorf("%w: the arguments must be one JSON object, with nothing after it", ErrBadArguments)
	}
	switch {
	case strings.TrimSpace(in.Code) == "":
		return Input{}, fmt.Errorf(`%w: "code" is missing or empty`, ErrBadArguments)
	case len(in.Code) > maxCode:
		return Input{}, fmt.Errorf("%w: the code is %d bytes, more than the %d this tool runs: split it over several calls (state lasts between them)",
			ErrBadArguments, len(in.Code), maxCode)
	}
	return in, nil
}

// trimJSONError words a decoding error without Go's type names.
func trimJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("%q must be %s, not a JSON %s", te.Field, map[string]string{"code": "a string", "timeout_ms": "a positive integer"}[te.Field], te.Value)
	}
	msg, _ := textcut.Cut(strings.TrimPrefix(err.Error(), "json: "), 200)
	return msg
}

// Call runs one tool call of a conversation: arguments are the call's
// JSON arguments as the model wrote them. The conversation's session is
// created on its first call (then Options.Setup runs), and hibernated
// after each. Call never returns nil; everything that went wrong is in the
// Result (IsError, Error, Err). ctx bounds the whole call, waiting for
// the conversation's previous call included.
func (t *Tool) Call(ctx context.Context, conversation string, arguments []byte) *Result {
	return export(t.call(ctx, conversation, arguments))
}

// call is Call, with runtool's Result.
func (t *Tool) call(ctx context.Context, conversation string, arguments []byte) *runtool.Result {
	in, err := ParseInput(arguments, t.opts.MaxCode)
	if err != nil {
		return errResult(err, t.limits.MaxOutput)
	}
	req, err := runtool.CallLimits(in.TimeoutMS, 0)
	if err != nil {
		return errResult(err, t.limits.MaxOutput)
	}
	// Close stops the call by its context, and waits for it.
	t.mu.Lock()
	closed := t.closed
	if !closed {
		t.calls.Add(1)
	}
	t.mu.Unlock()
	if closed {
		return errResult(ErrClosed, t.limits.MaxOutput)
	}
	defer t.calls.Done()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(t.closing, func() { cancel(ErrClosed) })()
	// The session lowers its limits by the request (never raises them);
	// a request above them gets the model a note.
	var raised string
	if t.limits.Timeout >= 0 && req.Timeout > t.limits.Timeout {
		raised = fmt.Sprintf("timeout_ms %d is above this tool's limit; the run had %v", in.TimeoutMS, t.limits.Timeout)
	}
	if t.stored != nil {
		r := t.callStored(ctx, conversation, in, req)
		if raised != "" {
			r.Notes = append(r.Notes, raised)
		}
		return r
	}
	return t.callLive(ctx, conversation, in, req, raised)
}

// callLive runs a call on the conversation's session this tool holds,
// opening one if it has none; raised, if not empty, is the note on a
// timeout above the tool's.
func (t *Tool) callLive(ctx context.Context, conversation string, in Input, req sandbox.Limits, raised string) *runtool.Result {
	c, err := t.live.Acquire(ctx, conversation, struct{}{}, func(ctx context.Context) (*sandbox.Session, error) {
		return t.open(ctx, conversation)
	})
	switch {
	case err == nil:
	case errors.Is(err, sessionpool.ErrClosed), errors.Is(context.Cause(ctx), ErrClosed):
		err = ErrClosed
	case errors.Is(err, sessionpool.ErrFull):
		err = fmt.Errorf("%w: the %d conversations this tool keeps a session for all have a call in progress", ErrTooManySessions, t.opts.MaxSessions)
	case errors.Is(err, sessionpool.ErrWaiting):
		err = fmt.Errorf("waiting for the conversation's previous call: %w", context.Cause(ctx))
	}
	if err != nil {
		return errResult(err, t.limits.MaxOutput)
	}
	w := runtool.WatchFiles(c.Session.Files().FS(), t.opts.OutputDir, t.opts.MaxImageBytes)
	res, err := c.Session.Run(ctx, in.Code, t.runOptions(conversation, req))
	r := runtool.FromRun(res, err, t.limits.MaxOutput)
	switch c.Gone {
	case sessionpool.GoneIdle:
		r.Notes = append(r.Notes, fmt.Sprintf("this conversation's previous session was closed after %v without calls: "+
			"this call ran in a fresh interpreter, without the variables and files of earlier calls", t.opts.IdleTimeout))
	case sessionpool.GoneEvicted:
		r.Notes = append(r.Notes, fmt.Sprintf("this conversation's previous session was closed to make room for another conversation "+
			"(this tool keeps at most %d sessions, and closes the least recently used first): "+
			"this call ran in a fresh interpreter, without the variables and files of earlier calls", t.opts.MaxSessions))
	}
	if raised != "" {
		r.Notes = append(r.Notes, raised)
	}
	if errors.Is(err, sandbox.ErrClosed) {
		// A run stopped while files were open could not be rolled back.
		c.Drop()
		r.Notes = append(r.Notes, "the session was closed: the next call starts a fresh interpreter, without this conversation's variables and files")
		return r
	}
	defer c.Release(true)
	if c.Ended() {
		r.Notes = append(r.Notes, "the session was closed: the next call starts a fresh interpreter, without this conversation's variables and files")
	} else if res != nil {
		if r.Files, err = w.Changed(); err != nil {
			r.Cut("files")
		}
	}
	return r
}

// callStored runs a call on the conversation's session from the Store,
// and commits it.
func (t *Tool) callStored(ctx context.Context, conversation string, in Input, req sandbox.Limits) *runtool.Result {
	var r *runtool.Result
	err := t.stored.Do(ctx, conversation, func(ctx context.Context, s *sandbox.Session, fresh bool) error {
		if fresh && t.opts.Setup != nil {
			if err := t.opts.Setup(ctx, conversation, s); err != nil {
				return fmt.Errorf("codetool: setting up the session: %w", err)
			}
		}
		w := runtool.WatchFiles(s.Files().FS(), t.opts.OutputDir, t.opts.MaxImageBytes)
		res, err := s.Run(ctx, in.Code, t.runOptions(conversation, req))
		r = runtool.FromRun(res, err, t.limits.MaxOutput)
		if errors.Is(err, sandbox.ErrClosed) {
			return err // stopped with files open: nothing to commit
		}
		if res != nil {
			if r.Files, err = w.Changed(); err != nil {
				r.Cut("files")
			}
		}
		return nil
	})
	switch {
	case err == nil:
		return r
	case r == nil || !errors.Is(err, sandbox.ErrClosed):
		// The code did not run, or ran and its state could not be
		// committed: the model sees the failure, not the discarded output.
		r = errResult(fmt.Errorf("codetool: conversation %q: %w", conversation, err), t.limits.MaxOutput)
		if errors.Is(err, sessionstore.ErrConflict) || errors.Is(err, sessionstore.ErrLeaseLost) {
			r.Notes = append(r.Notes, "another call of this conversation ran at the same time and was kept instead of this one: "+
				"this call's effects are discarded; the variables and files are as that call left them")
		}
		return r
	}
	r.Notes = append(r.Notes, "the session was closed: this call's effects are discarded, and the next call continues from the state before it")
	return r
}

// runOptions are a call's run options: its limits, its output to
// Options.OnOutput.
func (t *Tool) runOptions(conversation string, req sandbox.Limits) *sandbox.RunOptions {
	ro := &sandbox.RunOptions{Limits: req}
	if f := t.opts.OnOutput; f != nil {
		ro.Stdout = outputFunc(func(text string) { f(conversation, "stdout", text) })
		ro.Stderr = outputFunc(func(text string) { f(conversation, "stderr", text) })
	}
	return ro
}

// outputFunc is an io.Writer that hands each write to a function.
type outputFunc func(text string)

func (f outputFunc) Write(p []byte) (int, error) {
	f(string(p))
	return len(p), nil
}

func errResult(err error, maxOutput int) *runtool.Result {
	return runtool.FromRun(nil, err, maxOutput)
}

// open creates a conversation's session and sets it up.
func (t *Tool) open(ctx context.Context, conversation string) (*sandbox.Session, error) {
	s, err := t.py.NewSession(ctx, &sandbox.Config{Network: t.opts.Network, Limits: t.opts.Limits})
	if err != nil {
		return nil, err
	}
	if t.opts.Setup != nil {
		if err := t.opts.Setup(ctx, conversation, s); err != nil {
			s.Close()
			return nil, fmt.Errorf("codetool: setting up the session: %w", err)
		}
	}
	return s, nil
}

// End closes a conversation's session, waiting for its call in progress
// until ctx is done. A later call of the conversation starts a fresh one.
// Ending a conversation without a session does nothing. With a Store,
// End deletes the conversation from it, holding its lease.
func (t *Tool) End(ctx context.Context, conversation string) error {
	if t.stored != nil {
		return t.stored.Delete(ctx, conversation)
	}
	return t.live.End(ctx, conversation, struct{}{})
}

// Sessions returns how many conversations have a live session.
func (t *Tool) Sessions() int {
	if t.stored != nil {
		return t.stored.Live()
	}
	return t.live.Len()
}

// Close closes every session. It stops the runs in progress and waits
// for their calls to return; later calls are ErrClosed results.
func (t *Tool) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.stop(ErrClosed)
	if t.stored != nil {
		t.calls.Wait()
		t.stored.Close()
		return nil
	}
	t.live.Close()
	t.calls.Wait()
	return nil
}
