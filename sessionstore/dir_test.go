package sessionstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sessionstore"
	"github.com/fumehood/fumehood/sessionstore/storetest"
)

// TestDirConformance: the directory backend passes the conformance suite;
// unreachable is its directory replaced by a file.
func TestDirConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		root := filepath.Join(t.TempDir(), "store")
		d, err := sessionstore.OpenDir(root)
		require.NoError(t, err)
		return storetest.Harness{Backend: d, Break: func() func() {
			require.NoError(t, os.Rename(root, root+".away"))
			require.NoError(t, os.WriteFile(root, nil, 0o600))
			return func() {
				require.NoError(t, os.Remove(root))
				require.NoError(t, os.Rename(root+".away", root))
			}
		}}
	})
}

// TestDirTwoProcesses: two processes racing load-increment-commit on one
// conversation of one directory: every commit that succeeded counts once
// (the file lock holds across processes).
func TestDirTwoProcesses(t *testing.T) {
	if dir := os.Getenv("SESSIONSTORE_DIR_HELPER"); dir != "" {
		countTo(t, dir, 25)
		return
	}
	root := t.TempDir()
	s, err := sessionstore.Open(context.Background(), root, nil)
	require.NoError(t, err)
	ref, err := s.Put(context.Background(), "n", []byte("0"))
	require.NoError(t, err)
	_, err = s.Commit(context.Background(), "n", sessionstore.Head{}, ref)
	require.NoError(t, err)
	var cmds []*exec.Cmd
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDirTwoProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SESSIONSTORE_DIR_HELPER="+root)
		require.NoError(t, cmd.Start())
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		require.NoError(t, cmd.Wait())
	}
	head, err := s.Load(context.Background(), "n")
	require.NoError(t, err)
	data, err := s.Get(context.Background(), "n", head.Ref)
	require.NoError(t, err)
	assert.Equal(t, "50", string(data))
}

// countTo commits n increments of conversation "n", retrying conflicts.
func countTo(t *testing.T, root string, n int) {
	ctx := context.Background()
	s, err := sessionstore.Open(ctx, "file://"+root, nil)
	require.NoError(t, err)
	for done := 0; done < n; {
		head, err := s.Load(ctx, "n")
		require.NoError(t, err)
		data, err := s.Get(ctx, "n", head.Ref)
		require.NoError(t, err)
		v, err := strconv.Atoi(string(data))
		require.NoError(t, err)
		ref, err := s.Put(ctx, "n", []byte(strconv.Itoa(v+1)))
		require.NoError(t, err)
		if _, err := s.Commit(ctx, "n", head, ref); errors.Is(err, sessionstore.ErrConflict) {
			continue
		}
		require.NoError(t, err)
		done++
	}
}

// TestOpenURLs: directories, file URLs, and clear errors for the rest.
func TestOpenURLs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, u := range []string{dir, "file://" + dir, "file://localhost" + dir} {
		s, err := sessionstore.Open(ctx, u, nil)
		require.NoError(t, err, u)
		require.NoError(t, s.Close())
	}
	for u, want := range map[string]string{
		"":                       "no store URL",
		"redis://localhost:6379": `unknown store URL scheme "redis"`,
		"nats://localhost:4222":  "import github.com/fumehood/fumehood/sessionstore/natsstore",
		"file://elsewhere/x":     "local directory",
		"s3://bucket/key":        `unknown store URL scheme "s3"`,
	} {
		_, err := sessionstore.Open(ctx, u, nil)
		require.Error(t, err, u)
		assert.Contains(t, err.Error(), want, u)
	}
	_, err := sessionstore.Open(ctx, dir, &sessionstore.Options{Key: []byte("short")})
	assert.Error(t, err, "a short key")
}

