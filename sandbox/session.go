package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/fumehood/fumehood/wasi"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/afero"

	"github.com/fumehood/fumehood/internal/snapshot"
)

// Errors of sessions.
var (
	// ErrOpenFiles reports a snapshot, fork or hibernation refused, or a
	// resume or fork that failed, because of a descriptor the guest holds
	// open that cannot be opened again (a file deleted while open, say).
	// The error is an *OpenFileError naming the descriptor and its path.
	ErrOpenFiles = errors.New("sandbox: an open file cannot be carried over")
)

// Session is a live Python interpreter whose state (variables, imports,
// functions, files in its in-memory root) lasts from one run to the next.
// It can be snapshotted to bytes and resumed later, in this process or
// another, and forked into independent copies.
//
// Between runs the interpreter is idle: it holds memory but no goroutine.
// A run stopped by a limit (deadline, fuel, output, memory) or a trap rolls
// the session back to where it was before that run: variables are as they
// were; files the run wrote stay written.
//
// Files and directories the guest holds open between runs (a sqlite3
// connection, a logging.FileHandler) are carried by snapshots, forks,
// hibernation and rollbacks: a new instance opens each again at the same
// descriptor number, path, access, flags and offset it had when the last
// run ended. A fork's in-memory root is a copy, so its open files there
// are its own; a volume's files are the same for both. Only what cannot be
// opened again (a file deleted while open) stops a snapshot, fork or
// hibernation, with an *OpenFileError; a rollback or a wake from
// hibernation leaves such a descriptor closed.
//
// A Session is safe for use by one goroutine at a time; calls from several
// goroutines are serialized. Close it to release its memory.
type Session struct {
	g   *Guest
	cfg Config // the limits resolved are sb.limits

	mu sync.Mutex
	// stopRun cancels the run in progress, if any, so that Close need not
	// wait for its deadline. It has its own lock: mu is held by the run.
	stopMu  sync.Mutex
	stopRun context.CancelFunc
	closed  bool
	reason  error // why the session was closed, if not by Close

	sb     *Sandbox
	root   afero.Fs // the in-memory root, nil when a mount replaces it
	layout []snapshot.Mount
	base   *baseImage
	ckpt   *checkpoint
	// fds are the descriptors open at the checkpoint, which a new
	// instance opens again.
	fds   []snapshot.Descriptor
	inst  *instance
	env   map[string]string
	runs  int64
	slept time.Duration // deterministic clock: time slept by all runs
	// settle, while not nil, receives (an error or nothing, then closes)
	// once the checkpoint of the last run is taken: the driver's sessions
	// take it after Run returned. See settled.
	settle chan settling
	// abandon tells the checkpoint being taken after Run returned that
	// the session was closed meanwhile: it stops, since nothing will
	// read it.
	abandon atomic.Bool
	reseed  bool      // send a new random seed with the next run
	sendEnv bool      // send the environment with the next run
	rand    io.Reader // the session's random source
}

// NewSession starts a session: a fresh interpreter from the guest's base
// image for the session's mount layout (taken at the first NewSession of
// that layout, in about half a second), with a fresh random seed (for the
// random module and tempfile's names) and exactly cfg.Env as environment.
func (g *Guest) NewSession(ctx context.Context, cfg *Config) (*Session, error) {
	s, err := g.prepareSession(cfg, nil)
	if err != nil {
		return nil, err
	}
	base, err := g.base(ctx, s.layout)
	if err != nil {
		return nil, err
	}
	s.base = base
	s.ckpt = &checkpoint{size: uint64(base.size)}
	s.sendEnv, s.reseed = true, true
	if err := s.instantiate(ctx, true); err != nil {
		return nil, err
	}
	return s, nil
}

