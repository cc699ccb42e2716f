package sandbox

import (
	"errors"
	"io"
	"io/fs"
	"math"
	"path"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/tetratelabs/wazero/experimental/sys"
	sysapi "github.com/tetratelabs/wazero/sys"

	"github.com/fumehood/fumehood/wasi"
)

// Files is the filesystem of a sandbox or a session as the host sees it
// between runs: the in-memory root and the mounts, with the guest's path
// rules (".." and symbolic links resolve inside their mount) and quotas
// (a write past a mount's quota fails as the guest's would).
//
// Its methods take absolute guest paths, as the guest's code and a model
// see them: "/work/out.txt" (cleaned as the guest would:
// "/work/../work/out.txt" is the same file); any other name fails with
// fs.ErrInvalid, so that a write never lands somewhere other than where
// the caller meant. FS gives the same files as an io/fs file system, whose
// names are io/fs names, for fs.WalkDir, fs.Glob, fs.Sub, http.FS and
// fstest.TestFS.
//
// Errors are *fs.PathError values holding the name as given, and match the
// io/fs errors with errors.Is (fs.ErrNotExist, fs.ErrExist,
// fs.ErrPermission for a read-only mount, fs.ErrInvalid for a bad name);
// after the sandbox or session is closed they match ErrClosed.
//
// fumehood's control directory (/.fumehood, where a Python run's driver
// reports each run's outcome) is not part of Files, in a session or a
// Python sandbox: it is neither listed (not by ReadDir("/"), so not by
// fs.WalkDir) nor openable or statable (fs.ErrNotExist), and nothing can
// be written or removed there (fs.ErrNotExist; RemoveAll, for which a
// missing name is not an error, does nothing).
//
// Use Files between runs, or from a host function during one (the guest's
// code waits for the call): not while a run's code is executing, nor from
// several goroutines at once.
type Files struct {
	sb *Sandbox
}

// Files returns the sandbox's filesystem, for the host to read and write
// its files between runs.
func (s *Sandbox) Files() *Files { return &Files{sb: s} }

// Files returns the session's filesystem, for the host to read and write
// its files between runs. Its files are those of the session's runs: what
// a run writes is there for the next, and what the host writes before a
// run is there for it.
func (s *Session) Files() *Files { return s.sb.Files() }

// FS returns the files as an io/fs file system: it implements fs.FS,
// fs.ReadFileFS, fs.ReadDirFS and fs.StatFS, and takes io/fs names:
// unrooted, slash-separated, without "." or ".." elements (fs.ValidPath),
// relative to the guest's "/": "work/out.txt" is the guest's
// /work/out.txt and "." is its root. It hides the control directory as
// Files does, and is read-only. Files it opens count against the guest's
// open files (DefaultMaxOpen per mount) until closed.
func (f *Files) FS() fs.FS { return ioFS{f} }

// ioFS is Files' io/fs view.
type ioFS struct{ f *Files }

var (
	_ fs.FS         = ioFS{}
	_ fs.ReadFileFS = ioFS{}
	_ fs.ReadDirFS  = ioFS{}
	_ fs.StatFS     = ioFS{}
)

// ReadFile returns the content of the file name (an io/fs name).
func (v ioFS) ReadFile(name string) ([]byte, error) {
	data, _, err := v.f.readFile(name, ioName, math.MaxInt64)
	return data, err
}

// Stat describes the file name (an io/fs name), following symbolic links.
func (v ioFS) Stat(name string) (fs.FileInfo, error) { return v.f.stat(name, ioName) }

// ReadDir lists the directory name (an io/fs name), sorted by name.
func (v ioFS) ReadDir(name string) ([]fs.DirEntry, error) { return v.f.readDir(name, ioName) }

// A name's forms, for resolve.
const (
	ioName    = 1 << iota // an io/fs name
	guestName             // an absolute guest path
)

