package sessionstore

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// leaseRecord is a lease as stored. Its expiry is the taker's clock: the
// replicas sharing a store need clocks that agree to well within a lease's
// ttl.
type leaseRecord struct {
	Owner   string `json:"owner"`         // random, one per Lease call
	Expires int64  `json:"expires"`       // Unix nanoseconds
	Tag     string `json:"tag,omitempty"` // HMAC-SHA256 in hex; none without a key
}

// leaseTag is a lease's HMAC, over its conversation, owner and expiry.
func (s *store) leaseTag(name string, r *leaseRecord) string {
	m := hmac.New(sha256.New, s.opts.Key)
	for _, f := range []string{"fumehood-lease-v1", name, r.Owner, strconv.FormatInt(r.Expires, 10)} {
		m.Write([]byte(f))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil))
}

func (s *store) sealLease(name string, r leaseRecord) []byte {
	if s.opts.Key != nil {
		r.Tag = s.leaseTag(name, &r)
	}
	b, _ := json.Marshal(&r) // cannot fail: strings and integers
	return b
}

// openLease returns a stored lease's expiry; false if it is not a lease
// (unreadable; with a key, without a valid tag), which is free to take.
func (s *store) openLease(name string, raw []byte) (time.Time, bool) {
	var r leaseRecord
	if json.Unmarshal(raw, &r) != nil {
		return time.Time{}, false
	}
	if s.opts.Key != nil && !hmac.Equal([]byte(r.Tag), []byte(s.leaseTag(name, &r))) {
		return time.Time{}, false
	}
	return time.Unix(0, r.Expires), true
}

// maxSeen bounds the leases held by others that a store remembers seeing.
const maxSeen = 4096

// seenLease is when a store first saw a lease at a revision.
type seenLease struct {
	rev uint64
	at  time.Time
}

// leaseEnd is when a lease held by another caller expires for a taker
// with this ttl: its recorded expiry, but no later than ttl after this
// store first saw it at this revision. A holder renews its lease, writing
// a new revision, every third of its ttl; a record that claims more (a
// far-future expiry, forged or from a skewed clock) is over once no one
// renewed it for ttl.
func (s *store) leaseEnd(name string, rev uint64, expires time.Time, ttl time.Duration) time.Time {
	s.seenMu.Lock()
	defer s.seenMu.Unlock()
	seen, ok := s.seen[name]
	if !ok || seen.rev != rev {
		if !ok && len(s.seen) >= maxSeen {
			for k := range s.seen { // forget any one: it is seen anew
				delete(s.seen, k)
				break
			}
		}
		seen = seenLease{rev: rev, at: s.now()}
		s.seen[name] = seen
	}
	if end := seen.at.Add(ttl); end.Before(expires) {
		return end
	}
	return expires
}

// forgetLease forgets the lease of a conversation seen held.
func (s *store) forgetLease(name string) {
	s.seenMu.Lock()
	delete(s.seen, name)
	s.seenMu.Unlock()
}

// lease is a Lease on a store's Leases table, held while its record's
// revision is rev.
type lease struct {
	s     *store
	name  string
	owner string
	ttl   time.Duration

	mu      sync.Mutex
	rev     uint64 // 0 once released or lost
	expires time.Time
}

// Polling a held lease starts at minPoll and doubles up to maxPoll.
const (
	minPoll = 2 * time.Millisecond
	maxPoll = 25 * time.Millisecond
)

func (s *store) Lease(ctx context.Context, name string, ttl time.Duration) (Lease, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("sessionstore: a lease's ttl must be positive, not %v", ttl)
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	l := &lease{s: s, name: name, owner: hex.EncodeToString(id[:]), ttl: ttl}
	deadline := s.now().Add(s.opts.LeaseWait)
	for delay := minPoll; ; delay = min(2*delay, maxPoll) {
		err := l.try(ctx)
		if !errors.Is(err, ErrBusy) {
			if err != nil {
				return nil, fmt.Errorf("sessionstore: taking %q: %w", name, err)
			}
			return l, nil
		}
		left := deadline.Sub(s.now())
		if left <= 0 {
			return nil, fmt.Errorf("%w: %q is held by another call (waited %v)", ErrBusy, name, max(s.opts.LeaseWait, 0))
		}
		t := time.NewTimer(min(delay, left))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("sessionstore: waiting for %q, held by another call: %w", name, context.Cause(ctx))
		}
	}
}

// try takes the lease if no one holds it or its holder's expired;
// ErrBusy if it is held.
func (l *lease) try(ctx context.Context) error {
	raw, rev, err := l.s.b.Get(ctx, Leases, l.name)
	switch {
	case errors.Is(err, ErrNotFound):
		rev = 0
	case errors.Is(err, ErrTampered):
		// Not a lease (past MaxRecord, not a file): free, replaced at
		// the revision Get gave.
	case err != nil:
		return err
	default:
		// An unreadable lease, or one without a valid tag, is free.
		if exp, ok := l.s.openLease(l.name, raw); ok && l.s.now().Before(l.s.leaseEnd(l.name, rev, exp, l.ttl)) {
			return ErrBusy
		}
	}
	// The revision check makes a takeover one caller's: the others conflict.
	if err := l.write(ctx, rev, ErrBusy); err != nil {
		return err
	}
	l.s.forgetLease(l.name)
	return nil
}

// write stores the lease with a new expiry if its record is at revision
// rev; a conflict is lost.
func (l *lease) write(ctx context.Context, rev uint64, lost error) error {
	exp := l.s.now().Add(l.ttl)
	b := l.s.sealLease(l.name, leaseRecord{Owner: l.owner, Expires: exp.UnixNano()})
	n, err := l.s.b.Set(ctx, Leases, l.name, b, rev)
	if errors.Is(err, ErrConflict) {
		return fmt.Errorf("%w: %w", lost, err)
	}
	if err != nil {
		return err
	}
	l.rev, l.expires = n, exp
	return nil
}

func (l *lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rev == 0 {
		return fmt.Errorf("%w: %q", ErrLeaseLost, l.name)
	}
	err := l.write(ctx, l.rev, ErrLeaseLost)
	if errors.Is(err, ErrLeaseLost) {
		l.rev = 0
	}
	if err != nil {
		return fmt.Errorf("sessionstore: renewing the lease of %q: %w", l.name, err)
	}
	return nil
}

func (l *lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rev == 0 {
		return nil
	}
	err := l.s.b.Remove(ctx, Leases, l.name, l.rev)
	if err != nil && !errors.Is(err, ErrConflict) {
		return fmt.Errorf("sessionstore: releasing the lease of %q: %w", l.name, err)
	}
	l.rev = 0
	return nil
}

func (l *lease) Expires() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires
}
