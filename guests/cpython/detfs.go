package cpython

import (
	"io/fs"
	"slices"
	"strings"
	"sync"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
)

// A deterministic view of host directories for the PGO training run.
//
// The training's profile must not depend on the machine or the moment of
// the build: a different profile is a different python.wasm, so replicas
// that each build the guest would refuse each other's snapshots. Clocks
// and random numbers are wazero's deterministic fakes, but a host
// directory shows the host's file times (files the tests create get the
// time of the build; importlib's FileFinder rescans a directory whose
// time changed, and tests format times), its inode and device numbers,
// and directory entries in the host file system's hash order. detFS
// shows, instead:
//
//   - every file's access, modification and change times as trainEpoch
//     (a time the guest sets is accepted and not shown back);
//   - inode numbers in the order the guest first sees them, and one device
//     number per mount;
//   - directory entries sorted by name;
//   - directories of size zero (a host directory's size depends on its
//     history).

// trainEpoch is the time every file shows in training: 2022-01-01 UTC,
// where wazero's fake wall clock starts.
const trainEpoch = int64(1640995200) * 1e9

// inodes numbers host files in the order the guest first sees them.
type inodes struct {
	mu   sync.Mutex
	next sys.Inode
	seen map[[2]uint64]sys.Inode
}

// of returns the number shown for host inode ino on host device dev.
func (n *inodes) of(dev uint64, ino sys.Inode) sys.Inode {
	if ino == 0 {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	k := [2]uint64{dev, ino}
	if v, ok := n.seen[k]; ok {
		return v
	}
	if n.seen == nil {
		n.seen = map[[2]uint64]sys.Inode{}
	}
	n.next++
	n.seen[k] = n.next
	return n.next
}

// detFS is a host directory (wazero's DirFS) seen deterministically.
type detFS struct {
	experimentalsys.FS
	dev    uint64 // the device number shown
	inodes *inodes
}

// stat is st as shown to the guest.
func (d *detFS) stat(st sys.Stat_t) sys.Stat_t {
	st.Ino = d.inodes.of(st.Dev, st.Ino)
	st.Dev = d.dev
	st.Atim, st.Mtim, st.Ctim = trainEpoch, trainEpoch, trainEpoch
	if st.Mode.IsDir() {
		st.Size = 0
	}
	return st
}

// Stat implements experimentalsys.FS.
func (d *detFS) Stat(path string) (sys.Stat_t, experimentalsys.Errno) {
	st, errno := d.FS.Stat(path)
	return d.stat(st), errno
}

// Lstat implements experimentalsys.FS.
func (d *detFS) Lstat(path string) (sys.Stat_t, experimentalsys.Errno) {
	st, errno := d.FS.Lstat(path)
	return d.stat(st), errno
}

// OpenFile implements experimentalsys.FS.
func (d *detFS) OpenFile(path string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	f, errno := d.FS.OpenFile(path, flag, perm)
	if errno != 0 {
		return nil, errno
	}
	return &detFile{File: f, fs: d}, 0
}

// detFile is a file of a detFS.
type detFile struct {
	experimentalsys.File
	fs *detFS

	// entries are the directory's entries, sorted, read whole at the
	// first Readdir after opening or rewinding (read); next is the first
	// not yet returned.
	entries []experimentalsys.Dirent
	read    bool
	next    int
}

// Dev implements experimentalsys.File.
func (f *detFile) Dev() (uint64, experimentalsys.Errno) { return f.fs.dev, 0 }

// Ino implements experimentalsys.File.
func (f *detFile) Ino() (sys.Inode, experimentalsys.Errno) {
	st, errno := f.File.Stat()
	if errno != 0 {
		return 0, errno
	}
	return f.fs.inodes.of(st.Dev, st.Ino), 0
}

// Stat implements experimentalsys.File.
func (f *detFile) Stat() (sys.Stat_t, experimentalsys.Errno) {
	st, errno := f.File.Stat()
	return f.fs.stat(st), errno
}

// Readdir implements experimentalsys.File: the entries in name order.
// The host directory is read whole at the first call, and again when it
// has been rewound: the file is at its end after a whole read, so an
// entry read there means a Seek to the start came between.
func (f *detFile) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	all, errno := f.File.Readdir(-1)
	if errno != 0 {
		return nil, errno
	}
	if !f.read || len(all) > 0 {
		st, errno := f.File.Stat()
		if errno != 0 {
			return nil, errno
		}
		// Sorted before numbering: new inodes are numbered in the order
		// seen.
		slices.SortFunc(all, func(a, b experimentalsys.Dirent) int { return strings.Compare(a.Name, b.Name) })
		for i := range all {
			// Entries of mount points underneath keep the directory's
			// device for the mapping: their number is still unique.
			all[i].Ino = f.fs.inodes.of(st.Dev, all[i].Ino)
		}
		f.entries, f.read, f.next = all, true, 0
	}
	rest := f.entries[f.next:]
	if n > 0 && n < len(rest) {
		rest = rest[:n]
	}
	f.next += len(rest)
	return rest, 0
}
