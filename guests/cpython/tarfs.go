package cpython

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/spf13/afero"

	"github.com/fumehood/fumehood/internal/pipeline"
)

// tarFS is a read-only afero.Fs over the bytes of an uncompressed tar, such
// as the standard library's: every regular file's content is a slice of
// those bytes, never a copy, and opening the tree reads only the headers
// (tar.Reader skips each file's data by seeking). Writes fail with EPERM.
type tarFS struct {
	nodes map[string]*tarNode // by clean absolute path; "/" is the root
}

// tarNode is one file or directory of a tarFS.
type tarNode struct {
	name    string
	data    []byte // a regular file's content
	dir     bool
	modTime time.Time
	entries []*tarNode // a directory's, sorted by name
}

// newTarFS indexes the tar in data. Each regular file may be at most
// maxStdlibFile bytes; links, devices and sparse files are refused. data
// may be a mapping (pipeline.Store.Map): it is read through
// pipeline.SafeCopy, here and by every read of a file.
func newTarFS(data []byte) (*tarFS, error) {
	var (
		t   *tarFS
		err error
	)
	if ferr := pipeline.SafeCopy(func() { t, err = indexTar(data) }); ferr != nil {
		return nil, ferr
	}
	return t, err
}

func indexTar(data []byte) (*tarFS, error) {
	t := &tarFS{nodes: map[string]*tarNode{"/": {name: "/", dir: true}}}
	br := bytes.NewReader(data)
	tr := tar.NewReader(br)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		name := path.Clean("/" + h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			n, err := t.mkdirAll(name)
			if err != nil {
				return nil, err
			}
			n.modTime = h.ModTime
		case tar.TypeReg:
			if h.Size > maxStdlibFile {
				return nil, fmt.Errorf("%s is %d bytes", h.Name, h.Size)
			}
			start := br.Size() - int64(br.Len()) // tar.Reader stops at the data
			if h.Size < 0 || start+h.Size > int64(len(data)) {
				return nil, fmt.Errorf("%s: %w", h.Name, io.ErrUnexpectedEOF)
			}
			if name == "/" || t.nodes[name] != nil {
				return nil, fmt.Errorf("%s: %w", h.Name, fs.ErrExist)
			}
			parent, err := t.mkdirAll(path.Dir(name))
			if err != nil {
				return nil, err
			}
			n := &tarNode{name: path.Base(name), data: data[start : start+h.Size : start+h.Size], modTime: h.ModTime}
			t.nodes[name] = n
			parent.entries = append(parent.entries, n)
		default:
			return nil, fmt.Errorf("%s: unsupported tar entry type %q", h.Name, h.Typeflag)
		}
	}
	for _, n := range t.nodes {
		sort.Slice(n.entries, func(i, j int) bool { return n.entries[i].name < n.entries[j].name })
	}
	return t, nil
}

// mkdirAll returns the directory p, creating it and its parents.
func (t *tarFS) mkdirAll(p string) (*tarNode, error) {
	if n, ok := t.nodes[p]; ok {
		if !n.dir {
			return nil, fmt.Errorf("%s: %w", p, syscall.ENOTDIR)
		}
		return n, nil
	}
	parent, err := t.mkdirAll(path.Dir(p))
	if err != nil {
		return nil, err
	}
	n := &tarNode{name: path.Base(p), dir: true}
	t.nodes[p] = n
	parent.entries = append(parent.entries, n)
	return n, nil
}

func (t *tarFS) lookup(op, name string) (*tarNode, string, error) {
	p := path.Clean("/" + filepath.ToSlash(name))
	n, ok := t.nodes[p]
	if !ok {
		return nil, p, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	return n, p, nil
}

func denied(op, name string) error { return &fs.PathError{Op: op, Path: name, Err: syscall.EPERM} }

// Name implements afero.Fs.
func (t *tarFS) Name() string { return "tarfs" }

// Open implements afero.Fs.
func (t *tarFS) Open(name string) (afero.File, error) {
	n, _, err := t.lookup("open", name)
	if err != nil {
		return nil, err
	}
	return &tarFile{n: n, name: name}, nil
}

// OpenFile implements afero.Fs: only reading is allowed.
func (t *tarFS) OpenFile(name string, flag int, _ os.FileMode) (afero.File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_TRUNC) != 0 {
		return nil, denied("open", name)
	}
	return t.Open(name)
}

// Stat implements afero.Fs.
func (t *tarFS) Stat(name string) (os.FileInfo, error) {
	n, _, err := t.lookup("stat", name)
	if err != nil {
		return nil, err
	}
	return tarInfo{n}, nil
}

// Create implements afero.Fs: EPERM.
func (t *tarFS) Create(name string) (afero.File, error) { return nil, denied("create", name) }

// Mkdir implements afero.Fs: EPERM.
func (t *tarFS) Mkdir(name string, _ os.FileMode) error { return denied("mkdir", name) }

// MkdirAll implements afero.Fs: EPERM.
func (t *tarFS) MkdirAll(name string, _ os.FileMode) error { return denied("mkdir", name) }

// Remove implements afero.Fs: EPERM.
func (t *tarFS) Remove(name string) error { return denied("remove", name) }

