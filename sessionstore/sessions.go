package sessionstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fumehood/fumehood/sandbox"
)

// Defaults of SessionsOptions.
const (
	// DefaultLeaseTTL is SessionsOptions.LeaseTTL's default.
	DefaultLeaseTTL = 30 * time.Second
	// DefaultMaxLive is SessionsOptions.MaxLive's default.
	DefaultMaxLive = 16
	// DefaultHibernateAfter is SessionsOptions.HibernateAfter's default.
	DefaultHibernateAfter = 10 * time.Second
	// DefaultSweepEvery is SessionsOptions.SweepEvery's default.
	DefaultSweepEvery = time.Minute
)

// SessionsOptions configure Sessions. The zero value gives new and resumed
// sessions the sandbox package's defaults, and the defaults above.
type SessionsOptions struct {
	// Config configures new sessions and resumed ones (their limits,
	// network, mounts; a resumed session's environment is its snapshot's).
	Config *sandbox.Config
	// LeaseTTL is how long a call holds its conversation without renewing
	// it; a call renews it every third of that, so it bounds how long a
	// conversation stays held after its replica died. 0 means
	// DefaultLeaseTTL.
	LeaseTTL time.Duration
	// MaxLive bounds the sessions kept live between calls, so that a
	// conversation's next call here skips the resume; 0 means
	// DefaultMaxLive, a negative value keeps none. A process that keeps
	// none (a command, a function) may end right after a call, so its
	// calls drop the snapshot they replaced before they return; others
	// drop it after (Close waits for those).
	MaxLive int
	// HibernateAfter hibernates a live session once it had no call for
	// that long (it then holds only the pages its code changed, and its
	// next call wakes it, in about as long as a resume); 0 means
	// DefaultHibernateAfter, a negative value hibernates it after each
	// call. Until then it stays awake: its next call starts at once, and
	// it holds its whole linear memory.
	HibernateAfter time.Duration
	// SweepEvery is how often Sessions on a directory store runs a Sweep
	// (bounded by the store's Options.SweepBatch) on a goroutine of its
	// own: expired conversations and orphan snapshots go even if no one
	// loads them again. 0 means DefaultSweepEvery, a negative value never.
	// Other stores expire records themselves.
	SweepEvery time.Duration
}

// Sessions runs the calls of conversations kept in a Store, one call of a
// conversation at a time across every process sharing the store. It keeps
// recently used sessions live, with the head revision they hold: a call
// whose head has not moved runs on the live session after one revision
// check; any other resumes the head's snapshot. It is safe for concurrent
// use.
type Sessions struct {
	st   Store
	py   *sandbox.Guest
	opts SessionsOptions

	mu     sync.Mutex
	live   map[string]*liveSession
	turns  map[string]*turn // the calls of this process waiting for a conversation
	clock  uint64           // counts kept sessions, to find the least recently used
	closed bool

	drops sync.WaitGroup // the snapshots being dropped after their call (dropLater)

	stopSweep func() // stops the sweeps, and waits for one in progress
}

// turn lines up this process's calls of a conversation, so that one at a
// time asks the store for its lease: polling callers of one process would
// otherwise compete, and one could lose every round until ErrBusy.
type turn struct {
	ch      chan struct{} // holding the turn is a send
	waiters int           // calls holding or waiting for it; under Sessions.mu
}

// liveSession is a session in memory and the head it is at.
type liveSession struct {
	s     *sandbox.Session
	head  Head
	used  uint64      // Sessions.clock when it was kept
	sleep *time.Timer // hibernates it; nil once it is
}

// NewSessions returns Sessions that keep the conversations in st and run
// them on py, the Python guest (sandbox.CompilePython).
func NewSessions(st Store, py *sandbox.Guest, opts *SessionsOptions) *Sessions {
	var o SessionsOptions
	if opts != nil {
		o = *opts
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.MaxLive == 0 {
		o.MaxLive = DefaultMaxLive
	}
	if o.HibernateAfter == 0 {
		o.HibernateAfter = DefaultHibernateAfter
	}
	if o.SweepEvery == 0 {
		o.SweepEvery = DefaultSweepEvery
	}
	c := &Sessions{st: st, py: py, opts: o, live: map[string]*liveSession{}, turns: map[string]*turn{}, stopSweep: func() {}}
	if s, ok := st.(*store); ok && o.SweepEvery > 0 {
		if _, ok := s.b.(*Dir); ok {
			c.stopSweep = sweepEvery(s, o.SweepEvery)
		}
	}
	return c
}

// sweepEvery sweeps the store's directory every period until stop.
func sweepEvery(s *store, period time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				sctx, scancel := context.WithTimeout(ctx, sweepTimeout)
				_, _ = Sweep(sctx, s.b, &s.opts) // best effort: the next one goes on
				scancel()
			}
		}
	}()
	return func() { cancel(); <-done }
}

