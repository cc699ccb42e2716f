package errnoshim

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// TestShimExceptionHandling shims a module with a tag section whose WASI
// call sits in a try_table and whose errno is thrown: the call goes
// through the wrapper, the rest is kept.
func TestShimExceptionHandling(t *testing.T) {
	const (
		tClose  = 0 // (i32) -> (i32)
		tResult = 1 // () -> (i32)
		tTag    = 2 // (i32) -> ()
	)
	wasm := module(
		section(wasmbin.SectionType, vec(
			functype([]byte{i32}, []byte{i32}),
			functype(nil, []byte{i32}),
			functype([]byte{i32}, nil),
		)),
		section(wasmbin.SectionImport, vec(importFunc(ImportModule, "fd_close", tClose))),
		section(wasmbin.SectionFunction, vec(u32(tResult))),
		section(wasmbin.SectionTag, vec(cat([]byte{0}, u32(tTag)))),
		section(wasmbin.SectionExport, vec(exportFunc("f", 1))),
		section(wasmbin.SectionCode, vec(fn(
			[]byte{0x02, i32, 0x1F, 0x40, 1, 0x00, 0, 0}, // block (result i32); try_table (catch 0 0)
			i32Const(99), call(0), op(0x08, 0), // fd_close(99); throw its errno
			[]byte{opEnd}, i32Const(-1), []byte{opEnd},
		))),
	)
	shimmed := mustShim(t, wasm)
	assert.NotEqual(t, wasm, shimmed)
	ctx := context.Background()
	for name, b := range map[string][]byte{"plain": wasm, "shimmed": shimmed} {
		r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().
			WithCoreFeatures(api.CoreFeaturesV2|experimental.CoreFeaturesExceptionHandling))
		wasi_snapshot_preview1.MustInstantiate(ctx, r)
		mod, err := r.InstantiateWithConfig(ctx, b, wazero.NewModuleConfig().WithStartFunctions())
		require.NoError(t, err, name)
		res, err := mod.ExportedFunction("f").Call(ctx)
		require.NoError(t, err, name)
		assert.Equal(t, uint64(8), res[0], "%s: EBADF, thrown and caught", name)
		require.NoError(t, r.Close(ctx))
	}
}