// resolve turns a name in one of the forms allowed into a clean absolute
// guest path, checks that it is in reach, and finds the mount holding it
// and the path inside it.
func (f *Files) resolve(op, name string, forms int) (*wasi.FS, string, string, error) {
	bad := func(err error) (*wasi.FS, string, string, error) {
		return nil, "", "", &fs.PathError{Op: op, Path: name, Err: err}
	}
	var clean string
	switch {
	case strings.HasPrefix(name, "/") && forms&guestName != 0:
		if strings.IndexByte(name, 0) >= 0 {
			return bad(fs.ErrInvalid)
		}
		clean = path.Clean(name)
	case !strings.HasPrefix(name, "/") && forms&ioName != 0:
		if !fs.ValidPath(name) {
			return bad(fs.ErrInvalid)
		}
		clean = path.Join("/", name)
	default:
		return bad(fs.ErrInvalid)
	}
	if f.sb.closed {
		return bad(ErrClosed)
	}
	if f.hidden(clean) {
		return bad(fs.ErrNotExist)
	}
	for _, m := range f.sb.mounts {
		if rel, ok := within(clean, m.path); ok {
			return m.fs, rel, clean, nil
		}
	}
	return bad(fs.ErrNotExist)
}

// hidden reports whether the clean guest path is out of the Files' reach:
// the control directory or a path below it.
func (f *Files) hidden(clean string) bool {
	return f.sb.ctl != nil && (clean == controlPath || hasPrefixPath(clean, controlPath))
}

// mountPoint reports whether the clean guest path is where a mount is.
func (f *Files) mountPoint(clean string) bool {
	return slices.ContainsFunc(f.sb.mounts, func(m mounted) bool { return m.path == clean })
}

// within reports whether name is mount or below it, and the path relative to it.
func within(name, mount string) (string, bool) {
	if mount == "/" {
		return strings.TrimPrefix(name, "/"), true
	}
	if name == mount {
		return "", true
	}
	if rest, ok := strings.CutPrefix(name, mount+"/"); ok {
		return rest, true
	}
	return "", false
}

// errnoError makes a sys.Errno match the io/fs errors and the host's
// syscall.Errno of the same meaning (errors.Is(err, syscall.ENOSPC) for a
// write past a quota), and reads as the host's message for it.
type errnoError struct{ errno sys.Errno }

func (e errnoError) Error() string {
	if h, ok := hostErrno(e.errno); ok {
		return h.Error()
	}
	return e.errno.Error()
}

func (e errnoError) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return e.errno == sys.ENOENT
	case fs.ErrExist:
		return e.errno == sys.EEXIST || e.errno == sys.ENOTEMPTY
	case fs.ErrPermission:
		return e.errno == sys.EPERM || e.errno == sys.EACCES || e.errno == sys.EROFS
	case fs.ErrInvalid:
		return e.errno == sys.EINVAL
	}
	return false
}

// Unwrap returns the errno and, where the host has one of the same
// meaning, the host's syscall.Errno.
func (e errnoError) Unwrap() []error {
	if h, ok := hostErrno(e.errno); ok {
		return []error{e.errno, h}
	}
	return []error{e.errno}
}

// hostErrnos maps the errnos a file operation of Files can fail with to the
// host's. the wasi package's own (ENOSPC, EMFILE, ENOMEM) are numbers wazero does not
// know, which would otherwise read as "Errno(4147)" and match nothing.
var hostErrnos = map[sys.Errno]syscall.Errno{
	sys.EACCES: syscall.EACCES, sys.EAGAIN: syscall.EAGAIN, sys.EBADF: syscall.EBADF,
	sys.EEXIST: syscall.EEXIST, sys.EFAULT: syscall.EFAULT, sys.EINTR: syscall.EINTR,
	sys.EINVAL: syscall.EINVAL, sys.EIO: syscall.EIO, sys.EISDIR: syscall.EISDIR,
	sys.ELOOP: syscall.ELOOP, sys.ENAMETOOLONG: syscall.ENAMETOOLONG, sys.ENOENT: syscall.ENOENT,
	sys.ENOSYS: syscall.ENOSYS, sys.ENOTDIR: syscall.ENOTDIR, sys.ERANGE: syscall.ERANGE,
	sys.ENOTEMPTY: syscall.ENOTEMPTY, sys.ENOTSUP: syscall.ENOTSUP, sys.EPERM: syscall.EPERM,
	sys.EROFS:   syscall.EROFS,
	wasi.ENOSPC: syscall.ENOSPC, wasi.EMFILE: syscall.EMFILE, wasi.ENOMEM: syscall.ENOMEM,
}

