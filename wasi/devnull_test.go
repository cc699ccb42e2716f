package wasi_test

import (
	"io"
	"io/fs"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/wasi"
)

func TestDevNull(t *testing.T) {
	mem := afero.NewMemMapFs()
	fsys, err := wasi.NewFS(mem, wasi.Options{DevNull: true, ReadOnly: true, Device: 7})
	require.NoError(t, err)

	// Writable in a read-only FS, with the flags Python's open(os.devnull,
	// "w") passes; everything is written and nothing kept.
	w, errno := fsys.OpenFile("dev/null", sys.O_WRONLY|sys.O_CREAT|sys.O_TRUNC, 0o666)
	require.Zero(t, errno)
	n, errno := w.Write(make([]byte, 1<<20))
	require.Zero(t, errno)
	assert.Equal(t, 1<<20, n)
	n, errno = w.Pwrite([]byte("abc"), 1<<40)
	require.Zero(t, errno)
	assert.Equal(t, 3, n)
	_, errno = w.Read(make([]byte, 4))
	assert.Equal(t, sys.EBADF, errno, "opened for writing only")
	off, errno := w.Seek(100, io.SeekStart)
	require.Zero(t, errno)
	assert.Zero(t, off, "every offset is 0, as on Linux")
	require.Zero(t, w.Truncate(0))
	st, errno := w.Stat()
	require.Zero(t, errno)
	assert.Equal(t, fs.ModeDevice|fs.ModeCharDevice|0o666, st.Mode)
	assert.Equal(t, uint64(7), st.Dev)
	assert.Zero(t, st.Size)
	assert.NotZero(t, st.Ino)

	// Reads find the end at once, by any lexically equal name.
	r, errno := fsys.OpenFile("x/../dev/./null", sys.O_RDONLY, 0)
	require.Zero(t, errno)
	n, errno = r.Read(make([]byte, 16))
	require.Zero(t, errno)
	assert.Zero(t, n)
	_, errno = r.Write([]byte("x"))
	assert.Equal(t, sys.EBADF, errno, "opened for reading only")
	_, errno = r.Readdir(-1)
	assert.Equal(t, sys.ENOTDIR, errno)
	isDir, _ := r.IsDir()
	assert.False(t, isDir)

	// Stat by path agrees with the handle's, inode included.
	pst, errno := fsys.Stat("/dev/null")
	require.Zero(t, errno)
	assert.Equal(t, st, pst)
	lst, errno := fsys.Lstat("dev/null")
	require.Zero(t, errno)
	assert.Equal(t, st, lst)

	// It can be neither removed, replaced nor changed; it is no directory
	// or link.
	assert.Equal(t, sys.EPERM, fsys.Unlink("dev/null"))
	assert.Equal(t, sys.EPERM, fsys.Rename("dev/null", "x"))
	assert.Equal(t, sys.EPERM, fsys.Rename("x", "dev/null"))
	assert.Equal(t, sys.EPERM, fsys.Mkdir("dev/null", 0o755))
	assert.Equal(t, sys.EPERM, fsys.Rmdir("dev/null"))
	assert.Equal(t, sys.EPERM, fsys.Chmod("dev/null", 0o600))
	assert.Equal(t, sys.EPERM, fsys.Link("dev/null", "y"))
	assert.Equal(t, sys.EPERM, fsys.Symlink("y", "dev/null"))
	assert.Equal(t, sys.EPERM, fsys.Utimens("dev/null", 0, 0))
	_, errno = fsys.Readlink("dev/null")
	assert.Equal(t, sys.EINVAL, errno)
	_, errno = fsys.OpenFile("dev/null", sys.O_WRONLY|sys.O_CREAT|sys.O_EXCL, 0o666)
	assert.Equal(t, sys.EEXIST, errno)
	_, errno = fsys.OpenFile("dev/null", sys.O_RDONLY|sys.O_DIRECTORY, 0)
	assert.Equal(t, sys.ENOTDIR, errno)

	// The backing file system holds nothing of it, and other names under
	// dev stay the backing file system's.
	_, err = mem.Stat("/dev")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, errno = fsys.Stat("dev/zero")
	assert.Equal(t, sys.ENOENT, errno)
	_, errno = fsys.Stat("dev")
	assert.Equal(t, sys.ENOENT, errno)

	// A handle is described and reopened as any file's, in another FS
	// that serves the device.
	h, err := fsys.Describe(w)
	require.NoError(t, err)
	assert.Equal(t, wasi.Handle{Path: wasi.DevNullPath, Write: true}, h)
	other, err := wasi.NewFS(afero.NewMemMapFs(), wasi.Options{DevNull: true})
	require.NoError(t, err)
	w2, errno := other.Reopen(h)
	require.Zero(t, errno)
	_, errno = w2.Write([]byte("again"))
	require.Zero(t, errno)
	_, err = fsys.Describe(w2)
	assert.ErrorIs(t, err, wasi.ErrNotHandle, "another FS's handle")

	// Closed handles fail, and closing twice is no error.
	require.Zero(t, w.Close())
	require.Zero(t, w.Close())
	_, errno = w.Write([]byte("x"))
	assert.Equal(t, sys.EBADF, errno)
	_, err = fsys.Describe(w)
	assert.ErrorIs(t, err, wasi.ErrNotHandle)
	require.Zero(t, r.Close())
}

func TestDevNullOff(t *testing.T) {
	fsys, err := wasi.NewFS(afero.NewMemMapFs(), wasi.Options{})
	require.NoError(t, err)
	_, errno := fsys.OpenFile("dev/null", sys.O_WRONLY, 0)
	assert.Equal(t, sys.ENOENT, errno, "only with Options.DevNull")
	_, errno = fsys.Stat("dev/null")
	assert.Equal(t, sys.ENOENT, errno)
}

// TestDevNullMaxOpen checks that handles of the null device count toward
// MaxOpen like any: a guest opening it in a loop is stopped at the bound,
// and closing them gives the handles back.
func TestDevNullMaxOpen(t *testing.T) {
	var reported []uint16
	fsys, err := wasi.NewFS(afero.NewMemMapFs(), wasi.Options{DevNull: true, MaxOpen: 8,
		ReportErrno: func(e uint16) { reported = append(reported, e) }})
	require.NoError(t, err)
	var open []sys.File
	for i := 0; i < 8; i++ {
		f, errno := fsys.OpenFile("dev/null", sys.O_RDONLY, 0)
		require.Zero(t, errno)
		open = append(open, f)
	}
	_, errno := fsys.OpenFile("dev/null", sys.O_RDONLY, 0)
	assert.Equal(t, wasi.EMFILE, errno)
	assert.Equal(t, []uint16{33}, reported, "EMFILE passed on")
	_, errno = fsys.OpenFile("other", sys.O_RDWR|sys.O_CREAT, 0o644)
	assert.Equal(t, wasi.EMFILE, errno, "one bound for all handles")
	for _, f := range open {
		require.Zero(t, f.Close())
	}
	f, errno := fsys.OpenFile("other", sys.O_RDWR|sys.O_CREAT, 0o644)
	require.Zero(t, errno)
	require.Zero(t, f.Close())
}