// prepareSession checks cfg and sets up a session's filesystem and layout.
//
// fill, if not nil, fills the in-memory root instead of the usual /tmp and
// /work.
func (g *Guest) prepareSession(cfg *Config, fill func(afero.Fs) error) (*Session, error) {
	if !g.python {
		return nil, ErrNotPython
	}
	if g.isClosed() {
		return nil, ErrClosed
	}
	c := *c0(cfg)
	if c.TotalFuel < 0 {
		return nil, fmt.Errorf("sandbox: negative TotalFuel %d", c.TotalFuel)
	}
	if err := checkEnv(c.Env); err != nil {
		return nil, err
	}
	for _, m := range c.Mounts {
		if m.Path == controlPath || hasPrefixPath(m.Path, controlPath) {
			return nil, fmt.Errorf("sandbox: mount path %s is reserved for fumehood's control directory", m.Path)
		}
	}
	mounts := append([]Mount(nil), c.Mounts...)
	var root afero.Fs
	if !slices.ContainsFunc(mounts, func(m Mount) bool { return m.Path == "/" }) {
		q := c.RootQuota
		if q == (wasi.Quota{}) {
			q = defaultRootQuota
		}
		root = afero.NewMemMapFs()
		if fill != nil {
			if err := fill(root); err != nil {
				return nil, err
			}
		} else if err := makeRoot(root, c.Mounts); err != nil {
			return nil, err
		}
		mounts = append([]Mount{{Path: "/", FS: root, Quota: q}}, mounts...)
	}
	ctl := afero.NewMemMapFs()
	mounts = append(mounts, Mount{Path: controlPath, FS: ctl, Quota: wasi.Quota{MaxBytes: 64 << 20, MaxFiles: 16}})
	sb, err := g.newSandbox(&Config{Mounts: mounts, HostCalls: c.HostCalls, Network: c.Network, Logger: c.Logger, Limits: c.Limits, TotalFuel: c.TotalFuel}, true)
	if err != nil {
		return nil, err
	}
	s := &Session{g: g, cfg: c, sb: sb, env: c.Env, root: root, layout: sb.layout(root != nil)}
	if c.Deterministic {
		s.rand = seededRand(c.Seed)
	} else {
		s.rand = rand.Reader
	}
	return s, nil
}

// instantiate gives the session a new instance holding its checkpoint and
// its open descriptors (s.fds, left holding those it opened again). When
// strict, a descriptor it cannot open again is an error (an
// *OpenFileError); otherwise it is left closed.
func (s *Session) instantiate(ctx context.Context, strict bool) error {
	if err := s.ckpt.unpack(); err != nil {
		return err
	}
	clock := &sessionClock{s: s, in: &s.inst}
	in, err := s.g.newInstance(ctx, s.sb.fscfg, clock, s.rand, nil, uint64(s.sb.limits.Memory), s.ckpt.size)
	if err != nil {
		return err
	}
	if err := s.ckpt.restore(s.base, in.mod, in.linear); err != nil {
		in.close()
		return err
	}
	kept, err := s.reopenFiles(in, s.fds, strict)
	if err != nil {
		in.close()
		return err
	}
	s.fds = kept
	s.inst = in
	return nil
}

// Run runs Python code in the session and waits for it to finish. When the
// code ends in an expression, Result.Value holds its repr (unless it is
// None), as in the interactive interpreter.
//
// An exception raised by the code returns an *Exception (also in
// Result.Exception); SystemExit(n) with n != 0 returns an *ExitError. Both
// leave the session as the code left it. A run stopped by a limit returns
// the limit's error, as Guest.Run does, and rolls the session back.
//
// opts' Limits can only lower the session's. opts.Stdin, if set, is what
// the code reads from sys.stdin.
func (s *Session) Run(ctx context.Context, code string, opts *RunOptions) (*Result, error) {
	return s.do(ctx, &code, opts)
}

