package wasi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/afero"
	"github.com/tetratelabs/wazero/experimental/sys"
	sysapi "github.com/tetratelabs/wazero/sys"
)

// Options configures an FS. The zero value is a writable FS with no quota.
type Options struct {
	// ReadOnly makes the FS refuse every change with EROFS: opening for
	// writing, O_CREAT of a missing file, O_TRUNC, Mkdir, Rmdir, Unlink,
	// Rename, Link, Symlink, Chmod and Utimens (of the FS and of its files).
	// Reading, listing and stat work as usual.
	ReadOnly bool

	// Quota limits what the guest may store in this FS.
	Quota Quota

	// ReportErrno, if set, is called during a failing operation with the
	// WASI errno that wazero cannot express and turns into EIO: ENOSPC
	// (51), when a quota is exceeded, EMFILE (33), past MaxOpen, and ENOMEM
	// (48), past MaxListingBytes. A host whose guest is rewritten by
	// internal/errnoshim passes it on, so the guest sees ENOSPC instead of
	// EIO.
	ReportErrno func(wasip1Errno uint16)

	// MaxOpen, if not zero, bounds the handles open at once: opening one
	// more fails with EMFILE (reported like ENOSPC, see ReportErrno). Each
	// handle costs the host memory outside the guest's, so a sandbox sets
	// one (DefaultMaxOpen).
	MaxOpen int

	// MaxListingBytes, if not zero, bounds the host memory that directory
	// listings held by open handles may take in all (see ListingBytes).
	// A handle's listing is taken at its first Readdir after opening or
	// rewinding, so that positions stay valid while it is read, and is
	// released when the handle is closed or rewound; a listing that would
	// take the total past the bound fails with ENOMEM (reported like
	// ENOSPC, see ReportErrno). Each entry is counted as ListingEntryBytes
	// plus the length of its name. A sandbox sets one
	// (sandbox.DefaultMaxListingBytes).
	MaxListingBytes int64

	// Device, if not zero, is the device number the FS reports instead of
	// one unique in the process: for file systems that must look the same
	// to a guest in every process, as those a session's base image is
	// taken with. Mounts of one guest must still have distinct numbers.
	Device uint64

	// DevNull makes the FS serve a null device at DevNullPath ("dev/null"
	// of its root, so "/dev/null" when mounted at "/"), as Linux's: reads
	// find the end of the file, writes succeed and keep nothing, stat
	// reports a character device. It is not in the backing file system
	// and no listing shows it; it can be neither removed nor replaced
	// (EPERM), and it is writable in a read-only FS. A sandbox sets it on
	// the FS mounted at "/", so that a guest's os.devnull works.
	DevNull bool
}

// Quota limits the storage of one FS; all its files share it. Each limit is
// off when zero: this layer then imposes none, and the caller decides the
// defaults (a sandbox should set both, since a guest writing to an in-memory
// backing file system without a limit can exhaust the host's memory).
//
// A change that would exceed a limit changes nothing and fails with ENOSPC:
// a write writes no byte, a truncate does not resize, a create, mkdir or
// symlink creates nothing. Usage is kept exact through writes, pwrites inside
// or past the end of a file, truncates, O_TRUNC, unlink (the bytes of an
// unlinked file still open are released at its last close, as on disk),
// rename over a file or an empty directory, and rmdir. Content already in the
// backing file system when NewFS is called is counted, so it may start above
// a limit; then only changes that do not grow the usage succeed.
//
// FSes with a quota over the same host directory (RootFs values over the
// directory, however many were opened) share one usage, counted by a walk
// when the first of them is made and kept up to date by the changes of all
// of them: each one's quota bounds what the directory holds in all, and
// more FSes over it cost no more walks. Changes that other programs make
// to the directory are not seen as they happen: when a change is refused
// and the count is older than 10 seconds, the directory is counted again
// (plus the files unlinked while open through the FSes) before the change
// is refused for good; FS.Recount counts it again at once. The shared
// count holds the directory open (one descriptor) until no FS or RootFs
// over it is reachable. A file unlinked through one FS while another holds
// it open is counted as freed at once, though its bytes stay on disk until
// that other FS closes it. Changes through an FS over the directory without
// a quota are not counted either. Over any other backing file system each
// FS counts its own usage, from what the backing file system held when it
// was made. The walk tolerates changes made meanwhile (see CountUsage).
//
// ENOSPC is this package's own errno (wazero has none); a wasip1 guest sees
// EIO unless the host passes it on (Options.ReportErrno). wazero's fd_write calls File.Write once per iovec, so a vectored
// write may keep the iovecs before the one that hit the limit.
type Quota struct {
	// MaxBytes is the most bytes that the regular files of the FS may hold
	// in total (their sizes, holes included). Zero: no limit.
	MaxBytes int64

	// MaxFiles is the most files, directories and symbolic links the FS may
	// hold, not counting its root. Zero: no limit.
	MaxFiles int64
}

