//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package sessionstore_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sessionstore"
)

// allocated returns how many bytes of Go heap f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// plants are what a writer without the key puts where a record's file
// is: a 2 GiB sparse file, a link to /dev/zero, a FIFO with no writer.
var plants = []struct {
	name  string
	plant func(t *testing.T, path string)
}{
	{"sparse 2 GiB", func(t *testing.T, path string) {
		require.NoError(t, os.WriteFile(path, nil, 0o600))
		require.NoError(t, os.Truncate(path, 2<<30))
	}},
	{"link to /dev/zero", func(t *testing.T, path string) {
		require.NoError(t, os.Symlink("/dev/zero", path))
	}},
	{"FIFO", func(t *testing.T, path string) {
		require.NoError(t, syscall.Mkfifo(path, 0o600))
	}},
}

// TestDirRecordBounds: a head that is not a record (too long, a link, a
// FIFO) is ErrTampered at a small cost, and can be deleted; a lease that
// is not one is taken over. Nothing of either is read past MaxRecord.
func TestDirRecordBounds(t *testing.T) {
	ctx := context.Background()
	for _, p := range plants {
		t.Run(p.name, func(t *testing.T) {
			root := t.TempDir()
			st := openDir(t, root, &sessionstore.Options{Key: []byte("0123456789abcdef"), LeaseWait: -1})
			ref, err := st.Put(ctx, "c", []byte("state"))
			require.NoError(t, err)
			_, err = st.Commit(ctx, "c", sessionstore.Head{}, ref)
			require.NoError(t, err)
			head := filepath.Join(root, "heads", "c")
			require.NoError(t, os.Remove(head))
			p.plant(t, head)
			p.plant(t, filepath.Join(root, "leases", "c"))

			n := allocated(func() { _, err = st.Load(ctx, "c") })
			assert.ErrorIs(t, err, sessionstore.ErrTampered, "the head")
			assert.Less(t, n, uint64(1<<20), "bytes allocated loading the head")

			var l sessionstore.Lease
			n = allocated(func() { l, err = st.Lease(ctx, "c", time.Minute) })
			require.NoError(t, err, "a lease that is not one is free")
			assert.Less(t, n, uint64(1<<20), "bytes allocated taking the lease")
			fi, err := os.Lstat(filepath.Join(root, "leases", "c"))
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular(), "the lease replaced the planted file")
			require.NoError(t, l.Release(ctx))

			require.NoError(t, st.Delete(ctx, "c"), "a head that is not one still goes")
			_, err = os.Lstat(head)
			assert.ErrorIs(t, err, os.ErrNotExist)
		})
	}
}

// TestLeaseForged: a lease that claims a far-future expiry holds its
// conversation for at most the taker's ttl after it was first seen, even
// tagged under the key; with a key, an untagged one holds it not at all.
func TestLeaseForged(t *testing.T) {
	ctx := context.Background()
	key := []byte("0123456789abcdef")
	forever := time.Now().Add(100 * 365 * 24 * time.Hour)
	t.Run("tagged", func(t *testing.T) {
		d, err := sessionstore.OpenDir(t.TempDir())
		require.NoError(t, err)
		st, err := sessionstore.New(d, &sessionstore.Options{Key: key, LeaseWait: 10 * time.Second})
		require.NoError(t, err)
		_, err = d.Set(ctx, sessionstore.Leases, "c", sessionstore.SealLease(st, "c", "forger", forever), 0)
		require.NoError(t, err)
		const ttl = 300 * time.Millisecond
		start := time.Now()
		l, err := st.Lease(ctx, "c", ttl)
		require.NoError(t, err, "taken once unrenewed for its ttl")
		assert.GreaterOrEqual(t, time.Since(start), ttl, "held until then")
		assert.NoError(t, l.Release(ctx))
	})
	t.Run("untagged", func(t *testing.T) {
		d, err := sessionstore.OpenDir(t.TempDir())
		require.NoError(t, err)
		keyless, err := sessionstore.New(d, nil)
		require.NoError(t, err)
		st, err := sessionstore.New(d, &sessionstore.Options{Key: key, LeaseWait: -1})
		require.NoError(t, err)
		_, err = d.Set(ctx, sessionstore.Leases, "c", sessionstore.SealLease(keyless, "c", "forger", forever), 0)
		require.NoError(t, err)
		l, err := st.Lease(ctx, "c", time.Minute)
		require.NoError(t, err, "a lease without the key's tag holds nothing")
		assert.NoError(t, l.Release(ctx))
		// A held lease, tagged, still keeps others out.
		held, err := st.Lease(ctx, "c", time.Minute)
		require.NoError(t, err)
		defer held.Release(ctx)
		_, err = st.Lease(ctx, "c", time.Minute)
		assert.ErrorIs(t, err, sessionstore.ErrBusy)
	})
}
