// Package sessionstore keeps conversations' sessions between calls, in a
// store any process can reach: a local directory (one machine, any number
// of processes) or NATS JetStream (package natsstore), so that a session
// outlives the process that made it and any replica serves any
// conversation.
//
// A conversation is a small head record (the content address of its latest
// snapshot, a revision, times) and immutable snapshot bytes. Commit moves a
// head only if its revision is still the one loaded (compare-and-swap); a
// lease lets one caller at a time work on a conversation.
//
//	st, err := sessionstore.Open(ctx, "/var/lib/fumehood/sessions", &sessionstore.Options{Key: key})
//	convs := sessionstore.NewSessions(st, py, nil)
//	err = convs.Do(ctx, "conv-42", func(ctx context.Context, s *sandbox.Session, fresh bool) error {
//		_, err := s.Run(ctx, "x += 1", nil)
//		return err
//	})
//
// With Options.Key set, heads, leases and snapshots carry an HMAC-SHA256
// tag under that key and a record without a valid one is refused
// (ErrTampered; a lease without one is free to take): a process that does
// not hold the key cannot make another resume bytes of its choosing.
// Without a key, the store is trusted: whoever can write to it chooses the
// state, and so the code, that sessions resume.
//
// Whatever the key, nothing is read before it is bounded: a record longer
// than its bound, or in a directory store not a regular file, is
// ErrTampered and costs at most the bound; a lease's expiry counts for at
// most a lease's ttl after its holder last renewed it.
package sessionstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Errors of a Store (errors.Is).
var (
	// ErrNotFound: the conversation has no head (never committed,
	// deleted, or expired after Options.TTL without a commit).
	ErrNotFound = errors.New("sessionstore: no such conversation")
	// ErrConflict: the head moved since it was loaded, or the snapshot to
	// commit is gone (swept as an orphan); nothing was written.
	ErrConflict = errors.New("sessionstore: the conversation's head moved since it was loaded")
	// ErrBusy: another caller held the conversation's lease for longer
	// than Options.LeaseWait.
	ErrBusy = errors.New("sessionstore: the conversation is busy with another call")
	// ErrLeaseLost: the lease expired and another caller took it, or it was
	// released.
	ErrLeaseLost = errors.New("sessionstore: the conversation's lease was lost")
	// ErrTampered: a head or snapshot lacks a valid tag under Options.Key,
	// its bytes do not match their content address, or it is not a record
	// at all: longer than its bound (a head or lease: MaxRecord), or in a
	// directory store a link, a device or a FIFO. It is not used, and reading it cost at most its
	// bound.
	ErrTampered = errors.New("sessionstore: a record failed its integrity check")
	// ErrBadName: a conversation name outside CheckName's rules.
	ErrBadName = errors.New("sessionstore: bad conversation name")
	// ErrFull: the store has no room for a snapshot or record (a full
	// disk or quota; a NATS bucket at its max bytes); nothing was written.
	ErrFull = errors.New("sessionstore: the store is full")
	// ErrUnavailable: the store could not be reached.
	ErrUnavailable = errors.New("sessionstore: the store is unavailable")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("sessionstore: closed")
)

// Defaults of Options.
const (
	// DefaultTTL is Options.TTL's default: a conversation without a commit
	// for a day expires.
	DefaultTTL = 24 * time.Hour
	// DefaultLeaseWait is Options.LeaseWait's default.
	DefaultLeaseWait = 10 * time.Second
	// DefaultOrphanAge is Options.OrphanAge's default. A snapshot is put
	// before its head is committed, so a snapshot no head points to may be
	// a commit in flight; in Sessions that commit follows the put within
	// one lease renewal at most, and a call commits only while it holds
	// its lease (DefaultLeaseTTL, 30 s): an hour is over a hundred times
	// that window.
	DefaultOrphanAge = time.Hour
	// DefaultSweepBatch is Options.SweepBatch's default.
	DefaultSweepBatch = 1000
)

// Options configure a Store. The zero value is a trusted store (no key),
// DefaultTTL and DefaultLeaseWait.
type Options struct {
	// Key, if set, is the operator's secret: heads, leases and snapshots are tagged
	// with HMAC-SHA256 under it, and records without a valid tag are
	// refused with ErrTampered. Every replica sharing a store needs the
	// same key. At least 16 bytes.
	Key []byte
	// TTL expires a conversation that had no commit for that long; 0 means
	// DefaultTTL, a negative value never.
	TTL time.Duration
	// LeaseWait bounds how long Lease waits for a conversation held by
	// another caller before ErrBusy; 0 means DefaultLeaseWait, a negative
	// value does not wait.
	LeaseWait time.Duration
	// OrphanAge is how old a snapshot no head points to must be before
	// Sweep removes it from a directory store (a replica that died after
	// its put, or before it dropped the snapshot its commit replaced); 0
	// means DefaultOrphanAge, a negative value never. A commit of a
	// snapshot swept meanwhile (put longer ago than this) fails with
	// ErrConflict and writes nothing: the sweep and the commit check the
	// snapshot under the head's lock. On NATS the snapshots' bucket's max
	// age removes orphans instead.
	OrphanAge time.Duration
	// SweepBatch bounds the work of one Sweep of a directory store: it
	// examines at most this many heads and this many snapshots, holding a
	// conversation's lock only while it removes that conversation's
	// orphans; the next Sweep goes on where it stopped. 0 means
	// DefaultSweepBatch.
	SweepBatch int
}

