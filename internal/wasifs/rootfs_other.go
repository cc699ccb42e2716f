//go:build !unix

package wasifs

// openNonblock is added to every open of a RootFs (see rootfs_unix.go).
const openNonblock = 0
