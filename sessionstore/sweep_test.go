package sessionstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"
	"github.com/fumehood/fumehood/sessionstore"
)

// snapshotFiles lists a conversation's files under snapshots/.
func snapshotFiles(t *testing.T, root, name string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "snapshots", name))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// age sets the times of every file under root's snapshots/ to now-ago.
func age(t *testing.T, root string, ago time.Duration) {
	t.Helper()
	when := time.Now().Add(-ago)
	require.NoError(t, filepath.WalkDir(filepath.Join(root, "snapshots"), func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		return os.Chtimes(p, when, when)
	}))
}

// TestDirSweepOrphans: Sweep removes the snapshots no head points to once
// they are older than OrphanAge, never before, never a head's, and the
// directories left empty; a commit of a snapshot it removed fails with
// ErrConflict and writes nothing.
func TestDirSweepOrphans(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d, err := sessionstore.OpenDir(root)
	require.NoError(t, err)
	opts := &sessionstore.Options{Key: testKey}
	s, err := sessionstore.New(d, opts)
	require.NoError(t, err)

	kept, err := s.Put(ctx, "c", []byte("committed"))
	require.NoError(t, err)
	head, err := s.Commit(ctx, "c", sessionstore.Head{}, kept)
	require.NoError(t, err)
	orphan, err := s.Put(ctx, "c", []byte("never committed"))
	require.NoError(t, err)
	_, err = s.Put(ctx, "gone", []byte("a conversation with no head"))
	require.NoError(t, err)
	half := filepath.Join(root, "snapshots", "c", ".tmp-0123456789abcdef") // a writer killed mid-write
	require.NoError(t, os.WriteFile(half, []byte("half"), 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "snapshots", "empty"), 0o700))

	for _, ago := range []time.Duration{0, sessionstore.DefaultOrphanAge - time.Minute} {
		age(t, root, ago)
		st, err := sessionstore.Sweep(ctx, d, opts)
		require.NoError(t, err)
		assert.Zero(t, st.Orphans, "younger than OrphanAge (%v old)", ago)
		assert.Len(t, snapshotFiles(t, root, "c"), 3)
		assert.Len(t, snapshotFiles(t, root, "gone"), 1)
	}
	assert.NoDirExists(t, filepath.Join(root, "snapshots", "empty"), "an empty directory goes at once")

	age(t, root, sessionstore.DefaultOrphanAge+time.Minute)
	st, err := sessionstore.Sweep(ctx, d, opts)
	require.NoError(t, err)
	assert.Equal(t, 3, st.Orphans, "the uncommitted snapshot, the half-written file, the headless conversation's")
	assert.Equal(t, 1, st.Dirs)
	assert.True(t, st.Done)
	assert.Equal(t, []string{kept.ID}, snapshotFiles(t, root, "c"), "the head's snapshot stays, however old")
	assert.NoDirExists(t, filepath.Join(root, "snapshots", "gone"))
	_, err = s.Get(ctx, "c", head.Ref)
	require.NoError(t, err)

	// The commit of a snapshot swept meanwhile writes nothing.
	_, err = s.Commit(ctx, "c", head, orphan)
	require.ErrorIs(t, err, sessionstore.ErrConflict)
	assert.Contains(t, err.Error(), "swept")
	got, err := s.Load(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, head, got)

	// A head that fails its check under the key: its conversation is left.
	_, err = s.Put(ctx, "c", []byte("another orphan"))
	require.NoError(t, err)
	age(t, root, sessionstore.DefaultOrphanAge+time.Minute)
	st, err = sessionstore.Sweep(ctx, d, &sessionstore.Options{Key: []byte("another key of 16 bytes or more")})
	require.NoError(t, err)
	assert.Zero(t, st.Orphans)
	assert.Len(t, snapshotFiles(t, root, "c"), 2)
	st, err = sessionstore.Sweep(ctx, d, &sessionstore.Options{Key: testKey, OrphanAge: -1})
	require.NoError(t, err)
	assert.Zero(t, st.Orphans, "a negative OrphanAge never removes one")
}

