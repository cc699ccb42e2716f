//go:build linux

package pipeline

import (
	"os"
	"syscall"
)

// identify returns the identity of the open file f (fstat).
func identify(f *os.File) (identity, bool) {
	fi, err := f.Stat()
	if err != nil {
		return identity{size: -1}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return identity{size: fi.Size()}, false
	}
	return identity{
		dev: uint64(st.Dev), ino: st.Ino, size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(),
	}, true
}
