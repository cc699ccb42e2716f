// Package sessionpool holds live sandbox sessions by key for the calls
// that use them, one call at a time each: the conversations of codetool's
// Tool and the sessions of the MCP server, one implementation for both.
// It bounds the sessions held (refusing past the bound, or closing the
// least recently used idle one to make room), closes sessions left idle,
// hibernates a session between calls, and remembers why a key's session
// was closed, for the note its next call gets. Each session belongs to an
// owner: a call of another owner does not find it.
//
// Sessions kept in a sessionstore.Store are sessionstore.Sessions' to
// hold; a pool holds the sessions of a process that has no store.
package sessionpool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fumehood/fumehood/sandbox"
)

// Errors of Acquire and Remove.
var (
	// ErrFull: Options.Max sessions are held, and none could be closed to
	// make room (no Evict, or every one has a call in progress).
	ErrFull = errors.New("sessionpool: every session is taken")
	// ErrNotFound: the key has no session of the owner, and Acquire was
	// given no way to open one.
	ErrNotFound = errors.New("sessionpool: no such session")
	// ErrClosed: the pool was closed.
	ErrClosed = errors.New("sessionpool: closed")
	// ErrWaiting: the caller's context ended while it waited for the
	// call in progress on the session; the error also wraps the
	// context's cause.
	ErrWaiting = errors.New("sessionpool: gave up waiting for the session's call in progress")
)

// Gone says why a key's previous session was closed.
type Gone int

// Why a session was closed by the pool.
const (
	// GoneIdle: no call for Options.IdleTimeout.
	GoneIdle Gone = iota + 1
	// GoneEvicted: closed to make room for another key's.
	GoneEvicted
)

// maxGone bounds the keys remembered as closed for being idle or to make
// room, to tell their next call.
const maxGone = 4096

// Options configure a Pool. The zero value holds any number of sessions
// for as long as their keys are used.
type Options struct {
	// Max bounds the sessions held or being opened; 0 means no bound.
	Max int
	// Evict lets a new session past Max close the session least recently
	// released that has no call in progress; without it, or when every
	// session has a call in progress, Acquire fails with ErrFull.
	Evict bool
	// IdleTimeout closes a session that had no call for that long; 0 or
	// a negative value never does.
	IdleTimeout time.Duration
	// OnFree, if set, is called (with no lock held) each time a session
	// leaves the pool, for a caller that accounts for the memory sessions
	// hold.
	OnFree func()
}

// Pool holds sessions by key. It is safe for concurrent use. O is the
// type of the sessions' owners (struct{} when there is one).
type Pool[O comparable] struct {
	opts Options

	mu      sync.Mutex
	closed  bool
	entries map[string]*entry[O]
	gone    map[string]Gone
	clock   uint64 // counts releases, to find the least recently used
}

// entry is a key's session. Holding its turn (a send) is holding the
// session for a call; ended, timer and used are under Pool.mu.
type entry[O comparable] struct {
	turn  chan struct{}
	owner O
	s     *sandbox.Session // nil while being opened
	ended bool             // closed and forgotten
	timer *time.Timer      // the idle timer
	used  uint64           // Pool.clock at the last release
}

// New returns an empty pool.
func New[O comparable](opts Options) *Pool[O] {
	return &Pool[O]{opts: opts, entries: map[string]*entry[O]{}, gone: map[string]Gone{}}
}

// Call is a session held for one call; end it with Release or Drop.
type Call[O comparable] struct {
	// Session is the key's session.
	Session *sandbox.Session
	// Fresh says the session was opened for this call; Gone then says
	// why the key's previous session was closed by the pool (0: it had
	// none, or it was closed otherwise).
	Fresh bool
	Gone  Gone

	p   *Pool[O]
	key string
	e   *entry[O]
}

// Acquire holds key's session of owner for one call, waiting for the call
// in progress on it until ctx is done (an error wrapping ErrWaiting and
// the context's cause). A key with no session gets one from open when
// open is not nil (a session of owner; open's error is Acquire's), past
// Options.Max only if one can be evicted (ErrFull otherwise); without
// open it is ErrNotFound, as is a key whose session is another owner's.
func (p *Pool[O]) Acquire(ctx context.Context, key string, owner O, open func(context.Context) (*sandbox.Session, error)) (*Call[O], error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		e := p.entries[key]
		if e == nil {
			if open == nil {
				p.mu.Unlock()
				return nil, ErrNotFound
			}
			if p.opts.Max > 0 && len(p.entries) >= p.opts.Max {
				var vkey string
				var victim *entry[O]
				if p.opts.Evict {
					vkey, victim = p.leastRecentLocked()
				}
				p.mu.Unlock()
				if victim == nil {
					return nil, ErrFull
				}
				p.end(vkey, victim, GoneEvicted)
				<-victim.turn
				continue
			}
			e = &entry[O]{turn: make(chan struct{}, 1), owner: owner}
			e.turn <- struct{}{}
			p.entries[key] = e
			why := p.gone[key]
			delete(p.gone, key)
			p.mu.Unlock()
			s, err := open(ctx)
			p.mu.Lock()
			closed, removed := p.closed, e.ended
			if err == nil && !closed && !removed {
				e.s = s
			}
			p.mu.Unlock()
			if err != nil || closed || removed {
				if err == nil {
					// Closed or removed (RemoveOwner) while it was opened.
					s.Close()
					err = ErrClosed
					if !closed {
						err = ErrNotFound
					}
				}
				p.end(key, e, 0)
				<-e.turn
				return nil, err
			}
			return &Call[O]{Session: s, Fresh: true, Gone: why, p: p, key: key, e: e}, nil
		}
		if e.owner != owner {
			p.mu.Unlock()
			return nil, ErrNotFound
		}
		p.mu.Unlock()
		select {
		case e.turn <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrWaiting, context.Cause(ctx))
		}
		p.mu.Lock()
		closed, ended := p.closed, e.ended
		if !closed && !ended && e.timer != nil {
			e.timer.Stop()
		}
		p.mu.Unlock()
		switch {
		case closed:
			<-e.turn
			return nil, ErrClosed
		case ended:
			<-e.turn // closed meanwhile (idle, removed): look again
			continue
		}
		return &Call[O]{Session: e.s, p: p, key: key, e: e}, nil
	}
}

