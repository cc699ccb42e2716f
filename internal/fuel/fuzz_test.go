package fuel

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// FuzzInstrument checks that Instrument never panics, fails only with the
// errors it documents, produces output it recognises as instrumented, and
// never turns a module that wazero accepts into one it rejects.
//
// Input that is not a module is also tried as the code of a function in a
// small module (see bodyModule): random bytes seldom make a valid module,
// but often make a valid function body. When such a module is valid, its
// function runs with and without instrumentation and must do the same.
func FuzzInstrument(f *testing.F) {
	for _, seed := range [][]byte{
		module(), sumModule(), spinModule(), indexModule(), proposalsModule(),
		append(sumModule(), customSection("name", []byte{1, 4, 1, 0, 1, 'f'})...),
		{},
		loop(localGet(0), brIf(0)),
		cat(i32Const(1), []byte{opIf, i32}, i32Const(2), []byte{opElse}, i32Const(3), []byte{end}, call(1), globalSet(0)),
		cat([]byte{opBlock, empty, opBlock, empty}, localGet(1), []byte{0x0E, 0x01, 0x00, 0x01, end, end}),
		cat(i32Const(0), v128(1, 2, 3, 4), []byte{0xFD, 0x0B, 0x04, 0x00}, refFunc(1)),
		cat(i32Const(3), []byte{opLoop, 0x01}, i32Const(1), []byte{i32Sub}, op(0x22, 0), localGet(0), brIf(0), []byte{end}, globalSet(0)),
		cat(i32Const(8), i32Const(7), []byte{0x36, 0x02, 0x00}, call(0)), // i32.store, recursion
	} {
		f.Add(seed)
	}
	ctx := context.Background()
	// The interpreter validates like the compiler and compiles faster.
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithCoreFeatures(allFeatures))
	f.Cleanup(func() { _ = r.Close(ctx) })
	m := &meter{refill: 10_000, limit: 11, stop: errStop}
	instantiateMeter(f, ctx, r, m)

	f.Fuzz(func(t *testing.T, b []byte) {
		checkInstrument(t, ctx, r, b)
		if !wasmbin.IsWasm(b) {
			plain := bodyModule(b)
			if out := checkInstrument(t, ctx, r, plain); out != nil {
				compareRuns(t, ctx, r, m, plain, out)
			}
		}
	})
}

// checkInstrument instruments wasm and checks the result. It returns the
// instrumented module if wazero accepts both it and wasm.
func checkInstrument(t *testing.T, ctx context.Context, r wazero.Runtime, wasm []byte) []byte {
	out, err := Instrument(wasm)
	if err != nil {
		assert.Nil(t, out)
		if !errors.Is(err, wasmbin.ErrMalformed) && !errors.Is(err, wasmbin.ErrNotWasm) &&
			!errors.Is(err, ErrInstrumented) && !errors.Is(err, ErrUnsupported) {
			t.Fatalf("undocumented error: %v", err)
		}
		return nil
	}
	_, err = Instrument(out)
	require.ErrorIs(t, err, ErrInstrumented)

	if !smallIntegers(wasm) {
		return nil // wazero sizes allocations by the counts it reads
	}
	cm, err := r.CompileModule(ctx, wasm)
	if err != nil {
		return nil
	}
	_ = cm.Close(ctx)
	cm, err = r.CompileModule(ctx, out)
	require.NoError(t, err, "wazero accepts the module but not its instrumented copy")
	_ = cm.Close(ctx)
	return out
}

// smallIntegers reports whether no two bytes in a row have their high bit
// set, so that every LEB128 integer in wasm is below 2^14.
func smallIntegers(wasm []byte) bool {
	for i := 1; i < len(wasm); i++ {
		if wasm[i-1]&wasm[i]&0x80 != 0 {
			return false
		}
	}
	return true
}

// bodyModule returns a module whose function 0, exported as "f", of type
// [] -> [] with two i32 locals, runs code and then traps: its expression is
// code, unreachable, end. The trap lets code leave any values on the stack. Function 1 is (i32) -> i32. There are a memory and a table
// with small maximums, a mutable i32 global, and both functions are
// declared for ref.func.
func bodyModule(code []byte) []byte {
	body := cat([]byte{1, 2, i32}, code, []byte{0x00, end})
	return module(
		section(wasmbin.SectionType, vec(functype(nil, nil), functype([]byte{i32}, []byte{i32}))),
		section(wasmbin.SectionFunction, vec(u32(0), u32(1))),
		section(wasmbin.SectionTable, vec([]byte{funcref, 0x01, 2, 4})),
		section(wasmbin.SectionMemory, vec([]byte{0x01, 1, 2})),
		section(wasmbin.SectionGlobal, vec(globalEntry(i32, true, constExpr(i32Const(0))))),
		section(wasmbin.SectionExport, vec(exportFunc("f", 0), cat(str("mem"), []byte{0x02, 0}), cat(str("g"), []byte{0x03, 0}))),
		section(wasmbin.SectionElement, vec(cat(u32(3), []byte{0x00}, vec(u32(0), u32(1))))),
		section(wasmbin.SectionCode, vec(cat(u32(uint32(len(body))), body), fn(nil, localGet(0)))),
	)
}

// outcome is what running function f of a bodyModule did.
type outcome struct {
	trap   string
	err    error
	memory []byte
	global uint64
}

func runBody(t *testing.T, ctx context.Context, r wazero.Runtime, wasm []byte) outcome {
	mod, err := r.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithName(""))
	require.NoError(t, err)
	defer mod.Close(ctx)
	var o outcome
	if _, err := mod.ExportedFunction("f").Call(ctx); err != nil {
		o.err = err
		o.trap, _, _ = strings.Cut(err.Error(), "\n")
	}
	mem, ok := mod.Memory().Read(0, mod.Memory().Size())
	require.True(t, ok)
	o.memory = append([]byte(nil), mem...)
	o.global = mod.ExportedGlobal("g").Get()
	return o
}

// compareRuns runs the function of a bodyModule instrumented, with m
// granting a limited budget, and if it finishes, runs the plain one, which
// must do the same.
func compareRuns(t *testing.T, ctx context.Context, r wazero.Runtime, m *meter, plain, instrumented []byte) {
	m.calls, m.given = 0, 0
	got := runBody(t, ctx, r, instrumented)
	if errors.Is(got.err, errStop) {
		return // ran out of fuel: the plain one may never end
	}
	want := runBody(t, ctx, r, plain)
	assert.Equal(t, want.trap, got.trap, "trap")
	assert.Equal(t, want.global, got.global, "global")
	assert.True(t, string(want.memory) == string(got.memory), "memory differs")
}
