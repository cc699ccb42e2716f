package wasi

import (
	"io/fs"
	"path"
	"strings"

	"github.com/tetratelabs/wazero/experimental/sys"
	sysapi "github.com/tetratelabs/wazero/sys"
)

// DevNullPath is where an FS with Options.DevNull serves its null device,
// relative to its root.
const DevNullPath = "dev/null"

// isDevNull reports whether name is the null device of an FS that serves
// one. The name is taken lexically: "dev/./null" is the device, and so is
// "x/../dev/null" (no directory along the way need exist, since the
// device lives in no directory of the backing file system). A symbolic
// link in the backing file system does not lead to it. Every FS call
// asks, so a name without "null" in it is answered before it is cleaned.
func (f *FS) isDevNull(name string) bool {
	return f.devNull && strings.Contains(name, "null") && path.Clean("/"+name) == "/"+DevNullPath
}

// nullIno returns the null device's inode number, given out at its first
// use like any path's. The caller holds f.mu.
func (f *FS) nullIno() sysapi.Inode {
	if f.nullNode == 0 {
		f.ino++
		f.nullNode = f.ino
	}
	return f.nullNode
}

// nullStat is the null device's Stat_t: a character device that everyone
// may read and write, with one link, times at the epoch and size zero, the
// same in every sandbox and run. The caller holds f.mu.
func (f *FS) nullStat() sysapi.Stat_t {
	return sysapi.Stat_t{
		Dev:   f.dev,
		Ino:   f.nullIno(),
		Mode:  fs.ModeDevice | fs.ModeCharDevice | 0o666,
		Nlink: 1,
	}
}

// openNull opens the null device with the access OpenFile found in
// flag, once it checked MaxOpen. The caller holds f.mu.
func (f *FS) openNull(flag sys.Oflag, read, write bool) (sys.File, sys.Errno) {
	switch {
	case flag&sys.O_CREAT != 0 && flag&sys.O_EXCL != 0:
		return nil, sys.EEXIST
	case flag&sys.O_DIRECTORY != 0:
		return nil, sys.ENOTDIR
	}
	f.handles++
	return &nullFile{fs: f, read: read, write: write,
		append: flag&sys.O_APPEND != 0, nonblock: flag&sys.O_NONBLOCK != 0}, 0
}

// nullFile is an open handle of the null device: reads find the end of the
// file at once, writes succeed and keep nothing, as Linux's /dev/null. It
// holds no host resource beyond itself, and counts toward Options.MaxOpen
// like any handle.
type nullFile struct {
	sys.UnimplementedFile

	fs                            *FS
	read, write, append, nonblock bool
	closed                        bool
}

var _ sys.PollableFile = (*nullFile)(nil)

// check returns EBADF for a closed handle, or one not opened for the
// access asked (want: 'r', 'w' or 0 for neither). The caller holds f.fs.mu.
func (f *nullFile) check(want byte) sys.Errno {
	switch {
	case f.closed, want == 'r' && !f.read, want == 'w' && !f.write:
		return sys.EBADF
	}
	return 0
}

// locked runs fn with the FS mutex held.
func (f *nullFile) locked(want byte, fn func()) sys.Errno {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if errno := f.check(want); errno != 0 {
		return errno
	}
	if fn != nil {
		fn()
	}
	return 0
}

// Dev implements sys.File.
func (f *nullFile) Dev() (uint64, sys.Errno) { return f.fs.dev, 0 }

// Ino implements sys.File.
func (f *nullFile) Ino() (ino sysapi.Inode, errno sys.Errno) {
	errno = f.locked(0, func() { ino = f.fs.nullIno() })
	return ino, errno
}

// IsDir implements sys.File.
func (f *nullFile) IsDir() (bool, sys.Errno) { return false, 0 }

// IsAppend implements sys.File.
func (f *nullFile) IsAppend() (on bool) {
	_ = f.locked(0, func() { on = f.append })
	return on
}

// SetAppend implements sys.File.
func (f *nullFile) SetAppend(enable bool) sys.Errno {
	return f.locked(0, func() { f.append = enable })
}

// IsNonblock implements sys.File.
func (f *nullFile) IsNonblock() (on bool) {
	_ = f.locked(0, func() { on = f.nonblock })
	return on
}

// SetNonblock implements sys.File.
func (f *nullFile) SetNonblock(enable bool) sys.Errno {
	return f.locked(0, func() { f.nonblock = enable })
}

// Poll implements sys.PollableFile: the device is always ready.
func (f *nullFile) Poll(flag sys.Pflag, _ int32) (bool, sys.Errno) {
	if flag&^(sys.POLLIN|sys.POLLOUT) != 0 {
		return false, sys.ENOTSUP
	}
	return true, f.locked(0, nil)
}

// Stat implements sys.File.
func (f *nullFile) Stat() (st sysapi.Stat_t, errno sys.Errno) {
	errno = f.locked(0, func() { st = f.fs.nullStat() })
	return st, errno
}

// Read implements sys.File: always the end of the file.
func (f *nullFile) Read([]byte) (int, sys.Errno) { return 0, f.locked('r', nil) }

// Pread implements sys.File: always the end of the file.
func (f *nullFile) Pread(_ []byte, off int64) (int, sys.Errno) {
	if off < 0 {
		return 0, sys.EINVAL
	}
	return 0, f.locked('r', nil)
}

// Seek implements sys.File: every offset is 0, as on Linux.
func (f *nullFile) Seek(_ fileOffset, whence int) (int64, sys.Errno) {
	if whence < 0 || whence > 2 {
		return 0, sys.EINVAL
	}
	return 0, f.locked(0, nil)
}

// Write implements sys.File: everything is written, and nothing kept.
func (f *nullFile) Write(buf []byte) (int, sys.Errno) {
	if errno := f.locked('w', nil); errno != 0 {
		return 0, errno
	}
	return len(buf), 0
}

// Pwrite implements sys.File, as Write.
func (f *nullFile) Pwrite(buf []byte, off int64) (int, sys.Errno) {
	if off < 0 {
		return 0, sys.EINVAL
	}
	return f.Write(buf)
}

// Truncate implements sys.File: the device has no size to change.
func (f *nullFile) Truncate(size int64) sys.Errno {
	if size < 0 {
		return sys.EINVAL
	}
	return f.locked('w', nil)
}

// Sync implements sys.File: nothing to sync.
func (f *nullFile) Sync() sys.Errno { return f.locked(0, nil) }

// Datasync implements sys.File: nothing to sync.
func (f *nullFile) Datasync() sys.Errno { return f.locked(0, nil) }

// Utimens implements sys.File: the device's times are fixed.
func (f *nullFile) Utimens(int64, int64) sys.Errno {
	if errno := f.locked(0, nil); errno != 0 {
		return errno
	}
	return sys.EPERM
}

// Readdir implements sys.File: the device is no directory.
func (f *nullFile) Readdir(int) ([]sys.Dirent, sys.Errno) {
	if errno := f.locked(0, nil); errno != 0 {
		return nil, errno
	}
	return nil, sys.ENOTDIR
}

// Close implements sys.File. Closing twice is not an error.
func (f *nullFile) Close() sys.Errno {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if !f.closed {
		f.closed = true
		f.fs.handles--
	}
	return 0
}