// Usage is what the content of an FS uses, as its Quota counts it.
type Usage struct {
	// Bytes is the total size of the regular files, including files that
	// were unlinked but are still open.
	Bytes int64
	// Files is the number of files, directories and symbolic links, not
	// counting the root.
	Files int64
}

// FS is a sys.FS (wazero's experimental writable file system interface)
// backed by an afero.Fs. Create one with NewFS and mount it with
// Mount (see the package documentation).
//
// Every method takes paths relative to the mount root and returns a zero
// sys.Errno on success. FS is safe for concurrent use.
//
// Inode numbers (Stat_t.Ino, Dirent.Ino, File.Ino) are given out by the FS,
// non-zero and stable per path for its lifetime: a rename keeps them, an
// unlinked path's number is not reused. They do not persist across FS
// instances. All files of an FS share one device number (Stat_t.Dev),
// distinct from every other FS of the process.
type FS struct {
	sys.UnimplementedFS

	fsys     afero.Fs
	res      *resolver
	linker   afero.Linker // nil when the backing Fs cannot create links
	readOnly bool
	quota    Quota
	// accounting is true when a limit is set: only then is the usage kept.
	accounting bool
	// report is Options.ReportErrno.
	report func(uint16)
	dev    uint64
	// devNull is Options.DevNull; nullNode is the null device's inode
	// number once given out.
	devNull  bool
	nullNode sysapi.Inode

	mu sync.Mutex
	// vol is the usage the quota counts, set when accounting (see
	// volume); its mutex is taken after mu.
	vol   *volume
	nodes map[string]*node
	ino   uint64 // the last inode number given out
	// handles counts open handles, orphans included; maxOpen bounds it.
	handles int
	maxOpen int
	// listing is the bytes of directory listings held by open handles;
	// maxListing bounds it.
	listing    int64
	maxListing int64
}

// ListingEntryBytes is what one directory entry held in a listing is counted
// as, on top of the length of its name (Options.MaxListingBytes): its
// record and the allocation of its name.
const ListingEntryBytes = 48

// holdListing charges bytes of a new listing, or fails with ENOMEM past
// the bound. The caller holds f.mu.
func (f *FS) holdListing(bytes int64) sys.Errno {
	if f.maxListing > 0 && f.listing+bytes > f.maxListing {
		if f.report != nil {
			f.report(uint16(ENOMEM - 4096))
		}
		return ENOMEM
	}
	f.listing += bytes
	return 0
}

// ListingBytes returns the bytes of directory listings that open handles
// hold, as counted against Options.MaxListingBytes.
func (f *FS) ListingBytes() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listing
}

// node is what the FS knows of one path: its inode number and, while it is
// open, how many handles it has.
type node struct {
	ino  sysapi.Inode
	path string // current path; updated by Rename
	open int    // open handles
	// orphan is true once the path was unlinked or replaced while open: the
	// node is out of the FS's table, its bytes charged until the last close.
	orphan bool
	// atim is the access time set by Utimens, kept here when the backing
	// file system cannot store it apart from the modification time (as
	// afero.MemMapFs, which keeps one time per file); hasAtim says it is set.
	// Like the inode number, it follows renames and goes with an unlink.
	atim    int64
	hasAtim bool
}

// devices gives each FS its own device number, so that (Dev, Ino) pairs of
// two mounts never compare equal.
var devices atomic.Uint64

