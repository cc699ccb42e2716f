package fuel

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/fumehood/fumehood/internal/exnref"
	"github.com/fumehood/fumehood/internal/wasmbin"
)

// Exception handling: try_table, throw, throw_ref, the tag section, and
// the legacy try, catch, catch_all, delegate and rethrow.

const (
	opTryTable = 0x1F
	opThrowOp  = 0x08
	valExnref  = 0x69
)

func throw(tag uint32) []byte { return op(opThrowOp, tag) }

// tryTable encodes try_table with an empty block type and clauses.
func tryTable(clauses []byte, n uint32, code ...[]byte) []byte {
	return cat([]byte{opTryTable, empty}, u32(n), clauses, cat(code...), []byte{end})
}

// ehLoop is the body of a function (param $n i32) (result i32) with a
// local $acc, that adds n, n-1, ..., 1: each value reaches $acc through the
// i32 block $h, by what inner leaves there (a catch, or a branch).
func ehLoop(inner ...[]byte) []byte {
	return cat(
		block(loop(
			localGet(0), []byte{i32Eqz}, brIf(1),
			[]byte{opBlock, i32}, cat(inner...), i32Const(0), []byte{end},
			localGet(1), []byte{i32Add}, localSet(1),
			localGet(0), i32Const(1), []byte{i32Sub}, localSet(0),
			br(0),
		)),
		localGet(1),
	)
}

// ehModule exports functions that each add n, ..., 1 as ehLoop does, the
// value reaching the handler's block in a different way.
func ehModule() []byte {
	const (
		tUnary = 0 // (i32) -> (i32)
		tParam = 1 // (i32) -> ()
	)
	acc := vec(cat(u32(1), []byte{i32}))
	bodies := []struct {
		name string
		code []byte
	}{
		// thrower (function 0): throws tag 0 with its argument.
		{"thrower", cat(localGet(0), throw(0))},
		// A branch out of the try_table: no exception.
		{"branches", ehLoop(tryTable(cat([]byte{0x00}, u32(0), u32(0)), 1, localGet(0), br(1)))},
		// throw inside the try_table, caught by (catch 0).
		{"throws", ehLoop(tryTable(cat([]byte{0x00}, u32(0), u32(0)), 1, localGet(0), throw(0)))},
		// A call that throws.
		{"calls", ehLoop(tryTable(cat([]byte{0x00}, u32(0), u32(0)), 1, localGet(0), call(0), []byte{0x00}))},
		// Caught by catch_all_ref, thrown again by throw_ref, caught by
		// the outer try_table.
		{"rethrows", ehLoop(tryTable(cat([]byte{0x00}, u32(0), u32(0)), 1,
			[]byte{opBlock, valExnref},
			tryTable([]byte{0x03, 0}, 1, localGet(0), throw(0)),
			[]byte{0x00, end, byte(opThrowRef)},
		))},
	}
	var funcs, exports, code [][]byte
	for i, b := range bodies {
		typ, locals := uint32(tUnary), acc
		if i == 0 {
			typ, locals = tParam, nil
		}
		funcs = append(funcs, u32(typ))
		exports = append(exports, exportFunc(b.name, uint32(i)))
		code = append(code, fn(locals, b.code))
	}
	return module(
		section(wasmbin.SectionType, vec(
			functype([]byte{i32}, []byte{i32}),
			functype([]byte{i32}, nil),
		)),
		section(wasmbin.SectionFunction, vec(funcs...)),
		section(wasmbin.SectionTag, vec(cat([]byte{0}, u32(tParam)))),
		section(wasmbin.SectionExport, vec(exports...)),
		section(wasmbin.SectionCode, vec(code...)),
	)
}

const ehFeatures = api.CoreFeaturesV2 | experimental.CoreFeaturesExceptionHandling

// ehRun instantiates wasm with exception handling and the meter, and
// returns fn(n) and, if instrumented, the fuel it used.
func ehRun(t *testing.T, wasm []byte, fn string, n uint64) (int32, int64) {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCoreFeatures(ehFeatures))
	defer r.Close(ctx)
	m := &meter{refill: 1 << 40}
	instantiateMeter(t, ctx, r, m)
	mod, err := r.Instantiate(ctx, wasm)
	require.NoError(t, err)
	res, err := mod.ExportedFunction(fn).Call(ctx, n)
	require.NoError(t, err, fn)
	if mod.ExportedGlobal(GlobalName) == nil {
		return int32(res[0]), 0
	}
	return int32(res[0]), m.used(t, mod)
}

