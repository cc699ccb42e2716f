package wasi

import (
	"errors"
	"io"
	"math"

	"github.com/spf13/afero"
	"github.com/tetratelabs/wazero/experimental/sys"
	sysapi "github.com/tetratelabs/wazero/sys"
)

// fileOffset is int64. Seek declares its offset with this alias only because
// go vet's stdmethods check expects any Seek(int64, int) to return error,
// while sys.File's Seek returns sys.Errno.
type fileOffset = int64

// file is an open regular file or directory of an FS. It implements
// sys.PollableFile. Its offset is kept here (reads and writes use ReadAt and
// WriteAt of the backing file), and O_APPEND is emulated, so that the
// backing file is never opened in append mode.
//
// Every method takes the FS mutex.
type file struct {
	sys.UnimplementedFile

	fs  *FS
	n   *node
	dir bool
	af  afero.File // nil for a directory

	read, write bool
	append      bool
	nonblock    bool
	sync        bool // O_SYNC or O_DSYNC: each write is synced
	closed      bool
	off         int64

	// A directory's listing, taken at the first Readdir after opening or
	// rewinding, so that positions (fd_readdir cookies) stay valid.
	listed  bool
	dirents []sys.Dirent
	dirPos  int
	// listCost is what the listing is charged (FS.listing).
	listCost int64
}

// dropListing forgets the listing and releases its charge. The caller holds
// f.fs.mu.
func (f *file) dropListing() {
	f.fs.listing -= f.listCost
	f.listed, f.dirents, f.dirPos, f.listCost = false, nil, 0, 0
}

var _ sys.PollableFile = (*file)(nil)

// Dev implements sys.File: the FS's device number.
func (f *file) Dev() (uint64, sys.Errno) { return f.fs.dev, 0 }

// Ino implements sys.File: the inode number of the path it was opened at.
func (f *file) Ino() (sysapi.Inode, sys.Errno) { return f.n.ino, 0 }

// IsDir implements sys.File.
func (f *file) IsDir() (bool, sys.Errno) { return f.dir, 0 }

// IsAppend implements sys.File.
func (f *file) IsAppend() bool {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.append
}

// SetAppend implements sys.File.
func (f *file) SetAppend(enable bool) sys.Errno {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	switch {
	case f.closed:
		return sys.EBADF
	case f.dir:
		return sys.EISDIR
	}
	f.append = enable
	return 0
}

// IsNonblock implements sys.PollableFile.
func (f *file) IsNonblock() bool {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.nonblock
}

// SetNonblock implements sys.PollableFile. Regular files and directories
// never block, so the flag is only recorded.
func (f *file) SetNonblock(enable bool) sys.Errno {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return sys.EBADF
	}
	f.nonblock = enable
	return 0
}

// Poll implements sys.Pollable: regular files and directories are always
// ready.
func (f *file) Poll(flag sys.Pflag, _ int32) (bool, sys.Errno) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	switch {
	case f.closed:
		return false, sys.EBADF
	case flag&^(sys.POLLIN|sys.POLLOUT) != 0:
		return false, sys.ENOTSUP
	}
	return true, 0
}

// Stat implements sys.File.
func (f *file) Stat() (sysapi.Stat_t, sys.Errno) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return sysapi.Stat_t{}, sys.EBADF
	}
	if f.dir {
		fi, errno := f.fs.res.lstat(f.n.path)
		if errno != 0 {
			return sysapi.Stat_t{}, errno
		}
		return f.fs.statNode(f.n, fi), 0
	}
	fi, err := f.af.Stat()
	if err != nil {
		return sysapi.Stat_t{}, toErrno(err)
	}
	return f.fs.statNode(f.n, fi), 0
}

// readable returns the errno of a read from this file, zero when allowed.
func (f *file) readable() sys.Errno {
	switch {
	case f.closed:
		return sys.EBADF
	case f.dir:
		return sys.EISDIR
	case !f.read:
		return sys.EBADF
	}
	return 0
}

