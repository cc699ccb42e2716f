package wasi_test

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/wasi"
)

func TestNewFSErrors(t *testing.T) {
	_, err := wasi.NewFS(nil, wasi.Options{})
	require.Error(t, err)
	_, err = wasi.NewFS(afero.NewMemMapFs(), wasi.Options{Quota: wasi.Quota{MaxBytes: -1}})
	require.Error(t, err)
	_, err = wasi.NewFS(afero.NewMemMapFs(), wasi.Options{Quota: wasi.Quota{MaxFiles: -1}})
	require.Error(t, err)
	missing := filepath.Join(t.TempDir(), "missing")
	_, err = wasi.NewFS(afero.NewBasePathFs(afero.NewOsFs(), missing), wasi.Options{})
	require.ErrorIs(t, err, sys.ENOENT)
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = wasi.NewFS(afero.NewBasePathFs(afero.NewOsFs(), file), wasi.Options{})
	require.ErrorContains(t, err, "not a directory")

	fsys, err := wasi.NewFS(afero.NewMemMapFs(), wasi.Options{ReadOnly: true})
	require.NoError(t, err)
	require.Equal(t, "wasi.FS(MemMapFS, ro)", fsys.String())
	require.Equal(t, wasi.Usage{}, fsys.Usage(), "no quota: no accounting")
}

func TestENOSPC(t *testing.T) {
	require.NotEqual(t, sys.EIO, wasi.ENOSPC)
	for e := sys.Errno(1); e <= sys.EROFS; e++ {
		require.NotEqual(t, e, wasi.ENOSPC, "ENOSPC must not collide with %v", e)
	}
}

func TestPersistentVolumeUsage(t *testing.T) {
	// A host directory that already has content, as a persistent volume.
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "one"), make([]byte, 100), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "b", "two"), make([]byte, 50), 0o644))
	require.NoError(t, os.Symlink("a/one", filepath.Join(dir, "link")))
	backing := afero.NewBasePathFs(afero.NewOsFs(), dir)

	// The content is counted: a, a/b, a/one, a/b/two, link; 150 bytes.
	fsys, err := wasi.NewFS(backing, wasi.Options{Quota: wasi.Quota{MaxBytes: 120, MaxFiles: 5}})
	require.NoError(t, err)
	require.Equal(t, wasi.Usage{Bytes: 150, Files: 5}, fsys.Usage())

	// Over the quota from the start: nothing may grow, but removing works.
	f, errno := fsys.OpenFile("a/one", sys.O_RDWR, 0)
	require.Equal(t, sys.Errno(0), errno)
	_, errno = f.Pwrite([]byte("x"), 100)
	require.Equal(t, wasi.ENOSPC, errno)
	_, errno = f.Pwrite([]byte("overwrite"), 0)
	require.Equal(t, sys.Errno(0), errno, "overwriting does not grow")
	require.Equal(t, sys.Errno(0), f.Truncate(10))
	require.Equal(t, sys.Errno(0), f.Close())
	require.Equal(t, wasi.Usage{Bytes: 60, Files: 5}, fsys.Usage())
	require.Equal(t, wasi.ENOSPC, fsys.Mkdir("c", 0o755), "MaxFiles reached")
	require.Equal(t, sys.Errno(0), fsys.Unlink("link"))
	require.Equal(t, sys.Errno(0), fsys.Mkdir("c", 0o755))
	fi, err := os.Stat(filepath.Join(dir, "a", "one"))
	require.NoError(t, err)
	require.Equal(t, int64(10), fi.Size())
}

func TestCopyOnWriteBaseContent(t *testing.T) {
	backing := newCopyOnWrite(t)
	fsys, err := wasi.NewFS(backing, wasi.Options{Quota: wasi.Quota{MaxBytes: 1000, MaxFiles: 100}})
	require.NoError(t, err)
	// readme.txt, lib, lib/python, os.py, empty.py
	require.Equal(t, wasi.Usage{Bytes: int64(len("read me") + len("import sys\n")), Files: 5}, fsys.Usage())

	// The base content reads as usual.
	f, errno := fsys.OpenFile("/lib/python/os.py", sys.O_RDONLY, 0)
	require.Equal(t, sys.Errno(0), errno)
	b, err := io.ReadAll(fileReader{f})
	require.NoError(t, err)
	require.Equal(t, "import sys\n", string(b))
	require.Equal(t, sys.Errno(0), f.Close())

	// Writing to a base file copies it to the overlay; the base is intact.
	f, errno = fsys.OpenFile("/readme.txt", sys.O_WRONLY|sys.O_APPEND, 0)
	require.Equal(t, sys.Errno(0), errno)
	_, errno = f.Write([]byte("!!"))
	require.Equal(t, sys.Errno(0), errno)
	require.Equal(t, sys.Errno(0), f.Close())
	b, err = afero.ReadFile(backing, "/readme.txt")
	require.NoError(t, err)
	require.Equal(t, "read me!!", string(b))
	require.Equal(t, int64(len("read me!!")+len("import sys\n")), fsys.Usage().Bytes)

	// Files only in the read-only base cannot be removed or renamed.
	require.Equal(t, sys.EPERM, fsys.Unlink("/lib/python/os.py"))
	require.Equal(t, sys.EPERM, fsys.Rename("/lib/python/os.py", "/os.py"))
	_, errno = fsys.Stat("/lib/python/os.py")
	require.Equal(t, sys.Errno(0), errno)
	fresh, err := wasi.NewFS(backing, wasi.Options{Quota: wasi.Quota{MaxBytes: 1000}})
	require.NoError(t, err)
	require.Equal(t, fresh.Usage(), fsys.Usage())
}

// fileReader adapts a sys.File to io.Reader.
type fileReader struct{ f sys.File }

func (r fileReader) Read(p []byte) (int, error) {
	n, errno := r.f.Read(p)
	if errno != 0 {
		return n, errno
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

func TestConcurrentUse(t *testing.T) {
	// One FS used from several goroutines (as when one FS is mounted in
	// several module instances): the quota holds exactly.
	fsys, err := wasi.NewFS(afero.NewMemMapFs(), wasi.Options{Quota: wasi.Quota{MaxBytes: 1000}})
	require.NoError(t, err)
	const workers, writes = 8, 50
	done := make(chan int)
	for w := 0; w < workers; w++ {
		go func(w int) {
			f, errno := fsys.OpenFile(string(rune('a'+w)), sys.O_RDWR|sys.O_CREAT, 0o644)
			ok := 0
			if errno == 0 {
				for i := 0; i < writes; i++ {
					if _, errno := f.Write([]byte("0123456789")); errno == 0 {
						ok++
					}
				}
				f.Close()
			}
			done <- ok
		}(w)
	}
	total := 0
	for w := 0; w < workers; w++ {
		total += <-done
	}
	require.Equal(t, 100, total, "exactly 1000 bytes fit")
	require.Equal(t, int64(1000), fsys.Usage().Bytes)
}
