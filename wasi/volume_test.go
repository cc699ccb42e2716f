package wasi_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/internal/testenv"
	"github.com/fumehood/fumehood/wasi"
)

// volumeQuota is a quota large enough for the tests' trees.
var volumeQuota = wasi.Quota{MaxBytes: 1 << 30, MaxFiles: 100_000}

// TestVolumeCountToleratesChurn is the attack on the count of a shared
// volume: a tenant renames directories and creates and removes files in a
// loop while other sandboxes mount the volume. Counting it must never fail
// because something vanished mid-walk: over a backing file system that is
// walked for each FS (a BasePathFs), over a RootFs opened for each FS, and
// with CountUsage.
func TestVolumeCountToleratesChurn(t *testing.T) {
	dir := t.TempDir()
	const dirs = 20
	testenv.FillVolume(t, dir, dirs, 100)
	stop := make(chan struct{})
	wg := testenv.ChurnVolume(dir, dirs, stop)
	failed := 0
	const starts = 300
	for i := range starts {
		var err error
		switch i % 3 {
		case 0:
			_, err = wasi.NewFS(afero.NewBasePathFs(afero.NewOsFs(), dir), wasi.Options{Quota: volumeQuota})
		case 1:
			var r *wasi.RootFs
			r, err = wasi.HostDir(dir)
			require.NoError(t, err)
			_, err = wasi.NewFS(r, wasi.Options{Quota: volumeQuota})
			_ = r.Close()
		case 2:
			_, err = wasi.CountUsage(afero.NewBasePathFs(afero.NewOsFs(), dir))
		}
		if err != nil {
			failed++
			t.Log(err)
		}
	}
	close(stop)
	wg.Wait()
	assert.Zero(t, failed, "counts failed out of %d", starts)
}

// TestVolumeCountedOnce: FSes with a quota over one host directory, through
// one RootFs or RootFs values opened apart, count it once, not at each
// start, and share its usage.
func TestVolumeCountedOnce(t *testing.T) {
	dir := t.TempDir()
	testenv.FillVolume(t, dir, 20, 1000) // 20,000 files
	first, err := wasi.HostDir(dir)
	require.NoError(t, err)
	defer first.Close()
	before := wasi.Walks()
	held, err := wasi.NewFS(first, wasi.Options{Quota: volumeQuota})
	require.NoError(t, err)
	assert.Equal(t, wasi.Usage{Bytes: 20_000, Files: 20_040}, held.Usage())
	for range 50 {
		other, err := wasi.HostDir(dir)
		require.NoError(t, err)
		_, err = wasi.NewFS(other, wasi.Options{Quota: volumeQuota})
		require.NoError(t, err)
		_ = other.Close()
		_, err = wasi.NewFS(first, wasi.Options{Quota: volumeQuota})
		require.NoError(t, err)
	}
	assert.Equal(t, int64(1), wasi.Walks()-before, "one walk for 101 FSes")

	// A read-only mount or one without a quota counts nothing.
	_, err = wasi.NewFS(first, wasi.Options{ReadOnly: true})
	require.NoError(t, err)
	assert.Equal(t, int64(1), wasi.Walks()-before)
}

// TestVolumeQuotaShared: the quota of FSes over one host directory bounds
// what it holds in all, whichever FS writes, and writers racing each other
// never take it past the quota.
func TestVolumeQuotaShared(t *testing.T) {
	dir := t.TempDir()
	q := wasi.Quota{MaxBytes: 1000, MaxFiles: 100}
	const writers = 8
	var fss []*wasi.FS
	for range writers {
		r, err := wasi.HostDir(dir)
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Close() })
		fsys, err := wasi.NewFS(r, wasi.Options{Quota: q})
		require.NoError(t, err)
		fss = append(fss, fsys)
	}
	var wg sync.WaitGroup
	for w, fsys := range fss {
		wg.Go(func() {
			f, errno := fsys.OpenFile(fmt.Sprintf("w%d", w), sys.O_RDWR|sys.O_CREAT, 0o644)
			if errno != 0 {
				return
			}
			defer f.Close()
			for {
				if _, errno := f.Write(make([]byte, 7)); errno != 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := wasi.CountUsage(afero.NewBasePathFs(afero.NewOsFs(), dir))
	require.NoError(t, err)
	assert.LessOrEqual(t, got.Bytes, q.MaxBytes, "the directory holds at most one quota")
	assert.Greater(t, got.Bytes, q.MaxBytes-7*writers)
	for _, fsys := range fss {
		assert.Equal(t, got, fsys.Usage(), "every FS sees the directory's usage")
	}
}

// TestVolumeRecount: what another program removes from a host directory
// is seen when a change is refused, and the bytes of a file unlinked while
// open through an FS stay counted until it is closed.
func TestVolumeRecount(t *testing.T) {
	defer wasi.SetRecountAfter(0)()
	dir := t.TempDir()
	r, err := wasi.HostDir(dir)
	require.NoError(t, err)
	defer r.Close()
	fsys, err := wasi.NewFS(r, wasi.Options{Quota: wasi.Quota{MaxBytes: 100}})
	require.NoError(t, err)
	write := func(name string, n int) sys.Errno {
		f, errno := fsys.OpenFile(name, sys.O_RDWR|sys.O_CREAT, 0o644)
		require.Zero(t, errno)
		defer f.Close()
		_, errno = f.Write(make([]byte, n))
		return errno
	}
	require.Zero(t, write("a", 60))
	require.Zero(t, write("b", 30))
	held, errno := fsys.OpenFile("b", sys.O_RDWR, 0)
	require.Zero(t, errno)
	require.Zero(t, fsys.Unlink("b"))
	assert.Equal(t, int64(90), fsys.Usage().Bytes, "b is held open")

	require.NoError(t, os.Remove(filepath.Join(dir, "a"))) // by the host
	assert.Equal(t, int64(90), fsys.Usage().Bytes, "not seen yet")
	assert.Equal(t, wasi.ENOSPC, write("c", 80), "30 + 80 is past the quota")
	assert.Equal(t, int64(30), fsys.Usage().Bytes, "counted again: b only")
	require.Zero(t, write("c", 70))
	require.Zero(t, held.Close())
	assert.Equal(t, int64(70), fsys.Usage().Bytes)
	got, err := wasi.CountUsage(r)
	require.NoError(t, err)
	assert.Equal(t, got, fsys.Usage())

	require.NoError(t, os.WriteFile(filepath.Join(dir, "by-the-host"), make([]byte, 5), 0o644))
	require.NoError(t, fsys.Recount())
	assert.Equal(t, wasi.Usage{Bytes: 75, Files: 2}, fsys.Usage())
}
