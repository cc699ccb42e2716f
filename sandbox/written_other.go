//go:build !(linux && amd64)

package sandbox

import "errors"

// writeTracker tracks the pages a process writes where the kernel can
// (written_linux_amd64.go); elsewhere checkpoints compare all of memory.
type writeTracker struct{}

type watched struct{}

var errNoTracker = errors.New("write tracking needs Linux on amd64")

func newWriteTracker() (*writeTracker, error) { return nil, errNoTracker }

func (t *writeTracker) watch(b []byte) (watched, error) { return watched{}, errNoTracker }

func (t *writeTracker) unwatch(w watched) {}

func (t *writeTracker) written(w watched, dst []uint32) ([]uint32, error) { return dst, errNoTracker }
