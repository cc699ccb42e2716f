package runtool

import (
	"errors"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/fumehood/fumehood/internal/textcut"
)

// maxFiles bounds the files a Result lists, maxImages those it carries the
// content of, and maxWalk the entries looked at to find them.
const (
	maxFiles  = 64
	maxImages = 8
	maxWalk   = 20_000
)

// stamp is what tells a file changed.
type stamp struct {
	size  int64
	mtime time.Time
}

// Watch finds the files a run creates or changes under a directory:
// WatchFiles before the run, Changed after it. codetool's Tool.Call uses
// one for each call, the MCP server's run tools one for each run.
type Watch struct {
	fsys     fs.FS
	root     string // the directory, as an io/fs name
	maxImage int
	before   map[string]stamp // by io/fs name
}

// WatchFiles lists the regular files under dir (a guest path, such as
// "/work") in fsys, a sandbox's or session's Files or any fs.FS whose root
// is the guest's "/" (at most 20,000 entries looked at), to compare with
// after a run. Images of at most maxImageBytes (at least 1) will carry
// their content.
func WatchFiles(fsys fs.FS, dir string, maxImageBytes int) *Watch {
	root := strings.TrimPrefix(path.Join("/", dir), "/")
	if root == "" {
		root = "."
	}
	w := &Watch{fsys: fsys, root: root, maxImage: maxImageBytes}
	w.before = w.list()
	return w
}

// list returns the regular files under the directory, at most maxWalk
// entries looked at. What cannot be read is left out.
func (w *Watch) list() map[string]stamp {
	files := map[string]stamp{}
	seen := 0
	_ = fs.WalkDir(w.fsys, w.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == w.root {
			return nil
		}
		if seen++; seen > maxWalk {
			return fs.SkipAll
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil && fi.Mode().IsRegular() {
				files[p] = stamp{fi.Size(), fi.ModTime()}
			}
		}
		return nil
	})
	return files
}

// errTooManyFiles reports a listing cut at maxFiles.
var errTooManyFiles = errors.New("too many files")

// Changed returns the files new or changed since WatchFiles, in path
// order, at most 64; the first 8 images (PNG, JPEG, SVG) of at most the
// watch's size carry their content. It fails, with the first 64, when
// there were more.
func (w *Watch) Changed() ([]File, error) {
	after := w.list()
	var names []string
	for p, st := range after {
		if old, ok := w.before[p]; !ok || old != st {
			names = append(names, p)
		}
	}
	slices.Sort(names)
	var err error
	if len(names) > maxFiles {
		names, err = names[:maxFiles], errTooManyFiles
	}
	files := make([]File, 0, len(names))
	images := 0
	for _, p := range names {
		name, _ := textcut.Cut(path.Join("/", p), 1024)
		f := File{Path: name, Size: after[p].size}
		if imageName(p) {
			attach := f.Size <= int64(w.maxImage) && images < maxImages
			data := w.read(p, attach)
			if f.MediaType = imageType(p, data, attach); f.MediaType != "" && attach {
				f.Data = data
				images++
			}
		}
		files = append(files, f)
	}
	return files, err
}

// read returns the file's content if whole (at most the watch's image
// size, else nil), or its first sniffLen bytes; nil if it cannot be read.
func (w *Watch) read(name string, whole bool) []byte {
	if whole {
		data, _ := readAtMost(w.fsys, name, w.maxImage)
		return data
	}
	f, err := w.fsys.Open(name)
	if err != nil {
		return nil
	}
	defer f.Close()
	data, _ := io.ReadAll(io.LimitReader(f, sniffLen))
	return data
}

// errTooLarge reports a file longer than readAtMost takes.
var errTooLarge = errors.New("file too large")

// readAtMost reads the file name of fsys if it holds at most n bytes, and
// holds no more than that while reading: a file listed small may have grown
// since (a read-write mount is shared with other sandboxes).
func readAtMost(fsys fs.FS, name string, n int) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(n)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > n {
		return nil, errTooLarge
	}
	return data, nil
}