// hostErrno returns the host's errno of the same meaning as e.
func hostErrno(e sys.Errno) (syscall.Errno, bool) {
	h, ok := hostErrnos[e]
	return h, ok
}

func pathErr(op, name string, errno sys.Errno) error {
	return &fs.PathError{Op: op, Path: name, Err: errnoError{errno}}
}

// baseName is the name a FileInfo gives for name: "." for the io/fs root,
// else the last element.
func baseName(name, clean string) string {
	if name == "." {
		return "."
	}
	return path.Base(clean)
}

// Open opens the file or directory name (an io/fs name, such as
// "work/out.txt", or "." for the root) for reading. The file is an
// io.Seeker and an io.ReaderAt; a directory is an fs.ReadDirFile, listed
// when first read. Close it: while open, a file counts against the
// guest's open files.
func (v ioFS) Open(name string) (fs.File, error) {
	f := v.f
	fsys, rel, clean, err := f.resolve("open", name, ioName)
	if err != nil {
		return nil, err
	}
	h, errno := fsys.OpenFile(rel, sys.O_RDONLY, 0)
	if errno != 0 {
		return nil, pathErr("open", name, errno)
	}
	st, errno := h.Stat()
	if errno != 0 {
		h.Close()
		return nil, pathErr("open", name, errno)
	}
	info := fileInfo{name: baseName(name, clean), st: st}
	if st.Mode.IsDir() {
		// A directory is listed by ReadDir, as Files.ReadDir does, when
		// first read.
		h.Close()
		return &openDir{files: f, name: name, info: info}, nil
	}
	return &openFile{name: name, h: h, info: info}, nil
}

// ReadFile returns the content of the file name (an absolute guest path,
// such as "/work/out.txt"), all of it: a file the guest wrote can be as
// large as its quota; ReadFileLimit reads only its start.
func (f *Files) ReadFile(name string) ([]byte, error) {
	data, _, err := f.readFile(name, guestName, math.MaxInt64)
	return data, err
}

// ReadFileLimit returns the start of the file name (an absolute guest
// path), at most n bytes of it, and whether the file holds more: a
// ReadFile for content that will be cut anyway, such as what a model or a
// log is shown of a file.
//
//	head, more, err := files.ReadFileLimit("/work/out.csv", 64<<10)
//
// It holds no more than the bytes it returns, whatever the file's size:
// a guest can write a sparse file as large as its quota (a hole counts
// only as its size) that ReadFile would read whole. A negative n fails
// with fs.ErrInvalid.
func (f *Files) ReadFileLimit(name string, n int64) (data []byte, more bool, err error) {
	if n < 0 {
		return nil, false, &fs.PathError{Op: "read", Path: name, Err: fs.ErrInvalid}
	}
	return f.readFile(name, guestName, n)
}

