//go:build unix

package wasi_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/wasi"
)

func TestSpecialFilesAreNotOpened(t *testing.T) {
	// A named pipe in a host directory: opening it for reading would block
	// until a writer comes. The FS refuses anything but regular files and
	// directories.
	dir := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	fsys, err := wasi.NewFS(afero.NewBasePathFs(afero.NewOsFs(), dir), wasi.Options{})
	require.NoError(t, err)
	done := make(chan sys.Errno, 1)
	go func() {
		_, errno := fsys.OpenFile("fifo", sys.O_RDONLY, 0)
		done <- errno
	}()
	select {
	case errno := <-done:
		require.Equal(t, sys.EACCES, errno)
	case <-time.After(10 * time.Second):
		t.Fatal("opening a named pipe blocked")
	}
	st, errno := fsys.Lstat("fifo")
	require.Equal(t, sys.Errno(0), errno, "it can still be listed and stat'ed")
	require.NotZero(t, st.Mode&fs.ModeNamedPipe, "mode %v", st.Mode)
}

// TestSpecialFileSwapIsNotOpened swaps a checked regular file for a named
// pipe just before the FS opens it: through RootFs the open does not block
// and is refused.
func TestSpecialFileSwapIsNotOpened(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("regular"), 0o644))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	r, err := wasi.HostDir(dir)
	require.NoError(t, err)
	defer r.Close()
	for _, flag := range []sys.Oflag{sys.O_RDONLY, sys.O_RDWR, sys.O_WRONLY | sys.O_TRUNC} {
		h := &hookFs{Fs: r, at: "/f", hook: func() error {
			return os.Rename(filepath.Join(dir, "fifo"), filepath.Join(dir, "f"))
		}}
		fsys, err := wasi.NewFS(h, wasi.Options{})
		require.NoError(t, err)
		done := make(chan sys.Errno, 1)
		go func() {
			_, errno := fsys.OpenFile("f", flag, 0)
			done <- errno
		}()
		select {
		case errno := <-done:
			// EIO when writing: the pipe has no reader (ENXIO).
			require.Contains(t, []sys.Errno{sys.EACCES, sys.EIO}, errno, "flag %v", flag)
		case <-time.After(10 * time.Second):
			t.Fatal("opening a named pipe blocked")
		}
		require.NoError(t, h.err)
		require.Nil(t, h.hook, "the swap happened")
		// Put a regular file back, and the pipe aside, for the next flag.
		require.NoError(t, os.Rename(filepath.Join(dir, "f"), filepath.Join(dir, "fifo")))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("regular"), 0o644))
	}
}
