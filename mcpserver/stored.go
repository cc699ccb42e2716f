package mcpserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fumehood/fumehood/internal/runtool"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sessionstore"
)

// newID returns a new session ID: 128 random bits in hex.
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// storedPrefix begins the store's name of every session of the server.
const storedPrefix = "mcp-"

// storedName returns the name the Store keeps a session under: "mcp-"
// and the SHA-256 of its ID in hex. The store, shared infrastructure,
// never holds the ID itself, which is what lets a client reach the
// session: a reader of the store learns which sessions exist, not how to
// call them. ok is false for a string that is not an ID this server
// issues (32 lower-case hex digits), which then reaches no session, and
// the store is not asked.
func storedName(id string) (name string, ok bool) {
	if len(id) != 32 {
		return "", false
	}
	for _, c := range []byte(id) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	sum := sha256.Sum256([]byte(id))
	name = storedPrefix + hex.EncodeToString(sum[:])
	if sessionstore.CheckName(name) != nil {
		return "", false // cannot be: 68 bytes of [a-z0-9-]
	}
	return name, true
}

// startStore sets up the sessions kept in Options.Store. The memory
// budget holds the sessions kept live between calls (MaxSessions, fewer
// if the budget is smaller, leaving room for one call at least) as if
// they were always there, and each call reserves what one more session
// holds while it has one in memory.
func (s *Server) startStore() {
	keep := min(s.opts.MaxSessions, int(s.opts.MemoryBudget/s.charge)-1)
	maxLive := keep
	if keep <= 0 {
		keep, maxLive = 0, -1
	}
	s.kept = keep
	s.stored = sessionstore.NewSessions(s.opts.Store, s.py, &sessionstore.SessionsOptions{
		Config: s.sessionConfig(nil), LeaseTTL: s.opts.LeaseTTL, MaxLive: maxLive})
}

// storeError is the error of a stored session's call: a session that is
// not in the store is one that does not exist for the caller, as without
// a store.
func storeError(id string, err error) error {
	switch {
	case errors.Is(err, sessionstore.ErrNotFound):
		return noSession(id)
	case errors.Is(err, sessionstore.ErrBusy):
		return fmt.Errorf("session %q is busy with another call (on this server or another replica): try again when it ends", trunc(id, 100))
	case errors.Is(err, sessionstore.ErrClosed):
		return errServerClosed
	case errors.Is(err, sessionstore.ErrConflict), errors.Is(err, sessionstore.ErrLeaseLost):
		return fmt.Errorf("session %q: another call of it ran at the same time and was kept instead of this one: "+
			"this call's effects are discarded, and the session is as that call left it (%w)", trunc(id, 100), err)
	}
	return fmt.Errorf("session %q: %w", trunc(id, 100), err)
}

// holdCall reserves the memory of one session in memory for a call of a
// stored session; the returned func gives it back.
func (s *Server) holdCall(ctx context.Context, id string) (name string, release func(), err error) {
	name, ok := storedName(id)
	if !ok {
		return "", nil, noSession(id)
	}
	if err := s.reserve(ctx, false); err != nil {
		return "", nil, err
	}
	return name, s.release, nil
}

func (s *Server) createStored(ctx context.Context, client any, in createInput) (*mcp.CallToolResult, sessionRef, error) {
	id := newID()
	name, release, err := s.holdCall(ctx, id)
	if err != nil {
		return nil, sessionRef{}, err
	}
	defer release()
	sb, err := s.startCreate(ctx, client)
	if err != nil {
		return nil, sessionRef{}, err
	}
	started := false
	defer func() { s.endCreate(client, sb, name, started) }()
	ss, err := s.py.NewSession(ctx, s.sessionConfig(in.Env))
	if err != nil {
		return nil, sessionRef{}, err
	}
	if err := s.stored.Start(ctx, name, ss); err != nil {
		return nil, sessionRef{}, storeError(id, err)
	}
	started = true
	return nil, sessionRef{SessionID: id}, nil
}

// storedBy is what one client created in the Store through this server:
// the names of its sessions there, as far as this server knows, and its
// session_create calls in progress.
type storedBy struct {
	names   []string
	pending int
	checked time.Time // when the store was last asked about names
}

// storeCheckEvery is how often, at most, a client at
// MaxStoredSessionsPerClient has the store asked which of its sessions are
// still there: each time costs a read of each one's head.
const storeCheckEvery = time.Second

