package sandbox

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
)

// trapOf runs body as the only function of a module with one page of
// memory and returns the runtime's error.
func trapOf(t *testing.T, body []byte) error {
	t.Helper()
	sec := func(id byte, payload ...byte) []byte { return append([]byte{id, byte(len(payload))}, payload...) }
	code := append([]byte{0}, append(body, 0x0B)...) // no locals
	m := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	m = append(m, sec(1, 1, 0x60, 0, 0)...)   // type 0: () -> ()
	m = append(m, sec(3, 1, 0)...)            // function 0 of type 0
	m = append(m, sec(5, 1, 0, 1)...)         // memory: 1 page
	m = append(m, sec(7, 1, 1, 'f', 0, 0)...) // export "f"
	m = append(m, sec(10, append([]byte{1, byte(len(code))}, code...)...)...)
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	mod, err := rt.Instantiate(ctx, m)
	require.NoError(t, err)
	_, err = mod.ExportedFunction("f").Call(ctx)
	require.Error(t, err)
	return err
}

// TestRuntimeTrapThroughWrapping: the runtime's traps are recognized by
// their type wherever they are in the error's chain (the built guest's
// driver wraps them: "cpython: fumehood_exec: stack overflow", which a
// prefix match missed, so a runtime stack overflow was a plain trap), and
// an error that only says the same words is not one.
func TestRuntimeTrapThroughWrapping(t *testing.T) {
	overflow := trapOf(t, []byte{0x10, 0})                                // call 0, forever
	oob := trapOf(t, []byte{0x41, 0x80, 0x80, 0x10, 0x41, 0, 0x36, 2, 0}) // [262144] = 0
	wrapped := fmt.Errorf("cpython: fumehood_exec: %w", overflow)
	joined := errors.Join(errors.New("other"), fmt.Errorf("run: %w", wrapped))

	assert.Equal(t, trapStackOverflow, runtimeTrap(overflow))
	assert.Equal(t, trapStackOverflow, runtimeTrap(wrapped))
	assert.Equal(t, trapStackOverflow, runtimeTrap(joined))
	assert.Equal(t, trapOutOfBounds, runtimeTrap(fmt.Errorf("cpython: fumehood_exec: %w", oob)))
	for _, err := range []error{wrapped, joined} {
		got := stackPointer{}.check(nil, err)
		assert.ErrorIs(t, got, ErrStackOverflow, "%v", err)
		assert.ErrorIs(t, got, err, "the runtime's error is kept")
	}
	for _, forged := range []error{nil, errors.New("stack overflow"), errors.New("wasm error: stack overflow"),
		fmt.Errorf("cpython: %w", errors.New("stack overflow"))} {
		assert.Empty(t, runtimeTrap(forged), "%v", forged)
		assert.NotErrorIs(t, stackPointer{}.check(nil, forged), ErrStackOverflow, "%v", forged)
	}
}
