//go:build unix

package cpython

import (
	"os/exec"
	"syscall"
)

// processAlive reports whether a process with this pid exists.
func processAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// killGroupOnCancel starts cmd in a process group of its own and kills the
// whole group when its context is done, so that make's children stop too.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
