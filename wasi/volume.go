package wasi

import (
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/spf13/afero"
	"github.com/tetratelabs/wazero/experimental/sys"
)

// volume is the usage that the quotas of the FSes over one backing file
// system count: counted once, by a walk, when the first FS with a quota is
// made, and kept up to date by every change those FSes make. FSes over the
// same host directory (a RootFs, whoever opened it) share one volume, so
// their quotas bound what the directory holds in all, however many
// sandboxes mount it, and a new FS costs no walk; FSes over other
// backing file systems have a volume each.
//
// mu is held, after the FS's own mutex, through every change the usage
// counts: from the check against the quota, through the change, to the
// measure of what it changed. Changes made through FSes sharing the volume
// are thus counted exactly, and a quota is never exceeded by two of them
// checking at once.
type volume struct {
	mu   sync.Mutex
	used Usage
	// orphans is the part of used held by files unlinked while open
	// through one of the FSes: a recount cannot see them.
	orphans int64
	// host is true for a host directory, which other programs may change:
	// a change the quota refuses then counts the directory again first, at
	// most once per recountAfter, so that what they removed is seen.
	host bool
	// counted is when the usage was last counted; zero before the first
	// count.
	counted time.Time
	// dir holds a host directory open for as long as its volume lives, so
	// that its inode number, the key of the volume, is not given to
	// another directory meanwhile (a removed directory keeps it while
	// open). Closed by its own cleanup once the volume is collected.
	dir *os.File
}

// recountAfter is how long a host directory's count stands before a change
// it refuses counts the directory again (volume.host).
var recountAfter = 10 * time.Second

// volumeKey identifies a host directory: its device and inode numbers.
type volumeKey struct{ dev, ino uint64 }

// volumes holds the volume of each host directory that an FS with a quota
// mounts, for as long as an FS or a RootFs over it holds it.
var volumes struct {
	sync.Mutex
	m map[volumeKey]weak.Pointer[volume]
}

// walks counts the walks that counted a volume (Walks).
var walks atomic.Int64

// Walks returns how many times, since the process started, a host
// directory (a RootFs) was walked to count its content: once per directory
// by NewFS (see Quota), again when its quota refuses a change or by
// Recount, and by each CountUsage. Other backing file systems, walked by
// each NewFS with a quota, are not counted.
func Walks() int64 { return walks.Load() }

// hostVolume returns the volume of the host directory r, shared with
// every FS over it, or nil if its identity is unknown.
func hostVolume(r *RootFs) *volume {
	dir, err := r.root.Open(".")
	if err != nil {
		return nil
	}
	key, ok := identity(dir)
	if !ok {
		_ = dir.Close()
		return nil
	}
	volumes.Lock()
	defer volumes.Unlock()
	if v := volumes.m[key].Value(); v != nil {
		_ = dir.Close()
		return v
	}
	if volumes.m == nil {
		volumes.m = map[volumeKey]weak.Pointer[volume]{}
	}
	v := &volume{host: true, dir: dir}
	volumes.m[key] = weak.Make(v)
	runtime.AddCleanup(v, func(key volumeKey) {
		volumes.Lock()
		defer volumes.Unlock()
		if volumes.m[key].Value() == nil {
			delete(volumes.m, key)
		}
	}, key)
	return v
}

