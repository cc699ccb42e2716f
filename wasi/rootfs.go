package wasi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/afero"
)

// RootFs is an afero.Fs over a host directory opened as an *os.Root: the
// safe way to give a guest a directory of the host (HostDir opens
// one).
//
// Every operation goes through the os.Root, which resolves each path one
// component at a time with openat and never leaves the directory, even
// while another process (or another sandbox sharing the directory) renames
// components or swaps them for symbolic links: a symbolic link met on the
// way is followed only when it stays inside the directory, otherwise the
// operation fails. NewFS still expands links itself, relative to the mount
// root (see Resolve), and hands RootFs paths with no links in them; the
// os.Root is what keeps that true between the check and the use. Paths
// given to a RootFs are relative to the directory whether or not they start
// with "/", and ".." in them stops at its root.
//
// afero.NewBasePathFs over afero.NewOsFs, by contrast, hands the whole host
// path to the operating system, which follows a link swapped in after NewFS
// checked the path: it is confined only while nothing else changes the
// directory.
//
// Symbolic links: RootFs implements afero.Lstater, afero.Linker and
// afero.LinkReader. SymlinkIfPossible never stores a target that leads out
// of the directory as written: a relative target that climbs above the root
// is stored in its shortest form from the link's directory with the excess
// ".." dropped (as Resolve would read it), and an absolute target, taken
// relative to the root, is stored as the relative path to the same place.
// No host path is stored, so the directory can move. ReadlinkIfPossible
// shows a target under the directory's host path (a link the host made) as
// an absolute path from the root, so the directory's host path is never
// shown; other links are returned as they are.
//
// Errors name paths as given to the RootFs, never the directory's host
// path. The permission bits of created files and directories are limited to
// 0o777. A RootFs is safe for concurrent use; Close releases its directory.
type RootFs struct {
	root *os.Root
	// bases are the host paths of the directory, cleaned and absolute: as
	// given and with its symbolic links evaluated, for ReadlinkIfPossible
	// and SymlinkIfPossible.
	bases []string
	// vol is the usage of the directory that the quotas of FSes over it
	// count, once one has a quota; shared with other RootFs over the same
	// directory while any FS or RootFs holds it.
	vol atomic.Pointer[volume]
}

var (
	_ afero.Fs         = (*RootFs)(nil)
	_ afero.Lstater    = (*RootFs)(nil)
	_ afero.Linker     = (*RootFs)(nil)
	_ afero.LinkReader = (*RootFs)(nil)
	_ afero.File       = (*rootFile)(nil)
)

// HostDir opens a directory of the host as a RootFs, to mount in a guest:
// a file system that reaches the directory only through an os.Root. ".."
// and symbolic links resolve inside it, never to the rest of the host, even
// while other programs or sandboxes sharing the directory rename its
// components or swap them for symbolic links. It fails (with an
// *fs.PathError, so errors.Is(err, fs.ErrNotExist) works) when dir does not
// exist or is not a directory.
//
// The directory stays open for as long as the RootFs is reachable: mount it
// in as many guests as needed, and Close it when none uses it any more, or
// leave that to the garbage collector. Mounted with a quota, the
// directory's count (see Quota) also holds it open, until neither the
// RootFs nor an FS over it is reachable.
//
// Prefer it to afero.NewBasePathFs(afero.NewOsFs(), dir), which is confined
// only while nothing but the guest changes the directory.
func HostDir(dir string) (*RootFs, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("wasi: host directory: %w", err)
	}
	return NewRootFs(root), nil
}

// Volume returns a directory of the host for persistent storage, creating
// it (and its parents) if it is missing: HostDir for a directory that may
// not exist yet. Give its mount a Quota (fumehood's command line gives
// 1 GiB and 100,000 files).
func Volume(dir string) (*RootFs, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("wasi: volume: %w", err)
	}
	return HostDir(dir)
}

// NewRootFs returns a RootFs over root, which it then owns (see Close).
func NewRootFs(root *os.Root) *RootFs {
	r := &RootFs{root: root}
	if abs, err := filepath.Abs(root.Name()); err == nil {
		r.bases = append(r.bases, filepath.ToSlash(abs))
		if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
			r.bases = append(r.bases, filepath.ToSlash(real))
		}
	}
	return r
}

// Close releases the directory. Operations after Close fail.
func (r *RootFs) Close() error { return r.root.Close() }

// Name implements afero.Fs. It does not name the host directory, so that
// messages built from it do not show the host's paths.
func (r *RootFs) Name() string { return "RootFs" }

// rel turns a path of the RootFs into the relative name os.Root takes: "."
// for the root.
func rel(name string) string {
	p := strings.TrimPrefix(path.Clean("/"+filepath.ToSlash(name)), "/")
	if p == "" {
		return "."
	}
	return p
}

