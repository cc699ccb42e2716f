package wasi_test

import (
	"io"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/wasi"
)

func TestDescribeReopen(t *testing.T) {
	mem := afero.NewMemMapFs()
	require.NoError(t, mem.MkdirAll("/d", 0o755))
	require.NoError(t, afero.WriteFile(mem, "/d/a.txt", []byte("hello world"), 0o644))
	fsys, err := wasi.NewFS(mem, wasi.Options{})
	require.NoError(t, err)

	f, errno := fsys.OpenFile("d/a.txt", sys.O_RDWR|sys.O_APPEND|sys.O_TRUNC|sys.O_CREAT, 0o644)
	require.Zero(t, errno)
	_, errno = f.Write([]byte("abc"))
	require.Zero(t, errno)
	_, errno = f.Seek(2, io.SeekStart)
	require.Zero(t, errno)
	h, err := fsys.Describe(f)
	require.NoError(t, err)
	require.Equal(t, wasi.Handle{Path: "d/a.txt", Read: true, Write: true, Append: true, Offset: 2}, h)
	require.Equal(t, sys.O_RDWR|sys.O_APPEND, h.Flags(), "never O_CREAT or O_TRUNC")

	// A copy of the content: the reopened handle reads at the offset, and
	// does not truncate.
	copyFs := afero.NewMemMapFs()
	require.NoError(t, copyFs.MkdirAll("/d", 0o755))
	require.NoError(t, afero.WriteFile(copyFs, "/d/a.txt", []byte("abc"), 0o644))
	other, err := wasi.NewFS(copyFs, wasi.Options{})
	require.NoError(t, err)
	g, errno := other.Reopen(h)
	require.Zero(t, errno)
	buf := make([]byte, 8)
	n, errno := g.Read(buf)
	require.Zero(t, errno)
	require.Equal(t, "c", string(buf[:n]))
	require.True(t, g.IsAppend())

	// A directory, and the mount's root.
	d, errno := fsys.OpenFile("d", sys.O_RDONLY|sys.O_DIRECTORY, 0)
	require.Zero(t, errno)
	hd, err := fsys.Describe(d)
	require.NoError(t, err)
	require.Equal(t, wasi.Handle{Path: "d", Dir: true, Read: true}, hd)
	root, errno := fsys.OpenFile(".", sys.O_RDONLY, 0)
	require.Zero(t, errno)
	hr, err := fsys.Describe(root)
	require.NoError(t, err)
	require.Equal(t, ".", hr.Path)
	r2, errno := other.Reopen(hr)
	require.Zero(t, errno)
	isDir, _ := r2.IsDir()
	require.True(t, isDir)

	// A rename through the FS is followed.
	require.Zero(t, fsys.Rename("d/a.txt", "d/b.txt"))
	h, err = fsys.Describe(f)
	require.NoError(t, err)
	require.Equal(t, "d/b.txt", h.Path)

	// Deleted while open: said, with the path it had.
	require.Zero(t, fsys.Unlink("d/b.txt"))
	h, err = fsys.Describe(f)
	require.ErrorIs(t, err, wasi.ErrUnlinked)
	require.Equal(t, "d/b.txt", h.Path)
	_, errno = fsys.Reopen(h)
	require.Equal(t, sys.ENOENT, errno)

	// Not a handle of this FS, or closed.
	_, err = other.Describe(f)
	require.ErrorIs(t, err, wasi.ErrNotHandle)
	require.Zero(t, f.Close())
	_, err = fsys.Describe(f)
	require.ErrorIs(t, err, wasi.ErrNotHandle)

	// A file where a directory was, and a read-only FS.
	_, errno = other.Reopen(wasi.Handle{Path: "d/a.txt", Dir: true, Read: true})
	require.NotZero(t, errno)
	ro, err := wasi.NewFS(copyFs, wasi.Options{ReadOnly: true})
	require.NoError(t, err)
	_, errno = ro.Reopen(wasi.Handle{Path: "d/a.txt", Read: true, Write: true})
	require.Equal(t, sys.EROFS, errno)
	_, errno = ro.Reopen(wasi.Handle{Path: "d/a.txt", Read: true, Offset: -1})
	require.Equal(t, sys.EINVAL, errno)
}
