package sandbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/wasmbin"
	"github.com/fumehood/fumehood/sandbox"
)

// hostileModule describes a small hand-built WASI command: one function,
// _start, with the given locals and body, a memory of memPages pages and,
// if table is set, a table section with that payload.
type hostileModule struct {
	memPages uint32
	table    []byte // table section payload
	locals   []byte // the body's local declarations, with their count
	body     []byte // instructions, without the final end
}

func (h hostileModule) wasm() []byte {
	locals := h.locals
	if locals == nil {
		locals = []byte{0x00}
	}
	code := append(append(append([]byte{}, locals...), h.body...), 0x0B)
	secs := []wasmbin.Section{
		{ID: wasmbin.SectionType, Payload: []byte{0x01, 0x60, 0x00, 0x00}}, // () -> ()
		{ID: wasmbin.SectionFunction, Payload: []byte{0x01, 0x00}},
	}
	if h.table != nil {
		secs = append(secs, wasmbin.Section{ID: wasmbin.SectionTable, Payload: h.table})
	}
	return (&wasmbin.Module{Sections: append(secs,
		wasmbin.Section{ID: wasmbin.SectionMemory, Payload: wasmbin.AppendU32([]byte{0x01, 0x00}, h.memPages)},
		wasmbin.Section{ID: wasmbin.SectionExport, Payload: append(append([]byte{0x01, 0x06}, "_start"...), 0x00, 0x00)},
		wasmbin.Section{ID: wasmbin.SectionCode, Payload: append(wasmbin.AppendU32([]byte{0x01}, uint32(len(code))), code...)},
	)}).Encode()
}

func compileHostile(t *testing.T, h hostileModule, opts *sandbox.Options) (*sandbox.Guest, error) {
	t.Helper()
	g, err := sandbox.Compile(context.Background(), h.wasm(), opts)
	if err == nil {
		t.Cleanup(func() { g.Close(context.Background()) })
	}
	return g, err
}

// A module that declares more initial memory than the limit must not
// start: the allocator cannot refuse the first allocation, so this used to
// give a guest limited to 64 MiB a whole GiB of host memory.
func TestHugeInitialMemoryIsRefused(t *testing.T) {
	g, err := compileHostile(t, hostileModule{memPages: 16384}, &sandbox.Options{MemoryLimit: 64 << 20}) // 1 GiB
	require.NoError(t, err)
	res, err := g.Exec(context.Background(), nil)
	require.ErrorIs(t, err, sandbox.ErrMemoryLimit)
	assert.Nil(t, res, "nothing was instantiated")

	// The 4 GiB maximum, with the default limit.
	g, err = compileHostile(t, hostileModule{memPages: 65536}, nil)
	require.NoError(t, err)
	_, err = g.Exec(context.Background(), nil)
	require.ErrorIs(t, err, sandbox.ErrMemoryLimit)

	// A run whose own limit is large enough starts.
	g, err = compileHostile(t, hostileModule{memPages: 16}, &sandbox.Options{MemoryLimit: 512 << 10})
	require.NoError(t, err)
	_, err = g.Exec(context.Background(), nil)
	require.ErrorIs(t, err, sandbox.ErrMemoryLimit)
	res, err = g.Exec(context.Background(), &sandbox.Config{MemoryLimit: 1 << 20})
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), res.PeakMemory)
}
