package sandbox

import (
	"bytes"
	"fmt"
	"github.com/fumehood/fumehood/wasi"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFilesHideControlOfAnySandbox: hiding the control directory is a
// property of Files for any sandbox that mounts it, not of sessions only;
// what Files cannot reach stays there, and a sandbox without it has no
// such rule.
func TestFilesHideControlOfAnySandbox(t *testing.T) {
	ctl := afero.NewMemMapFs()
	require.NoError(t, afero.WriteFile(ctl, "/result-1", []byte("{}"), 0o644))
	g := &Guest{}
	sb, err := g.newSandbox(&Config{Mounts: []Mount{{Path: controlPath, FS: ctl}}}, true)
	require.NoError(t, err)
	defer sb.Close()

	files := sb.Files()
	_, err = files.Stat(controlPath + "/result-1")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.ErrorIs(t, files.WriteFile(controlPath+"/x", nil), fs.ErrNotExist)
	require.NoError(t, files.RemoveAll(controlPath+"/result-1"))

	b, err := afero.ReadFile(ctl, "/result-1")
	require.NoError(t, err, "still there, and in fumehood's reach")
	assert.Equal(t, "{}", string(b))

	plain, err := g.newSandbox(nil, false)
	require.NoError(t, err)
	defer plain.Close()
	require.NoError(t, plain.Files().MkdirAll(controlPath))
	fi, err := plain.Files().Stat(controlPath)
	require.NoError(t, err, "without the control mount, it is an ordinary name")
	assert.True(t, fi.IsDir())
}

// allocated returns the bytes the process allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestReadFileLimitHoldsOnlyTheLimit: a bounded read of a 900 MiB sparse
// file, as a guest can write one within a 1 GiB quota (a hole counts only
// as its size), allocates about what it returns, not the file.
func TestReadFileLimitHoldsOnlyTheLimit(t *testing.T) {
	dir := t.TempDir()
	big, err := os.Create(filepath.Join(dir, "big"))
	require.NoError(t, err)
	_, err = big.WriteAt([]byte("x"), 900<<20)
	require.NoError(t, err)
	require.NoError(t, big.Close())
	host, err := wasi.HostDir(dir)
	require.NoError(t, err)
	defer host.Close()
	sb, err := (&Guest{}).newSandbox(&Config{Mounts: []Mount{{Path: "/data", FS: host, Quota: wasi.Quota{MaxBytes: 1 << 30}}}}, false)
	require.NoError(t, err)
	defer sb.Close()

	const limit = 1 << 20
	var data []byte
	var more bool
	n := allocated(func() { data, more, err = sb.Files().ReadFileLimit("/data/big", limit) })
	require.NoError(t, err)
	assert.Len(t, data, limit)
	assert.True(t, more)
	assert.Less(t, n, uint64(4<<20), "bytes allocated to read 1 MiB of a 900 MiB file")
}

// lyingFs reports every file's size as zero, as a file that grew since
// its size was read would.
type lyingFs struct{ afero.Fs }

func (l lyingFs) OpenFile(name string, flag int, perm os.FileMode) (afero.File, error) {
	f, err := l.Fs.OpenFile(name, flag, perm)
	return lyingFile{f}, err
}

func (l lyingFs) Open(name string) (afero.File, error) { return l.OpenFile(name, os.O_RDONLY, 0) }

type lyingFile struct{ afero.File }

func (l lyingFile) Stat() (fs.FileInfo, error) {
	fi, err := l.File.Stat()
	if err != nil || fi.IsDir() {
		return fi, err
	}
	return zeroSize{fi}, nil
}

type zeroSize struct{ fs.FileInfo }

func (zeroSize) Size() int64 { return 0 }

// TestReadFileLimit: the bytes and the report of more, at and around the
// limit, whether the file's size is right or understated (the buffer
// grows, never past the limit); bad limits and names fail.
func TestReadFileLimit(t *testing.T) {
	mem := afero.NewMemMapFs()
	content := bytes.Repeat([]byte("0123456789"), 1000) // 10,000 bytes
	for _, n := range []int{0, 1, 4095, 4096, 4097, 9999, 10000} {
		require.NoError(t, afero.WriteFile(mem, fmt.Sprintf("/f%d", n), content[:n], 0o644))
	}
	require.NoError(t, mem.Mkdir("/dir", 0o755))
	for _, fsys := range []afero.Fs{mem, lyingFs{mem}} {
		sb, err := (&Guest{}).newSandbox(&Config{Mounts: []Mount{{Path: "/m", FS: fsys, ReadOnly: true}}}, false)
		require.NoError(t, err)
		defer sb.Close()
		files := sb.Files()
		for _, size := range []int{0, 1, 4095, 4096, 4097, 9999, 10000} {
			for _, limit := range []int{0, 1, 4096, 5000, 9999, 10000, 20000} {
				name := fmt.Sprintf("/m/f%d", size)
				data, more, err := files.ReadFileLimit(name, int64(limit))
				require.NoError(t, err, "%T %s %d", fsys, name, limit)
				want := min(size, limit)
				assert.Equal(t, content[:want], data, "%T %s %d", fsys, name, limit)
				assert.LessOrEqual(t, cap(data), max(limit, 0), "%T %s %d: held past the limit", fsys, name, limit)
				assert.Equal(t, size > limit, more, "%T %s %d", fsys, name, limit)
			}
			whole, err := files.ReadFile(fmt.Sprintf("/m/f%d", size))
			require.NoError(t, err)
			assert.Equal(t, content[:size], whole)
			assert.NotNil(t, whole)
		}
		_, _, err = files.ReadFileLimit("/m/f1", -1)
		assert.ErrorIs(t, err, fs.ErrInvalid)
		_, _, err = files.ReadFileLimit("m/f1", 10)
		assert.ErrorIs(t, err, fs.ErrInvalid, "not an absolute guest path")
		_, _, err = files.ReadFileLimit("/m/none", 10)
		assert.ErrorIs(t, err, fs.ErrNotExist)
		_, _, err = files.ReadFileLimit("/m/dir", 10)
		assert.Error(t, err)
	}
}