// writable returns the errno of a write to this file, zero when allowed.
func (f *file) writable() sys.Errno {
	switch {
	case f.closed:
		return sys.EBADF
	case f.dir:
		return sys.EISDIR
	case !f.write:
		return sys.EBADF
	}
	return 0
}

// Read implements sys.File.
func (f *file) Read(buf []byte) (int, sys.Errno) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if errno := f.readable(); errno != 0 {
		return 0, errno
	}
	n, errno := readAt(f.af, buf, f.off)
	f.off += int64(n)
	return n, errno
}

// Pread implements sys.File.
func (f *file) Pread(buf []byte, off int64) (int, sys.Errno) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if errno := f.readable(); errno != 0 {
		return 0, errno
	}
	if off < 0 {
		return 0, sys.EINVAL
	}
	return readAt(f.af, buf, off)
}

// readAt reads at off; reading at or past the end is not an error.
func readAt(af afero.File, buf []byte, off int64) (int, sys.Errno) {
	if len(buf) == 0 {
		return 0, 0
	}
	n, err := af.ReadAt(buf, off)
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return n, 0
	}
	return n, toErrno(err)
}

// Seek implements sys.File. On a directory, only a rewind (offset 0 from
// io.SeekStart) is allowed: it makes the next Readdir list the directory
// afresh. Other seeks on a directory fail with EISDIR.
func (f *file) Seek(offset fileOffset, whence int) (int64, sys.Errno) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, sys.EBADF
	}
	if f.dir {
		if offset == 0 && whence == io.SeekStart {
			f.dropListing()
			return 0, 0
		}
		return 0, sys.EISDIR
	}
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = f.off
	case io.SeekEnd:
		size, errno := fileSize(f.af)
		if errno != 0 {
			return 0, errno
		}
		base = size
	default:
		return 0, sys.EINVAL
	}
	if offset > 0 && base > math.MaxInt64-offset {
		return 0, sys.EINVAL
	}
	next := base + offset
	if next < 0 {
		return 0, sys.EINVAL
	}
	f.off = next
	return next, 0
}

// Readdir implements sys.File. The first call after opening or rewinding
// lists the whole directory, sorted by name; later calls page through that
// listing, so entries are never skipped or repeated while it is read. The
// listing is held until the file is closed or rewound and counts against
// Options.MaxListingBytes: past it, listing fails with ENOMEM.
func (f *file) Readdir(n int) ([]sys.Dirent, sys.Errno) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed || !f.dir {
		return nil, sys.EBADF
	}
	if !f.listed {
		fis, errno := f.fs.list(f.n.path)
		if errno != 0 {
			return nil, errno
		}
		cost := int64(0)
		for _, fi := range fis {
			cost += ListingEntryBytes + int64(len(fi.Name()))
		}
		if errno := f.fs.holdListing(cost); errno != 0 {
			return nil, errno
		}
		f.listCost = cost
		dirents := make([]sys.Dirent, len(fis))
		for i, fi := range fis {
			dirents[i] = sys.Dirent{
				Name: fi.Name(),
				Ino:  f.fs.nodeFor(join(f.n.path, fi.Name())).ino,
				Type: fi.Mode().Type(),
			}
		}
		f.listed, f.dirents, f.dirPos = true, dirents, 0
	}
	rest := f.dirents[f.dirPos:]
	if n > 0 && len(rest) > n {
		rest = rest[:n]
	}
	f.dirPos += len(rest)
	return rest, 0
}

// Write implements sys.File. In append mode, each write goes to the end of
// the file.
func (f *file) Write(buf []byte) (int, sys.Errno) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if errno := f.writable(); errno != 0 {
		return 0, errno
	}
	if len(buf) == 0 {
		return 0, 0
	}
	off := f.off
	if f.append {
		size, errno := fileSize(f.af)
		if errno != 0 {
			return 0, errno
		}
		off = size
	}
	n, errno := f.fs.writeAt(f.af, f.n, buf, off)
	f.off = off + int64(n)
	return n, f.synced(errno)
}

// synced syncs the file after a successful write in O_SYNC or O_DSYNC mode.
func (f *file) synced(errno sys.Errno) sys.Errno {
	if errno == 0 && f.sync {
		errno = toErrno(f.af.Sync())
	}
	return errno
}