// readFile reads at most limit bytes of the file name, and reports
// whether it holds more. The file's size only sizes the first buffer:
// what is read decides, so a file that grows or lies about its size costs
// no more than limit.
func (f *Files) readFile(name string, forms int, limit int64) ([]byte, bool, error) {
	fsys, rel, _, err := f.resolve("read", name, forms)
	if err != nil {
		return nil, false, err
	}
	h, errno := fsys.OpenFile(rel, sys.O_RDONLY, 0)
	if errno != 0 {
		return nil, false, pathErr("read", name, errno)
	}
	defer h.Close()
	if dir, _ := h.IsDir(); dir {
		return nil, false, pathErr("read", name, sys.EISDIR)
	}
	var size int64
	if st, errno := h.Stat(); errno == 0 {
		size = max(st.Size, 0)
	}
	out := make([]byte, 0, min(size, limit, maxSizeHint))
	var one [1]byte
	for {
		var buf []byte
		if len(out) < cap(out) {
			buf = out[len(out):cap(out)]
		} else {
			// Full: one byte tells the end of the file from more of it,
			// without growing the buffer for nothing.
			buf = one[:]
		}
		n, errno := h.Read(buf)
		if errno != 0 {
			return nil, false, pathErr("read", name, errno)
		}
		switch {
		case n == 0:
			return out, false, nil
		case len(buf) == len(one) && len(out) == cap(out):
			if int64(len(out)) >= limit {
				return out, true, nil
			}
			grown := make([]byte, len(out), min(limit, int64(max(2*cap(out), 4096))))
			copy(grown, out)
			out = append(grown, one[0])
		default:
			out = out[:len(out)+n]
		}
	}
}

// maxSizeHint bounds the first buffer of a read sized by the file's
// reported size; a larger file grows it as it is read.
const maxSizeHint = 64 << 20

// Stat describes the file name (an absolute guest path), following
// symbolic links.
func (f *Files) Stat(name string) (fs.FileInfo, error) { return f.stat(name, guestName) }

func (f *Files) stat(name string, forms int) (fs.FileInfo, error) {
	fsys, rel, clean, err := f.resolve("stat", name, forms)
	if err != nil {
		return nil, err
	}
	st, errno := fsys.Stat(rel)
	if errno != 0 {
		return nil, pathErr("stat", name, errno)
	}
	return fileInfo{name: baseName(name, clean), st: st}, nil
}

// ReadDir lists the directory name (an absolute guest path), sorted by
// name. Entries describe symbolic links themselves.
func (f *Files) ReadDir(name string) ([]fs.DirEntry, error) { return f.readDir(name, guestName) }