// Do runs one call of a conversation: it waits for this process's earlier
// calls of the conversation, then takes its lease (each wait bounded by the
// store's LeaseWait, then ErrBusy), brings its session
// (the live one if the head has not moved, else resumed from the head's
// snapshot, else a new one: fresh is true), calls run, snapshots the
// session, stores the snapshot and commits it as the new head, and
// releases the lease.
//
// The call's effects are kept if Do returns nil. An error from run, a
// session that cannot be snapshotted, a lost lease (ErrLeaseLost) or a
// head that moved (ErrConflict: another process committed first) commit
// nothing: the conversation stays at its last committed state, and the
// session run worked on is closed, never used again. A commit that fails
// otherwise (ErrUnavailable) may still have landed, its acknowledgement
// lost: the next call continues from whichever head the store holds.
func (c *Sessions) Do(ctx context.Context, name string, run func(ctx context.Context, s *sandbox.Session, fresh bool) error) error {
	return c.do(ctx, name, doCreate, run)
}

// Update is Do on a conversation that exists: one without a head (never
// started, deleted, expired) is ErrNotFound, checked before the lease is
// taken and again under it, and nothing runs. Start begins one.
func (c *Sessions) Update(ctx context.Context, name string, run func(ctx context.Context, s *sandbox.Session) error) error {
	return c.do(ctx, name, doUpdate, func(ctx context.Context, s *sandbox.Session, _ bool) error { return run(ctx, s) })
}

// View is Update for a call that does not change the session, such as
// reading its files: it holds the lease while view runs, and commits
// nothing; the session stays live at the head it was at.
func (c *Sessions) View(ctx context.Context, name string, view func(ctx context.Context, s *sandbox.Session) error) error {
	return c.do(ctx, name, doView, func(ctx context.Context, s *sandbox.Session, _ bool) error { return view(ctx, s) })
}

// The modes of do.
const (
	doCreate = iota // Do: a conversation without a head starts afresh
	doUpdate        // Update: it is ErrNotFound
	doView          // View: as Update, and nothing is committed
)

// Start begins a conversation with s as its first state: it stores its
// snapshot and commits it only if the conversation has no head (else
// ErrConflict, and nothing is written), and keeps s live. Start takes s
// over: it is closed if it is not kept.
func (c *Sessions) Start(ctx context.Context, name string, s *sandbox.Session) error {
	keep := false
	defer func() {
		if !keep {
			s.Close()
		}
	}()
	if c.isClosed() {
		return ErrClosed
	}
	ref, err := c.save(ctx, name, s)
	if err != nil {
		return err
	}
	head, err := c.st.Commit(ctx, name, Head{}, ref)
	if err != nil {
		if errors.Is(err, ErrConflict) {
			_ = c.st.Drop(ctx, name, ref)
		}
		return err
	}
	keep = c.keep(name, s, head)
	return nil
}

