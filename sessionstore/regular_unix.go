//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package sessionstore

import (
	"errors"
	"os"
	"syscall"
)

// openFlags open a stored file without following a link (the open fails)
// and without waiting for a writer (a FIFO opens at once, then fails the
// check that it is a regular file).
const openFlags = os.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// isLinkErr reports whether an open with O_NOFOLLOW failed on a link.
func isLinkErr(err error) bool {
	return errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK)
}
