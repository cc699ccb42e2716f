// Package storetest checks that a sessionstore.Backend behaves as a Store
// needs: the one conformance suite every backend passes, as
// testing/fstest.TestFS is for file systems.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sessionstore"
)

// Harness is a backend under test.
type Harness struct {
	// Backend is empty, for one test; the suite closes it.
	Backend sessionstore.Backend
	// Break, if set, makes the backend unreachable and returns a function
	// that makes it reachable again.
	Break func() (restore func())
}

// key is the suite's operator key.
var key = []byte("storetest key, 32 bytes long....")

// Run runs the suite, each test on a fresh harness from open.
func Run(t *testing.T, open func(t *testing.T) Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"CommitAndLoad", testCommitAndLoad},
		{"Conflict", testConflict},
		{"RacingCommitsCountOnce", testRacingCommits},
		{"Delete", testDelete},
		{"Expiry", testExpiry},
		{"LeaseBusy", testLeaseBusy},
		{"LeaseWaits", testLeaseWaits},
		{"LeaseTakeover", testLeaseTakeover},
		{"Tampered", testTampered},
		{"BadNames", testBadNames},
		{"Unreachable", testUnreachable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := open(t)
			t.Cleanup(func() { h.Backend.Close() })
			tc.fn(t, h)
		})
	}
}

func newStore(t *testing.T, b sessionstore.Backend, o *sessionstore.Options) sessionstore.Store {
	t.Helper()
	s, err := sessionstore.New(b, o)
	require.NoError(t, err)
	return s
}

// commit stores data as the conversation's next head after prev.
func commit(t *testing.T, s sessionstore.Store, name string, prev sessionstore.Head, data string) (sessionstore.Head, error) {
	t.Helper()
	ref, err := s.Put(context.Background(), name, []byte(data))
	require.NoError(t, err)
	return s.Commit(context.Background(), name, prev, ref)
}

// testCommitAndLoad: a conversation's first commit, then its next, load
// back with their snapshots.
func testCommitAndLoad(t *testing.T, h Harness) {
	ctx := context.Background()
	s := newStore(t, h.Backend, &sessionstore.Options{Key: key})
	_, err := s.Load(ctx, "conv-1")
	require.ErrorIs(t, err, sessionstore.ErrNotFound)
	h1, err := commit(t, s, "conv-1", sessionstore.Head{}, "state one")
	require.NoError(t, err)
	assert.NotZero(t, h1.Revision)
	assert.Equal(t, int64(9), h1.Size)
	got, err := s.Load(ctx, "conv-1")
	require.NoError(t, err)
	assert.Equal(t, h1, got)
	h2, err := commit(t, s, "conv-1", got, "state two")
	require.NoError(t, err)
	assert.NotEqual(t, h1.Revision, h2.Revision)
	assert.Equal(t, h1.Created, h2.Created, "Created stays the first commit's")
	got, err = s.Load(ctx, "conv-1")
	require.NoError(t, err)
	assert.Equal(t, h2, got)
	data, err := s.Get(ctx, "conv-1", got.Ref)
	require.NoError(t, err)
	assert.Equal(t, "state two", string(data))
	_, err = s.Load(ctx, "conv-2")
	assert.ErrorIs(t, err, sessionstore.ErrNotFound, "conversations are apart")
}

// testConflict: a commit on a head that moved since it was loaded fails
// with ErrConflict and writes nothing; so does a second first commit.
func testConflict(t *testing.T, h Harness) {
	ctx := context.Background()
	s := newStore(t, h.Backend, nil)
	base, err := commit(t, s, "c", sessionstore.Head{}, "base")
	require.NoError(t, err)
	_, err = commit(t, s, "c", sessionstore.Head{}, "another first")
	require.ErrorIs(t, err, sessionstore.ErrConflict)
	a, err := commit(t, s, "c", base, "from A")
	require.NoError(t, err)
	_, err = commit(t, s, "c", base, "from B")
	require.ErrorIs(t, err, sessionstore.ErrConflict)
	got, err := s.Load(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, a, got)
}

