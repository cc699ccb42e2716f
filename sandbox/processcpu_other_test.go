//go:build !unix

package sandbox

import (
	"testing"
	"time"
)

// processCPU skips the benchmark: the process's CPU time is read with
// getrusage, which only Unix-like systems have.
func processCPU(tb testing.TB) time.Duration {
	tb.Skip("process CPU time is measured on Unix-like systems only")
	return 0
}
