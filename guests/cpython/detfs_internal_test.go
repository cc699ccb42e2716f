package cpython

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
)

// detTree makes a directory with files created in the order given, each
// with a different host time, and returns its detFS.
func detTree(t *testing.T, names ...string) (*detFS, string) {
	dir := t.TempDir()
	for i, n := range names {
		p := filepath.Join(dir, n)
		require.NoError(t, os.WriteFile(p, []byte(n), 0o644))
		when := time.Now().Add(time.Duration(i) * time.Hour)
		require.NoError(t, os.Chtimes(p, when, when))
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	return &detFS{FS: sysfs.DirFS(dir), dev: 7, inodes: &inodes{}}, dir
}

// names lists a directory's entries through f.
func names(t *testing.T, f experimentalsys.File, n int) []string {
	ents, errno := f.Readdir(n)
	require.Zero(t, errno)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name)
	}
	return out
}

// TestDetFS: what the training sees of a host directory depends on
// nothing but the names in it and the order the guest looks at them:
// times are trainEpoch, inodes count up from 1 in the order seen, the
// device is the mount's, entries come sorted (also after a rewind).
func TestDetFS(t *testing.T) {
	d, _ := detTree(t, "c", "a", "b")

	st, errno := d.Stat("c")
	require.Zero(t, errno)
	assert.Equal(t, trainEpoch, st.Mtim)
	assert.Equal(t, trainEpoch, st.Atim)
	assert.Equal(t, trainEpoch, st.Ctim)
	assert.Equal(t, uint64(7), st.Dev)
	assert.Equal(t, uint64(1), st.Ino, "the first file seen is inode 1")
	assert.Equal(t, int64(1), st.Size)

	st, errno = d.Lstat("sub")
	require.Zero(t, errno)
	assert.Equal(t, uint64(2), st.Ino)
	assert.Zero(t, st.Size, "a directory's size depends on its history")

	dir, errno := d.OpenFile(".", experimentalsys.O_RDONLY, 0)
	require.Zero(t, errno)
	defer dir.Close()
	assert.Equal(t, []string{"a", "b"}, names(t, dir, 2))
	assert.Equal(t, []string{"c", "sub"}, names(t, dir, 10))
	assert.Empty(t, names(t, dir, 10))
	_, errno = dir.Seek(0, io.SeekStart)
	require.Zero(t, errno)
	ents, errno := dir.Readdir(-1)
	require.Zero(t, errno)
	require.Len(t, ents, 4)
	assert.Equal(t, "a", ents[0].Name)
	assert.Equal(t, uint64(3), ents[0].Ino, "a is the third file seen")
	assert.Equal(t, uint64(1), ents[2].Ino, "c keeps its number")

	f, errno := d.OpenFile("a", experimentalsys.O_RDONLY, 0)
	require.Zero(t, errno)
	defer f.Close()
	ino, errno := f.Ino()
	require.Zero(t, errno)
	assert.Equal(t, uint64(3), ino)
	dev, errno := f.Dev()
	require.Zero(t, errno)
	assert.Equal(t, uint64(7), dev)
	st, errno = f.Stat()
	require.Zero(t, errno)
	assert.Equal(t, trainEpoch, st.Mtim)

	// A time the guest sets is accepted and not shown back.
	require.Zero(t, d.Utimens("b", 1e9, 2e9))
	st, errno = d.Stat("b")
	require.Zero(t, errno)
	assert.Equal(t, trainEpoch, st.Mtim)
}

// TestDetFSSameView: two trees of the same names, made in different
// orders at different times, look the same when walked the same way.
func TestDetFSSameView(t *testing.T) {
	view := func(d *detFS) []any {
		dir, errno := d.OpenFile(".", experimentalsys.O_RDONLY, 0)
		require.Zero(t, errno)
		defer dir.Close()
		ents, errno := dir.Readdir(-1)
		require.Zero(t, errno)
		var out []any
		for _, e := range ents {
			st, errno := d.Stat(e.Name)
			require.Zero(t, errno)
			out = append(out, e, st)
		}
		return out
	}
	a, _ := detTree(t, "x", "y", "z")
	b, _ := detTree(t, "z", "x", "y")
	assert.Equal(t, view(a), view(b))
}

// TestRemovePycache removes every __pycache__ below a directory and
// nothing else.
func TestRemovePycache(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"__pycache__/a.pyc", "pkg/__pycache__/b.pyc", "pkg/b.py", "a.py"} {
		p := filepath.Join(dir, filepath.FromSlash(f))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, nil, 0o644))
	}
	require.NoError(t, removePycache(dir))
	for f, want := range map[string]bool{"__pycache__": false, "pkg/__pycache__": false, "pkg/b.py": true, "a.py": true} {
		_, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f)))
		assert.Equal(t, want, err == nil, f)
	}
}