// testRacingCommits: callers racing load-increment-commit on one
// conversation: every commit that succeeded counts exactly once.
func testRacingCommits(t *testing.T, h Harness) {
	ctx := context.Background()
	s := newStore(t, h.Backend, nil)
	_, err := commit(t, s, "n", sessionstore.Head{}, "0")
	require.NoError(t, err)
	const workers, each = 4, 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := 0
	for range workers {
		wg.Go(func() {
			for done := 0; done < each; {
				head, err := s.Load(ctx, "n")
				if !assert.NoError(t, err) {
					return
				}
				data, err := s.Get(ctx, "n", head.Ref)
				if !assert.NoError(t, err) {
					return
				}
				var n int
				fmt.Sscan(string(data), &n)
				ref, err := s.Put(ctx, "n", []byte(fmt.Sprint(n+1)))
				if !assert.NoError(t, err) {
					return
				}
				_, err = s.Commit(ctx, "n", head, ref)
				if errors.Is(err, sessionstore.ErrConflict) {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				done++
				mu.Lock()
				acked++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	head, err := s.Load(ctx, "n")
	require.NoError(t, err)
	data, err := s.Get(ctx, "n", head.Ref)
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprint(acked), string(data))
	assert.Equal(t, workers*each, acked)
}

// testDelete: a deleted conversation is gone, snapshot included; a commit
// on its old head conflicts; deleting again does nothing.
func testDelete(t *testing.T, h Harness) {
	ctx := context.Background()
	s := newStore(t, h.Backend, nil)
	h1, err := commit(t, s, "d", sessionstore.Head{}, "x")
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, "d"))
	_, err = s.Load(ctx, "d")
	assert.ErrorIs(t, err, sessionstore.ErrNotFound)
	_, err = s.Get(ctx, "d", h1.Ref)
	assert.ErrorIs(t, err, sessionstore.ErrNotFound)
	_, err = commit(t, s, "d", h1, "stale")
	assert.ErrorIs(t, err, sessionstore.ErrConflict)
	require.NoError(t, s.Delete(ctx, "d"))
	_, err = commit(t, s, "d", sessionstore.Head{}, "again")
	assert.NoError(t, err, "a deleted conversation starts again")
}

// testExpiry: a conversation without a commit for longer than the TTL is
// not found, and gone from the store.
func testExpiry(t *testing.T, h Harness) {
	ctx := context.Background()
	s := newStore(t, h.Backend, &sessionstore.Options{TTL: 20 * time.Millisecond})
	_, err := commit(t, s, "e", sessionstore.Head{}, "x")
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	_, err = s.Load(ctx, "e")
	assert.ErrorIs(t, err, sessionstore.ErrNotFound)
	_, _, err = h.Backend.Get(ctx, sessionstore.Heads, "e")
	assert.ErrorIs(t, err, sessionstore.ErrNotFound, "an expired head is removed")
	forever := newStore(t, h.Backend, &sessionstore.Options{TTL: -1})
	_, err = commit(t, forever, "f", sessionstore.Head{}, "x")
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	_, err = forever.Load(ctx, "f")
	assert.NoError(t, err, "a negative TTL never expires")
}

// testLeaseBusy: a held conversation is busy for everyone else, until
// its holder releases it.
func testLeaseBusy(t *testing.T, h Harness) {
	ctx := context.Background()
	s := newStore(t, h.Backend, &sessionstore.Options{LeaseWait: -1})
	a, err := s.Lease(ctx, "l", time.Minute)
	require.NoError(t, err)
	_, err = s.Lease(ctx, "l", time.Minute)
	require.ErrorIs(t, err, sessionstore.ErrBusy)
	waiting := newStore(t, h.Backend, &sessionstore.Options{LeaseWait: 30 * time.Millisecond})
	_, err = waiting.Lease(ctx, "l", time.Minute)
	require.ErrorIs(t, err, sessionstore.ErrBusy, "busy after waiting its bound")
	other, err := s.Lease(ctx, "other", time.Minute)
	require.NoError(t, err, "conversations are apart")
	require.NoError(t, other.Release(ctx))
	require.NoError(t, a.Renew(ctx))
	require.NoError(t, a.Release(ctx))
	b, err := s.Lease(ctx, "l", time.Minute)
	require.NoError(t, err)
	require.ErrorIs(t, a.Renew(ctx), sessionstore.ErrLeaseLost, "a released lease is gone")
	require.NoError(t, a.Release(ctx), "releasing twice does nothing")
	_, err = s.Lease(ctx, "l", time.Minute)
	require.ErrorIs(t, err, sessionstore.ErrBusy, "a's second release left b's lease alone")
	require.NoError(t, b.Release(ctx))
}

// testLeaseWaits: a taker waits for the holder's release.
func testLeaseWaits(t *testing.T, h Harness) {
	ctx := context.Background()
	s := newStore(t, h.Backend, &sessionstore.Options{LeaseWait: time.Minute})
	a, err := s.Lease(ctx, "w", time.Minute)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		b, err := s.Lease(ctx, "w", time.Minute)
		if err == nil {
			err = b.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, a.Release(ctx))
	require.NoError(t, <-got)
	cctx, cancel := context.WithCancel(ctx)
	a, err = s.Lease(ctx, "w", time.Minute)
	require.NoError(t, err)
	cancel()
	_, err = s.Lease(cctx, "w", time.Minute)
	require.ErrorIs(t, err, context.Canceled, "the wait ends with ctx")
	require.NoError(t, a.Release(ctx))
}

// testLeaseTakeover: an expired lease is taken over; its old holder's
// renew then fails, and its release leaves the new holder's lease alone.
func testLeaseTakeover(t *testing.T, h Harness) {
	ctx := context.Background()
	s := newStore(t, h.Backend, &sessionstore.Options{LeaseWait: -1})
	a, err := s.Lease(ctx, "t", 20*time.Millisecond)
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	b, err := s.Lease(ctx, "t", time.Minute)
	require.NoError(t, err, "an expired lease is taken over")
	require.ErrorIs(t, a.Renew(ctx), sessionstore.ErrLeaseLost)
	require.NoError(t, a.Release(ctx))
	_, err = s.Lease(ctx, "t", time.Minute)
	require.ErrorIs(t, err, sessionstore.ErrBusy, "b still holds it")
	require.NoError(t, b.Renew(ctx))
	require.NoError(t, b.Release(ctx))
}

// testTampered: with a key, a head or snapshot changed, forged, moved
// from another conversation, written without the key or under another key
// is refused with ErrTampered.
func testTampered(t *testing.T, h Harness) {
	ctx := context.Background()
	b := h.Backend
	s := newStore(t, b, &sessionstore.Options{Key: key})
	h1, err := commit(t, s, "victim", sessionstore.Head{}, "good state")
	require.NoError(t, err)
	evil, err := s.Put(ctx, "victim", []byte("evil state"))
	require.NoError(t, err)
	raw, rev, err := b.Get(ctx, sessionstore.Heads, "victim")
	require.NoError(t, err)

	refuse := func(what string, name string) {
		t.Helper()
		_, err := s.Load(ctx, name)
		assert.ErrorIs(t, err, sessionstore.ErrTampered, what)
	}
	// The head pointed at other bytes, its tag kept.
	var rec map[string]any
	require.NoError(t, json.Unmarshal(raw, &rec))
	rec["digest"], rec["id"] = evil.Digest, evil.ID
	forged, _ := json.Marshal(rec)
	rev, err = b.Set(ctx, sessionstore.Heads, "victim", forged, rev)
	require.NoError(t, err)
	refuse("a changed head", "victim")
	// The same without a tag.
	delete(rec, "tag")
	forged, _ = json.Marshal(rec)
	rev, err = b.Set(ctx, sessionstore.Heads, "victim", forged, rev)
	require.NoError(t, err)
	refuse("an untagged head", "victim")
	// Garbage.
	rev, err = b.Set(ctx, sessionstore.Heads, "victim", []byte("{\"v\":1"), rev)
	require.NoError(t, err)
	refuse("garbage", "victim")
	// Another conversation's valid head.
	_, err = b.Set(ctx, sessionstore.Heads, "victim", raw, rev)
	require.NoError(t, err)
	_, err = b.Set(ctx, sessionstore.Heads, "thief", raw, 0)
	require.NoError(t, err)
	refuse("a head moved to another conversation", "thief")
	got, err := s.Load(ctx, "victim")
	require.NoError(t, err, "the head put back is good")
	// Written without a key, or under another.
	for _, o := range []*sessionstore.Options{nil, {Key: []byte("another key, 32 bytes long......")}} {
		w := newStore(t, b, o)
		_, err := commit(t, w, "other-writer", sessionstore.Head{}, "x")
		require.NoError(t, err)
		refuse("a head written without the key", "other-writer")
		require.NoError(t, w.Delete(ctx, "other-writer"))
	}
	// The snapshot's bytes changed, or replaced by a keyless writer's.
	blob, err := b.GetBlob(ctx, "victim", got.ID)
	require.NoError(t, err)
	changed := bytes.Replace(blob, []byte("good"), []byte("evil"), 1)
	replace := func(id string, data []byte) {
		require.NoError(t, b.RemoveBlob(ctx, "victim", id))
		require.NoError(t, b.PutBlob(ctx, "victim", id, data))
	}
	replace(got.ID, changed)
	_, err = s.Get(ctx, "victim", got.Ref)
	assert.ErrorIs(t, err, sessionstore.ErrTampered, "changed snapshot bytes")
	keyless := newStore(t, b, nil)
	evil2, err := keyless.Put(ctx, "victim", []byte("evil state"))
	require.NoError(t, err)
	_, err = s.Get(ctx, "victim", evil2)
	assert.ErrorIs(t, err, sessionstore.ErrTampered, "a snapshot written without the key")
	// Without a key, changed bytes are still caught by their address.
	replace(got.ID, changed)
	_, err = keyless.Get(ctx, "victim", h1.Ref)
	assert.ErrorIs(t, err, sessionstore.ErrTampered, "bytes that do not match their address")
	// A short key is refused.
	_, err = sessionstore.New(b, &sessionstore.Options{Key: []byte("short")})
	assert.Error(t, err)
}

// testBadNames: names that are paths, hold NUL or are huge are refused
// by every method, and nothing is written.
func testBadNames(t *testing.T, h Harness) {
	ctx := context.Background()
	s := newStore(t, h.Backend, nil)
	good, err := commit(t, s, "good", sessionstore.Head{}, "x")
	require.NoError(t, err)
	for _, name := range []string{"", "/etc/passwd", "a/b", "..", "../good", "a..b", ".hidden", "a.", "a\x00b",
		"a b", "é", "a\\b", strings.Repeat("a", 10<<10), strings.Repeat("a", sessionstore.MaxName+1)} {
		_, err := s.Load(ctx, name)
		assert.ErrorIs(t, err, sessionstore.ErrBadName, "Load %q", name)
		_, err = s.Put(ctx, name, []byte("x"))
		assert.ErrorIs(t, err, sessionstore.ErrBadName, "Put %q", name)
		_, err = s.Get(ctx, name, good.Ref)
		assert.ErrorIs(t, err, sessionstore.ErrBadName, "Get %q", name)
		_, err = s.Commit(ctx, name, sessionstore.Head{}, good.Ref)
		assert.ErrorIs(t, err, sessionstore.ErrBadName, "Commit %q", name)
		assert.ErrorIs(t, s.Delete(ctx, name), sessionstore.ErrBadName, "Delete %q", name)
		assert.ErrorIs(t, s.Drop(ctx, name, good.Ref), sessionstore.ErrBadName, "Drop %q", name)
		_, err = s.Lease(ctx, name, time.Second)
		assert.ErrorIs(t, err, sessionstore.ErrBadName, "Lease %q", name)
	}
	assert.NoError(t, sessionstore.CheckName(strings.Repeat("a", sessionstore.MaxName)))
	assert.NoError(t, sessionstore.CheckName("user-1.conv_2"))
	for _, id := range []string{"../../etc/passwd", good.Digest, good.Digest + "-../../x", good.ID + "/x"} {
		_, err = s.Get(ctx, "good", sessionstore.Ref{Digest: good.Digest, ID: id})
		assert.Error(t, err, "a bad ID %q", id)
	}
	got, err := s.Load(ctx, "good")
	require.NoError(t, err)
	assert.Equal(t, good, got)
}

// testUnreachable: with the backend unreachable, a commit fails with an
// error that is not a conflict, and once it is back the head is the last
// one committed, whole.
func testUnreachable(t *testing.T, h Harness) {
	if h.Break == nil {
		t.Skip("the harness cannot make this backend unreachable")
	}
	ctx := context.Background()
	s := newStore(t, h.Backend, &sessionstore.Options{Key: key})
	h1, err := commit(t, s, "u", sessionstore.Head{}, "committed")
	require.NoError(t, err)
	ref, err := s.Put(ctx, "u", []byte("not committed"))
	require.NoError(t, err)
	restore := h.Break()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = s.Commit(cctx, "u", h1, ref)
	cancel()
	require.Error(t, err)
	assert.NotErrorIs(t, err, sessionstore.ErrConflict)
	t.Logf("commit while unreachable: %v", err)
	restore()
	var got sessionstore.Head
	require.Eventually(t, func() bool { // a client reconnects
		got, err = s.Load(ctx, "u")
		return !errors.Is(err, sessionstore.ErrUnavailable)
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, h1, got, "no half-written head")
	data, err := s.Get(ctx, "u", got.Ref)
	require.NoError(t, err)
	assert.Equal(t, "committed", string(data))
}
