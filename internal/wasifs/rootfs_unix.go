//go:build unix

package wasifs

import "syscall"

// openNonblock is added to every open of a RootFs, so that opening a named
// pipe or device that replaced a checked file never blocks.
const openNonblock = syscall.O_NONBLOCK
