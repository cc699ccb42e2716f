package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// FillVolume writes dirs directories under dir, named d000, d001, ...,
// each with an empty subdirectory "inner" and files one-byte files.
func FillVolume(t testing.TB, dir string, dirs, files int) {
	t.Helper()
	for d := range dirs {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", d))
		require.NoError(t, os.MkdirAll(filepath.Join(sub, "inner"), 0o755))
		for i := range files {
			require.NoError(t, os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d", i)), []byte{'x'}, 0o644))
		}
	}
}

// ChurnVolume changes a directory filled by FillVolume with dirs
// directories in a loop, as a tenant sharing it can, until stop is closed:
// it renames each directory away and back, renames its "inner"
// subdirectory, and creates and removes a file in it. The returned
// WaitGroup is done when it has stopped.
func ChurnVolume(dir string, dirs int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			d := filepath.Join(dir, fmt.Sprintf("d%03d", i%dirs))
			moved := d + ".moved"
			_ = os.Rename(d, moved)
			_ = os.Rename(filepath.Join(moved, "inner"), filepath.Join(moved, "inner.moved"))
			_ = os.WriteFile(filepath.Join(moved, "new"), []byte("new"), 0o644)
			_ = os.Remove(filepath.Join(moved, "new"))
			_ = os.Rename(filepath.Join(moved, "inner.moved"), filepath.Join(moved, "inner"))
			_ = os.Rename(moved, d)
		}
	})
	return &wg
}
