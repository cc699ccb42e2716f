package pipeline

import (
	"errors"
	"runtime/debug"
	"syscall"
)

// ErrFault reports a memory fault while reading a mapped blob: its file
// was truncated after it was mapped.
var ErrFault = errors.New("pipeline: fault reading a mapped blob (its file was truncated?)")

// SafeCopy runs read, which reads memory Map returned, turning a fault
// (SIGBUS on pages a truncation removed) into an error matching ErrFault
// and syscall.EIO instead of a crash of the process.
func SafeCopy(read func()) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if re, ok := r.(interface{ Addr() uintptr }); ok && re != nil {
				err = errors.Join(ErrFault, syscall.EIO)
				return
			}
			panic(r)
		}
	}()
	read()
	return nil
}