// TestDirSweepBatch: a Sweep examines at most SweepBatch snapshots; the
// next ones go on where it stopped, until one says Done.
func TestDirSweepBatch(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d, err := sessionstore.OpenDir(root)
	require.NoError(t, err)
	s, err := sessionstore.New(d, nil)
	require.NoError(t, err)
	const conversations, batch = 10, 3
	for i := range conversations {
		_, err := s.Put(ctx, fmt.Sprintf("c%d", i), []byte("orphan"))
		require.NoError(t, err)
	}
	age(t, root, time.Hour+time.Minute)
	opts := &sessionstore.Options{SweepBatch: batch}
	removed, passes := 0, 0
	for done := false; !done; passes++ {
		require.Less(t, passes, conversations, "a round ends")
		st, err := sessionstore.Sweep(ctx, d, opts)
		require.NoError(t, err)
		assert.LessOrEqual(t, st.Orphans, batch)
		removed += st.Orphans
		done = st.Done
	}
	assert.Equal(t, conversations, removed)
	assert.GreaterOrEqual(t, passes, conversations/batch)
	left, err := os.ReadDir(filepath.Join(root, "snapshots"))
	require.NoError(t, err)
	assert.Empty(t, left)
}

// TestDirSweepRacesCommits: commits racing a sweep that counts every
// snapshot no head points to as an orphan at once (OrphanAge 1 ns): a
// commit either lands with its snapshot, which stays, or fails with
// ErrConflict and writes nothing. No head ever points to a missing
// snapshot.
func TestDirSweepRacesCommits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := t.TempDir()
	d, err := sessionstore.OpenDir(root)
	require.NoError(t, err)
	opts := &sessionstore.Options{OrphanAge: time.Nanosecond, SweepBatch: 50}
	s, err := sessionstore.New(d, opts)
	require.NoError(t, err)
	var swept sync.WaitGroup
	orphans := 0
	swept.Go(func() {
		for ctx.Err() == nil {
			st, err := sessionstore.Sweep(ctx, d, opts)
			if ctx.Err() == nil {
				assert.NoError(t, err)
			}
			orphans += st.Orphans
		}
	})
	const writers, commits = 4, 100
	var wg sync.WaitGroup
	var mu sync.Mutex
	landed, refused, failedPuts := 0, 0, 0
	for w := range writers {
		wg.Go(func() {
			name := fmt.Sprintf("w%d", w)
			var head sessionstore.Head
			for i := range commits {
				// At this age the sweep also takes a put's file from under
				// it while it is written: the put fails, and stores nothing.
				ref, err := s.Put(ctx, name, []byte(fmt.Sprintf("%s %d", name, i)))
				var next sessionstore.Head
				if err == nil {
					next, err = s.Commit(ctx, name, head, ref)
				}
				mu.Lock()
				switch {
				case errors.Is(err, os.ErrNotExist):
					failedPuts++
				case errors.Is(err, sessionstore.ErrConflict):
					refused++
				case assert.NoError(t, err):
					landed++
					head = next
				}
				mu.Unlock()
				if head.Revision != 0 {
					_, err := s.Get(ctx, name, head.Ref)
					assert.NoError(t, err, "the head's snapshot is there")
				}
			}
		})
	}
	wg.Wait()
	cancel()
	swept.Wait()
	for w := range writers {
		name := fmt.Sprintf("w%d", w)
		h, err := s.Load(context.Background(), name)
		require.NoError(t, err)
		_, err = s.Get(context.Background(), name, h.Ref)
		assert.NoError(t, err)
	}
	assert.Equal(t, writers*commits, landed+refused+failedPuts)
	assert.NotZero(t, landed)
	t.Logf("%d commits landed, %d refused (their snapshot swept first), %d puts failed; %d orphans swept", landed, refused, failedPuts, orphans)
}

// crashEnv names the store of TestDirSweepAfterCrash's replica process.
const crashEnv = "SESSIONSTORE_CRASH_HELPER"

// stalled is a store whose commits of one conversation and drops of
// another never return, so that a process can be killed between them.
type stalled struct {
	sessionstore.Store
	commit, drop string
	out          *os.File
}

func (s *stalled) Commit(ctx context.Context, name string, prev sessionstore.Head, ref sessionstore.Ref) (sessionstore.Head, error) {
	if name == s.commit {
		fmt.Fprintln(s.out, "committing")
		select {}
	}
	return s.Store.Commit(ctx, name, prev, ref)
}

