package sessionstore

import (
	"context"
	"errors"
	"fmt"
)

// Lister is a Backend that lists the keys of a table's records; Sweep
// needs one. Dir is one; NATS buckets expire records themselves.
type Lister interface {
	// Keys returns the keys of the table's records, in no order; it may
	// include keys of removed records.
	Keys(ctx context.Context, t Table) ([]string, error)
}

// Sweep removes the conversations of a backend that expired after
// opts.TTL without a commit, with their snapshots, and returns how many
// it removed. A Store removes an expired conversation when it is next
// loaded; Sweep removes those that never are: run it now and then on a
// directory store. Heads that fail their check under opts.Key are left.
func Sweep(ctx context.Context, b Backend, opts *Options) (removed int, err error) {
	l, ok := b.(Lister)
	if !ok {
		return 0, errors.New("sessionstore: this backend cannot list its conversations")
	}
	st, err := New(b, opts)
	if err != nil {
		return 0, err
	}
	s := st.(*store)
	if s.opts.TTL < 0 {
		return 0, nil
	}
	keys, err := l.Keys(ctx, Heads)
	if err != nil {
		return 0, fmt.Errorf("sessionstore: sweeping: %w", err)
	}
	for _, name := range keys {
		if CheckName(name) != nil {
			continue
		}
		if _, expired, _ := s.load(ctx, name); expired {
			removed++
		}
		if err := ctx.Err(); err != nil {
			return removed, err
		}
	}
	return removed, nil
}