// NewFS returns an FS that serves the content of fsys, whose root ("/") is
// the root of the mount, with the given options.
//
// fsys may be any afero.Fs whose root exists and is a directory; for a host
// directory use a RootFs, which stays confined while the directory changes
// under it (see the package documentation). Symbolic links are supported
// when fsys implements afero.Lstater, afero.LinkReader and, to create them,
// afero.Linker (RootFs, afero.OsFs, afero.BasePathFs over it);
// they are always expanded by this package (see Resolve). A backing Fs that
// can hold symbolic links must implement afero.Lstater, or its own Stat
// would follow them. Hard links are not supported (Link fails with ENOSYS).
//
// When a quota limit is set, NewFS walks fsys once to count what it already
// holds, unless an FS over the same host directory did (see Quota); an
// error reading it is returned, but not a file or directory vanishing while
// it is walked (see CountUsage).
//
// With an *afero.BasePathFs, which stores the target of every link it
// creates as a host path under its base directory, a link created by the
// guest with a relative target reads back (readlink) as the equivalent
// absolute path within the mount; links read from the host that point under
// the base directory are shown relative to the mount root.
func NewFS(fsys afero.Fs, opts Options) (*FS, error) {
	if fsys == nil {
		return nil, errors.New("wasi: NewFS: nil afero.Fs")
	}
	if opts.Quota.MaxBytes < 0 || opts.Quota.MaxFiles < 0 || opts.MaxOpen < 0 || opts.MaxListingBytes < 0 {
		return nil, fmt.Errorf("wasi: NewFS: negative quota %+v, MaxOpen %d or MaxListingBytes %d",
			opts.Quota, opts.MaxOpen, opts.MaxListingBytes)
	}
	f := &FS{
		fsys:       fsys,
		res:        newResolver(fsys),
		readOnly:   opts.ReadOnly,
		quota:      opts.Quota,
		accounting: opts.Quota.MaxBytes > 0 || opts.Quota.MaxFiles > 0,
		report:     opts.ReportErrno,
		maxOpen:    opts.MaxOpen,
		maxListing: opts.MaxListingBytes,
		dev:        opts.Device,
		devNull:    opts.DevNull,
		nodes:      map[string]*node{},
	}
	if f.dev == 0 {
		f.dev = devices.Add(1)
	}
	f.linker, _ = fsys.(afero.Linker)
	root, errno := f.res.lstat("/")
	if errno != 0 {
		return nil, fmt.Errorf("wasi: NewFS: root of %s: %w", fsys.Name(), errno)
	}
	if !root.IsDir() {
		return nil, fmt.Errorf("wasi: NewFS: root of %s is not a directory", fsys.Name())
	}
	f.nodeFor("/")
	if f.accounting {
		if errno := f.joinVolume(root); errno != 0 {
			return nil, fmt.Errorf("wasi: NewFS: counting the content of %s: %w", fsys.Name(), errno)
		}
	}
	return f, nil
}

// String implements fmt.Stringer.
func (f *FS) String() string {
	mode := "rw"
	if f.readOnly {
		mode = "ro"
	}
	return fmt.Sprintf("wasi.FS(%s, %s)", f.fsys.Name(), mode)
}

// ReadOnly reports whether the FS refuses changes (Options.ReadOnly).
func (f *FS) ReadOnly() bool { return f.readOnly }

// Quota returns the limits the FS enforces.
func (f *FS) Quota() Quota { return f.quota }

// Usage returns what the content of the FS uses. It is kept only when a
// Quota limit is set, and is the zero Usage otherwise.
func (f *FS) Usage() Usage {
	if !f.accounting {
		return Usage{}
	}
	f.vol.mu.Lock()
	defer f.vol.mu.Unlock()
	return f.vol.used
}

// nodeFor returns the node of path p, giving it an inode number on first use.
// The caller holds f.mu.
func (f *FS) nodeFor(p string) *node {
	n := f.nodes[p]
	if n == nil {
		f.ino++
		n = &node{ino: f.ino, path: p}
		f.nodes[p] = n
	}
	return n
}

// dropNode forgets path p, which no longer exists. An open node becomes an
// orphan and is returned. The caller holds f.mu.
func (f *FS) dropNode(p string) (orphan *node) {
	n := f.nodes[p]
	if n == nil {
		return nil
	}
	delete(f.nodes, p)
	if n.open > 0 {
		n.orphan = true
		return n
	}
	return nil
}

// moveNodes moves the nodes of from and everything under it to to, keeping
// their inode numbers. The caller holds f.mu.
func (f *FS) moveNodes(from, to string) {
	var moved []*node
	for p, n := range f.nodes {
		if p == from || strings.HasPrefix(p, from+"/") {
			delete(f.nodes, p)
			n.path = to + p[len(from):]
			moved = append(moved, n)
		}
	}
	for _, n := range moved {
		f.nodes[n.path] = n
	}
}