// TestExceptionHandlingFuel checks that fuel stays exact or conservative
// where a catch resumes execution: each iteration costs the same, and a
// value that reaches the handler by an exception costs at least what the
// same value reaching it by a branch costs.
func TestExceptionHandlingFuel(t *testing.T) {
	plain := ehModule()
	metered := mustInstrument(t, plain)
	perIteration := map[string]int64{}
	for _, fn := range []string{"branches", "throws", "calls", "rethrows"} {
		var fuel [4]int64
		for i, n := range []uint64{0, 10, 20, 30} {
			want, _ := ehRun(t, plain, fn, n)
			got, used := ehRun(t, metered, fn, n)
			require.Equal(t, int32(n*(n+1)/2), want, "%s(%d) uninstrumented", fn, n)
			require.Equal(t, want, got, "%s(%d) instrumented", fn, n)
			fuel[i] = used
		}
		_, again := ehRun(t, metered, fn, 20)
		assert.Equal(t, fuel[2], again, "%s: the same run uses the same fuel", fn)
		assert.Equal(t, fuel[2]-fuel[1], fuel[1]-fuel[0], "%s: each iteration costs the same", fn)
		assert.Equal(t, fuel[3]-fuel[2], fuel[1]-fuel[0], "%s: each iteration costs the same", fn)
		perIteration[fn] = (fuel[1] - fuel[0]) / 10
	}
	// Each iteration runs 3 instructions to test n, 2 in the try_table
	// (local.get and br or throw), then 3 to add and 5 to count down and
	// loop; the i32.const 0 that neither runs is not charged. A catch is a
	// branch to its label, whose code is a region of its own: a throw
	// costs what the branch costs.
	assert.Equal(t, int64(3+2+8), perIteration["branches"])
	assert.Equal(t, perIteration["branches"], perIteration["throws"])
	assert.GreaterOrEqual(t, perIteration["calls"], perIteration["throws"])
	assert.GreaterOrEqual(t, perIteration["rethrows"], perIteration["throws"])
	t.Logf("fuel per iteration: %v", perIteration)
}

// TestExceptionHandlingLegacy instruments a module with legacy exception
// handling, then translates it for wazero: the regions fuel draws around
// try, catch, catch_all and delegate hold.
func TestExceptionHandlingLegacy(t *testing.T) {
	const (
		opTry      = 0x06
		opCatch    = 0x07
		opCatchAll = 0x19
		opDelegate = 0x18
	)
	legacy := module(
		section(wasmbin.SectionType, vec(
			functype([]byte{i32}, []byte{i32}),
			functype([]byte{i32}, nil),
		)),
		section(wasmbin.SectionFunction, vec(u32(1), u32(0))),
		section(wasmbin.SectionTag, vec(cat([]byte{0}, u32(1)))),
		section(wasmbin.SectionExport, vec(exportFunc("sum", 1))),
		section(wasmbin.SectionCode, vec(
			fn(nil, localGet(0), throw(0)),
			fn(vec(cat(u32(1), []byte{i32})), ehLoop(
				// try (result i32) try (delegate 0) n; call thrower end
				// catch 0 end: the value, then br 0 out of the block.
				[]byte{opTry, i32},
				[]byte{opTry, empty}, localGet(0), call(0), op(opDelegate, 0),
				i32Const(0),
				op(opCatch, 0),
				[]byte{opCatchAll}, i32Const(-1),
				[]byte{end}, br(0),
			)),
		)),
	)
	metered, err := exnref.Translate(mustInstrument(t, legacy))
	require.NoError(t, err)
	translated, err := exnref.Translate(legacy)
	require.NoError(t, err)
	var fuel []int64
	for _, n := range []uint64{0, 10, 20} {
		want, _ := ehRun(t, translated, "sum", n)
		got, used := ehRun(t, metered, "sum", n)
		require.Equal(t, int32(n*(n+1)/2), want)
		require.Equal(t, want, got)
		fuel = append(fuel, used)
	}
	assert.Positive(t, fuel[1]-fuel[0])
	assert.Equal(t, fuel[2]-fuel[1], fuel[1]-fuel[0], "each iteration costs the same")
}