func (s *Session) do(ctx context.Context, code *string, opts *RunOptions) (*Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.settled() {
		return nil, s.closedErr()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.setStopRun(cancel)
	defer s.setStopRun(nil)
	ctx, r, err := s.sb.begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	if r.stopped() {
		return r.end(nil, memStats{}, nil)
	}
	// Deterministic clocks go on from where the session's last run left them.
	r.state.setClocks(ctx, s.cfg.Deterministic, s.sb.fuelUsed+int64(s.slept), func(d time.Duration) { s.slept += d })
	if s.inst == nil {
		// Hibernating: bring the interpreter back from the checkpoint.
		if err := s.instantiate(ctx, false); err != nil {
			return r.fail(err)
		}
	}
	in := s.inst
	_, body, err := s.request(code, r.limits.MaxOutput)
	if err != nil {
		return r.fail(err)
	}
	if r.opts.Stdin != nil {
		in.userIn = newStdin(ctx, r.opts.Stdin, r.state)
	}
	in.stdout.w, in.stderr.w = r.stdout, r.stderr
	in.mem.mem.limit = uint64(r.limits.Memory)
	refusedBefore := in.mem.mem.refused
	defer func() {
		in.stdout.w, in.stderr.w, in.userIn = nil, nil, nil
	}()

	r.started = time.Now()
	out, runErr := in.execDriver(ctx, r.state, r.budget, &s.sb.errno, body, r.limits.MaxOutput)
	mem := memStats{peak: int64(in.mem.mem.peak), hit: in.mem.mem.refused > refusedBefore}
	s.runs++
	res, err := r.end(runErr, mem, out)
	if out != nil && res.Stop == StopExit {
		s.sendEnv, s.reseed = false, false
		// The instance is idle until the next call, which waits for the
		// checkpoint (settled) only if it comes before it is taken.
		done := make(chan settling, 1)
		s.settle = done
		ck := s.ckpt
		s.g.background.Add(1)
		go func() {
			var out settling
			defer func() {
				if p := recover(); p != nil {
					out.err = fmt.Errorf("%w taking a checkpoint: %v", errInternal, p)
				}
				done <- out
				s.g.background.Done()
			}()
			out.fds = s.takeCheckpoint(ck, in, &s.abandon)
		}()
		return res, err
	}
	if err == nil {
		// The interpreter exited with status 0 (os._exit(0)): the run
		// ended early all the same.
		err = &ExitError{Code: 0}
	}
	s.rollback(ctx)
	return res, err
}

// setStopRun sets what Close calls to stop the run in progress.
func (s *Session) setStopRun(cancel context.CancelFunc) {
	s.stopMu.Lock()
	s.stopRun = cancel
	s.stopMu.Unlock()
}

// checkpoint makes the state the run left in the instance the one a
// stopped run rolls back to.
func (s *Session) checkpoint(in *instance) {
	s.fds = s.takeCheckpoint(s.ckpt, in, nil)
}

// takeCheckpoint updates ck with the state of in and returns the
// descriptors a rollback to it opens again. One that cannot be (deleted
// while open) is left out: a snapshot names it, since it describes the
// live instance. It reads only in, ck and what does not change while the
// session lives, so it can run while the session is idle. If stop is set
// (the session was closed while it ran), it returns early, leaving ck
// partly updated: only for a checkpoint nothing will read again.
func (s *Session) takeCheckpoint(ck *checkpoint, in *instance, stop *atomic.Bool) []snapshot.Descriptor {
	if stopped(stop) {
		return nil
	}
	// ck holds what the memory held at the last checkpoint (or at the
	// restore): where the kernel tracks the pages written since, only
	// those are compared; else all are, and tracking starts, before the
	// comparison, so a page written meanwhile is compared again next time.
	// Which pages are unpopulated is asked first: tracking marks every
	// unpopulated page write-protected, and the kernel then reports it
	// as swapped out, so asked after, none would be, and the comparison
	// and trimOnce would read (and populate) the whole memory.
	m := in.mem.mem
	if pages, ok := m.written(); ok {
		ck.updateWritten(s.base, m.buf, s.g.deadStack(), pages, stop)
	} else {
		dead := s.g.deadStack()
		zero := m.unpopulated(dead)
		if stopped(stop) {
			return nil
		}
		m.track()
		ck.update(s.base, m.buf, dead, zero, stop)
		m.trimOnce(zero)
	}
	if stopped(stop) {
		return nil
	}
	if fds, _, err := s.describeFiles(in); err == nil {
		return fds
	}
	return nil
}

// stopped reports whether stop, if any, is set.
func stopped(stop *atomic.Bool) bool { return stop != nil && stop.Load() }

// settling is what a checkpoint taken after Run returned reports.
type settling struct {
	fds []snapshot.Descriptor
	err error
}

// settled waits for the checkpoint of the last run, if it is being taken,
// and reports whether the session is still open. Every call that reads or
// replaces the instance, the checkpoint or the open descriptors, under mu,
// calls it first.
func (s *Session) settled() bool {
	if s.settle == nil {
		return !s.closed
	}
	out := <-s.settle
	s.settle = nil
	if out.err != nil {
		s.closeLocked(out.err)
	} else {
		s.fds = out.fds
	}
	return !s.closed
}

// rollback replaces the instance, stopped mid-run, with a new one at the
// checkpoint; if that fails, the session is closed.
func (s *Session) rollback(ctx context.Context) {
	s.inst.close()
	s.inst = nil
	if err := s.instantiate(context.WithoutCancel(ctx), false); err != nil {
		s.closeLocked(fmt.Errorf("rolling back after a stopped run: %w", err))
	}
}

// Hibernate releases the session's interpreter while it is idle: only the
// pages that differ from the base image (and the in-memory files) stay in
// memory, a fraction of a live session's. The next Run, Fork or Snapshot
// works as before; Run first brings the interpreter back, in about as long
// as NewSession takes. Servers holding many idle sessions hibernate them.
//
// Files the guest holds open are opened again when it wakes, at the same
// descriptors and offsets. Hibernate fails with an *OpenFileError
// (matching ErrOpenFiles), and the session stays as it was, when one of
// them cannot be (a file deleted while open).
func (s *Session) Hibernate() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.settled() {
		return s.closedErr()
	}
	if s.inst == nil {
		return nil
	}
	fds, err := s.carriedFiles()
	if err != nil {
		return err
	}
	s.inst.close()
	s.inst = nil
	s.fds = fds
	// Kept compressed until it wakes: a failure only costs memory.
	_ = s.ckpt.pack()
	return nil
}

