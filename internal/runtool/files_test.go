package runtool_test

import (
	"bytes"
	"image"
	"image/jpeg"
	"image/png"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/runtool"
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
	w := runtool.WatchFiles(fsys, "/work", 1<<20)
	fsys["work/old.txt"] = &fstest.MapFile{Data: []byte("changed"), ModTime: t0.Add(time.Second)}
	png := tinyPNG(t)
	fsys["work/plots/p.png"] = &fstest.MapFile{Data: png, ModTime: t0}
	fsys["tmp/new.txt"] = &fstest.MapFile{Data: []byte("outside"), ModTime: t0}
	files, err := w.Changed()
	require.NoError(t, err)
	require.Len(t, files, 2)
	assert.Equal(t, runtool.File{Path: "/work/old.txt", Size: 7}, files[0])
	assert.Equal(t, runtool.File{Path: "/work/plots/p.png", Size: int64(len(png)), MediaType: "image/png", Data: png}, files[1])

	// The root, and a missing directory.
	w = runtool.WatchFiles(fsys, "/", 1<<20)
	fsys["new.txt"] = &fstest.MapFile{Data: []byte("n")}
	files, err = w.Changed()
	require.NoError(t, err)
	require.Len(t, files, 1)
	assert.Equal(t, "/new.txt", files[0].Path)
	files, err = runtool.WatchFiles(fsys, "/missing", 1<<20).Changed()
	require.NoError(t, err)
	assert.Empty(t, files)
}

// tinyPNG encodes a 2x2 image.
func tinyPNG(t *testing.T) []byte {
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, image.NewRGBA(image.Rect(0, 0, 2, 2))))
	return b.Bytes()
}

// TestWatchFilesImagesByContent: a file is attached as an image only if its
// content is the image its name says; a text file named x.png, a PNG
// signature with no header, or an .svg that is not SVG text is a plain
// file (an SDK forwarding them as image blocks would get the model request
// refused). A real image too large to attach is still named an image.
func TestWatchFilesImagesByContent(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	fsys := fstest.MapFS{}
	w := runtool.WatchFiles(fsys, "/work", 1024)
	var jpg bytes.Buffer
	require.NoError(t, jpeg.Encode(&jpg, image.NewRGBA(image.Rect(0, 0, 2, 2)), nil))
	big := tinyPNG(t)
	big = append(big, make([]byte, 2048)...) // a PNG with trailing bytes, past the image size
	for name, data := range map[string][]byte{
		"x.png":       []byte("hello"),
		"sig.png":     []byte("\x89PNG\r\n\x1a\n"),
		"fake.jpg":    []byte("\xff\xd8 not a jpeg"),
		"fake.svg":    []byte("\xff\xfe<svg"),
		"plain.svg":   []byte("just text"),
		"ok.jpeg":     jpg.Bytes(),
		"ok.svg":      []byte(`<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"/>`),
		"big.png":     big,
		"ok.png":      tinyPNG(t),
		"picture.txt": tinyPNG(t),
	} {
		fsys["work/"+name] = &fstest.MapFile{Data: data, ModTime: t0}
	}
	files, err := w.Changed()
	require.NoError(t, err)
	got := map[string]string{}
	attached := map[string]bool{}
	for _, f := range files {
		got[f.Path] = f.MediaType
		attached[f.Path] = f.Data != nil
	}
	assert.Equal(t, map[string]string{
		"/work/x.png": "", "/work/sig.png": "", "/work/fake.jpg": "", "/work/fake.svg": "", "/work/plain.svg": "",
		"/work/ok.jpeg": "image/jpeg", "/work/ok.svg": "image/svg+xml", "/work/big.png": "image/png",
		"/work/ok.png": "image/png", "/work/picture.txt": "",
	}, got)
	assert.Equal(t, map[string]bool{
		"/work/x.png": false, "/work/sig.png": false, "/work/fake.jpg": false, "/work/fake.svg": false, "/work/plain.svg": false,
		"/work/ok.jpeg": true, "/work/ok.svg": true, "/work/big.png": false, "/work/ok.png": true, "/work/picture.txt": false,
	}, attached)
}
