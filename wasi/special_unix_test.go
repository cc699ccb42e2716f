//go:build unix

package wasi_test

import (
	"io/fs"
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