// TestDirSweep: Sweep removes the conversations that expired without
// ever being loaded again, snapshots included, and leaves the others.
func TestDirSweep(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d, err := sessionstore.OpenDir(root)
	require.NoError(t, err)
	s, err := sessionstore.New(d, nil)
	require.NoError(t, err)
	for _, name := range []string{"old-1", "old-2", "old-3", "new"} {
		ref, err := s.Put(ctx, name, []byte(name))
		require.NoError(t, err)
		_, err = s.Commit(ctx, name, sessionstore.Head{}, ref)
		require.NoError(t, err)
		if name != "new" { // committed an hour ago
			raw, rev, err := d.Get(ctx, sessionstore.Heads, name)
			require.NoError(t, err)
			var rec map[string]any
			require.NoError(t, json.Unmarshal(raw, &rec))
			rec["updated"] = time.Now().Add(-time.Hour).UnixNano()
			raw, _ = json.Marshal(rec)
			_, err = d.Set(ctx, sessionstore.Heads, name, raw, rev)
			require.NoError(t, err)
		}
	}
	require.NoError(t, s.Delete(ctx, "old-3")) // a tombstone: not counted
	n, err := sessionstore.Sweep(ctx, d, &sessionstore.Options{TTL: -1})
	require.NoError(t, err)
	assert.Zero(t, n.Expired, "a negative TTL never expires")
	n, err = sessionstore.Sweep(ctx, d, &sessionstore.Options{TTL: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, 2, n.Expired)
	assert.True(t, n.Done)
	left, err := os.ReadDir(filepath.Join(root, "snapshots"))
	require.NoError(t, err)
	require.Len(t, left, 1)
	assert.Equal(t, "new", left[0].Name())
	_, err = s.Load(ctx, "new")
	assert.NoError(t, err)
}

// TestDirRemovedLeavesNoRecords: a deleted conversation and a released
// lease leave no file in heads/ or leases/, and a record made again under
// the same name never reuses a revision of the removed one, so a writer
// still holding one conflicts.
func TestDirRemovedLeavesNoRecords(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d, err := sessionstore.OpenDir(root)
	require.NoError(t, err)
	s, err := sessionstore.New(d, nil)
	require.NoError(t, err)
	l, err := s.Lease(ctx, "c", time.Minute)
	require.NoError(t, err)
	ref, err := s.Put(ctx, "c", []byte("x"))
	require.NoError(t, err)
	_, err = s.Commit(ctx, "c", sessionstore.Head{}, ref)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.NoError(t, s.Delete(ctx, "c"))
	for _, dir := range []string{"heads", "leases", "snapshots"} {
		left, err := os.ReadDir(filepath.Join(root, dir))
		require.NoError(t, err)
		assert.Empty(t, left, dir)
	}

	first, err := d.Set(ctx, sessionstore.Heads, "r", []byte("a"), 0)
	require.NoError(t, err)
	second, err := d.Set(ctx, sessionstore.Heads, "r", []byte("b"), first)
	require.NoError(t, err)
	assert.Equal(t, first+1, second)
	require.NoError(t, d.Remove(ctx, sessionstore.Heads, "r", second))
	again, err := d.Set(ctx, sessionstore.Heads, "r", []byte("c"), 0)
	require.NoError(t, err)
	assert.Greater(t, again, second, "a new record starts past the removed one's revisions")
	_, err = d.Set(ctx, sessionstore.Heads, "r", []byte("stale"), second)
	assert.ErrorIs(t, err, sessionstore.ErrConflict)
}

// TestDirSweepTombstones: the records an earlier version kept for removed
// conversations and leases (tombstones), and half-written lease files, are
// removed by Sweep once older than OrphanAge, and not before.
func TestDirSweepTombstones(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d, err := sessionstore.OpenDir(root)
	require.NoError(t, err)
	tombstone := []byte{0, 0, 0, 0, 0, 0, 0, 7, 0} // revision 7, removed
	files := map[string][]byte{"heads/gone": tombstone, "leases/gone": tombstone, "leases/.tmp-0123456789abcdef": []byte("half")}
	for name, b := range files {
		require.NoError(t, os.WriteFile(filepath.Join(root, name), b, 0o600))
	}
	again, err := d.Set(ctx, sessionstore.Heads, "gone", []byte("x"), 0)
	require.NoError(t, err)
	assert.Equal(t, uint64(8), again, "a tombstone's record goes on from its revision")
	require.NoError(t, d.Remove(ctx, sessionstore.Heads, "gone", again))
	require.NoError(t, os.WriteFile(filepath.Join(root, "heads/gone"), tombstone, 0o600))

	st, err := sessionstore.Sweep(ctx, d, &sessionstore.Options{OrphanAge: time.Hour})
	require.NoError(t, err)
	assert.Zero(t, st.Records+st.Orphans, "younger than OrphanAge")
	when := time.Now().Add(-2 * time.Hour)
	for name := range files {
		require.NoError(t, os.Chtimes(filepath.Join(root, name), when, when))
	}
	st, err = sessionstore.Sweep(ctx, d, &sessionstore.Options{OrphanAge: time.Hour})
	require.NoError(t, err)
	assert.Equal(t, 2, st.Records)
	assert.Equal(t, 1, st.Orphans)
	for name := range files {
		assert.NoFileExists(t, filepath.Join(root, name))
	}
}
