//go:build !unix

package wasi

import "os"

// openNonblock is added to every open of a RootFs (see rootfs_unix.go).
const openNonblock = 0

// identity reports that a directory's identity is not known here: each
// RootFs then has a volume of its own.
func identity(*os.File) (volumeKey, bool) { return volumeKey{}, false }
