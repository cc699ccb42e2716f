package sandbox

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
)

// TestInvokeStackSize pins what stackSize reads of wazero's internals: a
// wazero upgrade that moves the call engine's stack field fails here
// rather than leaving invokes bounded only by fallbackStack.
func TestInvokeStackSize(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	defer rt.Close(ctx)
	// (module (func (export "f")))
	wasm := []byte{0, 'a', 's', 'm', 1, 0, 0, 0,
		1, 4, 1, 0x60, 0, 0,
		3, 2, 1, 0,
		7, 5, 1, 1, 'f', 0, 0,
		10, 4, 1, 2, 0, 0x0B}
	mod, err := rt.Instantiate(ctx, wasm)
	require.NoError(t, err)
	fn := mod.ExportedFunction("f")
	_, err = fn.Call(ctx)
	require.NoError(t, err)
	size := stackSize(fn)
	assert.NotEqual(t, fallbackStack, size, "stackSize cannot read this wazero's call stack")
	assert.Greater(t, size, 0)
	assert.Less(t, size, cachedStack, "a fresh call stack is small enough to keep")
	assert.Equal(t, fallbackStack, stackSize(nil))
}
