package sessionstore_test

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sessionstore"
)

// TestDirFull: a directory that cannot take a snapshot (a file size limit
// the write runs into, as a full disk would stop it) fails the put with
// the file system's error, leaves no partial file, and the head stays.
func TestDirFull(t *testing.T) {
	if root := os.Getenv("SESSIONSTORE_FULL_HELPER"); root != "" {
		signal.Ignore(syscall.SIGXFSZ) // a write past the limit fails with EFBIG instead
		require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 64 << 10, Max: 64 << 10}))
		s, err := sessionstore.Open(context.Background(), root, nil)
		require.NoError(t, err)
		_, err = s.Put(context.Background(), "full", make([]byte, 256<<10))
		require.ErrorIs(t, err, syscall.EFBIG)
		require.ErrorIs(t, err, sessionstore.ErrFull)
		return
	}
	ctx := context.Background()
	root := t.TempDir()
	s, err := sessionstore.Open(ctx, root, nil)
	require.NoError(t, err)
	ref, err := s.Put(ctx, "full", []byte("small"))
	require.NoError(t, err)
	head, err := s.Commit(ctx, "full", sessionstore.Head{}, ref)
	require.NoError(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^TestDirFull$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SESSIONSTORE_FULL_HELPER="+root)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)

	got, err := s.Load(ctx, "full")
	require.NoError(t, err)
	assert.Equal(t, head, got)
	left, err := os.ReadDir(filepath.Join(root, "snapshots", "full"))
	require.NoError(t, err)
	assert.Len(t, left, 1, "only the committed snapshot: no partial file")
}
