package sessionstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
	"github.com/fumehood/fumehood/sessionstore"
)

var testKey = []byte("sessions test key, 32 bytes.....")

func openDir(t *testing.T, root string, o *sessionstore.Options) sessionstore.Store {
	t.Helper()
	st, err := sessionstore.Open(context.Background(), root, o)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func newSessions(t *testing.T, st sessionstore.Store) *sessionstore.Sessions {
	t.Helper()
	c := sessionstore.NewSessions(st, sandboxtest.Python(t), nil)
	t.Cleanup(func() { c.Close() })
	return c
}

// eval runs code in the conversation and returns the value of its last
// expression; s is the session it ran on.
func eval(t *testing.T, c *sessionstore.Sessions, name, code string) (value string, s *sandbox.Session, err error) {
	t.Helper()
	err = c.Do(context.Background(), name, func(ctx context.Context, sess *sandbox.Session, fresh bool) error {
		s = sess
		if fresh {
			if _, err := sess.Run(ctx, "x = 0", nil); err != nil {
				return err
			}
		}
		res, err := sess.Run(ctx, code, nil)
		if err != nil {
			return err
		}
		value = res.Value
		return nil
	})
	return value, s, err
}

// TestSessionsTwoReplicas: two Sessions on one store take turns on a
// conversation: each call sees the other's state; a call on the replica
// that made the head runs on its live session (the fast path).
func TestSessionsTwoReplicas(t *testing.T) {
	st := openDir(t, t.TempDir(), &sessionstore.Options{Key: testKey})
	a, b := newSessions(t, st), newSessions(t, st)
	want := 0
	var last *sandbox.Session
	for i := range 6 {
		r := a
		if i%2 == 1 {
			r = b
		}
		v, s, err := eval(t, r, "conv", "x += 1; x")
		require.NoError(t, err)
		want++
		assert.Equal(t, want, atoi(t, v))
		assert.NotSame(t, last, s, "the head moved: resumed")
		last = s
	}
	v, s, err := eval(t, b, "conv", "x += 1; x")
	require.NoError(t, err)
	assert.Equal(t, 7, atoi(t, v))
	assert.Same(t, last, s, "the head has not moved: the live session")
	assert.Equal(t, 1, b.Live())
}

// TestSessionsConflict: a head that moves while a call runs (a writer
// that ignores the lease) fails the call with ErrConflict: nothing of it
// is kept, its session is dropped, and the next call resumes the head that
// won.
func TestSessionsConflict(t *testing.T) {
	ctx := context.Background()
	st := openDir(t, t.TempDir(), nil)
	a := newSessions(t, st)
	_, _, err := eval(t, a, "c", "x = 1")
	require.NoError(t, err)
	var inside *sandbox.Session
	err = a.Do(ctx, "c", func(ctx context.Context, s *sandbox.Session, fresh bool) error {
		inside = s
		_, err := s.Run(ctx, "x = 100", nil)
		require.NoError(t, err)
		commitState(t, st, "c", "x = 50")
		return nil
	})
	require.ErrorIs(t, err, sessionstore.ErrConflict)
	v, s, err := eval(t, a, "c", "x")
	require.NoError(t, err)
	assert.Equal(t, "50", v, "the head that won")
	assert.NotSame(t, inside, s, "the conflicting call's session is dropped")
}

// commitState commits, over any lease, a session that ran code.
func commitState(t *testing.T, st sessionstore.Store, name, code string) {
	ctx := context.Background()
	py := sandboxtest.Python(t)
	s, err := py.NewSession(ctx, nil)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Run(ctx, code, nil)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, s.Snapshot(&buf))
	head, err := st.Load(ctx, name)
	if errors.Is(err, sessionstore.ErrNotFound) {
		head = sessionstore.Head{}
	} else {
		require.NoError(t, err)
	}
	ref, err := st.Put(ctx, name, buf.Bytes())
	require.NoError(t, err)
	_, err = st.Commit(ctx, name, head, ref)
	require.NoError(t, err)
}