// Ref is a stored snapshot of a conversation: its content address and the
// name of its copy.
type Ref struct {
	// Digest is the SHA-256 of the snapshot's bytes, in hex.
	Digest string
	// Size is the snapshot's length in bytes.
	Size int64
	// ID names the stored copy: the digest, '-' and a random suffix, so
	// that each Put writes an object of its own that is never rewritten
	// (two writers of the same bytes cannot replace each other's copy
	// under a reader).
	ID string
}

// RefOf returns the content address of snapshot bytes (no ID).
func RefOf(data []byte) Ref {
	sum := sha256.Sum256(data)
	return Ref{Digest: hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

// Head is a conversation's latest state: which snapshot, at which revision.
type Head struct {
	Ref
	// Revision is the store's revision of the head: Commit succeeds only
	// while it is still the latest. It is never 0 for a stored head.
	Revision uint64
	// Created is when the conversation's first head was committed, Updated
	// when this one was.
	Created, Updated time.Time
}

// Store keeps conversations. Its methods are safe for concurrent use, by
// any number of processes sharing the same backing store.
type Store interface {
	// Load returns the conversation's head: ErrNotFound if it has none,
	// ErrTampered if it fails its integrity check.
	Load(ctx context.Context, name string) (Head, error)
	// Put stores snapshot bytes for the conversation and returns their
	// Ref. A stored snapshot is immutable; one no head points to is
	// invisible (Drop deletes it).
	Put(ctx context.Context, name string, data []byte) (Ref, error)
	// Get returns the bytes of a snapshot Put for the conversation,
	// checked against ref (ErrTampered) and, with a key, against their tag.
	Get(ctx context.Context, name string, ref Ref) ([]byte, error)
	// Commit makes ref the conversation's head if its head is still prev
	// (prev.Revision 0: the conversation has no head), and returns the new
	// head; ErrConflict when it moved, or (on a directory) when Sweep
	// removed ref's snapshot as an orphan, and then nothing was written.
	Commit(ctx context.Context, name string, prev Head, ref Ref) (Head, error)
	// Drop deletes a snapshot no head points to any more.
	Drop(ctx context.Context, name string, ref Ref) error
	// Delete deletes the conversation's head and its snapshot. Deleting a
	// conversation without a head does nothing.
	Delete(ctx context.Context, name string) error
	// Lease takes the conversation for ttl: until it expires or is
	// released, other callers' Lease waits (Options.LeaseWait, ctx), then
	// fails with ErrBusy. An expired lease is taken over, and so is one
	// that stayed at the same revision (unrenewed) for ttl whatever expiry
	// it claims, one that is not a lease, and with a key one without a
	// valid tag.
	Lease(ctx context.Context, name string, ttl time.Duration) (Lease, error)
	// Close releases the store's connections.
	Close() error
}

// Lease is a hold on a conversation, until it expires or is released.
type Lease interface {
	// Renew extends the lease by its ttl from now; ErrLeaseLost when it
	// expired and another caller took it, or it was released.
	Renew(ctx context.Context) error
	// Release gives the conversation up. Releasing a lost lease does
	// nothing.
	Release(ctx context.Context) error
	// Expires is when the lease expires unless renewed.
	Expires() time.Time
}

// New returns a Store on a backend, with its options (nil: the defaults).
func New(b Backend, opts *Options) (Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Key != nil && len(o.Key) < 16 {
		return nil, fmt.Errorf("sessionstore: the key is %d bytes: give at least 16", len(o.Key))
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.LeaseWait == 0 {
		o.LeaseWait = DefaultLeaseWait
	}
	if o.OrphanAge == 0 {
		o.OrphanAge = DefaultOrphanAge
	}
	if o.SweepBatch <= 0 {
		o.SweepBatch = DefaultSweepBatch
	}
	o.Key = append([]byte(nil), o.Key...)
	return &store{b: b, opts: o, now: time.Now, seen: map[string]seenLease{}}, nil
}

// store is a Store on a Backend: names checked, records sealed, leases and
// expiry kept, the same for every backend.
type store struct {
	b    Backend
	opts Options
	now  func() time.Time

	seenMu sync.Mutex
	seen   map[string]seenLease // leases held by others, when first seen (leaseEnd)
}

func (s *store) Load(ctx context.Context, name string) (Head, error) {
	h, _, err := s.load(ctx, name)
	return h, err
}

// load is Load, saying whether the head it found expired (and was
// removed).
func (s *store) load(ctx context.Context, name string) (_ Head, expired bool, _ error) {
	if err := CheckName(name); err != nil {
		return Head{}, false, err
	}
	raw, rev, err := s.b.Get(ctx, Heads, name)
	if err != nil {
		return Head{}, false, fmt.Errorf("sessionstore: loading %q: %w", name, err)
	}
	h, err := s.openHead(name, raw)
	if err != nil {
		return Head{}, false, fmt.Errorf("sessionstore: loading %q: %w", name, err)
	}
	h.Revision = rev
	if s.opts.TTL > 0 && s.now().Sub(h.Updated) > s.opts.TTL {
		// Best effort: the next Load says the same if this fails.
		if s.b.Remove(ctx, Heads, name, rev) == nil {
			_ = s.b.RemoveBlob(ctx, name, h.ID)
		}
		return Head{}, true, fmt.Errorf("sessionstore: loading %q: %w (expired after %v without a commit)", name, ErrNotFound, s.opts.TTL)
	}
	return h, false, nil
}

func (s *store) Put(ctx context.Context, name string, data []byte) (Ref, error) {
	if err := CheckName(name); err != nil {
		return Ref{}, err
	}
	ref := RefOf(data)
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	ref.ID = ref.Digest + "-" + hex.EncodeToString(suffix[:])
	if err := s.b.PutBlob(ctx, name, ref.ID, s.sealBlob(name, ref, data)); err != nil {
		return Ref{}, fmt.Errorf("sessionstore: storing a snapshot of %q: %w", name, err)
	}
	return ref, nil
}

func (s *store) Get(ctx context.Context, name string, ref Ref) ([]byte, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if !validRef(ref) {
		return nil, fmt.Errorf("sessionstore: %q is not a stored snapshot", ref.ID)
	}
	raw, err := s.b.GetBlob(ctx, name, ref.ID)
	if err != nil {
		return nil, fmt.Errorf("sessionstore: reading the snapshot of %q: %w", name, err)
	}
	data, err := s.openBlob(name, ref, raw)
	if err != nil {
		return nil, fmt.Errorf("sessionstore: reading the snapshot of %q: %w", name, err)
	}
	return data, nil
}

func (s *store) Commit(ctx context.Context, name string, prev Head, ref Ref) (Head, error) {
	if err := CheckName(name); err != nil {
		return Head{}, err
	}
	if !validRef(ref) {
		return Head{}, fmt.Errorf("sessionstore: %q is not a stored snapshot", ref.ID)
	}
	now := s.now().UTC()
	h := Head{Ref: ref, Created: prev.Created, Updated: now}
	if prev.Revision == 0 || h.Created.IsZero() {
		h.Created = now
	}
	var rev uint64
	var err error
	if d, ok := s.b.(*Dir); ok {
		rev, err = d.setHead(ctx, name, s.sealHead(name, h), prev.Revision, ref.ID)
	} else {
		rev, err = s.b.Set(ctx, Heads, name, s.sealHead(name, h), prev.Revision)
	}
	if err != nil {
		return Head{}, fmt.Errorf("sessionstore: committing %q: %w", name, err)
	}
	h.Revision = rev
	return h, nil
}

func (s *store) Drop(ctx context.Context, name string, ref Ref) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if !validRef(ref) {
		return fmt.Errorf("sessionstore: %q is not a stored snapshot", ref.ID)
	}
	if err := s.b.RemoveBlob(ctx, name, ref.ID); err != nil {
		return fmt.Errorf("sessionstore: dropping a snapshot of %q: %w", name, err)
	}
	return nil
}

func (s *store) Delete(ctx context.Context, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	raw, _, err := s.b.Get(ctx, Heads, name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil && !errors.Is(err, ErrTampered) { // a record that is not a head still goes
		return fmt.Errorf("sessionstore: deleting %q: %w", name, err)
	}
	if err := s.b.Remove(ctx, Heads, name, 0); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("sessionstore: deleting %q: %w", name, err)
	}
	// A head that fails its check still goes; its snapshot is found only
	// from a valid one.
	if h, err := s.openHead(name, raw); err == nil {
		if err := s.b.RemoveBlob(ctx, name, h.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("sessionstore: deleting the snapshot of %q: %w", name, err)
		}
	}
	return nil
}

func (s *store) Close() error { return s.b.Close() }

// leaseWait is Options.LeaseWait, which Sessions also bounds its own
// waits by.
func (s *store) leaseWait() time.Duration { return s.opts.LeaseWait }

// validRef reports whether ref is a digest, a size and an ID made of the
// digest, '-' and 16 hex digits.
func validRef(ref Ref) bool {
	digest, suffix, ok := strings.Cut(ref.ID, "-")
	return ok && digest == ref.Digest && isHex(digest, 2*sha256.Size) && isHex(suffix, 16) && ref.Size >= 0
}

// isHex reports whether s is n lower-case hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