// Ended reports whether the session was closed during the call (Drop,
// Remove, Close): the key's next call opens a new one.
func (c *Call[O]) Ended() bool {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.e.ended
}

// Release ends the call. Unless the session was closed meanwhile, it is
// hibernated if hibernate is set (only the memory pages its code changed
// stay held until the next call), becomes the most recently used, and its
// idle timer starts.
func (c *Call[O]) Release(hibernate bool) {
	p, e := c.p, c.e
	p.mu.Lock()
	ended := e.ended
	p.mu.Unlock()
	if !ended {
		if hibernate {
			// Open files are carried; one deleted while open keeps the
			// session awake (sandbox.ErrOpenFiles), which is fine.
			_ = e.s.Hibernate()
		}
		p.mu.Lock()
		p.clock++
		e.used = p.clock
		if d := p.opts.IdleTimeout; d > 0 && !p.closed && !e.ended {
			if e.timer == nil {
				e.timer = time.AfterFunc(d, func() { p.expire(c.key, e) })
			} else {
				e.timer.Reset(d)
			}
		}
		p.mu.Unlock()
	}
	<-e.turn
}

// Drop ends the call and closes the session, such as one a run left
// unusable (sandbox.ErrClosed): the key's next call opens a new one.
func (c *Call[O]) Drop() {
	c.p.end(c.key, c.e, 0)
	<-c.e.turn
}

// leastRecentLocked takes the turn of the session least recently
// released among those with no call in progress, and returns it; nil when
// every session has a call in progress or is being opened.
func (p *Pool[O]) leastRecentLocked() (string, *entry[O]) {
	keys := make([]string, 0, len(p.entries))
	for k := range p.entries {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(p.entries[a].used, p.entries[b].used) })
	for _, k := range keys {
		e := p.entries[k]
		select {
		case e.turn <- struct{}{}:
			return k, e
		default:
		}
	}
	return "", nil
}

// expire closes a session idle past the timeout, unless a call holds it.
func (p *Pool[O]) expire(key string, e *entry[O]) {
	select {
	case e.turn <- struct{}{}:
	default:
		return // a call holds it; its release restarts the timer
	}
	p.end(key, e, GoneIdle)
	<-e.turn
}

// end forgets and closes a session: one whose turn the caller holds, or
// any at Close. why, if not 0, is remembered for the key's next call.
func (p *Pool[O]) end(key string, e *entry[O], why Gone) {
	p.mu.Lock()
	if e.ended {
		p.mu.Unlock()
		return
	}
	e.ended = true
	if p.entries[key] == e {
		delete(p.entries, key)
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	if why != 0 {
		if len(p.gone) >= maxGone {
			clear(p.gone)
		}
		p.gone[key] = why
	}
	s := e.s
	p.mu.Unlock()
	if s != nil {
		s.Close()
	}
	if p.opts.OnFree != nil {
		p.opts.OnFree()
	}
}

// End closes key's session of owner once the call in progress on it, if
// any, has ended, waiting for it until ctx is done. A key without a
// session is no error.
func (p *Pool[O]) End(ctx context.Context, key string, owner O) error {
	c, err := p.Acquire(ctx, key, owner, nil)
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrClosed):
		return nil
	case errors.Is(err, ErrWaiting):
		return context.Cause(ctx)
	case err != nil:
		return err
	}
	c.Drop()
	return nil
}

// Remove closes key's session of owner now, stopping the call in progress
// on it (sandbox.Session.Close); ErrNotFound if it has none.
func (p *Pool[O]) Remove(key string, owner O) error {
	p.mu.Lock()
	e := p.entries[key]
	if e == nil || e.owner != owner {
		p.mu.Unlock()
		return ErrNotFound
	}
	p.mu.Unlock()
	p.end(key, e, 0)
	return nil
}

// RemoveOwner closes every session of owner now, as Remove.
func (p *Pool[O]) RemoveOwner(owner O) {
	p.mu.Lock()
	var keys []string
	var es []*entry[O]
	for k, e := range p.entries {
		if e.owner == owner {
			keys, es = append(keys, k), append(es, e)
		}
	}
	p.mu.Unlock()
	for i, e := range es {
		p.end(keys[i], e, 0)
	}
}

// Len returns the sessions held or being opened.
func (p *Pool[O]) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

// Idle returns the sessions held with no call in progress.
func (p *Pool[O]) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.entries {
		if e.s != nil && len(e.turn) == 0 {
			n++
		}
	}
	return n
}

// Close closes every session, stopping the runs in progress on them
// (sandbox.Session.Close); later calls of Acquire fail with ErrClosed. It
// does not wait for the calls in progress to end.
func (p *Pool[O]) Close() {
	p.mu.Lock()
	p.closed = true
	all := maps.Clone(p.entries)
	p.mu.Unlock()
	for k, e := range all {
		p.end(k, e, 0)
	}
}
