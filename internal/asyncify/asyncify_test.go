package asyncify

import (
	"context"
	"errors"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

func TestParseVersion(t *testing.T) {
	for out, want := range map[string]string{
		"wasm-opt version 108\n":                 "108",
		"wasm-opt version 116 (version_116)\n":   "116",
		"wasm-opt version 123 (version_123)":     "123",
		"wasm-opt version 108-1\nsomething else": "108-1",
	} {
		got, err := parseVersion(out)
		require.NoError(t, err, out)
		assert.Equal(t, want, got, out)
	}
	for _, out := range []string{"", "wasm-opt", "version", "wasm-opt version \n"} {
		_, err := parseVersion(out)
		assert.Error(t, err, out)
	}
}

func TestMissingWasmOpt(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	ctx := context.Background()
	_, err := Version(ctx)
	assert.ErrorIs(t, err, ErrNoWasmOpt)
	assert.Contains(t, err.Error(), "binaryen")
	_, err = Asyncify(ctx, []byte("\x00asm\x01\x00\x00\x00"))
	assert.ErrorIs(t, err, ErrNoWasmOpt)
}

func needWasmOpt(t *testing.T) {
	if _, err := exec.LookPath(Command); err != nil {
		t.Skip("wasm-opt is not installed (Debian package binaryen)")
	}
}

func TestVersion(t *testing.T) {
	needWasmOpt(t)
	v, err := Version(context.Background())
	require.NoError(t, err)
	assert.NotEmpty(t, v)
	t.Logf("wasm-opt version %s", v)
}

// readerModule imports fd_read and calls it from an exported function.
func readerModule() []byte {
	u := func(v uint32) []byte { return wasmbin.AppendU32(nil, v) }
	name := func(s string) []byte { return append(u(uint32(len(s))), s...) }
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	body := cat(
		[]byte{0x00}, // no locals
		[]byte{0x41, 0, 0x41, 0, 0x41, 0, 0x41, 0x08}, // fd_read(0, 0, 0, 8)
		[]byte{0x10, 0x00, 0x1A, 0x0B},                // call 0, drop, end
	)
	m := &wasmbin.Module{Sections: []wasmbin.Section{
		{ID: wasmbin.SectionType, Payload: cat(u(2),
			[]byte{0x60, 4, 0x7F, 0x7F, 0x7F, 0x7F, 1, 0x7F},
			[]byte{0x60, 0, 0})},
		{ID: wasmbin.SectionImport, Payload: cat(u(1), name("wasi_snapshot_preview1"), name("fd_read"), []byte{0x00}, u(0))},
		{ID: wasmbin.SectionFunction, Payload: cat(u(1), u(1))},
		{ID: wasmbin.SectionMemory, Payload: []byte{1, 0, 1}},
		{ID: wasmbin.SectionExport, Payload: cat(u(2), name("run"), []byte{0x00}, u(1), name("memory"), []byte{0x02}, u(0))},
		{ID: wasmbin.SectionCode, Payload: cat(u(1), u(uint32(len(body))), body)},
	}}
	return m.Encode()
}

func TestAsyncify(t *testing.T) {
	needWasmOpt(t)
	ctx := context.Background()
	out, err := Asyncify(ctx, readerModule())
	require.NoError(t, err)
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	cm, err := r.CompileModule(ctx, out)
	require.NoError(t, err)
	for _, name := range []string{"run", "asyncify_start_unwind", "asyncify_stop_unwind", "asyncify_start_rewind", "asyncify_stop_rewind", "asyncify_get_state"} {
		assert.Contains(t, cm.ExportedFunctions(), name)
	}
	m, err := wasmbin.Parse(out)
	require.NoError(t, err)
	g, err := wasmbin.MutableGlobals(m)
	require.NoError(t, err)
	assert.Len(t, g, 2, "asyncify's state and data globals")
}

func TestAsyncifyFailure(t *testing.T) {
	needWasmOpt(t)
	_, err := Asyncify(context.Background(), []byte("\x00asm\x01\x00\x00\x00\x01\x05garbage"))
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrNoWasmOpt))
	assert.Contains(t, err.Error(), "wasm-opt")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Asyncify(ctx, readerModule())
	assert.ErrorIs(t, err, context.Canceled)
}
