//go:build !unix

package cpython

import (
	"os"
	"os/exec"
)

// processAlive reports whether a process with this pid exists: where
// signal 0 cannot ask, a process found by FindProcess counts as alive, so
// a work directory is kept rather than removed under a running build.
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	_ = p.Release()
	return true
}

// killGroupOnCancel leaves exec.CommandContext's default: the guest build
// runs its tools on Unix-like hosts only (it needs Debian's toolchain).
func killGroupOnCancel(*exec.Cmd) {}