// TestSessionsBusy: a call of a conversation held by another call waits
// for it up to the store's LeaseWait, then fails with ErrBusy without
// running.
func TestSessionsBusy(t *testing.T) {
	root := t.TempDir()
	a := newSessions(t, openDir(t, root, nil))
	b := newSessions(t, openDir(t, root, &sessionstore.Options{LeaseWait: 50 * time.Millisecond}))
	err := a.Do(context.Background(), "busy", func(ctx context.Context, s *sandbox.Session, fresh bool) error {
		_, err := s.Run(ctx, "x = 0", nil)
		require.NoError(t, err)
		_, _, err = eval(t, b, "busy", "x")
		assert.ErrorIs(t, err, sessionstore.ErrBusy)
		return nil
	})
	require.NoError(t, err)
	_, _, err = eval(t, b, "busy", "x")
	require.NoError(t, err, "free once a's call ended")
}

// TestSessionsLostLease: a call that runs past its lease, taken over by
// another replica meanwhile, is stopped and fails with ErrLeaseLost;
// nothing of it is kept.
func TestSessionsLostLease(t *testing.T) {
	root := t.TempDir()
	st := openDir(t, root, &sessionstore.Options{LeaseWait: -1})
	py := sandboxtest.Python(t)
	a := sessionstore.NewSessions(st, py, &sessionstore.SessionsOptions{LeaseTTL: 60 * time.Millisecond})
	defer a.Close()
	_, _, err := eval(t, a, "l", "x = 1")
	require.NoError(t, err)
	err = a.Do(context.Background(), "l", func(ctx context.Context, s *sandbox.Session, fresh bool) error {
		_, err := s.Run(ctx, "x = 2", nil)
		require.NoError(t, err)
		// Another replica's clock says the lease expired: it takes it
		// over (the lease's record, rewritten as expired).
		b, err := sessionstore.OpenDir(root)
		require.NoError(t, err)
		for { // a's renewals race this
			raw, rev, err := b.Get(ctx, sessionstore.Leases, "l")
			require.NoError(t, err)
			var rec map[string]any
			require.NoError(t, json.Unmarshal(raw, &rec))
			rec["expires"] = 0
			raw, _ = json.Marshal(rec)
			if _, err = b.Set(ctx, sessionstore.Leases, "l", raw, rev); !errors.Is(err, sessionstore.ErrConflict) {
				require.NoError(t, err)
				break
			}
		}
		other, err := st.Lease(ctx, "l", time.Minute)
		require.NoError(t, err)
		defer other.Release(context.Background())
		<-ctx.Done() // a's renewal fails and stops the call
		return ctx.Err()
	})
	require.ErrorIs(t, err, sessionstore.ErrLeaseLost)
	v, _, err := eval(t, a, "l", "x")
	require.NoError(t, err)
	assert.Equal(t, "1", v, "the lost call's x = 2 is not kept")
}

// TestSessionsTampered: with a key, a forged head is refused before any
// session runs.
func TestSessionsTampered(t *testing.T) {
	root := t.TempDir()
	keyed := openDir(t, root, &sessionstore.Options{Key: testKey})
	a := newSessions(t, keyed)
	_, _, err := eval(t, a, "t", "x = 1")
	require.NoError(t, err)
	// Someone without the key commits a state of their choosing.
	commitState(t, openDir(t, root, nil), "t", "x = 666")
	ran := false
	err = a.Do(context.Background(), "t", func(context.Context, *sandbox.Session, bool) error {
		ran = true
		return nil
	})
	require.ErrorIs(t, err, sessionstore.ErrTampered)
	assert.False(t, ran)
	assert.Equal(t, 0, a.Live(), "the live session at the old head is dropped")
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	require.NoError(t, json.Unmarshal([]byte(s), &n), s)
	return n
}

