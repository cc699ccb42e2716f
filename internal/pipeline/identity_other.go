//go:build !linux

package pipeline

import "os"

// identify gives no identity on this platform: every Get hashes.
func identify(f *os.File) (identity, bool) {
	fi, err := f.Stat()
	if err != nil {
		return identity{size: -1}, false
	}
	return identity{size: fi.Size()}, false
}
