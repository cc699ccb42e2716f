package wasi

import (
	"errors"
	"io"

	"github.com/tetratelabs/wazero/experimental/sys"
)

// Handle describes an open file or directory of an FS: what it takes to
// open it again, in another FS over the same content (a copy of an
// in-memory root, the same volume) or after a restart, as sessions do for
// the descriptors a snapshot carries.
type Handle struct {
	// Path is where the handle's file is now, relative to the mount's
	// root: clean, slash-separated, "." for the root itself. It follows
	// renames made through the FS.
	Path string
	// Dir marks a directory.
	Dir bool
	// The access the handle was opened with, and its flags.
	Read, Write, Append, Nonblock, Sync bool
	// Offset is the offset of a regular file (0 for a directory).
	Offset int64
}

// Errors of Describe.
var (
	// ErrNotHandle reports a sys.File that is not an open handle of the FS
	// asked: another FS's, another kind of file, or a closed one.
	ErrNotHandle = errors.New("wasi: not an open file of this FS")
	// ErrUnlinked reports a handle whose file was deleted, or replaced by
	// a rename, while it was open: no path leads to it any more.
	ErrUnlinked = errors.New("wasi: the open file was deleted or replaced")
)

// Describe returns what it takes to open sf again (Reopen). It fails
// with ErrNotHandle for anything but an open handle of f, and with
// ErrUnlinked (the Handle still filled in, with the path it had) when no
// path leads to the file any more.
func (f *FS) Describe(sf sys.File) (Handle, error) {
	if h, ok := sf.(*nullFile); ok && h.fs == f {
		f.mu.Lock()
		defer f.mu.Unlock()
		if h.closed {
			return Handle{}, ErrNotHandle
		}
		return Handle{Path: DevNullPath, Read: h.read, Write: h.write, Append: h.append, Nonblock: h.nonblock}, nil
	}
	h, ok := sf.(*file)
	if !ok || h.fs != f {
		return Handle{}, ErrNotHandle
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if h.closed {
		return Handle{}, ErrNotHandle
	}
	d := Handle{
		Path: relPath(h.n.path), Dir: h.dir,
		Read: h.read, Write: h.write, Append: h.append, Nonblock: h.nonblock, Sync: h.sync,
	}
	if !h.dir {
		d.Offset = h.off
	}
	if h.n.orphan {
		return d, ErrUnlinked
	}
	return d, nil
}

// relPath turns an FS path ("/a/b", "/") into a Handle's ("a/b", ".").
func relPath(p string) string {
	for len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	if p == "" {
		return "."
	}
	return p
}

// Flags returns the flags that open h's path again as h was: its access
// mode and O_APPEND, O_NONBLOCK, O_SYNC and O_DIRECTORY as they apply, never
// O_CREAT or O_TRUNC.
func (h Handle) Flags() sys.Oflag {
	var flag sys.Oflag
	switch {
	case h.Dir || !h.Write:
		flag = sys.O_RDONLY
	case h.Read:
		flag = sys.O_RDWR
	default:
		flag = sys.O_WRONLY
	}
	if h.Dir {
		flag |= sys.O_DIRECTORY
	}
	if h.Append && !h.Dir {
		flag |= sys.O_APPEND
	}
	if h.Nonblock {
		flag |= sys.O_NONBLOCK
	}
	if h.Sync && !h.Dir {
		flag |= sys.O_SYNC
	}
	return flag
}

// Reopen opens h's path in f again as h describes it, at h's offset. A
// path that is now missing fails with ENOENT, one that is now a directory
// where h is a file (or the reverse) with EISDIR (or ENOTDIR); access is
// checked as by OpenFile (EROFS for writing to a read-only FS).
func (f *FS) Reopen(h Handle) (sys.File, sys.Errno) {
	if h.Offset < 0 {
		return nil, sys.EINVAL
	}
	file, errno := f.OpenFile(h.Path, h.Flags(), 0)
	if errno != 0 {
		return nil, errno
	}
	if isDir, _ := file.IsDir(); isDir != h.Dir {
		_ = file.Close()
		if isDir {
			return nil, sys.EISDIR
		}
		return nil, sys.ENOTDIR
	}
	if h.Offset > 0 {
		if _, errno := file.Seek(h.Offset, io.SeekStart); errno != 0 {
			_ = file.Close()
			return nil, errno
		}
	}
	return file, 0
}
