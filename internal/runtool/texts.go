package runtool

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fumehood/fumehood/sandbox"
)

// ResultShows says what a run's result shows, for a model: codetool's
// Description and the MCP server's run tools use it.
const ResultShows = "The result shows stdout, stderr, the value of the code's last expression (when it ends in one) " +
	"and an exception with its traceback; a text past the output limit is cut, and the result says so."

// Rollback says what a run stopped by a limit leaves, for a model.
const Rollback = "A run stopped by a limit leaves the state as it was before the run."

// FilesShown says, for a model, that a result lists the files a run made
// and attaches images: codetool's Description and the MCP server's run
// tools use it.
const FilesShown = "It also lists the files the run created or changed under /work; images (PNG, JPEG, SVG) are attached, " +
	"so draw a chart by writing one there (SVG text, or PNG with zlib)."

// ErrBadArguments reports a model's arguments that were not valid JSON,
// had an unknown field or the wrong type, lacked the code, held too much
// of it, or asked for a negative limit: codetool.ErrBadArguments.
var ErrBadArguments = errors.New("codetool: bad arguments")

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