// Pwrite implements sys.File. It writes at off even in append mode (as
// POSIX specifies; Linux would append).
func (f *file) Pwrite(buf []byte, off int64) (int, sys.Errno) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if errno := f.writable(); errno != 0 {
		return 0, errno
	}
	if off < 0 {
		return 0, sys.EINVAL
	}
	if len(buf) == 0 {
		return 0, 0
	}
	n, errno := f.fs.writeAt(f.af, f.n, buf, off)
	return n, f.synced(errno)
}

// writeAt writes buf at off in af, the file of node n, first checking that
// the growth of the file fits the quota: if it does not, nothing is written
// and the errno is ENOSPC. The caller holds f.mu.
func (f *FS) writeAt(af afero.File, n *node, buf []byte, off int64) (int, sys.Errno) {
	if off > math.MaxInt64-int64(len(buf)) {
		return 0, sys.EINVAL
	}
	if !f.accounting {
		n, err := af.WriteAt(buf, off)
		return n, toErrno(err)
	}
	f.lockVolume()
	defer f.unlockVolume()
	before, errno := fileSize(af)
	if errno != 0 {
		return 0, errno
	}
	if end := off + int64(len(buf)); end > before {
		if errno := f.reserve(end-before, 0); errno != 0 {
			return 0, errno
		}
	}
	written, err := af.WriteAt(buf, off)
	if after, errno := fileSize(af); errno == 0 {
		f.chargeFile(n, after-before)
	}
	return written, toErrno(err)
}

// Truncate implements sys.File. Growing the file is checked against the
// quota first (ENOSPC, and the size is unchanged).
func (f *file) Truncate(size int64) sys.Errno {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	switch {
	case f.closed:
		return sys.EBADF
	case f.dir:
		return sys.EISDIR
	case size < 0:
		return sys.EINVAL
	case !f.write:
		return sys.EBADF
	}
	if !f.fs.accounting {
		return toErrno(f.af.Truncate(size))
	}
	f.fs.lockVolume()
	defer f.fs.unlockVolume()
	before, errno := fileSize(f.af)
	if errno != 0 {
		return errno
	}
	if size > before {
		if errno := f.fs.reserve(size-before, 0); errno != 0 {
			return errno
		}
	}
	errno = toErrno(f.af.Truncate(size))
	if after, e := fileSize(f.af); e == 0 {
		f.fs.chargeFile(f.n, after-before)
	}
	return errno
}

// Sync implements sys.File.
func (f *file) Sync() sys.Errno {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	switch {
	case f.closed:
		return sys.EBADF
	case f.dir:
		return 0
	}
	return toErrno(f.af.Sync())
}

// Datasync implements sys.File, as Sync.
func (f *file) Datasync() sys.Errno {
	return f.Sync()
}

// Utimens implements sys.File. It sets the times of the path the file has
// now; for a file that was unlinked while open it fails with ENOENT.
func (f *file) Utimens(atim, mtim int64) sys.Errno {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	switch {
	case f.closed:
		return sys.EBADF
	case f.fs.readOnly:
		return sys.EROFS
	case f.n.orphan:
		return sys.ENOENT
	}
	fi, errno := f.fs.res.lstat(f.n.path)
	if errno != 0 {
		return errno
	}
	return f.fs.chtimes(f.n, fi, atim, mtim)
}

// Close implements sys.File. Closing twice is not an error. The last close
// of a file unlinked while open releases its bytes from the quota.
func (f *file) Close() sys.Errno {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0
	}
	f.closed = true
	f.dropListing()
	var errno sys.Errno
	if f.af != nil {
		if f.n.orphan && f.n.open == 1 && f.fs.accounting {
			if size, e := fileSize(f.af); e == 0 {
				f.fs.lockVolume()
				f.fs.chargeOrphan(-size)
				f.fs.unlockVolume()
			}
		}
		errno = toErrno(f.af.Close())
	}
	f.n.open--
	f.fs.handles--
	return errno
}