func (c *Sessions) do(ctx context.Context, name string, mode int, run func(ctx context.Context, s *sandbox.Session, fresh bool) error) error {
	if c.isClosed() {
		return ErrClosed
	}
	if mode != doCreate {
		// Checked before the lease too: a name that was never started
		// leaves no lease record behind.
		if _, err := c.st.Load(ctx, name); err != nil {
			if errors.Is(err, ErrNotFound) || errors.Is(err, ErrTampered) {
				c.drop(name)
			}
			return err
		}
	}
	leave, err := c.takeTurn(ctx, name)
	if err != nil {
		return err
	}
	defer leave()
	lease, err := c.st.Lease(ctx, name, c.opts.LeaseTTL)
	if err != nil {
		return err
	}
	defer func() {
		// A lease that cannot be released expires: the call's outcome
		// stands either way.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = lease.Release(rctx)
	}()
	rctx, lost := c.renew(ctx, lease)
	defer lost()

	head, err := c.st.Load(ctx, name)
	if errors.Is(err, ErrNotFound) && mode == doCreate {
		head, err = Head{}, nil
	}
	if errors.Is(err, ErrTampered) || errors.Is(err, ErrNotFound) {
		c.drop(name) // the store is under attack, or the conversation is gone: keep nothing of it
	}
	if err != nil {
		return err // any other failure leaves the live session as it was
	}
	s, fresh, err := c.bring(ctx, name, head)
	if err != nil {
		return err
	}
	keep := false
	defer func() {
		if !keep {
			s.Close()
		}
	}()
	if err := run(rctx, s, fresh); err != nil {
		if mode == doView && lost() == nil {
			keep = c.keep(name, s, head) // unchanged: it is still at head
		}
		if lerr := lost(); lerr != nil {
			return fmt.Errorf("%w (the run: %w)", lerr, err) // what stopped it
		}
		return err
	}
	if mode == doView {
		if err := lost(); err != nil {
			return err
		}
		keep = c.keep(name, s, head)
		return nil
	}
	ref, err := c.save(ctx, name, s)
	if err != nil {
		return err
	}
	// The commit needs the lease to be held: no one else can have taken
	// it while more than half of its ttl is left (its expiry is written
	// by this clock, and takers wait for it to pass); else it is renewed
	// first, which fails if it was lost.
	if time.Until(lease.Expires()) < c.opts.LeaseTTL/2 {
		if err := lease.Renew(ctx); err != nil {
			return err
		}
	}
	if err := lost(); err != nil {
		return err
	}
	next, err := c.st.Commit(ctx, name, head, ref)
	if err != nil {
		if errors.Is(err, ErrConflict) {
			// Nothing was written. Any other failure may have landed,
			// its acknowledgement lost: the snapshot stays.
			_ = c.st.Drop(ctx, name, ref)
		}
		return err
	}
	if head.Revision != 0 { // no head points to it
		if c.opts.MaxLive < 0 {
			_ = c.st.Drop(ctx, name, head.Ref)
		} else {
			c.dropLater(ctx, name, head.Ref)
		}
	}
	keep = c.keep(name, s, next)
	return nil
}

// dropTimeout bounds dropping a snapshot after its call.
const dropTimeout = 30 * time.Second

// dropLater drops a snapshot that no head points to any more, on a
// goroutine of its own: the call's outcome does not depend on it, and on
// NATS it is four requests (0.3 ms) the caller would wait for. Close
// waits for it. One that fails stays, invisible, until the buckets' max
// age removes it (on a directory, Sweep does once it is older than the
// store's Options.OrphanAge).
func (c *Sessions) dropLater(ctx context.Context, name string, ref Ref) {
	c.drops.Add(1)
	go func() {
		defer c.drops.Done()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
		defer cancel()
		_ = c.st.Drop(dctx, name, ref)
	}()
}

// takeTurn waits for this process's earlier calls of a conversation, in
// about the order they came; leave lets the next one go.
func (c *Sessions) takeTurn(ctx context.Context, name string) (leave func(), _ error) {
	c.mu.Lock()
	t := c.turns[name]
	if t == nil {
		t = &turn{ch: make(chan struct{}, 1)}
		c.turns[name] = t
	}
	t.waiters++
	c.mu.Unlock()
	done := func() {
		c.mu.Lock()
		if t.waiters--; t.waiters == 0 {
			delete(c.turns, name)
		}
		c.mu.Unlock()
	}
	leave = func() { <-t.ch; done() }
	select {
	case t.ch <- struct{}{}:
		return leave, nil
	default:
	}
	var timeout <-chan time.Time
	if w, ok := c.st.(interface{ leaseWait() time.Duration }); ok {
		timer := time.NewTimer(max(w.leaseWait(), 0))
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case t.ch <- struct{}{}:
		return leave, nil
	case <-timeout:
		done()
		return nil, fmt.Errorf("%w: %q is held by another call of this process", ErrBusy, name)
	case <-ctx.Done():
		done()
		return nil, fmt.Errorf("sessionstore: waiting for %q, held by another call: %w", name, context.Cause(ctx))
	}
}

// renew renews the lease every third of its ttl while a call runs; when
// that fails it cancels the returned context. stop ends the renewals and
// returns the loss, if any.
func (c *Sessions) renew(ctx context.Context, lease Lease) (_ context.Context, stop func() error) {
	rctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	var once sync.Once
	var loss error
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(c.opts.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := lease.Renew(rctx); err != nil && !errors.Is(err, context.Canceled) {
					loss = fmt.Errorf("the call ran past its lease: %w", err)
					cancel(loss)
					return
				}
			}
		}
	}()
	return rctx, func() error {
		once.Do(func() {
			close(done)
			<-finished
		})
		if loss == nil {
			return nil
		}
		if errors.Is(loss, ErrLeaseLost) {
			return loss
		}
		return fmt.Errorf("%w: %w", ErrLeaseLost, loss)
	}
}