// startCreate counts a session_create of client against
// MaxStoredSessionsPerClient: at the bound, it asks the store which of
// the client's sessions are still there (closed on any replica, or
// expired, they no longer count; at most every storeCheckEvery), and
// refuses if all are. End it with endCreate.
func (s *Server) startCreate(ctx context.Context, client any) (*storedBy, error) {
	limit := s.opts.MaxStoredSessionsPerClient
	for checked := false; ; checked = true {
		s.mu.Lock()
		sb := s.created[client]
		if sb == nil {
			sb = &storedBy{}
			s.created[client] = sb
		}
		if len(sb.names)+sb.pending < limit {
			sb.pending++
			s.mu.Unlock()
			return sb, nil
		}
		if checked || time.Since(sb.checked) < storeCheckEvery {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: this client has %d sessions in the store, its most: close one with session_close", errClientSessions, limit)
		}
		sb.checked = time.Now()
		names := slices.Clone(sb.names)
		s.mu.Unlock()
		var gone []string
		for _, name := range names {
			if _, err := s.opts.Store.Load(ctx, name); errors.Is(err, sessionstore.ErrNotFound) {
				gone = append(gone, name)
			} else if err != nil && ctx.Err() != nil {
				return nil, err
			}
		}
		s.mu.Lock()
		sb.names = slices.DeleteFunc(sb.names, func(n string) bool { return slices.Contains(gone, n) })
		s.mu.Unlock()
	}
}

// endCreate ends a session_create that startCreate counted, adding the
// session's name if it was started in the store.
func (s *Server) endCreate(client any, sb *storedBy, name string, started bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb.pending--
	if started {
		sb.names = append(sb.names, name)
	}
	s.forgetCreatorLocked(client, sb)
}

// forgetCreatorLocked forgets a client that has no session in the store
// and no session_create in progress.
func (s *Server) forgetCreatorLocked(client any, sb *storedBy) {
	if len(sb.names) == 0 && sb.pending == 0 && s.created[client] == sb {
		delete(s.created, client)
	}
}

func (s *Server) runStored(ctx context.Context, client any, in sessionRunInput, cfg *sandbox.RunOptions) (*mcp.CallToolResult, runOutput, error) {
	name, release, err := s.holdCall(ctx, in.SessionID)
	if err != nil {
		return nil, runOutput{}, err
	}
	defer release()
	var (
		res    *sandbox.Result
		runErr error
		w      *runtool.Watch
	)
	err = s.stored.Update(ctx, name, func(ctx context.Context, ss *sandbox.Session) error {
		// The lease first, then a run slot: a call holding a slot never
		// waits for a lease.
		done, err := s.acquireRun(ctx, client, cfg.Limits.Timeout)
		if err != nil {
			return err
		}
		defer done()
		w = runtool.WatchFiles(ss.Files().FS(), outputDir, s.maxImage())
		res, runErr = ss.Run(ctx, in.Code, cfg)
		if errors.Is(runErr, sandbox.ErrClosed) {
			return runErr // stopped with files open: nothing to commit
		}
		return nil
	})
	switch {
	case err == nil:
		return s.result(res, runErr, w)
	case res != nil && errors.Is(err, sandbox.ErrClosed):
		// The session was closed: the next call continues from the last
		// committed state.
		return s.result(res, runErr, nil)
	}
	return nil, runOutput{}, storeError(in.SessionID, err)
}

func (s *Server) filesStored(ctx context.Context, in filesInput) (*mcp.CallToolResult, filesOutput, error) {
	name, release, err := s.holdCall(ctx, in.SessionID)
	if err != nil {
		return nil, filesOutput{}, err
	}
	defer release()
	var (
		tr  *mcp.CallToolResult
		out filesOutput
	)
	op := func(_ context.Context, ss *sandbox.Session) error {
		var err error
		tr, out, err = s.fileOp(ss.Files(), in)
		return err
	}
	var opErr error
	if in.Op == "write" {
		err = s.stored.Update(ctx, name, op) // committed, under the lease
	} else {
		// Reads change nothing: under the lease, nothing to commit.
		err = s.stored.View(ctx, name, func(ctx context.Context, ss *sandbox.Session) error {
			opErr = op(ctx, ss)
			return nil
		})
	}
	if err != nil {
		if errors.Is(err, sessionstore.ErrNotFound) || errors.Is(err, sessionstore.ErrBusy) || errors.Is(err, sessionstore.ErrClosed) {
			return nil, filesOutput{}, storeError(in.SessionID, err)
		}
		return nil, filesOutput{}, err
	}
	return tr, out, opErr
}

func (s *Server) closeStored(ctx context.Context, client any, in sessionRef) (*mcp.CallToolResult, sessionRef, error) {
	name, ok := storedName(in.SessionID)
	if !ok {
		return nil, sessionRef{}, noSession(in.SessionID)
	}
	if _, err := s.opts.Store.Load(ctx, name); err != nil {
		return nil, sessionRef{}, storeError(in.SessionID, err)
	}
	if err := s.stored.Delete(ctx, name); err != nil {
		return nil, sessionRef{}, storeError(in.SessionID, err)
	}
	// It no longer counts for the client that closed it; a session closed
	// by another client, or on another replica, stops counting for its
	// creator when startCreate next asks the store.
	s.mu.Lock()
	if sb := s.created[client]; sb != nil {
		sb.names = slices.DeleteFunc(sb.names, func(n string) bool { return n == name })
		s.forgetCreatorLocked(client, sb)
	}
	s.mu.Unlock()
	return nil, in, nil
}