// TestSessionsHibernateAfter: a live session stays awake for
// HibernateAfter, or is hibernated after each call, and serves the
// conversation's next call either way; one hibernated by its timer (or
// in the middle of it, when the call resumes from the store instead)
// gives the same state.
func TestSessionsHibernateAfter(t *testing.T) {
	st := openDir(t, t.TempDir(), nil)
	for _, after := range []time.Duration{time.Minute, -1, time.Millisecond} {
		c := sessionstore.NewSessions(st, sandboxtest.Python(t), &sessionstore.SessionsOptions{HibernateAfter: after})
		name := "h" + strings.TrimPrefix(after.String(), "-")
		_, first, err := eval(t, c, name, "x += 1; x")
		require.NoError(t, err)
		if after == time.Millisecond {
			time.Sleep(20 * time.Millisecond)
		}
		v, s, err := eval(t, c, name, "x += 1; x")
		require.NoError(t, err)
		assert.Equal(t, "2", v)
		if after != time.Millisecond {
			assert.True(t, first == s, "the live session")
		}
		require.NoError(t, c.Close())
		assert.Equal(t, 0, c.Live())
	}
}

// TestSessionsStoreUnreachable: with the store unreachable (all of it, or
// its heads past a lease taken) a call fails with a clear error and runs
// nothing; the live session is untouched, and once the store is back the
// next call runs on it, at the last committed state.
func TestSessionsStoreUnreachable(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	a := newSessions(t, openDir(t, root, nil))
	_, live, err := eval(t, a, "u", "x = 7")
	require.NoError(t, err)
	for _, broken := range []string{root, filepath.Join(root, "heads")} {
		require.NoError(t, os.Rename(broken, broken+".away"))
		require.NoError(t, os.WriteFile(broken, nil, 0o600))
		ran := false
		err = a.Do(context.Background(), "u", func(context.Context, *sandbox.Session, bool) error {
			ran = true
			return nil
		})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "not a directory")
		assert.False(t, ran)
		assert.Equal(t, 1, a.Live(), "the live session is kept")

		require.NoError(t, os.Remove(broken))
		require.NoError(t, os.Rename(broken+".away", broken))
		v, s, err := eval(t, a, "u", "x")
		require.NoError(t, err)
		assert.Equal(t, "7", v)
		assert.True(t, live == s, "the same live session")
	}
}

// ambiguous is a backend whose head writes land but report the store
// unavailable while failCommits is set, and whose lease releases fail
// while failReleases is.
type ambiguous struct {
	sessionstore.Backend
	failCommits, failReleases bool
}

func (a *ambiguous) Set(ctx context.Context, t sessionstore.Table, key string, value []byte, rev uint64) (uint64, error) {
	n, err := a.Backend.Set(ctx, t, key, value, rev)
	if err == nil && t == sessionstore.Heads && a.failCommits {
		return 0, fmt.Errorf("%w: the acknowledgement was lost", sessionstore.ErrUnavailable)
	}
	return n, err
}

func (a *ambiguous) Remove(ctx context.Context, t sessionstore.Table, key string, rev uint64) error {
	if t == sessionstore.Leases && a.failReleases {
		return fmt.Errorf("%w: releasing", sessionstore.ErrUnavailable)
	}
	return a.Backend.Remove(ctx, t, key, rev)
}

// TestSessionsAmbiguousCommit: a commit that landed but reported a
// failure keeps its snapshot, so the next call continues from it; a
// lease that cannot be released after a commit does not fail the call.
func TestSessionsAmbiguousCommit(t *testing.T) {
	d, err := sessionstore.OpenDir(t.TempDir())
	require.NoError(t, err)
	b := &ambiguous{Backend: d}
	st, err := sessionstore.New(b, &sessionstore.Options{LeaseWait: -1})
	require.NoError(t, err)
	a := sessionstore.NewSessions(st, sandboxtest.Python(t), nil)
	defer a.Close()
	_, _, err = eval(t, a, "amb", "x = 1")
	require.NoError(t, err)

	b.failCommits = true
	_, _, err = eval(t, a, "amb", "x = 2")
	require.ErrorIs(t, err, sessionstore.ErrUnavailable)
	b.failCommits = false
	v, _, err := eval(t, a, "amb", "x")
	require.NoError(t, err, "the head that landed has its snapshot")
	assert.Equal(t, "2", v)

	b.failReleases = true
	_, _, err = eval(t, a, "amb", "x = 3")
	require.NoError(t, err, "committed: the lease expires by itself")
	b.failReleases = false
}

