package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Result is what a run produced. A run that ended early still returns the
// output written until then and what it used.
type Result struct {
	// Stdout and Stderr hold the captured output, at most MaxOutput bytes each.
	Stdout, Stderr []byte
	// StdoutTruncated and StderrTruncated report output dropped past
	// MaxOutput: the text holds the start, a line "[... N bytes dropped
	// ...]" and the end (or, with StopAtOutputLimit, what came before the
	// stop).
	StdoutTruncated, StderrTruncated bool
	// StdoutBytes and StderrBytes count everything the guest wrote, kept or not.
	StdoutBytes, StderrBytes int64
	// ExitCode is the guest's exit status: 0 on success, 1 for an uncaught
	// Python exception, and for SystemExit(n) or an exit with n the
	// status a POSIX parent would see, from 0 to 255: n's low 8 bits (as
	// python's, SystemExit(-1) and SystemExit(2**70) are 255, and
	// SystemExit(256) is 0, a success). It is -1 only when the run was
	// stopped before the guest exited.
	ExitCode int
	// Duration is the run's wall time, from instantiation to exit.
	Duration time.Duration
	// FuelUsed is the fuel the run spent.
	FuelUsed int64
	// PeakMemory is the largest size, in bytes, of the guest's linear memory.
	PeakMemory int64
	// MemoryLimitHit reports that the guest tried to grow its memory past
	// the limit at least once.
	MemoryLimitHit bool
	// Stop says what ended the run: StopExit when the guest ended it
	// itself, else the limit or failure that stopped it. The host sets it
	// from what it recorded, never from the guest's exit status or
	// output, so a guest cannot pass its own exit for a limit.
	Stop StopReason

	// Session runs only (Session.Run):

	// Value is the repr of the value of the code's last expression, when
	// the code ends in an expression whose value is not None; HasValue
	// says whether there is one. The host cuts it to at most MaxOutput
	// bytes (at a character boundary; invalid UTF-8 becomes U+FFFD), and
	// ValueTruncated says so.
	Value          string
	HasValue       bool
	ValueTruncated bool
	// Exception is the Python exception the code raised, if any, in any
	// Python run (Guest.Run and Sandbox.Run too): the error the run
	// returns. It is what the guest reported; the host caps each of its
	// texts at MaxOutput bytes and never decides Stop from it.
	Exception *Exception
	// HostCalls counts the run's calls of host functions, refused ones
	// included; HTTPRequests counts the HTTP requests it sent, each
	// redirect hop included (see Config.HostCalls and Network).
	HostCalls, HTTPRequests int
}

// StopReason says what ended a run (Result.Stop).
type StopReason int

var stopNames = [...]string{"exit", "fuel", "deadline", "canceled", "memory", "output", "trap", "error", "stack"}

// String returns the reason's name: "exit", "fuel", "deadline",
// "canceled", "memory", "output", "trap", "error" or "stack".
func (s StopReason) String() string {
	if s >= 0 && int(s) < len(stopNames) {
		return stopNames[s]
	}
	return "StopReason(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText implements encoding.TextMarshaler: the reason's name.
func (s StopReason) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// stopReason is the reason for an error the host recorded when it stopped
// a run.
func stopReason(err error) StopReason {
	switch {
	case errors.Is(err, ErrFuelExhausted):
		return StopFuel
	case errors.Is(err, context.DeadlineExceeded):
		return StopDeadline
	case errors.Is(err, context.Canceled):
		return StopCanceled
	case errors.Is(err, ErrOutputLimit):
		return StopOutput
	case errors.Is(err, ErrMemoryLimit):
		return StopMemory
	}
	return StopError
}

// ExitError reports a guest that exited with a non-zero status. The Result
// returned with it holds the output.
type ExitError struct {
	// Code is the guest's exit status, from 1 to 255 (see
	// Result.ExitCode), or 0 for a session's interpreter that exited
	// with status 0 in the middle of a run (os._exit(0)).
	Code int
}

// Error implements error.
func (e *ExitError) Error() string {
	return fmt.Sprintf("sandbox: guest exited with status %d", e.Code)
}

// TrapError reports a guest that stopped on a WebAssembly trap, such as an
// out-of-bounds access, unreachable code or a call stack overflow.
type TrapError struct {
	// Err is the runtime's description of the trap.
	Err error
}

// Error implements error.
func (e *TrapError) Error() string { return "sandbox: guest trapped: " + e.Err.Error() }

// Unwrap returns the runtime's error.
func (e *TrapError) Unwrap() error { return e.Err }

// Exception is a Python exception that ended a run's code. Every Python
// run reports it the same way: Guest.Run, Sandbox.Run and Session.Run
// return it (errors.As) and put it in Result.Exception; Result.ExitCode is
// 1 and the traceback is on Result.Stderr too, as python prints it. A
// session goes on after it. It is what the guest reported: the host cuts
// each of Type, Message and Traceback to at most the run's MaxOutput
// bytes, as it cuts Result.Value, and never decides Result.Stop from it.
type Exception struct {
	// Type is the exception's class, qualified by its module unless it is
	// a builtin or defined by the run's code: "ZeroDivisionError",
	// "json.decoder.JSONDecodeError".
	Type string `json:"type"`
	// Message is str() of the exception.
	Message string `json:"message"`
	// Traceback is the formatted traceback, as Python prints it, without
	// the driver's own frames.
	Traceback string `json:"traceback"`
	// Truncated reports that Type, Message or Traceback was cut to
	// MaxOutput bytes.
	Truncated bool `json:"truncated,omitempty"`
}

// Error implements error: "python: Type: message".
func (e *Exception) Error() string {
	if e.Message == "" {
		return "python: " + e.Type
	}
	return "python: " + e.Type + ": " + e.Message
}

// RunEvent is what Options.OnRun is told of a run that ended.
type RunEvent struct {
	// Session reports a session's run (Session.Run), else a one-shot
	// run (Guest.Run, Sandbox.Run, Exec and the like).
	Session bool
	// Result is the run's result: Stop says what ended it, Duration,
	// FuelUsed and PeakMemory what it used. It is the Result the caller
	// gets: read it, do not change it.
	Result *Result
	// Err is the run's error, as the caller gets it.
	Err error
}
