package codetool

import (
	"fmt"
	"math"
	"time"

	"github.com/fumehood/fumehood/sandbox"
)

// Limits bound every run of a tool. They come from the caller, never from
// the model: a call may only lower Timeout and Fuel (Lower).
type Limits struct {
	// Timeout bounds a run's wall time; 0 means sandbox.DefaultTimeout and
	// a negative value means no bound beyond the caller's context.
	Timeout time.Duration
	// Fuel is a run's CPU budget in WebAssembly instructions; 0 means
	// sandbox.DefaultFuel.
	Fuel int64
	// MaxOutput bounds, in bytes, each of stdout and stderr and each text
	// of a Result (the value, the exception's type, message and
	// traceback); 0 means sandbox.DefaultMaxOutput.
	MaxOutput int
}

// Resolve returns the limits with the defaults applied, so that a call's
// request is compared with the limit that would really apply. It fails
// on a negative Fuel or MaxOutput.
func (l Limits) Resolve() (Limits, error) {
	switch {
	case l.Fuel < 0:
		return l, fmt.Errorf("codetool: negative Fuel %d", l.Fuel)
	case l.MaxOutput < 0:
		return l, fmt.Errorf("codetool: negative MaxOutput %d", l.MaxOutput)
	}
	if l.Timeout == 0 {
		l.Timeout = sandbox.DefaultTimeout
	} else if l.Timeout < 0 {
		l.Timeout = -1
	}
	if l.Fuel == 0 {
		l.Fuel = sandbox.DefaultFuel
	}
	if l.MaxOutput == 0 {
		l.MaxOutput = sandbox.DefaultMaxOutput
	}
	return l, nil
}

// maxTimeoutMS is the largest timeout in milliseconds a time.Duration holds.
const maxTimeoutMS = math.MaxInt64 / int64(time.Millisecond)

// Lower returns a run's configuration: the resolved limits l, lowered by a
// call's request for a timeout in milliseconds and a fuel budget (0: no
// request). A request never raises a limit: a larger value leaves l's,
// and raised says so (for a note to the model). A negative or
// out-of-range request is an error wrapping ErrBadArguments, whose
// message names the field.
func (l Limits) Lower(timeoutMS, fuel int64) (cfg *sandbox.Config, raised bool, err error) {
	switch {
	case timeoutMS < 0:
		return nil, false, fmt.Errorf("%w: timeout_ms must be a positive number of milliseconds, not %d", ErrBadArguments, timeoutMS)
	case timeoutMS > maxTimeoutMS:
		return nil, false, fmt.Errorf("%w: timeout_ms %d is out of range: at most %d", ErrBadArguments, timeoutMS, maxTimeoutMS)
	case fuel < 0:
		return nil, false, fmt.Errorf("%w: fuel must be a positive number of instructions, not %d", ErrBadArguments, fuel)
	}
	cfg = &sandbox.Config{Timeout: l.Timeout, Fuel: l.Fuel, MaxOutput: l.MaxOutput}
	if timeoutMS > 0 {
		t := time.Duration(timeoutMS) * time.Millisecond
		if cfg.Timeout < 0 || t < cfg.Timeout {
			cfg.Timeout = t
		} else if t > cfg.Timeout {
			raised = true
		}
	}
	if fuel > 0 {
		if fuel < cfg.Fuel {
			cfg.Fuel = fuel
		} else if fuel > cfg.Fuel {
			raised = true
		}
	}
	return cfg, raised, nil
}