// bring returns the session of a conversation at head: its live one if
// it holds head, else one resumed from head's snapshot, else (no head) a
// new one.
func (c *Sessions) bring(ctx context.Context, name string, head Head) (_ *sandbox.Session, fresh bool, _ error) {
	c.mu.Lock()
	l := c.live[name]
	delete(c.live, name)
	c.mu.Unlock()
	if l != nil {
		if l.sleep != nil {
			l.sleep.Stop() // it is taken out of the map: a firing timer finds nothing
		}
		if head.Revision != 0 && l.head.Revision == head.Revision && l.head.Ref == head.Ref {
			return l.s, false, nil
		}
		l.s.Close() // the head moved on elsewhere, or the conversation was deleted
	}
	if head.Revision == 0 {
		s, err := c.py.NewSession(ctx, c.opts.Config)
		if err != nil {
			return nil, false, err
		}
		return s, true, nil
	}
	data, err := c.st.Get(ctx, name, head.Ref)
	if err != nil {
		return nil, false, err
	}
	s, err := c.py.ResumeSession(ctx, bytes.NewReader(data), c.opts.Config)
	if err != nil {
		return nil, false, fmt.Errorf("sessionstore: resuming %q: %w", name, err)
	}
	return s, false, nil
}

// keep keeps a session live at head, closing the least recently used
// past MaxLive; false if it was not kept. It hibernates at once or after
// HibernateAfter.
func (c *Sessions) keep(name string, s *sandbox.Session, head Head) bool {
	if c.opts.MaxLive < 0 {
		return false
	}
	if c.opts.HibernateAfter < 0 && s.Hibernate() != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.clock++
	l := &liveSession{s: s, head: head, used: c.clock}
	if c.opts.HibernateAfter > 0 {
		l.sleep = time.AfterFunc(c.opts.HibernateAfter, func() { c.hibernate(name, l) })
	}
	c.live[name] = l
	for len(c.live) > c.opts.MaxLive {
		oldest := slices.MinFunc(keys(c.live), func(a, b string) int { return cmp.Compare(c.live[a].used, c.live[b].used) })
		c.live[oldest].close()
		delete(c.live, oldest)
	}
	return true
}

// hibernate hibernates a live session that had no call since it was
// kept. It leaves the map meanwhile: a call in between resumes from the
// store instead.
func (c *Sessions) hibernate(name string, l *liveSession) {
	c.mu.Lock()
	if c.live[name] != l {
		c.mu.Unlock()
		return // taken by a call, or closed
	}
	delete(c.live, name)
	c.mu.Unlock()
	if l.s.Hibernate() != nil {
		l.s.Close()
		return
	}
	l.sleep = nil
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.live[name] != nil {
		l.s.Close() // a newer session of the conversation was kept meanwhile
		return
	}
	c.live[name] = l
}

// close stops a live session's timer and closes it.
func (l *liveSession) close() {
	if l.sleep != nil {
		l.sleep.Stop()
	}
	l.s.Close()
}

func keys(m map[string]*liveSession) []string {
	k := make([]string, 0, len(m))
	for n := range m {
		k = append(k, n)
	}
	return k
}

// drop closes a conversation's live session, if any.
func (c *Sessions) drop(name string) {
	c.mu.Lock()
	l := c.live[name]
	delete(c.live, name)
	c.mu.Unlock()
	if l != nil {
		l.close()
	}
}

// Delete deletes a conversation from the store, holding its lease, and
// closes its live session: its next call starts a new session.
func (c *Sessions) Delete(ctx context.Context, name string) error {
	lease, err := c.st.Lease(ctx, name, c.opts.LeaseTTL)
	if err != nil {
		return err
	}
	defer lease.Release(context.WithoutCancel(ctx))
	c.drop(name)
	return c.st.Delete(ctx, name)
}

// Live returns how many sessions are kept live.
func (c *Sessions) Live() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.live)
}

func (c *Sessions) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close closes the live sessions and waits for the snapshots its calls
// replaced to be dropped from the store; calls in progress close theirs
// when they end, and later calls fail with ErrClosed. The store stays
// open.
func (c *Sessions) Close() error {
	c.mu.Lock()
	c.closed = true
	live := c.live
	c.live = map[string]*liveSession{}
	c.mu.Unlock()
	for _, l := range live {
		l.close()
	}
	c.stopSweep()
	c.drops.Wait()
	return nil
}

// save snapshots s and puts the bytes in the store as name's, for a commit.
func (c *Sessions) save(ctx context.Context, name string, s *sandbox.Session) (Ref, error) {
	var buf bytes.Buffer
	if err := s.Snapshot(&buf); err != nil {
		return Ref{}, fmt.Errorf("sessionstore: %q: snapshotting the session: %w", name, err)
	}
	return c.st.Put(ctx, name, buf.Bytes())
}
