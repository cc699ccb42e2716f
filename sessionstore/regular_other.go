//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package sessionstore

import "os"

// openFlags: the directory store does not open on these platforms
// (lockSupported); the check that a file is regular still holds.
const openFlags = os.O_RDONLY

func isLinkErr(error) bool { return false }