func (s *stalled) Drop(ctx context.Context, name string, ref sessionstore.Ref) error {
	if name == s.drop {
		fmt.Fprintln(s.out, "dropping")
		select {}
	}
	return s.Store.Drop(ctx, name, ref)
}

// TestDirSweepAfterCrash: a replica process killed (SIGKILL) after
// storing its call's snapshot but before committing it, and one killed
// after a commit but before dropping the snapshot it replaced, leave
// orphans; Sweep removes them once older than OrphanAge, never before,
// and both conversations go on from their committed state.
func TestDirSweepAfterCrash(t *testing.T) {
	ctx := context.Background()
	if root := os.Getenv(crashEnv); root != "" {
		st, err := sessionstore.Open(ctx, root, &sessionstore.Options{Key: testKey})
		require.NoError(t, err)
		c := sessionstore.NewSessions(st, sandboxtest.Python(t), nil)
		for _, name := range []string{"put", "drop", "drop"} {
			_, _, err := eval(t, c, name, "x += 1")
			require.NoError(t, err)
		}
		stall := &stalled{Store: st, commit: "put", drop: "drop", out: os.Stdout}
		c = sessionstore.NewSessions(stall, sandboxtest.Python(t), &sessionstore.SessionsOptions{MaxLive: -1, LeaseTTL: time.Second})
		go eval(t, c, "drop", "x += 1")
		go eval(t, c, "put", "x += 1")
		select {}
	}
	sandboxtest.Built(t)
	root := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDirSweepAfterCrash$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+root)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	seen := map[string]bool{}
	for len(seen) < 2 && lines.Scan() {
		seen[lines.Text()] = true
	}
	require.True(t, seen["committing"] && seen["dropping"], "the replica stalled in both: %v", seen)
	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()

	for _, name := range []string{"put", "drop"} {
		require.Len(t, snapshotFiles(t, root, name), 2, "%s: the head's snapshot and an orphan", name)
	}
	d, err := sessionstore.OpenDir(root)
	require.NoError(t, err)
	opts := &sessionstore.Options{Key: testKey}
	for _, ago := range []time.Duration{0, sessionstore.DefaultOrphanAge - time.Minute} {
		age(t, root, ago)
		st, err := sessionstore.Sweep(ctx, d, opts)
		require.NoError(t, err)
		assert.Zero(t, st.Orphans, "never before OrphanAge (%v old)", ago)
	}
	age(t, root, sessionstore.DefaultOrphanAge+time.Minute)
	st, err := sessionstore.Sweep(ctx, d, opts)
	require.NoError(t, err)
	assert.Equal(t, 2, st.Orphans)
	store := openDir(t, root, opts)
	c := newSessions(t, store)
	for name, want := range map[string]string{"put": "2", "drop": "4"} {
		h, err := store.Load(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, []string{h.ID}, snapshotFiles(t, root, name), name)
		v, _, err := eval(t, c, name, "x += 1; x")
		require.NoError(t, err, name)
		assert.Equal(t, want, v, "%s: its committed state, and the call", name)
	}
}

// TestSessionsSweep: Sessions on a directory store sweeps it now and
// then, until closed.
func TestSessionsSweep(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := openDir(t, root, nil)
	_, err := st.Put(ctx, "c", []byte("orphan"))
	require.NoError(t, err)
	age(t, root, sessionstore.DefaultOrphanAge+time.Minute)
	c := sessionstore.NewSessions(st, nil, &sessionstore.SessionsOptions{SweepEvery: time.Millisecond})
	require.Eventually(t, func() bool { return snapshotFiles(t, root, "c") == nil }, 30*time.Second, time.Millisecond)
	require.NoError(t, c.Close())
	_, err = st.Put(ctx, "c", []byte("orphan"))
	require.NoError(t, err)
	age(t, root, sessionstore.DefaultOrphanAge+time.Minute)
	c = sessionstore.NewSessions(st, nil, &sessionstore.SessionsOptions{SweepEvery: -1})
	defer c.Close()
	time.Sleep(20 * time.Millisecond)
	assert.Len(t, snapshotFiles(t, root, "c"), 1, "SweepEvery < 0 never sweeps")
}
