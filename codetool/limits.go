package codetool

import (
	"fmt"
	"math"
	"time"

	"github.com/fumehood/fumehood/sandbox"
)

// maxTimeoutMS is the largest timeout in milliseconds a time.Duration holds.
const maxTimeoutMS = math.MaxInt64 / int64(time.Millisecond)

// CallLimits returns a call's request for a timeout in milliseconds and a
// fuel budget (0: no request) as the sandbox.Limits of a run. A run gets
// them only where they are lower than the tool's (sandbox.Limits.Lower:
// a request never raises a limit). A negative or out-of-range request is
// an error wrapping ErrBadArguments, whose message names the field.
func CallLimits(timeoutMS, fuel int64) (sandbox.Limits, error) {
	switch {
	case timeoutMS < 0:
		return sandbox.Limits{}, fmt.Errorf("%w: timeout_ms must be a positive number of milliseconds, not %d", ErrBadArguments, timeoutMS)
	case timeoutMS > maxTimeoutMS:
		return sandbox.Limits{}, fmt.Errorf("%w: timeout_ms %d is out of range: at most %d", ErrBadArguments, timeoutMS, maxTimeoutMS)
	case fuel < 0:
		return sandbox.Limits{}, fmt.Errorf("%w: fuel must be a positive number of instructions, not %d", ErrBadArguments, fuel)
	}
	return sandbox.Limits{Timeout: time.Duration(timeoutMS) * time.Millisecond, Fuel: fuel}, nil
}