// Create implements afero.Fs.
func (r *RootFs) Create(name string) (afero.File, error) {
	return r.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

// Mkdir implements afero.Fs.
func (r *RootFs) Mkdir(name string, perm os.FileMode) error {
	return r.root.Mkdir(rel(name), perm&fs.ModePerm)
}

// MkdirAll implements afero.Fs.
func (r *RootFs) MkdirAll(name string, perm os.FileMode) error {
	return r.root.MkdirAll(rel(name), perm&fs.ModePerm)
}

// Open implements afero.Fs.
func (r *RootFs) Open(name string) (afero.File, error) {
	return r.OpenFile(name, os.O_RDONLY, 0)
}

// OpenFile implements afero.Fs. On Unix, files are opened with O_NONBLOCK,
// which changes nothing for regular files and directories and lets the
// open of a named pipe or device return at once.
func (r *RootFs) OpenFile(name string, flag int, perm os.FileMode) (afero.File, error) {
	f, err := r.root.OpenFile(rel(name), flag|openNonblock, perm&fs.ModePerm)
	if err != nil {
		return nil, err
	}
	return &rootFile{File: f, name: path.Clean("/" + filepath.ToSlash(name))}, nil
}

// Remove implements afero.Fs.
func (r *RootFs) Remove(name string) error { return r.root.Remove(rel(name)) }

// RemoveAll implements afero.Fs.
func (r *RootFs) RemoveAll(name string) error { return r.root.RemoveAll(rel(name)) }

// Rename implements afero.Fs.
func (r *RootFs) Rename(oldname, newname string) error {
	return r.root.Rename(rel(oldname), rel(newname))
}

// Stat implements afero.Fs: it follows symbolic links that stay inside the
// directory.
func (r *RootFs) Stat(name string) (os.FileInfo, error) { return r.root.Stat(rel(name)) }

// Chmod implements afero.Fs.
func (r *RootFs) Chmod(name string, mode os.FileMode) error {
	return r.root.Chmod(rel(name), mode)
}

// Chown implements afero.Fs.
func (r *RootFs) Chown(name string, uid, gid int) error {
	return r.root.Chown(rel(name), uid, gid)
}

// Chtimes implements afero.Fs.
func (r *RootFs) Chtimes(name string, atime, mtime time.Time) error {
	return r.root.Chtimes(rel(name), atime, mtime)
}

// LstatIfPossible implements afero.Lstater: a final symbolic link is
// described, not followed.
func (r *RootFs) LstatIfPossible(name string) (os.FileInfo, bool, error) {
	fi, err := r.root.Lstat(rel(name))
	return fi, true, err
}

// SymlinkIfPossible implements afero.Linker: it creates the link newname
// pointing at oldname, which is stored so that it does not lead out of the
// directory as written (see RootFs).
func (r *RootFs) SymlinkIfPossible(oldname, newname string) error {
	link := rel(newname)
	target, err := r.hostTarget(link, filepath.ToSlash(oldname))
	if err != nil {
		return &os.LinkError{Op: "symlink", Old: oldname, New: newname, Err: err}
	}
	return r.root.Symlink(target, link)
}

// hostTarget returns what to store as the target of the link at link (a
// name relative to the root) for target.
func (r *RootFs) hostTarget(link, target string) (string, error) {
	dir := path.Dir(link) // "." for the root
	if strings.HasPrefix(target, "/") {
		// Relative to the root: the same place, from the link's directory.
		short, err := filepath.Rel("/"+dir, path.Clean(target))
		if err != nil {
			return "", err
		}
		return filepath.ToSlash(short), nil
	}
	depth := 0
	if dir != "." {
		depth = strings.Count(dir, "/") + 1
	}
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
		default:
			depth++
		}
		if depth < 0 {
			// Climbs above the root: store where Resolve would take it,
			// relative to the link's directory.
			abs := path.Join("/", dir, target)
			short, err := filepath.Rel("/"+dir, abs)
			if err != nil {
				return "", err
			}
			return filepath.ToSlash(short), nil
		}
	}
	return target, nil
}

// ReadlinkIfPossible implements afero.LinkReader. A target under the
// directory's host path is returned as an absolute path from its root.
func (r *RootFs) ReadlinkIfPossible(name string) (string, error) {
	target, err := r.root.Readlink(rel(name))
	if err != nil {
		return "", err
	}
	t := filepath.ToSlash(target)
	for _, base := range r.bases {
		if t == base {
			return "/", nil
		}
		if strings.HasPrefix(t, base+"/") && base != "/" {
			return t[len(base):], nil
		}
	}
	return target, nil
}

// rootFile is a file opened through a RootFs. Its Name and the paths in its
// errors are its name in the RootFs, not the host path.
type rootFile struct {
	*os.File
	name string
}

// Name implements afero.File: the name in the RootFs.
func (f *rootFile) Name() string { return f.name }

// err replaces the host path in a *fs.PathError with the file's name.
func (f *rootFile) err(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: f.name, Err: pe.Err}
	}
	return err
}

// Close implements afero.File.
func (f *rootFile) Close() error { return f.err(f.File.Close()) }

// Read implements afero.File.
func (f *rootFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	return n, f.err(err)
}

// ReadAt implements afero.File.
func (f *rootFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	return n, f.err(err)
}

// Seek implements afero.File.
func (f *rootFile) Seek(offset int64, whence int) (int64, error) {
	n, err := f.File.Seek(offset, whence)
	return n, f.err(err)
}

// Write implements afero.File.
func (f *rootFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.err(err)
}

// WriteAt implements afero.File.
func (f *rootFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.err(err)
}

// WriteString implements afero.File.
func (f *rootFile) WriteString(s string) (int, error) {
	n, err := f.File.WriteString(s)
	return n, f.err(err)
}

// Readdir implements afero.File.
func (f *rootFile) Readdir(n int) ([]os.FileInfo, error) {
	fis, err := f.File.Readdir(n)
	return fis, f.err(err)
}

// Readdirnames implements afero.File.
func (f *rootFile) Readdirnames(n int) ([]string, error) {
	names, err := f.File.Readdirnames(n)
	return names, f.err(err)
}

// Stat implements afero.File.
func (f *rootFile) Stat() (os.FileInfo, error) {
	fi, err := f.File.Stat()
	return fi, f.err(err)
}

// Sync implements afero.File.
func (f *rootFile) Sync() error { return f.err(f.File.Sync()) }

// Truncate implements afero.File.
func (f *rootFile) Truncate(size int64) error { return f.err(f.File.Truncate(size)) }
