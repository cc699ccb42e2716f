//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package sessionstore

import (
	"os"
	"syscall"
)

func lockSupported() error { return nil }

// lockFile takes an exclusive flock on f, released when f is closed. It
// holds between processes, and between two opens in one process.
func lockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			return err
		}
	}
}
