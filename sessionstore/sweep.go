package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Lister is a Backend that lists the keys of a table's records; Sweep
// needs one. Dir is one; NATS buckets expire records themselves.
type Lister interface {
	// Keys returns the keys of the table's records, in no order; it may
	// include keys of removed records.
	Keys(ctx context.Context, t Table) ([]string, error)
}

// SweepStats is what a Sweep removed.
type SweepStats struct {
	// Expired counts the conversations removed, with their snapshots,
	// after Options.TTL without a commit.
	Expired int
	// Orphans counts the snapshots (and half-written files of a process
	// that died writing) removed from a directory store: no head pointed
	// to them, and they were older than Options.OrphanAge.
	Orphans int
	// Dirs counts the empty conversation directories removed.
	Dirs int
	// Records counts the records of removed conversations and leases an
	// earlier version of the directory store kept (tombstones), removed
	// once older than Options.OrphanAge.
	Records int
	// Done is true when this Sweep finished a round: since the last Sweep
	// that said so, every head and snapshot was examined once.
	Done bool
}

// Sweep removes the conversations of a backend that expired after
// opts.TTL without a commit, with their snapshots, and on a directory
// store (Dir) the orphans: snapshots no head points to, older than
// opts.OrphanAge (left by a process that died between its put and its
// commit, or before it dropped the snapshot its commit replaced), and
// conversation directories left empty. A Store removes an expired
// conversation when it is next loaded; Sweep removes those that never
// are. Heads that fail their check under opts.Key are left, and so are
// their conversations' snapshots.
//
// On a Dir one Sweep examines at most opts.SweepBatch heads and as many
// snapshots, and the next Sweep of the same Dir goes on where it stopped:
// call it now and then (Sessions does, every SessionsOptions.SweepEvery),
// or until Done to cover the whole store. A conversation's lock is held
// only while its orphans are removed, so a sweep delays a commit of it
// by as long as that takes at most.
func Sweep(ctx context.Context, b Backend, opts *Options) (SweepStats, error) {
	st, err := New(b, opts)
	if err != nil {
		return SweepStats{}, err
	}
	s := st.(*store)
	if d, ok := b.(*Dir); ok {
		return d.sweep(ctx, s)
	}
	l, ok := b.(Lister)
	if !ok {
		return SweepStats{}, errors.New("sessionstore: this backend cannot list its conversations")
	}
	if s.opts.TTL < 0 {
		return SweepStats{Done: true}, nil
	}
	keys, err := l.Keys(ctx, Heads)
	if err != nil {
		return SweepStats{}, fmt.Errorf("sessionstore: sweeping: %w", err)
	}
	var stats SweepStats
	for _, name := range keys {
		if err := s.expire(ctx, name, &stats); err != nil {
			return stats, err
		}
	}
	stats.Done = true
	return stats, nil
}

// expire removes a conversation if it expired, counting it; the error is
// ctx's.
func (s *store) expire(ctx context.Context, name string, stats *SweepStats) error {
	if CheckName(name) == nil {
		if _, expired, _ := s.load(ctx, name); expired {
			stats.Expired++
		}
	}
	return ctx.Err()
}

// sweep is Sweep on a directory: up to SweepBatch heads from where the
// last sweep stopped (expired ones go, with their snapshots; so do
// half-written record files older than OrphanAge), and up to SweepBatch
// snapshots, conversation by conversation (orphans go).
func (d *Dir) sweep(ctx context.Context, s *store) (SweepStats, error) {
	d.sweepMu.Lock()
	defer d.sweepMu.Unlock()
	var stats SweepStats
	now := s.now()
	stale := func(e fs.DirEntry) bool {
		info, err := e.Info()
		return err == nil && info.Mode().IsRegular() && s.opts.OrphanAge >= 0 && now.Sub(info.ModTime()) > s.opts.OrphanAge
	}
	for range s.opts.SweepBatch {
		e, err := d.heads.next()
		if err != nil || e == nil {
			if err != nil {
				return stats, err
			}
			break
		}
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) {
			if stale(e) && os.Remove(filepath.Join(d.heads.dir, name)) == nil {
				stats.Orphans++
			}
			continue
		}
		if err := s.expire(ctx, name, &stats); err != nil {
			return stats, err
		}
		if stale(e) && d.removeTombstone(Heads, name) {
			stats.Records++
		}
	}
	// Leases: half-written files and tombstones.
	for range s.opts.SweepBatch {
		e, err := d.leases.next()
		if err != nil || e == nil {
			if err != nil {
				return stats, err
			}
			break
		}
		switch name := e.Name(); {
		case !stale(e):
		case strings.HasPrefix(name, tmpPrefix):
			if os.Remove(filepath.Join(d.leases.dir, name)) == nil {
				stats.Orphans++
			}
		case d.removeTombstone(Leases, name):
			stats.Records++
		}
	}
	for budget := s.opts.SweepBatch; budget > 0; {
		e, err := d.snaps.next()
		if err != nil {
			return stats, err
		}
		if e == nil {
			break
		}
		n := 1
		if e.IsDir() && CheckName(e.Name()) == nil {
			if n, err = d.sweepConversation(ctx, s, e.Name(), budget, stale, &stats); err != nil {
				return stats, err
			}
		}
		budget -= max(n, 1)
		if err := ctx.Err(); err != nil {
			return stats, err
		}
	}
	if d.heads.done && d.leases.done && d.snaps.done {
		stats.Done = true
		d.heads.done, d.leases.done, d.snaps.done = false, false, false
	}
	return stats, nil
}