// reserve fails with ENOSPC if growing the usage by bytes and files would
// exceed the quota; a host directory is counted again first (recount). The
// caller holds f.mu and, when accounting, f.vol.mu.
func (f *FS) reserve(bytes, files int64) sys.Errno {
	if f.exceeds(bytes, files) && (!f.recount() || f.exceeds(bytes, files)) {
		if f.report != nil {
			f.report(uint16(ENOSPC - 4096))
		}
		return ENOSPC
	}
	return 0
}

// exceeds reports whether growing the usage by bytes and files would
// exceed the quota. The caller holds f.mu and, when accounting, f.vol.mu.
func (f *FS) exceeds(bytes, files int64) bool {
	if !f.accounting {
		return false
	}
	used := f.vol.used
	return bytes > 0 && f.quota.MaxBytes > 0 && used.Bytes+bytes > f.quota.MaxBytes ||
		files > 0 && f.quota.MaxFiles > 0 && used.Files+files > f.quota.MaxFiles
}

// charge adds a measured change to the usage. The caller holds f.mu and
// f.vol.mu.
func (f *FS) charge(bytes, files int64) {
	if f.accounting {
		f.vol.used.Bytes += bytes
		f.vol.used.Files += files
	}
}

// usageOf measures what p and, for a directory, everything under it uses,
// zero when p does not exist. The caller holds f.mu.
func (f *FS) usageOf(p string) (Usage, sys.Errno) {
	if !f.accounting {
		return Usage{}, 0
	}
	fi, errno := f.res.lstat(p)
	switch errno {
	case 0:
		return f.usageTree(p, fi)
	case sys.ENOENT:
		return Usage{}, 0
	default:
		return Usage{}, errno
	}
}

// usageTree measures p, described by fi, and its descendants. Below the
// root, what vanishes or changes type while it is walked (another program
// or sandbox changing the directory) counts as what the walk saw of it.
func (f *FS) usageTree(p string, fi fs.FileInfo) (Usage, sys.Errno) {
	var u Usage
	if p != "/" {
		u.Files = 1
	}
	switch {
	case fi.Mode().IsRegular():
		u.Bytes = fi.Size()
	case fi.IsDir():
		entries, errno := f.list(p)
		if errno != 0 && p != "/" && vanished(errno) {
			return u, 0
		}
		if errno != 0 {
			return u, errno
		}
		for _, e := range entries {
			sub, errno := f.usageTree(join(p, e.Name()), e)
			if errno != 0 {
				return u, errno
			}
			u.Bytes += sub.Bytes
			u.Files += sub.Files
		}
	}
	return u, 0
}

