package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

func TestVolume(t *testing.T) {
	sandboxtest.Built(t)
	dir := t.TempDir()
	var first, second bytes.Buffer
	require.NoError(t, run(context.Background(), &first, dir))
	assert.Equal(t, `run 1, scratch from an earlier run: False
run 2, scratch from an earlier run: False
run 3, scratch from an earlier run: False
the host reads log.txt: "run 1\nrun 2\nrun 3\n"
refused: No space left on device
big.bin holds 0 bytes
`, first.String())

	// Another compiled guest, as in another process: the volume goes on.
	require.NoError(t, run(context.Background(), &second, dir))
	assert.Contains(t, second.String(), "run 4, scratch from an earlier run: False\n")
	assert.Contains(t, second.String(), "refused: No space left on device\n")

	visits, err := os.ReadFile(filepath.Join(dir, "visits.txt"))
	require.NoError(t, err)
	assert.Equal(t, "6", string(visits))
	big, err := os.Stat(filepath.Join(dir, "big.bin"))
	require.NoError(t, err)
	assert.Zero(t, big.Size(), "a write past the quota writes nothing")
	_, err = os.Stat(filepath.Join(dir, "scratch"))
	assert.ErrorIs(t, err, os.ErrNotExist, "/tmp is not in the volume")
}

// TestQuotaCountsExistingFiles: what the host left in the directory counts.
func TestQuotaCountsExistingFiles(t *testing.T) {
	sandboxtest.Built(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "old.bin"), make([]byte, quota.MaxBytes), 0o644))
	err := run(context.Background(), &bytes.Buffer{}, dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "OSError: [Errno 51] No space left on device")
	_, err = os.Stat(filepath.Join(dir, "visits.txt"))
	require.NoError(t, err, "creating a file costs no bytes")
	visits, err := os.ReadFile(filepath.Join(dir, "visits.txt"))
	require.NoError(t, err)
	assert.Empty(t, visits, "its content did not fit")
}
