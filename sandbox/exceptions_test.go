package sandbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/testenv"
	"github.com/fumehood/fumehood/internal/wasmbin"
	"github.com/fumehood/fumehood/sandbox"
)

// legacyThrowModule is a WASI command whose _start throws 7 in a legacy
// try (as clang 19's -fwasm-exceptions emits), catches it and exits with
// it: (try (i32.const 7) (throw $e) (catch $e (call $proc_exit))).
func legacyThrowModule() []byte {
	u32 := func(v uint32) []byte { return wasmbin.AppendU32(nil, v) }
	name, sec := testenv.WasmName, testenv.WasmSection
	body := []byte{0, // no locals
		0x06, 0x40, // try
		0x41, 7, 0x08, 0, // i32.const 7; throw 0
		0x07, 0, // catch 0
		0x10, 0, // call proc_exit
		0x0B, 0x0B}
	var m []byte
	m = append(m, 0, 'a', 's', 'm', 1, 0, 0, 0)
	m = append(m, sec(wasmbin.SectionType, []byte{0x60, 1, 0x7F, 0}, []byte{0x60, 0, 0})...)
	m = append(m, sec(wasmbin.SectionImport, append(append(name("wasi_snapshot_preview1"), name("proc_exit")...), 0, 0))...)
	m = append(m, sec(wasmbin.SectionFunction, []byte{1})...)
	m = append(m, sec(wasmbin.SectionMemory, []byte{0, 1})...)
	m = append(m, sec(wasmbin.SectionTag, []byte{0, 0})...)
	m = append(m, sec(wasmbin.SectionExport, append(name("_start"), 0, 1), append(name("memory"), 2, 0))...)
	return append(m, sec(wasmbin.SectionCode, append(u32(uint32(len(body))), body...))...)
}

func TestCompileExceptionHandling(t *testing.T) {
	ctx := context.Background()
	wasm := legacyThrowModule()
	_, err := sandbox.Compile(ctx, wasm, &sandbox.Options{CacheDir: t.TempDir()})
	require.ErrorIs(t, err, sandbox.ErrInvalidModule, "exception handling is opt-in")
	assert.ErrorContains(t, err, "Options.ExceptionHandling")

	g, err := sandbox.Compile(ctx, wasm, &sandbox.Options{CacheDir: t.TempDir(), ExceptionHandling: true})
	require.NoError(t, err)
	defer g.Close()
	res, err := g.Exec(ctx, nil)
	var exit *sandbox.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 7, exit.Code, "the value thrown, caught")
	assert.Positive(t, res.FuelUsed)
}
