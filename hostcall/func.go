package hostcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Handler serves one host function. args is the JSON object of the
// guest's keyword arguments; the result must be something encoding/json
// can marshal. An error reaches the guest as an exception carrying
// err.Error(); a panic reaches it as an error too, and never crashes the
// host. ctx is done when the run's deadline passes or the run is canceled.
type Handler func(ctx context.Context, args json.RawMessage) (result any, err error)

// Func makes a Handler from a function with typed arguments and result:
// the guest's keyword arguments are decoded into Args (a struct with json
// tags, usually) and an unknown or ill-typed argument is an error the guest
// sees. For example:
//
//	type SearchArgs struct {
//		Query string `json:"query"`
//		Limit int    `json:"limit"`
//	}
//	search := hostcall.Func(func(ctx context.Context, a SearchArgs) ([]string, error) { ... })
//
// and in Python, fumehood.call("search", query="wasm", limit=3).
func Func[Args, Result any](fn func(ctx context.Context, args Args) (Result, error)) Handler {
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		var args Args
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&args); err != nil {
			return nil, &ArgumentError{Err: err}
		}
		return fn(ctx, args)
	}
}

// Errors a call can end with, besides the handler's own. The guest sees
// each as a fumehood.CallError whose kind names it.
var (
	// ErrUnknownFunction reports a call to a name no handler is registered
	// under (kind "unknown").
	ErrUnknownFunction = errors.New("hostcall: unknown function")
	// ErrTooManyCalls reports a call past Config.MaxCalls (kind "limit").
	ErrTooManyCalls = errors.New("hostcall: too many calls")
	// ErrTooLarge reports a request or response past its size limit (kind
	// "limit").
	ErrTooLarge = errors.New("hostcall: too large")
)

// ArgumentError reports arguments that could not be decoded into a
// function's argument type (kind "arguments").
type ArgumentError struct{ Err error }

// Error implements error.
func (e *ArgumentError) Error() string { return "invalid arguments: " + e.Err.Error() }

// Unwrap returns the decoder's error.
func (e *ArgumentError) Unwrap() error { return e.Err }

// PanicError reports a handler that panicked (kind "panic"). The guest is
// told only that the function failed: Error does not include the value,
// which the server logs with the stack (attributes "panic" and "stack").
type PanicError struct {
	// Function is the name of the handler that panicked.
	Function string
	// Value is what it panicked with.
	Value any
	// Stack is the handler goroutine's stack at the panic.
	Stack []byte
}

// Error implements error. It names the function, not the panic's value,
// which may hold anything the host had in hand.
func (e *PanicError) Error() string {
	return fmt.Sprintf("hostcall: function %q panicked", e.Function)
}