// RemoveAll implements afero.Fs: EPERM.
func (t *tarFS) RemoveAll(name string) error { return denied("remove", name) }

// Rename implements afero.Fs: EPERM.
func (t *tarFS) Rename(name, _ string) error { return denied("rename", name) }

// Chmod implements afero.Fs: EPERM.
func (t *tarFS) Chmod(name string, _ os.FileMode) error { return denied("chmod", name) }

// Chown implements afero.Fs: EPERM.
func (t *tarFS) Chown(name string, _, _ int) error { return denied("chown", name) }

// Chtimes implements afero.Fs: EPERM.
func (t *tarFS) Chtimes(name string, _, _ time.Time) error { return denied("chtimes", name) }

// tarInfo is a tarNode's fs.FileInfo: files 0444, directories 0755, as the
// in-memory tree this replaces had.
type tarInfo struct{ n *tarNode }

func (i tarInfo) Name() string       { return i.n.name }
func (i tarInfo) Size() int64        { return int64(len(i.n.data)) }
func (i tarInfo) ModTime() time.Time { return i.n.modTime }
func (i tarInfo) IsDir() bool        { return i.n.dir }
func (i tarInfo) Sys() any           { return nil }
func (i tarInfo) Mode() fs.FileMode {
	if i.n.dir {
		return fs.ModeDir | 0o755
	}
	return 0o444
}

// tarFile is an open tarNode. Like an os.File it is not safe for
// concurrent use (wasi.FS serializes calls).
type tarFile struct {
	n      *tarNode
	name   string
	off    int64
	dirPos int
	closed bool
}

func (f *tarFile) check(op string) error {
	if f.closed {
		return &fs.PathError{Op: op, Path: f.name, Err: fs.ErrClosed}
	}
	return nil
}

// Close implements afero.File.
func (f *tarFile) Close() error {
	if err := f.check("close"); err != nil {
		return err
	}
	f.closed = true
	return nil
}

// Name implements afero.File.
func (f *tarFile) Name() string { return f.name }

// Stat implements afero.File.
func (f *tarFile) Stat() (os.FileInfo, error) {
	if err := f.check("stat"); err != nil {
		return nil, err
	}
	return tarInfo{f.n}, nil
}

// ReadAt implements afero.File.
func (f *tarFile) ReadAt(b []byte, off int64) (int, error) {
	if err := f.check("read"); err != nil {
		return 0, err
	}
	if f.n.dir {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: syscall.EISDIR}
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: fs.ErrInvalid}
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	var n int
	if err := pipeline.SafeCopy(func() { n = copy(b, f.n.data[off:]) }); err != nil {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: err}
	}
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// Read implements afero.File.
func (f *tarFile) Read(b []byte) (int, error) {
	n, err := f.ReadAt(b, f.off)
	f.off += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// Seek implements afero.File. Seeking a directory to its start rewinds
// its listing.
func (f *tarFile) Seek(offset int64, whence int) (int64, error) {
	if err := f.check("seek"); err != nil {
		return 0, err
	}
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = f.off
	case io.SeekEnd:
		base = int64(len(f.n.data))
	default:
		return 0, &fs.PathError{Op: "seek", Path: f.name, Err: fs.ErrInvalid}
	}
	if base+offset < 0 {
		return 0, &fs.PathError{Op: "seek", Path: f.name, Err: fs.ErrInvalid}
	}
	f.off = base + offset
	if f.n.dir && f.off == 0 {
		f.dirPos = 0
	}
	return f.off, nil
}

// Readdir implements afero.File, as os.File.Readdir does.
func (f *tarFile) Readdir(count int) ([]os.FileInfo, error) {
	if err := f.check("readdir"); err != nil {
		return nil, err
	}
	if !f.n.dir {
		return nil, &fs.PathError{Op: "readdir", Path: f.name, Err: syscall.ENOTDIR}
	}
	rest := f.n.entries[f.dirPos:]
	if count > 0 {
		if len(rest) == 0 {
			return nil, io.EOF
		}
		rest = rest[:min(count, len(rest))]
	}
	f.dirPos += len(rest)
	out := make([]os.FileInfo, len(rest))
	for i, n := range rest {
		out[i] = tarInfo{n}
	}
	return out, nil
}

// Readdirnames implements afero.File.
func (f *tarFile) Readdirnames(count int) ([]string, error) {
	fis, err := f.Readdir(count)
	names := make([]string, len(fis))
	for i, fi := range fis {
		names[i] = fi.Name()
	}
	return names, err
}

// Write implements afero.File: EPERM.
func (f *tarFile) Write([]byte) (int, error) { return 0, denied("write", f.name) }

// WriteAt implements afero.File: EPERM.
func (f *tarFile) WriteAt([]byte, int64) (int, error) { return 0, denied("write", f.name) }

// WriteString implements afero.File: EPERM.
func (f *tarFile) WriteString(string) (int, error) { return 0, denied("write", f.name) }

// Truncate implements afero.File: EPERM.
func (f *tarFile) Truncate(int64) error { return denied("truncate", f.name) }

// Sync implements afero.File.
func (f *tarFile) Sync() error { return nil }