// list returns the entries of directory p sorted by name, without "." and
// "..".
func (f *FS) list(p string) ([]fs.FileInfo, sys.Errno) {
	d, err := f.fsys.Open(p)
	if err != nil {
		return nil, toErrno(err)
	}
	defer d.Close()
	fis, err := d.Readdir(-1)
	if err != nil {
		return nil, toErrno(err)
	}
	out := fis[:0]
	for _, fi := range fis {
		if n := fi.Name(); n != "" && n != "." && n != ".." && !strings.ContainsRune(n, '/') {
			out = append(out, fi)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, 0
}

// isEmptyDir reports whether directory p has no entries.
func (f *FS) isEmptyDir(p string) (bool, sys.Errno) {
	entries, errno := f.list(p)
	return len(entries) == 0, errno
}

// join joins a clean absolute directory path and a name.
func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// statOf builds the Stat_t of path p described by fi. The caller holds f.mu.
func (f *FS) statOf(p string, fi fs.FileInfo) sysapi.Stat_t {
	return f.statNode(f.nodeFor(p), fi)
}

// statNode builds the Stat_t of node n from fi, with its inode number and
// the access time the FS keeps for it, if any. The caller holds f.mu.
func (f *FS) statNode(n *node, fi fs.FileInfo) sysapi.Stat_t {
	st := sysapi.NewStat_t(fi)
	st.Dev = f.dev
	st.Ino = n.ino
	if n.hasAtim {
		st.Atim = n.atim
	}
	st.Mode = fi.Mode().Type() | fi.Mode().Perm()
	// One link: afero has no hard links, and for a directory 1 is the value
	// that tells tools like find not to infer the number of subdirectories.
	st.Nlink = 1
	return st
}

// OpenFile implements sys.FS. It opens regular files and directories (the
// latter only for reading); other file types (devices, pipes, sockets of a
// host directory) fail with EACCES. perm applies to a created file, without
// setuid, setgid or sticky bits.
func (f *FS) OpenFile(name string, flag sys.Oflag, perm fs.FileMode) (sys.File, sys.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if flag&(sys.O_CREAT|sys.O_TRUNC) != 0 {
		f.lockVolume()
		defer f.unlockVolume()
	}
	if f.maxOpen > 0 && f.handles >= f.maxOpen {
		if f.report != nil {
			f.report(uint16(EMFILE - 4096))
		}
		return nil, EMFILE
	}

	var read, write bool
	switch flag & (sys.O_RDONLY | sys.O_RDWR | sys.O_WRONLY) {
	case sys.O_RDONLY:
		read = true
	case sys.O_RDWR:
		read, write = true, true
	case sys.O_WRONLY:
		write = true
	default:
		return nil, sys.EINVAL
	}
	if f.isDevNull(name) {
		return f.openNull(flag, read, write)
	}
	creat := flag&sys.O_CREAT != 0
	excl := creat && flag&sys.O_EXCL != 0
	// O_CREAT|O_EXCL never follows a final link: it fails on any existing
	// name, a dangling link included.
	follow := flag&sys.O_NOFOLLOW == 0 && !excl

	r, errno := f.res.resolve(name, follow)
	if errno != 0 {
		return nil, errno
	}

	if !r.exists() {
		switch {
		case !creat:
			return nil, sys.ENOENT
		case flag&sys.O_DIRECTORY != 0:
			return nil, sys.EINVAL
		case r.dirSlash:
			return nil, sys.EISDIR
		case f.readOnly:
			return nil, sys.EROFS
		}
		if errno := f.reserve(0, 1); errno != 0 {
			return nil, errno
		}
		af, err := f.fsys.OpenFile(r.path, osAccess(read, write)|os.O_CREATE|os.O_EXCL, perm&fs.ModePerm)
		if err != nil {
			return nil, toErrno(err)
		}
		f.charge(0, 1)
		return f.newFile(r.path, af, read, write, flag), 0
	}

	if excl {
		return nil, sys.EEXIST
	}
	mode := r.fi.Mode()
	switch {
	case mode&fs.ModeSymlink != 0: // only with O_NOFOLLOW
		return nil, sys.ELOOP
	case mode.IsDir():
		if write || flag&sys.O_TRUNC != 0 {
			return nil, sys.EISDIR
		}
		n := f.nodeFor(r.path)
		n.open++
		f.handles++
		return &file{fs: f, n: n, dir: true, read: true, nonblock: flag&sys.O_NONBLOCK != 0}, 0
	case !mode.IsRegular():
		return nil, sys.EACCES
	case flag&sys.O_DIRECTORY != 0:
		return nil, sys.ENOTDIR
	}
	trunc := flag&sys.O_TRUNC != 0
	if f.readOnly && (write || trunc) {
		return nil, sys.EROFS
	}
	af, err := f.fsys.OpenFile(r.path, osAccess(read, write), 0)
	if err != nil {
		return nil, toErrno(err)
	}
	// What was opened may not be what was checked, if the directory
	// changed in between (a RootFs opens without blocking).
	if fi, err := af.Stat(); err != nil || !fi.Mode().IsRegular() {
		_ = af.Close()
		if err != nil {
			return nil, toErrno(err)
		}
		return nil, sys.EACCES
	}
	if trunc && write {
		before, errno := fileSize(af)
		if errno == 0 {
			errno = toErrno(af.Truncate(0))
		}
		if errno != 0 {
			_ = af.Close()
			return nil, errno
		}
		after, _ := fileSize(af)
		f.charge(after-before, 0)
	}
	return f.newFile(r.path, af, read, write, flag), 0
}

// osAccess returns the os.OpenFile access mode.
func osAccess(read, write bool) int {
	switch {
	case read && write:
		return os.O_RDWR
	case write:
		return os.O_WRONLY
	default:
		return os.O_RDONLY
	}
}

// newFile wraps an open regular file. The caller holds f.mu.
func (f *FS) newFile(p string, af afero.File, read, write bool, flag sys.Oflag) *file {
	n := f.nodeFor(p)
	n.open++
	f.handles++
	return &file{
		fs:       f,
		n:        n,
		af:       af,
		read:     read,
		write:    write,
		append:   flag&sys.O_APPEND != 0,
		nonblock: flag&sys.O_NONBLOCK != 0,
		sync:     flag&(sys.O_SYNC|sys.O_DSYNC) != 0,
	}
}

// Lstat implements sys.FS: a final symbolic link is not followed.
func (f *FS) Lstat(name string) (sysapi.Stat_t, sys.Errno) {
	return f.stat(name, false)
}

// Stat implements sys.FS: symbolic links are followed.
func (f *FS) Stat(name string) (sysapi.Stat_t, sys.Errno) {
	return f.stat(name, true)
}

func (f *FS) stat(name string, follow bool) (sysapi.Stat_t, sys.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.isDevNull(name) {
		return f.nullStat(), 0
	}
	r, errno := f.res.resolve(name, follow)
	if errno != 0 {
		return sysapi.Stat_t{}, errno
	}
	if !r.exists() {
		return sysapi.Stat_t{}, sys.ENOENT
	}
	return f.statOf(r.path, r.fi), 0
}

// Mkdir implements sys.FS. perm is applied without setuid, setgid or sticky
// bits.
func (f *FS) Mkdir(name string, perm fs.FileMode) sys.Errno {
	if f.isDevNull(name) {
		return sys.EPERM // the null device (Options.DevNull)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lockVolume()
	defer f.unlockVolume()
	if f.readOnly {
		return sys.EROFS
	}
	r, errno := f.res.resolve(name, false)
	if errno != 0 {
		return errno
	}
	if r.exists() {
		return sys.EEXIST
	}
	if errno := f.reserve(0, 1); errno != 0 {
		return errno
	}
	if errno := toErrno(f.fsys.Mkdir(r.path, perm&fs.ModePerm)); errno != 0 {
		return errno
	}
	f.charge(0, 1)
	return 0
}

// Chmod implements sys.FS, following symbolic links. Only the permission
// bits (0o777) of perm are applied.
func (f *FS) Chmod(name string, perm fs.FileMode) sys.Errno {
	if f.isDevNull(name) {
		return sys.EPERM // the null device (Options.DevNull)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readOnly {
		return sys.EROFS
	}
	r, errno := f.res.resolve(name, true)
	if errno != 0 {
		return errno
	}
	if !r.exists() {
		return sys.ENOENT
	}
	return toErrno(f.fsys.Chmod(r.path, perm&fs.ModePerm))
}

// Rename implements sys.FS with POSIX semantics: a file replaces a file, a
// directory replaces an empty directory (ENOTEMPTY otherwise), a file over a
// directory fails with EISDIR and a directory over a file with ENOTDIR, a
// directory into itself or its own subtree with EINVAL, and renaming a name
// to itself does nothing. Symbolic links are renamed, not followed.
func (f *FS) Rename(from, to string) sys.Errno {
	if f.isDevNull(from) || f.isDevNull(to) {
		return sys.EPERM // the null device (Options.DevNull)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lockVolume()
	defer f.unlockVolume()
	if f.readOnly {
		return sys.EROFS
	}
	rf, errno := f.res.resolve(from, false)
	if errno != 0 {
		return errno
	}
	if !rf.exists() {
		return sys.ENOENT
	}
	rt, errno := f.res.resolve(to, false)
	if errno != 0 {
		return errno
	}
	if rf.path == rt.path {
		return 0
	}
	if rf.isDir() {
		if rf.path == "/" || strings.HasPrefix(rt.path, rf.path+"/") {
			return sys.EINVAL
		}
		if rt.exists() {
			if !rt.isDir() {
				return sys.ENOTDIR
			}
			if empty, errno := f.isEmptyDir(rt.path); errno != 0 {
				return errno
			} else if !empty {
				return sys.ENOTEMPTY
			}
		}
	} else {
		if rt.isDir() {
			return sys.EISDIR
		}
		if rt.dirSlash {
			return sys.ENOTDIR
		}
	}

	before, errno := f.usageOf2(rf.path, rt.path)
	if errno != 0 {
		return errno
	}
	err := f.fsys.Rename(rf.path, rt.path)
	if err != nil && rt.exists() && toErrno(err) == sys.EEXIST {
		// Some backends refuse to replace; remove the (checked) target first.
		if rmErr := f.fsys.Remove(rt.path); rmErr == nil {
			err = f.fsys.Rename(rf.path, rt.path)
		}
	}
	if err != nil {
		return toErrno(err)
	}
	after, _ := f.usageOf2(rf.path, rt.path)
	f.charge(after.Bytes-before.Bytes, after.Files-before.Files)

	if orphan := f.dropNode(rt.path); orphan != nil && rt.fi.Mode().IsRegular() {
		f.chargeOrphan(rt.fi.Size()) // still held by an open handle
	}
	f.moveNodes(rf.path, rt.path)
	return 0
}

// usageOf2 measures two paths.
func (f *FS) usageOf2(a, b string) (Usage, sys.Errno) {
	ua, errno := f.usageOf(a)
	if errno != 0 {
		return Usage{}, errno
	}
	ub, errno := f.usageOf(b)
	if errno != 0 {
		return Usage{}, errno
	}
	return Usage{Bytes: ua.Bytes + ub.Bytes, Files: ua.Files + ub.Files}, 0
}

// Rmdir implements sys.FS: it removes an empty directory. The root cannot be
// removed (EINVAL).
func (f *FS) Rmdir(name string) sys.Errno {
	if f.isDevNull(name) {
		return sys.EPERM // the null device (Options.DevNull)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lockVolume()
	defer f.unlockVolume()
	if f.readOnly {
		return sys.EROFS
	}
	r, errno := f.res.resolve(name, false)
	if errno != 0 {
		return errno
	}
	switch {
	case !r.exists():
		return sys.ENOENT
	case !r.isDir():
		return sys.ENOTDIR
	case r.path == "/":
		return sys.EINVAL
	}
	if empty, errno := f.isEmptyDir(r.path); errno != 0 {
		return errno
	} else if !empty {
		return sys.ENOTEMPTY
	}
	return f.remove(r)
}

// Unlink implements sys.FS: it removes a file or symbolic link (not what it
// points to). A directory fails with EISDIR. An open file stays readable and
// writable through its handles.
func (f *FS) Unlink(name string) sys.Errno {
	if f.isDevNull(name) {
		return sys.EPERM // the null device (Options.DevNull)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lockVolume()
	defer f.unlockVolume()
	if f.readOnly {
		return sys.EROFS
	}
	r, errno := f.res.resolve(name, false)
	if errno != 0 {
		return errno
	}
	switch {
	case !r.exists():
		return sys.ENOENT
	case r.isDir():
		return sys.EISDIR
	}
	return f.remove(r)
}

// remove removes the checked path r and updates the usage and nodes.
func (f *FS) remove(r resolved) sys.Errno {
	var before Usage
	if f.accounting {
		before.Files = 1
		if r.fi.Mode().IsRegular() {
			before.Bytes = r.fi.Size()
		}
	}
	if errno := toErrno(f.fsys.Remove(r.path)); errno != 0 {
		if errno == sys.ENOENT {
			// It exists (r.fi), so the backend cannot remove it, as
			// afero.CopyOnWriteFs for a file of its read-only layer.
			return sys.EPERM
		}
		return errno
	}
	// A union file system may show a lower layer's file again.
	after, _ := f.usageOf(r.path)
	f.charge(after.Bytes-before.Bytes, after.Files-before.Files)
	if orphan := f.dropNode(r.path); orphan != nil {
		f.chargeOrphan(before.Bytes) // still held by an open handle
	}
	return 0
}

// Link implements sys.FS. afero has no hard links: after checking the
// paths it fails with ENOSYS.
func (f *FS) Link(oldName, newName string) sys.Errno {
	if f.isDevNull(oldName) || f.isDevNull(newName) {
		return sys.EPERM // the null device (Options.DevNull)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readOnly {
		return sys.EROFS
	}
	ro, errno := f.res.resolve(oldName, false)
	if errno != 0 {
		return errno
	}
	switch {
	case !ro.exists():
		return sys.ENOENT
	case ro.isDir():
		return sys.EPERM
	}
	rn, errno := f.res.resolve(newName, false)
	if errno != 0 {
		return errno
	}
	if rn.exists() {
		return sys.EEXIST
	}
	return sys.ENOSYS
}

// Symlink implements sys.FS: it creates linkName pointing at target, which
// is stored as given (see NewFS for afero.BasePathFs, and RootFs, which cuts
// a target that climbs above its root). An absolute target
// fails with EPERM, as WASI's path resolution does not permit one (and as
// wazero's own host directory file system does); links that are already in
// the backing file system with absolute targets are still followed, taken
// relative to the mount root. It fails with ENOSYS when the backing Fs
// cannot create links.
func (f *FS) Symlink(target, linkName string) sys.Errno {
	if f.isDevNull(linkName) {
		return sys.EPERM // the null device (Options.DevNull)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lockVolume()
	defer f.unlockVolume()
	switch {
	case f.readOnly:
		return sys.EROFS
	case f.linker == nil:
		return sys.ENOSYS
	case target == "":
		return sys.ENOENT
	case target[0] == '/':
		return sys.EPERM
	case strings.IndexByte(target, 0) >= 0:
		return sys.EINVAL
	case len(target) > MaxPathLen:
		return sys.ENAMETOOLONG
	}
	r, errno := f.res.resolve(linkName, false)
	if errno != 0 {
		return errno
	}
	if r.exists() {
		return sys.EEXIST
	}
	if r.dirSlash {
		return sys.ENOENT
	}
	if errno := f.reserve(0, 1); errno != 0 {
		return errno
	}
	if errno := toErrno(f.linker.SymlinkIfPossible(f.res.toHostTarget(r.path, target), r.path)); errno != 0 {
		return errno
	}
	f.charge(0, 1)
	return 0
}

// Readlink implements sys.FS. A path that is not a symbolic link fails with
// EINVAL.
func (f *FS) Readlink(name string) (string, sys.Errno) {
	if f.isDevNull(name) {
		return "", sys.EINVAL // the null device is no link
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r, errno := f.res.resolve(name, false)
	if errno != 0 {
		return "", errno
	}
	switch {
	case !r.exists():
		return "", sys.ENOENT
	case !r.isSymlink():
		return "", sys.EINVAL
	}
	return f.res.readlink(r.path)
}

// Utimens implements sys.FS, following symbolic links. A time given as
// sys.UTIME_OMIT is left unchanged. When the backing file system cannot
// store the access time apart from the modification time (afero.MemMapFs
// keeps only the latter), the FS keeps the access time itself, for the
// lifetime of the FS: Stat then reports the time set, and setting one of
// the two times leaves the other unchanged on every backend.
func (f *FS) Utimens(name string, atim, mtim int64) sys.Errno {
	if f.isDevNull(name) {
		return sys.EPERM // the null device (Options.DevNull)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readOnly {
		return sys.EROFS
	}
	r, errno := f.res.resolve(name, true)
	if errno != 0 {
		return errno
	}
	if !r.exists() {
		return sys.ENOENT
	}
	return f.chtimes(f.nodeFor(r.path), r.fi, atim, mtim)
}

// chtimes sets the times of node n, described by fi, keeping a time given
// as sys.UTIME_OMIT. If the backing file system then reports an access
// time other than the one set, and equal to the modification time, it
// cannot store access times: the node keeps it (see Utimens). The caller
// holds f.mu.
func (f *FS) chtimes(n *node, fi fs.FileInfo, atim, mtim int64) sys.Errno {
	if atim == sys.UTIME_OMIT && mtim == sys.UTIME_OMIT {
		return 0
	}
	st := f.statNode(n, fi)
	if atim == sys.UTIME_OMIT {
		atim = st.Atim
	}
	if mtim == sys.UTIME_OMIT {
		mtim = st.Mtim
	}
	if errno := toErrno(f.fsys.Chtimes(n.path, time.Unix(0, atim), time.Unix(0, mtim))); errno != 0 {
		return errno
	}
	n.hasAtim = false
	if after, errno := f.res.lstat(n.path); errno == 0 {
		if got := sysapi.NewStat_t(after); got.Atim != atim && got.Atim == got.Mtim {
			n.atim, n.hasAtim = atim, true
		}
	}
	return 0
}

// fileSize returns the size of an open file.
func fileSize(af afero.File) (int64, sys.Errno) {
	fi, err := af.Stat()
	if err != nil {
		return 0, toErrno(err)
	}
	return fi.Size(), 0
}

var _ sys.FS = (*FS)(nil)

// OpenHandles returns, for every path with open handles, how many there
// are. Paths are relative to the mount's root, "/" being the root itself.
// A runtime that preopens the mount may hold a handle on "/" for as long
// as the mount is attached.
func (f *FS) OpenHandles() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	orphans := f.handles
	for p, n := range f.nodes {
		if n.open > 0 {
			out[p] = n.open
			orphans -= n.open
		}
	}
	if orphans > 0 {
		out[""] = orphans
	}
	return out
}

// Handles returns how many handles are open in all, and how many of them
// are on the mount's root directory: a cheaper OpenHandles.
func (f *FS) Handles() (all, root int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.nodes["/"]; n != nil {
		root = n.open
	}
	return f.handles, root
}