// sweepConversation removes a conversation's orphan snapshots, examining
// up to budget of its files, and its directory if that is left empty; it
// returns how many files it examined. The orphans go under the head's
// lock, which a commit on a directory takes to check that its snapshot is
// still there (Dir.setHead): a commit lands before the sweep reads the
// head, and its snapshot stays, or after it, and fails without writing.
func (d *Dir) sweepConversation(ctx context.Context, s *store, name string, budget int, stale func(fs.DirEntry) bool, stats *SweepStats) (int, error) {
	dir := filepath.Join(d.root, "snapshots", name)
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sessionstore: sweeping: %w", err)
	}
	entries, err := f.ReadDir(budget)
	f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("sessionstore: sweeping: %w", err)
	}
	var old []string
	for _, e := range entries {
		if (strings.HasPrefix(e.Name(), tmpPrefix) || isBlobID(e.Name())) && stale(e) {
			old = append(old, e.Name())
		}
	}
	removed := 0
	if len(old) > 0 {
		unlock, err := d.lock(Heads, name)
		if err != nil {
			return len(entries), err
		}
		_, live, raw, err := d.read(Heads, name)
		keep := ""
		if errors.Is(err, ErrTampered) {
			unlock()
			return len(entries), nil // a head that is not one: leave its conversation as it is
		}
		if err == nil && live {
			var h Head
			if h, err = s.openHead(name, raw); err != nil {
				unlock()
				return len(entries), nil // a head that fails its check: leave its conversation as it is
			}
			keep = h.ID
		}
		if err != nil {
			unlock()
			return len(entries), err
		}
		for _, id := range old {
			if id != keep && os.Remove(filepath.Join(dir, id)) == nil {
				removed++
			}
		}
		unlock()
		stats.Orphans += removed
	}
	if removed == len(entries) && os.Remove(dir) == nil { // fails unless empty; a put makes it again
		stats.Dirs++
	}
	return len(entries), nil
}

// isBlobID reports whether name is a snapshot's ID: a SHA-256 in hex,
// '-' and 16 hex digits.
func isBlobID(name string) bool {
	digest, _, _ := strings.Cut(name, "-")
	return validRef(Ref{Digest: digest, ID: name})
}

// walker reads a directory's entries one at a time across sweeps: each
// sweep goes on where the last stopped, and one that reaches the end sets
// done and starts over at the next.
type walker struct {
	dir  string
	f    *os.File
	buf  []fs.DirEntry
	done bool // reached the end since the last round was reported
}

// next returns the next entry, or nil at the end of the directory or
// when done is set.
func (w *walker) next() (fs.DirEntry, error) {
	if w.done {
		return nil, nil
	}
	if len(w.buf) == 0 {
		if w.f == nil {
			f, err := os.Open(w.dir)
			if err != nil {
				return nil, fmt.Errorf("sessionstore: sweeping: %w", err)
			}
			w.f = f
		}
		entries, err := w.f.ReadDir(256)
		if len(entries) == 0 {
			w.close()
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("sessionstore: sweeping: %w", err)
			}
			w.done = true
			return nil, nil
		}
		w.buf = entries
	}
	e := w.buf[0]
	w.buf = w.buf[1:]
	return e, nil
}

func (w *walker) close() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	w.buf = nil
}

// sweepTimeout bounds one of Sessions' sweeps.
const sweepTimeout = time.Minute