// FuelUsed returns the fuel used by all the session's runs.
func (s *Session) FuelUsed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sb.fuelUsed
}

// Runs returns how many runs the session has had, counting those of the
// session it was resumed or forked from.
func (s *Session) Runs() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs
}

// Close releases the session's interpreter. A closed session cannot run,
// snapshot or fork.
func (s *Session) Close() error {
	s.stopMu.Lock()
	if s.stopRun != nil {
		s.stopRun()
	}
	s.stopMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked(nil)
	return nil
}

func (s *Session) closeLocked(reason error) {
	if s.closed {
		return
	}
	if s.settle != nil {
		// The checkpoint reads the instance and the mounts: they are
		// released once it is taken, and Close does not wait for it.
		// The sandbox is closed now for its files; its host-call
		// server, which a descriptor's description may read, after.
		s.abandon.Store(true) // the checkpoint is of no use now
		done, in, host := s.settle, s.inst, s.sb.shut()
		s.settle, s.inst, s.ckpt = nil, nil, nil
		s.closed, s.reason = true, reason
		s.g.background.Add(1)
		go func() {
			defer s.g.background.Done()
			<-done
			in.close()
			if host != nil {
				host.Close()
			}
		}()
		return
	}
	s.closed, s.reason = true, reason
	s.inst.close()
	s.inst = nil
	s.ckpt = nil
	s.sb.Close()
}

func (s *Session) closedErr() error {
	if s.reason != nil {
		return fmt.Errorf("%w: %w", ErrClosed, s.reason)
	}
	return ErrClosed
}
