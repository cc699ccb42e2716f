package codetool_test

import (
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/codetool"
)

// TestWatchFilesOverFS: WatchFiles works on any fs.FS rooted at the
// guest's "/", reports absolute guest paths of new and changed regular
// files under its directory only, and carries small images.
func TestWatchFilesOverFS(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	fsys := fstest.MapFS{
		"work/old.txt":     {Data: []byte("old"), ModTime: t0},
		"work/same.txt":    {Data: []byte("same"), ModTime: t0},
		"tmp/elsewhere.md": {Data: []byte("x"), ModTime: t0},
	}
	w := codetool.WatchFiles(fsys, "/work", 0)
	fsys["work/old.txt"] = &fstest.MapFile{Data: []byte("changed"), ModTime: t0.Add(time.Second)}
	fsys["work/plots/p.png"] = &fstest.MapFile{Data: []byte("\x89PNG"), ModTime: t0}
	fsys["tmp/new.txt"] = &fstest.MapFile{Data: []byte("outside"), ModTime: t0}
	files, err := w.Changed()
	require.NoError(t, err)
	require.Len(t, files, 2)
	assert.Equal(t, codetool.File{Path: "/work/old.txt", Size: 7}, files[0])
	assert.Equal(t, codetool.File{Path: "/work/plots/p.png", Size: 4, MediaType: "image/png", Data: []byte("\x89PNG")}, files[1])

	// The root, and a missing directory.
	w = codetool.WatchFiles(fsys, "/", 0)
	fsys["new.txt"] = &fstest.MapFile{Data: []byte("n")}
	files, err = w.Changed()
	require.NoError(t, err)
	require.Len(t, files, 1)
	assert.Equal(t, "/new.txt", files[0].Path)
	files, err = codetool.WatchFiles(fsys, "/missing", 0).Changed()
	require.NoError(t, err)
	assert.Empty(t, files)
}
