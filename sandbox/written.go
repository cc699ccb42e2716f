package sandbox

import (
	"bytes"
	"fmt"
	"math"
	"sync"
	"time"
)

// A session's checkpoint compares only the pages written since the last
// one where the kernel tracks writes (written_linux_amd64.go) and where
// that pays: the tracking moves the cost from the comparison, which runs
// after Run returned, to the run, whose first write to each page takes a
// fault. What a fault costs depends on the machine more than anything
// else here (0.85 µs on one virtual machine of this project's CI kind,
// 15 µs on another, where the 112 pages `x += 1` writes cost 1.7 ms
// against 0.4 ms for comparing all of memory), so the process measures it
// once, at the first checkpoint, and tracks only if a fault costs at most
// as much as comparing maxFaultPages pages.
const maxFaultPages = 16

// Tracking modes: trackAuto (tracking where it pays) for everyone; tests
// and benchmarks force the others.
const (
	trackAuto = iota
	trackOff
	trackAlways
)

// trackWrites is the tracking mode.
var trackWrites = trackAuto

var (
	trackerOnce sync.Once
	// kernelTracker is the kernel's tracker, open, or nil (trackerErr
	// says why); trackCost is what it costs, measured once it opened.
	kernelTracker *writeTracker
	trackerErr    error
	trackCost     trackingCost
)

// openTracker returns the kernel's tracker, opening and measuring it the
// first time, or nil where the kernel has none (before Linux 6.7,
// userfaultfd refused, off Linux on amd64).
func openTracker() *writeTracker {
	trackerOnce.Do(func() {
		kernelTracker, trackerErr = newWriteTracker()
		if trackerErr == nil {
			trackCost = measureTracking(kernelTracker)
		}
	})
	return kernelTracker
}

// writes returns the tracker a memory should be tracked with, or nil when
// the checkpoints of this process compare all of memory.
func writes() *writeTracker {
	t := openTracker()
	switch {
	case t == nil, trackWrites == trackOff:
		return nil
	case trackWrites == trackAlways, trackCost.pays():
		return t
	}
	return nil
}

// trackingCost is what tracking costs the machine, per page: a first
// write to a protected page (fault), against comparing a page that did
// not change (compare). err is set when the tracker failed its own test.
type trackingCost struct {
	fault, compare time.Duration
	err            error
}

func (c trackingCost) pays() bool {
	return c.err == nil && c.fault <= maxFaultPages*c.compare
}

func (c trackingCost) String() string {
	if c.err != nil {
		return c.err.Error()
	}
	return fmt.Sprintf("a first write %v, a page compared %v", c.fault, c.compare)
}

// measureTracking times, the least of three trials of 32 pages each, a
// first write to a protected page and a comparison of an unchanged one,
// and checks that the tracker reports exactly the pages written. It takes
// about 2 ms where faults are slow, once per process.
func measureTracking(t *writeTracker) (c trackingCost) {
	const pages, every = 32, 8
	buf := make([]byte, pages*every*pageSize) // large: starts on a page
	for i := range buf {
		buf[i] = byte(i)
	}
	ref := bytes.Clone(buf)
	w, err := t.watch(buf)
	if err != nil {
		return trackingCost{err: err}
	}
	defer t.unwatch(w)
	c.fault, c.compare = math.MaxInt64, math.MaxInt64
	var written []uint32
	for trial := range 3 {
		if written, err = t.written(w, written[:0]); err != nil {
			return trackingCost{err: err}
		}
		if trial > 0 && len(written) != pages {
			return trackingCost{err: fmt.Errorf("the kernel reported %d pages written of %d", len(written), pages)}
		}
		t0 := time.Now()
		for p := range pages {
			buf[p*every*pageSize]++
		}
		c.fault = min(c.fault, time.Since(t0)/pages)
		t0 = time.Now()
		same := 0
		for p := range pages {
			at := (p*every + 1) * pageSize // a page not written
			if bytes.Equal(buf[at:at+pageSize], ref[at:at+pageSize]) {
				same++
			}
		}
		c.compare = min(c.compare, time.Since(t0)/pages)
		if same != pages {
			return trackingCost{err: fmt.Errorf("pages not written changed")}
		}
	}
	return c
}
