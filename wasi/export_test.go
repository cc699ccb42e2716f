package wasi

import "time"

// SetRecountAfter sets recountAfter for a test and returns what restores it.
func SetRecountAfter(d time.Duration) (restore func()) {
	old := recountAfter
	recountAfter = d
	return func() { recountAfter = old }
}
