package cpython

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/wasi"
)

type tarEntry struct {
	name, body string
	typ        byte
}

func makeTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mod := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, ModTime: mod, Size: int64(len(e.body))}
		if e.typ == tar.TypeSymlink {
			h.Linkname, h.Size = e.body, 0
		}
		require.NoError(t, tw.WriteHeader(h))
		if h.Size > 0 {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

func stdlibTar(t *testing.T) []byte {
	return makeTar(t,
		tarEntry{name: "lib/", typ: tar.TypeDir},
		tarEntry{name: "lib/python313.zip", body: strings.Repeat("zip", 1000), typ: tar.TypeReg},
		// No entry for share/ or share/zoneinfo/: made as parents.
		tarEntry{name: "share/zoneinfo/Europe/Paris", body: "TZif paris", typ: tar.TypeReg},
		tarEntry{name: "share/zoneinfo/Europe/Berlin", body: "TZif berlin", typ: tar.TypeReg},
		tarEntry{name: "share/zoneinfo/UTC", body: "", typ: tar.TypeReg},
	)
}

func TestTarFSServesSlicesOfTheTar(t *testing.T) {
	data := stdlibTar(t)
	fsys, err := untar(data)
	require.NoError(t, err)

	b, err := afero.ReadFile(fsys, "/share/zoneinfo/Europe/Paris")
	require.NoError(t, err)
	assert.Equal(t, "TZif paris", string(b))
	b, err = afero.ReadFile(fsys, "/lib/python313.zip")
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("zip", 1000), string(b))

	// No copy: the file's bytes are inside the tar's.
	tfs, err := newTarFS(data)
	require.NoError(t, err)
	n := tfs.nodes["/lib/python313.zip"]
	require.NotNil(t, n)
	start := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	at := uintptr(unsafe.Pointer(unsafe.SliceData(n.data)))
	assert.True(t, at >= start && at+uintptr(len(n.data)) <= start+uintptr(len(data)), "file data is a slice of the tar")
	assert.Equal(t, len(n.data), cap(n.data), "a file's slice cannot reach past its end")

	fi, err := fsys.Stat("/share/zoneinfo/UTC")
	require.NoError(t, err)
	assert.Equal(t, int64(0), fi.Size())
	assert.Equal(t, fs.FileMode(0o444), fi.Mode())
	fi, err = fsys.Stat("/share")
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	_, err = fsys.Stat("/share/nope")
	assert.ErrorIs(t, err, fs.ErrNotExist)

	d, err := fsys.Open("/share/zoneinfo/Europe")
	require.NoError(t, err)
	names, err := d.Readdirnames(-1)
	require.NoError(t, err)
	assert.Equal(t, []string{"Berlin", "Paris"}, names, "sorted")
	_, err = d.Readdir(1)
	assert.ErrorIs(t, err, io.EOF)
	_, err = d.Seek(0, io.SeekStart)
	require.NoError(t, err)
	fis, err := d.Readdir(1)
	require.NoError(t, err)
	require.Len(t, fis, 1)
	assert.Equal(t, "Berlin", fis[0].Name())
	require.NoError(t, d.Close())
	assert.ErrorIs(t, d.Close(), fs.ErrClosed)

	root, err := fsys.Open("/")
	require.NoError(t, err)
	names, err = root.Readdirnames(-1)
	require.NoError(t, err)
	assert.Equal(t, []string{"lib", "share"}, names)
}

func TestTarFSRefusesWrites(t *testing.T) {
	fsys, err := untar(stdlibTar(t))
	require.NoError(t, err)
	_, err = fsys.OpenFile("/lib/python313.zip", os.O_RDWR, 0)
	assert.ErrorIs(t, err, syscall.EPERM)
	_, err = fsys.Create("/lib/new")
	assert.ErrorIs(t, err, syscall.EPERM)
	assert.ErrorIs(t, fsys.Remove("/lib/python313.zip"), syscall.EPERM)
	assert.ErrorIs(t, fsys.Mkdir("/x", 0o755), syscall.EPERM)
	// Under the read-only wrapper too: the file itself refuses.
	tfs, err := newTarFS(stdlibTar(t))
	require.NoError(t, err)
	f, err := tfs.Open("/lib/python313.zip")
	require.NoError(t, err)
	_, err = f.Write([]byte("x"))
	assert.ErrorIs(t, err, syscall.EPERM)
	_, err = f.WriteAt([]byte("x"), 0)
	assert.ErrorIs(t, err, syscall.EPERM)
	assert.ErrorIs(t, f.Truncate(0), syscall.EPERM)
	_, err = tfs.OpenFile("/lib/python313.zip", os.O_WRONLY|os.O_TRUNC, 0)
	assert.ErrorIs(t, err, syscall.EPERM)

	// Through the mount the sandbox makes of it: EROFS, and the bytes stay.
	wfs, err := wasi.NewFS(fsys, wasi.Options{ReadOnly: true})
	require.NoError(t, err)
	_, errno := wfs.OpenFile("lib/python313.zip", sys.O_RDWR, 0)
	assert.Equal(t, sys.EROFS, errno)
	wf, errno := wfs.OpenFile("share/zoneinfo/Europe/Paris", sys.O_RDONLY, 0)
	require.Equal(t, sys.Errno(0), errno)
	buf := make([]byte, 64)
	n, errno := wf.Pread(buf, 5)
	require.Equal(t, sys.Errno(0), errno)
	assert.Equal(t, "paris", string(buf[:n]))
}

func TestTarFSBadTars(t *testing.T) {
	good := stdlibTar(t)
	for name, data := range map[string][]byte{
		"truncated in a file": good[:512+100],
		"a symbolic link":     makeTar(t, tarEntry{name: "lib/x", body: "/etc/passwd", typ: tar.TypeSymlink}),
		"a file twice":        makeTar(t, tarEntry{name: "a", body: "1", typ: tar.TypeReg}, tarEntry{name: "a", body: "2", typ: tar.TypeReg}),
		"a file as a parent":  makeTar(t, tarEntry{name: "a", body: "1", typ: tar.TypeReg}, tarEntry{name: "a/b", body: "2", typ: tar.TypeReg}),
	} {
		_, err := newTarFS(data)
		assert.Error(t, err, name)
	}
}
