package errnoshim

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// FuzzShim checks that Shim never panics, fails only with the errors it
// documents, recognises its own output, and never turns a module that
// wazero accepts into one it rejects.
//
// Input that is not a module is also tried as the code of a function in a
// small module that imports fd_write (see bodyModule), as random bytes
// seldom make a valid module but often a valid function body.
func FuzzShim(f *testing.F) {
	for _, seed := range [][]byte{
		module(), wasiModule(), plainModule(),
		append(wasiModule(), customSection(".debug_info", []byte{1})...),
		{},
		cat(localGet(0), localGet(0), localGet(0), localGet(0), call(0)),
		cat(refFunc(0), []byte{opDropOp}, localGet(0), localGet(0), localGet(0), localGet(0), returnCall(0)),
		// A call in a try_table whose catch_all leaves the block around it.
		cat([]byte{0x02, 0x40, 0x1F, 0x40, 1, 0x02, 0}, localGet(0), localGet(0), localGet(0), localGet(0), call(0),
			[]byte{opDropOp, opEnd, opEnd}, i32Const(-1)),
	} {
		f.Add(seed)
	}
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().
		WithCoreFeatures(api.CoreFeaturesV2|experimental.CoreFeaturesTailCall|experimental.CoreFeaturesThreads|
			experimental.CoreFeaturesExceptionHandling))
	f.Cleanup(func() { _ = r.Close(ctx) })

	f.Fuzz(func(t *testing.T, b []byte) {
		checkShim(t, ctx, r, b)
		if !wasmbin.IsWasm(b) {
			checkShim(t, ctx, r, bodyModule(b))
		}
	})
}

const opDropOp = 0x1A

// bodyModule returns a module that imports fd_write as function 0 and
// defines function 1, of the same type, whose code is body, referenced by
// a declarative element segment so that ref.func may name both.
func bodyModule(body []byte) []byte {
	code := cat([]byte{1, 1, i32}, body, []byte{opEnd})
	return module(
		section(wasmbin.SectionType, vec(functype([]byte{i32, i32, i32, i32}, []byte{i32}))),
		section(wasmbin.SectionImport, vec(importFunc(ImportModule, "fd_write", 0))),
		section(wasmbin.SectionFunction, vec(u32(0))),
		section(wasmbin.SectionExport, vec(exportFunc("f", 1))),
		section(wasmbin.SectionElement, vec(cat(u32(3), []byte{0}, vec(u32(0), u32(1))))),
		section(wasmbin.SectionCode, vec(cat(u32(uint32(len(code))), code))),
	)
}

func checkShim(t *testing.T, ctx context.Context, r wazero.Runtime, wasm []byte) {
	orig := bytes.Clone(wasm)
	out, err := Shim(wasm)
	require.Equal(t, orig, wasm, "the input is not modified")
	if err != nil {
		require.True(t, errors.Is(err, wasmbin.ErrMalformed) || errors.Is(err, wasmbin.ErrNotWasm) ||
			errors.Is(err, ErrShimmed), "unexpected error: %v", err)
		return
	}
	if !bytes.Equal(out, wasm) {
		_, err := Shim(out)
		assert.ErrorIs(t, err, ErrShimmed, "the output is recognised as shimmed")
	}
	if m, err := wasmbin.Parse(wasm); err != nil || wasmbin.CheckTags(m) != nil {
		return // wazero panics on a tag of a type it lacks
	}
	cm, err := r.CompileModule(ctx, wasm)
	if err != nil {
		return
	}
	_ = cm.Close(ctx)
	cm, err = r.CompileModule(ctx, out)
	require.NoError(t, err, "wazero accepts the input but not the shimmed output")
	_ = cm.Close(ctx)
}

// TestBodyModule checks that the fuzz seeds built by bodyModule are valid,
// so that the fuzzer starts from modules that reach the compile checks.
func TestBodyModule(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().
		WithCoreFeatures(api.CoreFeaturesV2|experimental.CoreFeaturesTailCall|experimental.CoreFeaturesExceptionHandling))
	t.Cleanup(func() { _ = r.Close(ctx) })
	for _, body := range [][]byte{
		cat(localGet(0), localGet(0), localGet(0), localGet(0), call(0)),
		cat(refFunc(0), []byte{opDropOp}, localGet(0), localGet(0), localGet(0), localGet(0), returnCall(0)),
		// A call in a try_table whose catch_all leaves the block around it.
		cat([]byte{0x02, 0x40, 0x1F, 0x40, 1, 0x02, 0}, localGet(0), localGet(0), localGet(0), localGet(0), call(0),
			[]byte{opDropOp, opEnd, opEnd}, i32Const(-1)),
	} {
		wasm := bodyModule(body)
		mustCompile(t, ctx, r, wasm)
		out := mustShim(t, wasm)
		require.NotEqual(t, wasm, out)
		mustCompile(t, ctx, r, out)
		s := summarize(t, out)
		assert.Equal(t, []uint32{0}, s.calls[1], "the wrapper calls the import")
		assert.NotContains(t, s.calls[0], uint32(0), "the function no longer names the import")
		assert.Equal(t, []uint32{2, 1}, s.elements, "the declarative segment names the wrapper")
	}
}
