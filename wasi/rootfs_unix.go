//go:build unix

package wasi

import (
	"os"
	"syscall"
)

// openNonblock is added to every open of a RootFs, so that opening a named
// pipe or device that replaced a checked file never blocks.
const openNonblock = syscall.O_NONBLOCK

// identity returns the device and inode numbers of the open directory.
func identity(dir *os.File) (volumeKey, bool) {
	fi, err := dir.Stat()
	if err != nil {
		return volumeKey{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return volumeKey{}, false
	}
	return volumeKey{dev: uint64(st.Dev), ino: uint64(st.Ino)}, true //nolint:unconvert // narrower on some systems
}