// joinVolume gives f, which has a quota, the volume of its backing file
// system, counting it first if no FS did. root describes the root.
func (f *FS) joinVolume(root fs.FileInfo) sys.Errno {
	v := &volume{}
	if r, ok := f.fsys.(*RootFs); ok {
		if v = r.vol.Load(); v == nil {
			v = hostVolume(r)
			if v == nil {
				v = &volume{host: true}
			}
			r.vol.CompareAndSwap(nil, v)
			v = r.vol.Load()
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.counted.IsZero() {
		used, errno := f.countAll(root)
		if errno != 0 {
			return errno
		}
		v.used, v.counted = used, time.Now()
	}
	f.vol = v
	return 0
}

// recount counts a host directory again, if its count is older than
// recountAfter, and reports whether it did. The caller holds f.mu and
// f.vol.mu.
func (f *FS) recount() bool {
	v := f.vol
	if !v.host || time.Since(v.counted) < recountAfter {
		return false
	}
	return f.countAgain() == 0
}

// countAgain counts the volume again: what the walk finds, and the files
// unlinked while open through the FSes. The caller holds f.mu and f.vol.mu.
func (f *FS) countAgain() sys.Errno {
	v := f.vol
	v.counted = time.Now()
	root, errno := f.res.lstat("/")
	if errno != 0 {
		return errno
	}
	used, errno := f.countAll(root)
	if errno != 0 {
		return errno
	}
	used.Bytes += v.orphans
	v.used = used
	return 0
}

// Recount counts the content of the backing file system again, for the
// quota of f and of the FSes sharing its usage (see Quota): for a host that
// changed a host directory while FSes over it have a quota. It does
// nothing without a quota. Files unlinked while open through the FSes stay
// counted.
func (f *FS) Recount() error {
	if !f.accounting {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lockVolume()
	defer f.unlockVolume()
	if errno := f.countAgain(); errno != 0 {
		return fmt.Errorf("wasi: Recount: counting the content of %s: %w", f.fsys.Name(), errno)
	}
	return nil
}

// countAll walks the whole backing file system, whose root root
// describes, and returns what it uses.
func (f *FS) countAll(root fs.FileInfo) (Usage, sys.Errno) {
	if _, ok := f.fsys.(*RootFs); ok {
		walks.Add(1)
	}
	return f.usageTree("/", root)
}

// lockVolume locks f's volume, if it has one, for a change that its
// usage counts. The caller holds f.mu, and calls unlockVolume after.
func (f *FS) lockVolume() {
	if f.accounting {
		f.vol.mu.Lock()
	}
}

// unlockVolume undoes lockVolume.
func (f *FS) unlockVolume() {
	if f.accounting {
		f.vol.mu.Unlock()
	}
}

// chargeOrphan adds a change to the bytes of a file unlinked while open.
// The caller holds f.mu and f.vol.mu.
func (f *FS) chargeOrphan(bytes int64) {
	if f.accounting {
		f.vol.used.Bytes += bytes
		f.vol.orphans += bytes
	}
}

// chargeFile adds a measured change of the size of node n's file. The
// caller holds f.mu and f.vol.mu.
func (f *FS) chargeFile(n *node, bytes int64) {
	if n.orphan {
		f.chargeOrphan(bytes)
	} else {
		f.charge(bytes, 0)
	}
}

// CountUsage walks fsys and returns what its content uses, as a Quota
// counts it: what NewFS counts for the first FS over a backing file system.
// Like that count, it tolerates changes made meanwhile: a file or directory
// that vanishes or changes type while it is walked counts as what the walk
// saw of it, not as an error. Only a root that is missing or not a
// directory, and other errors reading the content, are errors.
func CountUsage(fsys afero.Fs) (Usage, error) {
	f := &FS{fsys: fsys, res: newResolver(fsys)}
	root, errno := f.res.lstat("/")
	if errno != 0 {
		return Usage{}, fmt.Errorf("wasi: CountUsage: root of %s: %w", fsys.Name(), errno)
	}
	if !root.IsDir() {
		return Usage{}, fmt.Errorf("wasi: CountUsage: root of %s is not a directory", fsys.Name())
	}
	used, errno := f.countAll(root)
	if errno != 0 {
		return Usage{}, fmt.Errorf("wasi: CountUsage: counting the content of %s: %w", fsys.Name(), errno)
	}
	return used, nil
}

// vanished reports whether errno, met while walking below the root, says
// that what was listed changed meanwhile: it was removed or renamed away
// (ENOENT), replaced by a file (ENOTDIR) or by a symbolic link (ELOOP).
func vanished(errno sys.Errno) bool {
	return errno == sys.ENOENT || errno == sys.ENOTDIR || errno == sys.ELOOP
}