// TestSessionsManyCallsOneConversation: calls of one conversation from
// many goroutines of one process take turns: none is starved into
// ErrBusy, and each counts once.
func TestSessionsManyCallsOneConversation(t *testing.T) {
	a := newSessions(t, openDir(t, t.TempDir(), nil))
	_, _, err := eval(t, a, "many", "x")
	require.NoError(t, err)
	const workers, each = 6, 5
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				_, _, err := eval(t, a, "many", "x += 1")
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	v, _, err := eval(t, a, "many", "x")
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprint(workers*each), v)
}

// TestSessionsBusyInProcess: a call waiting behind another call of its
// own process is bounded by the store's LeaseWait too.
func TestSessionsBusyInProcess(t *testing.T) {
	a := newSessions(t, openDir(t, t.TempDir(), &sessionstore.Options{LeaseWait: 30 * time.Millisecond}))
	err := a.Do(context.Background(), "b", func(ctx context.Context, s *sandbox.Session, fresh bool) error {
		_, _, err := eval(t, a, "b", "1")
		assert.ErrorIs(t, err, sessionstore.ErrBusy)
		return nil
	})
	require.NoError(t, err)
}

// TestSessionsStartUpdateView: Update and View refuse a conversation that
// was never started (ErrNotFound, leaving no lease behind) or was deleted,
// and never create one; Start begins one from a given session once (a
// second Start is ErrConflict); View runs under the lease and commits
// nothing, so the head stays where it was.
func TestSessionsStartUpdateView(t *testing.T) {
	root := t.TempDir()
	st := openDir(t, root, &sessionstore.Options{Key: testKey})
	a, b := newSessions(t, st), newSessions(t, st)
	ctx := context.Background()
	nop := func(context.Context, *sandbox.Session) error { return nil }
	require.ErrorIs(t, a.Update(ctx, "never", nop), sessionstore.ErrNotFound)
	require.ErrorIs(t, a.View(ctx, "never", nop), sessionstore.ErrNotFound)
	_, err := st.Load(ctx, "never")
	require.ErrorIs(t, err, sessionstore.ErrNotFound, "Update created nothing")
	leases, _ := filepath.Glob(filepath.Join(root, "leases", "*never*"))
	assert.Empty(t, leases, "no lease was taken for a conversation that does not exist")

	py := sandboxtest.Python(t)
	s, err := py.NewSession(ctx, &sandbox.Config{Env: map[string]string{"GREETING": "hi"}})
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx, "conv", s))
	s2, err := py.NewSession(ctx, nil)
	require.NoError(t, err)
	require.ErrorIs(t, b.Start(ctx, "conv", s2), sessionstore.ErrConflict)

	run := func(c *sessionstore.Sessions, code string) string {
		var v string
		require.NoError(t, c.Update(ctx, "conv", func(ctx context.Context, s *sandbox.Session) error {
			res, err := s.Run(ctx, code, nil)
			if err == nil {
				v = res.Value
			}
			return err
		}))
		return v
	}
	assert.Equal(t, "'hi'", run(b, "import os; x = 41; os.environ['GREETING']"), "B resumed the session A started")
	before, err := st.Load(ctx, "conv")
	require.NoError(t, err)
	require.NoError(t, a.View(ctx, "conv", func(ctx context.Context, s *sandbox.Session) error {
		_, err := s.Files().ReadDir("/work")
		return err
	}))
	after, err := st.Load(ctx, "conv")
	require.NoError(t, err)
	assert.Equal(t, before.Revision, after.Revision, "View commits nothing")
	assert.Equal(t, "42", run(a, "x + 1"))

	require.NoError(t, b.Delete(ctx, "conv"))
	require.ErrorIs(t, a.Update(ctx, "conv", nop), sessionstore.ErrNotFound)
	assert.Zero(t, a.Live(), "the deleted conversation's live session was closed")
}
