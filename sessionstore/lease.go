package sessionstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// leaseRecord is a lease as stored. Its expiry is the taker's clock: the
// replicas sharing a store need clocks that agree to well within a lease's
// ttl.
type leaseRecord struct {
	Owner   string `json:"owner"`   // random, one per Lease call
	Expires int64  `json:"expires"` // Unix nanoseconds
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
	case err != nil:
		return err
	default:
		var r leaseRecord
		// An unreadable lease counts as expired.
		if json.Unmarshal(raw, &r) == nil && l.s.now().UnixNano() < r.Expires {
			return ErrBusy
		}
	}
	// The revision check makes a takeover one caller's: the others conflict.
	return l.write(ctx, rev, ErrBusy)
}

// write stores the lease with a new expiry if its record is at revision
// rev; a conflict is lost.
func (l *lease) write(ctx context.Context, rev uint64, lost error) error {
	exp := l.s.now().Add(l.ttl)
	b, _ := json.Marshal(leaseRecord{Owner: l.owner, Expires: exp.UnixNano()})
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