func (f *Files) readDir(name string, forms int) ([]fs.DirEntry, error) {
	fsys, rel, clean, err := f.resolve("readdir", name, forms)
	if err != nil {
		return nil, err
	}
	h, errno := fsys.OpenFile(rel, sys.O_RDONLY|sys.O_DIRECTORY, 0)
	if errno != 0 {
		return nil, pathErr("readdir", name, errno)
	}
	defer h.Close()
	dirents, errno := h.Readdir(-1)
	if errno != 0 {
		return nil, pathErr("readdir", name, errno)
	}
	out := make([]fs.DirEntry, 0, len(dirents))
	for _, d := range dirents {
		if d.Name == "." || d.Name == ".." || f.hidden(path.Join(clean, d.Name)) {
			continue
		}
		var st sysapi.Stat_t
		if child := path.Join(clean, d.Name); f.mountPoint(child) {
			// A mount point is the mount's root, as stat sees it.
			if st, err = f.lstat(child); err != nil {
				return nil, err
			}
		} else if st, errno = fsys.Lstat(path.Join(rel, d.Name)); errno != 0 {
			return nil, pathErr("readdir", path.Join(name, d.Name), errno)
		}
		out = append(out, fs.FileInfoToDirEntry(fileInfo{name: d.Name, st: st}))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

// WriteFile writes data to the file name (an absolute guest path),
// creating it (but not its directory) or truncating it. A write the
// mount's quota cannot hold fails with an error matching syscall.ENOSPC
// and changes nothing: no file is created, an existing one keeps its
// content.
func (f *Files) WriteFile(name string, data []byte) error {
	fsys, rel, _, err := f.resolve("write", name, guestName)
	if err != nil {
		return err
	}
	if errno := fits(fsys, rel, int64(len(data))); errno != 0 {
		return pathErr("write", name, errno)
	}
	h, errno := fsys.OpenFile(rel, sys.O_WRONLY|sys.O_CREAT|sys.O_TRUNC, 0o644)
	if errno != 0 {
		return pathErr("write", name, errno)
	}
	for len(data) > 0 {
		n, errno := h.Write(data)
		if errno != 0 {
			h.Close()
			return pathErr("write", name, errno)
		}
		data = data[n:]
	}
	if errno := h.Close(); errno != 0 {
		return pathErr("write", name, errno)
	}
	return nil
}

// fits checks, before anything changes, that the quota of fsys holds the
// file rel with size bytes in place of what it holds now: ENOSPC if not.
// Between runs nothing else writes the filesystem, so the check holds for
// the write that follows (a volume shared with other sandboxes may still
// fill meanwhile: then the write fails part way, as on a full disk).
func fits(fsys *wasi.FS, rel string, size int64) sys.Errno {
	q := fsys.Quota()
	if q.MaxBytes == 0 && q.MaxFiles == 0 {
		return 0
	}
	used := fsys.Usage()
	bytes, files := used.Bytes+size, used.Files+1
	if st, errno := fsys.Stat(rel); errno == 0 {
		if st.Mode.IsDir() {
			return sys.EISDIR
		}
		bytes, files = bytes-st.Size, files-1
	} else if errno != sys.ENOENT {
		return errno
	}
	if (q.MaxBytes > 0 && bytes > q.MaxBytes && size > 0) || (q.MaxFiles > 0 && files > q.MaxFiles && files > used.Files) {
		return wasi.ENOSPC
	}
	return 0
}

// MkdirAll creates the directory name (an absolute guest path) and any
// parents it lacks. An existing directory is not an error.
func (f *Files) MkdirAll(name string) error {
	fsys, rel, _, err := f.resolve("mkdir", name, guestName)
	if err != nil {
		return err
	}
	if rel == "" {
		return nil
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		errno := fsys.Mkdir(p, 0o755)
		if errno == sys.EEXIST {
			if st, errno := fsys.Stat(p); errno == 0 && st.Mode.IsDir() {
				continue
			}
			return pathErr("mkdir", name, sys.ENOTDIR)
		}
		if errno != 0 {
			return pathErr("mkdir", name, errno)
		}
	}
	return nil
}

// Remove removes the file or empty directory name (an absolute guest
// path). A mount's root cannot be removed (fs.ErrPermission).
func (f *Files) Remove(name string) error {
	fsys, rel, _, err := f.resolve("remove", name, guestName)
	if err != nil {
		return err
	}
	if rel == "" {
		return pathErr("remove", name, sys.EPERM) // a mount root stays
	}
	errno := fsys.Unlink(rel)
	if errno == sys.EISDIR || errno == sys.EPERM {
		errno = fsys.Rmdir(rel)
	}
	if errno != 0 {
		return pathErr("remove", name, errno)
	}
	return nil
}

// RemoveAll removes name (an absolute guest path) and everything below
// it. A missing name is not an error.
func (f *Files) RemoveAll(name string) error {
	st, err := f.lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode.IsDir() {
		entries, err := f.ReadDir(name)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := f.RemoveAll(path.Join(name, e.Name())); err != nil {
				return err
			}
		}
	}
	return f.Remove(name)
}

func (f *Files) lstat(name string) (sysapi.Stat_t, error) {
	fsys, rel, _, err := f.resolve("lstat", name, guestName)
	if err != nil {
		return sysapi.Stat_t{}, err
	}
	st, errno := fsys.Lstat(rel)
	if errno != 0 {
		return st, pathErr("lstat", name, errno)
	}
	return st, nil
}

// fileInfo describes a file of a sandbox.
type fileInfo struct {
	name string
	st   sysapi.Stat_t
}

func (fi fileInfo) Name() string       { return fi.name }
func (fi fileInfo) Size() int64        { return fi.st.Size }
func (fi fileInfo) Mode() fs.FileMode  { return fi.st.Mode }
func (fi fileInfo) ModTime() time.Time { return time.Unix(0, fi.st.Mtim) }
func (fi fileInfo) IsDir() bool        { return fi.st.Mode.IsDir() }

// Sys returns the file's *sys.Stat_t (wazero's).
func (fi fileInfo) Sys() any { return &fi.st }

// openFile is a file opened by Files.Open.
type openFile struct {
	name string
	h    sys.File
	info fileInfo
}

func (o *openFile) Stat() (fs.FileInfo, error) {
	if o.h == nil {
		return nil, &fs.PathError{Op: "stat", Path: o.name, Err: fs.ErrClosed}
	}
	return o.info, nil
}

func (o *openFile) Read(b []byte) (int, error) {
	if o.h == nil {
		return 0, &fs.PathError{Op: "read", Path: o.name, Err: fs.ErrClosed}
	}
	if len(b) == 0 {
		return 0, nil
	}
	n, errno := o.h.Read(b)
	if errno != 0 {
		return n, pathErr("read", o.name, errno)
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (o *openFile) ReadAt(b []byte, off int64) (int, error) {
	if o.h == nil {
		return 0, &fs.PathError{Op: "read", Path: o.name, Err: fs.ErrClosed}
	}
	total := 0
	for total < len(b) {
		n, errno := o.h.Pread(b[total:], off+int64(total))
		if errno != 0 {
			return total, pathErr("read", o.name, errno)
		}
		if n == 0 {
			return total, io.EOF
		}
		total += n
	}
	return total, nil
}

func (o *openFile) Seek(offset int64, whence int) (int64, error) {
	if o.h == nil {
		return 0, &fs.PathError{Op: "seek", Path: o.name, Err: fs.ErrClosed}
	}
	off, errno := o.h.Seek(offset, whence)
	if errno != 0 {
		return 0, pathErr("seek", o.name, errno)
	}
	return off, nil
}

func (o *openFile) Close() error {
	if o.h == nil {
		return &fs.PathError{Op: "close", Path: o.name, Err: fs.ErrClosed}
	}
	errno := o.h.Close()
	o.h = nil
	if errno != 0 {
		return pathErr("close", o.name, errno)
	}
	return nil
}

// openDir is a directory opened by Files.FS().Open.
type openDir struct {
	files   *Files
	name    string
	info    fileInfo
	entries []fs.DirEntry // nil until first read
	closed  bool
}

func (d *openDir) Stat() (fs.FileInfo, error) {
	if d.closed {
		return nil, &fs.PathError{Op: "stat", Path: d.name, Err: fs.ErrClosed}
	}
	return d.info, nil
}

func (d *openDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.name, Err: errnoError{sys.EISDIR}}
}

func (d *openDir) ReadDir(n int) ([]fs.DirEntry, error) {
	if d.closed {
		return nil, &fs.PathError{Op: "readdir", Path: d.name, Err: fs.ErrClosed}
	}
	if d.entries == nil {
		entries, err := d.files.readDir(d.name, ioName)
		if err != nil {
			return nil, err
		}
		d.entries = entries
	}
	if n <= 0 {
		rest := d.entries
		d.entries = d.entries[len(d.entries):]
		return rest, nil
	}
	if len(d.entries) == 0 {
		return nil, io.EOF
	}
	rest := d.entries[:min(n, len(d.entries))]
	d.entries = d.entries[len(rest):]
	return rest, nil
}

func (d *openDir) Close() error {
	if d.closed {
		return &fs.PathError{Op: "close", Path: d.name, Err: fs.ErrClosed}
	}
	d.closed = true
	return nil
}
