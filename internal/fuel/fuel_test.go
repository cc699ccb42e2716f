package fuel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

func i64Const(v int64) []byte { return append([]byte{0x42}, wasmbin.AppendS64(nil, v)...) }

// charge and check are what Instrument inserts in a module whose fuel global
// and out_of_fuel function both have index 0.
func charge(cost int64) []byte {
	return cat(globalGet(0), i64Const(cost), []byte{i64Sub}, globalSet(0))
}

var check = cat(globalGet(0), i64Const(0), []byte{i64LtS, opIf, empty}, call(0), []byte{end})

func TestInstrumentWholeModule(t *testing.T) {
	// (module (func (export "f") (result i32) i32.const 1 i32.const 2 i32.add))
	in := module(
		section(wasmbin.SectionType, vec(functype(nil, []byte{i32}))),
		section(wasmbin.SectionFunction, vec(u32(0))),
		section(wasmbin.SectionExport, vec(exportFunc("f", 0))),
		section(wasmbin.SectionCode, vec(fn(nil, i32Const(1), i32Const(2), []byte{i32Add}))),
	)
	want := module(
		section(wasmbin.SectionType, vec(functype(nil, []byte{i32}), functype(nil, nil))),
		section(wasmbin.SectionImport, vec(cat(str("fumehood"), str("out_of_fuel"), []byte{0x00}, u32(1)))),
		section(wasmbin.SectionFunction, vec(u32(0))),
		section(wasmbin.SectionGlobal, vec(globalEntry(i64, true, constExpr(i64Const(0))))),
		section(wasmbin.SectionExport, vec(exportFunc("f", 1), cat(str("fumehood_fuel"), []byte{0x03}, u32(0)))),
		section(wasmbin.SectionCode, vec(fn(nil, charge(3), i32Const(1), i32Const(2), []byte{i32Add}))),
	)
	got, err := Instrument(in)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestCallerPaysForCalleeEntry(t *testing.T) {
	// Function 0, exported, calls 1 and 2; 1 is also in a table, 2 only
	// called. All three have type [] -> [].
	callee := [][]byte{i32Const(1), {opDrop}, i32Const(2), {opDrop}}
	in := module(
		section(wasmbin.SectionType, vec(functype(nil, nil))),
		section(wasmbin.SectionFunction, vec(u32(0), u32(0), u32(0))),
		section(wasmbin.SectionTable, vec(cat([]byte{funcref, 0}, u32(1)))),
		section(wasmbin.SectionExport, vec(exportFunc("f", 0))),
		section(wasmbin.SectionElement, vec(cat(u32(0), constExpr(i32Const(0)), vec(u32(1))))),
		section(wasmbin.SectionCode, vec(fn(nil, call(1), call(2)), fn(nil, callee...), fn(nil, callee...))),
	)
	m, err := wasmbin.Parse(mustInstrument(t, in))
	require.NoError(t, err)
	// The caller pays 2 for the entry of function 2 (now 3), and checks,
	// as the host may call it and it calls functions; the callees do not.
	assert.Equal(t, vec(
		fn(nil, charge(4), check, call(2), call(3)),
		fn(nil, charge(2), cat(callee...)),
		fn(nil, callee...),
	), m.Section(wasmbin.SectionCode).Payload)
}

// instrumentBody instruments a module holding one [] -> [] function with the
// given locals and code, exported so that it pays for its own entry, and
// returns the function's instrumented body. The fuel global and out_of_fuel
// both get index 0; the function gets index 1.
func instrumentBody(t *testing.T, locals []byte, code ...[]byte) []byte {
	t.Helper()
	out := mustInstrument(t, module(
		section(wasmbin.SectionType, vec(functype(nil, nil))),
		section(wasmbin.SectionFunction, vec(u32(0))),
		section(wasmbin.SectionExport, vec(exportFunc("f", 0))),
		section(wasmbin.SectionCode, vec(fn(locals, code...))),
	))
	m, err := wasmbin.Parse(out)
	require.NoError(t, err)
	// The [] -> [] type is reused for out_of_fuel.
	assert.Equal(t, vec(functype(nil, nil)), m.Section(wasmbin.SectionType).Payload)
	r := reader{B: m.Section(wasmbin.SectionCode).Payload}
	require.Equal(t, uint32(1), r.U32())
	body := r.Bytes(r.U32())
	require.NoError(t, r.Err)
	assert.Empty(t, r.Rest(), "bytes after the body")
	return body
}

func TestRegions(t *testing.T) {
	noLocals := []byte{0}
	cases := []struct {
		name string
		code [][]byte
		want []byte // the instrumented body, locals included
	}{{
		name: "a function that calls no function is not checked on entry",
		want: cat(noLocals, []byte{end}),
	}, {
		name: "straight line, nop and drop are free",
		code: [][]byte{i32Const(1), {opDrop, opNop}, i32Const(2), {opDrop}},
		want: cat(noLocals, charge(2), i32Const(1), []byte{opDrop, opNop}, i32Const(2), []byte{opDrop, end}),
	}, {
		name: "if and else arms",
		code: [][]byte{i32Const(1), {opIf, empty, opNop, opElse}, i32Const(2), {opDrop, end}},
		want: cat(noLocals, charge(2), i32Const(1), []byte{opIf, empty},
			[]byte{opNop, opElse}, charge(1), i32Const(2), []byte{opDrop, end, end}),
	}, {
		name: "the cheaper arm's cost is charged before the if",
		code: [][]byte{i32Const(1), {opIf, empty}, i32Const(2), {opDrop, opElse}, i32Const(3), {opDrop}, i32Const(4), {opDrop, end}},
		want: cat(noLocals, charge(3), i32Const(1), []byte{opIf, empty}, i32Const(2), []byte{opDrop, opElse},
			charge(1), i32Const(3), []byte{opDrop}, i32Const(4), []byte{opDrop, end, end}),
	}, {
		name: "loop of free instructions costs 1",
		code: [][]byte{loop()},
		want: cat(noLocals, []byte{opLoop, empty}, charge(1), check, []byte{end, end}),
	}, {
		name: "the code after a loop left only at its end is charged before the loop",
		code: [][]byte{loop(i32Const(1), brIf(0)), {opNop}, i32Const(3), {opDrop}},
		want: cat(noLocals, charge(1), []byte{opLoop, empty}, charge(2), check, i32Const(1), brIf(0), []byte{end},
			[]byte{opNop}, i32Const(3), []byte{opDrop, end}),
	}, {
		name: "the code after a block left only at its end continues the region before it",
		code: [][]byte{block(br(0), i32Const(1), []byte{opDrop}), i32Const(2), {opDrop}},
		want: cat(noLocals, charge(3), []byte{opBlock, empty}, br(0), i32Const(1), []byte{opDrop, end},
			i32Const(2), []byte{opDrop, end}),
	}, {
		name: "after a block no branch targets, the region runs on",
		code: [][]byte{block(i32Const(1), []byte{opDrop}), i32Const(2), {opDrop}},
		want: cat(noLocals, charge(2), []byte{opBlock, empty}, i32Const(1), []byte{opDrop, end},
			i32Const(2), []byte{opDrop, end}),
	}, {
		name: "a branch from a nested block targets the outer one",
		code: [][]byte{block(block(br(1)), i32Const(1), []byte{opDrop}), i32Const(2), {opDrop}},
		want: cat(noLocals, charge(3), []byte{opBlock, empty, opBlock, empty}, br(1), []byte{end},
			i32Const(1), []byte{opDrop, end}, i32Const(2), []byte{opDrop, end}),
	}, {
		name: "br_table targets every label it names",
		code: [][]byte{block(block(i32Const(0), []byte{0x0E, 1, 0, 1})), i32Const(2), {opDrop}},
		want: cat(noLocals, charge(3), []byte{opBlock, empty, opBlock, empty}, i32Const(0), []byte{0x0E, 1, 0, 1, end},
			[]byte{end}, i32Const(2), []byte{opDrop, end}),
	}, {
		name: "a join entered only by br is charged in the regions that branch",
		code: [][]byte{block(i32Const(0), brIf(0), block(i32Const(1), []byte{opIf, empty}, br(1), []byte{opElse}, br(1), []byte{end}),
			i32Const(7), []byte{opDrop})},
		want: cat(noLocals, charge(4), []byte{opBlock, empty}, i32Const(0), brIf(0), []byte{opBlock, empty}, i32Const(1), []byte{opIf, empty},
			charge(2), br(1), []byte{opElse}, charge(2), br(1), []byte{end, end}, i32Const(7), []byte{opDrop, end, end}),
	}, {
		name: "if without else inside a loop",
		code: [][]byte{loop(i32Const(0), []byte{opIf, empty}, br(1), []byte{end})},
		want: cat(noLocals, []byte{opLoop, empty}, charge(2), check, i32Const(0), []byte{opIf, empty},
			charge(1), br(1), []byte{end, end, end}),
	}, {
		name: "unreachable code after return is charged with its region",
		code: [][]byte{{opReturn}, i32Const(1), {opDrop}},
		want: cat(noLocals, charge(2), []byte{opReturn}, i32Const(1), []byte{opDrop, end}),
	}, {
		name: "calls and ref.func get shifted indices",
		code: [][]byte{call(0), refFunc(0), {opDrop}},
		want: cat(noLocals, charge(2), check, call(1), refFunc(1), []byte{opDrop, end}),
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, instrumentBody(t, nil, c.code...))
		})
	}

	t.Run("locals are kept", func(t *testing.T) {
		locals := vec(cat(u32(2), []byte{i32}), cat(u32(300), []byte{i64}))
		got := instrumentBody(t, locals, i32Const(7), localSet(1))
		assert.Equal(t, cat(locals, charge(2), i32Const(7), localSet(1), []byte{end}), got)
	})
}

// newRuntime returns a runtime closed at the end of the test.
func newRuntime(t testing.TB, ctx context.Context) wazero.Runtime {
	r := wazero.NewRuntime(ctx)
	t.Cleanup(func() { _ = r.Close(ctx) })
	return r
}

// instantiate instruments wasm and instantiates it with m serving out_of_fuel.
func instantiate(t *testing.T, ctx context.Context, wasm []byte, m *meter) api.Module {
	t.Helper()
	r := newRuntime(t, ctx)
	instantiateMeter(t, ctx, r, m)
	mod, err := r.Instantiate(ctx, mustInstrument(t, wasm))
	require.NoError(t, err)
	return mod
}

func TestFuelIsLinearInLoopIterations(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int64{0, 1, 10, 1000} {
		m := &meter{refill: 1 << 40}
		mod := instantiate(t, ctx, sumModule(), m)
		res, err := mod.ExportedFunction("sum").Call(ctx, uint64(n))
		require.NoError(t, err)
		assert.Equal(t, uint64(n*(n+1)/2), res[0], "sum(%d)", n)
		assert.Equal(t, sumFuel(n), m.used(t, mod), "fuel for sum(%d)", n)
	}
}

func TestRefillLetsExecutionContinue(t *testing.T) {
	ctx := context.Background()
	m := &meter{refill: 50}
	mod := instantiate(t, ctx, sumModule(), m)
	res, err := mod.ExportedFunction("sum").Call(ctx, 1000)
	require.NoError(t, err)
	assert.Equal(t, uint64(500500), res[0])
	assert.Equal(t, sumFuel(1000), m.used(t, mod))
	// Fuel is checked at each iteration, so the guest never runs more than
	// one iteration into debt before asking.
	assert.GreaterOrEqual(t, m.calls, int(sumFuel(1000)/50))
	assert.GreaterOrEqual(t, int64(mod.ExportedGlobal(GlobalName).Get()), int64(-12))
}

// spinModule exports "spin", an infinite loop: (loop br 0).
func spinModule() []byte {
	return module(
		section(wasmbin.SectionType, vec(functype(nil, nil))),
		section(wasmbin.SectionFunction, vec(u32(0))),
		section(wasmbin.SectionExport, vec(exportFunc("spin", 0))),
		section(wasmbin.SectionCode, vec(fn(nil, loop(br(0))))),
	)
}

func TestInfiniteLoopRunsOutOfFuel(t *testing.T) {
	ctx := context.Background()
	m := &meter{refill: 100, limit: 5, stop: errStop}
	mod := instantiate(t, ctx, spinModule(), m)
	_, err := mod.ExportedFunction("spin").Call(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, errStop, "the host's panic ends the call with its error")
	assert.Equal(t, 5, m.calls, "out_of_fuel is called again after each refill is spent")
	// Each iteration costs 1: the guest asked at -1, then after every 100.
	assert.Equal(t, int64(4*100+1), m.used(t, mod))
}

func TestFuelIsDeterministic(t *testing.T) {
	ctx := context.Background()
	var used []int64
	for range 3 {
		m := &meter{refill: 37}
		mod := instantiate(t, ctx, sumModule(), m)
		_, err := mod.ExportedFunction("sum").Call(ctx, 777)
		require.NoError(t, err)
		used = append(used, m.used(t, mod))
	}
	assert.Equal(t, []int64{sumFuel(777), sumFuel(777), sumFuel(777)}, used)
}

// indexModule uses function indices in every place they can appear. It
// imports env.log, so its defined functions start at index 1:
//
//	1 init        start function: global 0 = 42
//	2 double      (i32) -> i32
//	3 triple      (i32) -> i32
//	4 dispatch    (i, x) -> table[i](x), through call_indirect
//	5 get_g       -> global 0
//	6 via_ref     table[2] = ref.func triple; table[2](7)
//	7 via_global  table[2] = global 1 (ref.func double); table[2](8)
//	8 call_log    (x) -> log(x); double(x)
//	9 elem_expr   table[3](9), table[3] set by an expression segment
//
// Table: [double, triple, -, triple, call_log] from segments of flags 0, 4
// and 2; a declarative segment (flags 3) declares triple. The name section
// names the functions and dispatch's parameters.
func indexModule() []byte {
	const (
		tLog = iota
		tVoid
		tUnary
		tBinary
		tConst
	)
	names := cat(
		[]byte{1}, // function names
		func() []byte {
			m := vec(
				cat(u32(0), str("log")), cat(u32(1), str("init")), cat(u32(2), str("double")),
				cat(u32(3), str("triple")), cat(u32(4), str("dispatch_impl")), cat(u32(8), str("call_log_impl")),
			)
			return append(u32(uint32(len(m))), m...)
		}(),
		[]byte{2}, // local names
		func() []byte {
			m := vec(cat(u32(4), vec(cat(u32(0), str("idx")), cat(u32(1), str("arg")))))
			return append(u32(uint32(len(m))), m...)
		}(),
	)
	return module(
		section(wasmbin.SectionType, vec(
			functype([]byte{i32}, nil),
			functype(nil, nil),
			functype([]byte{i32}, []byte{i32}),
			functype([]byte{i32, i32}, []byte{i32}),
			functype(nil, []byte{i32}),
		)),
		section(wasmbin.SectionImport, vec(cat(str("env"), str("log"), []byte{0x00}, u32(tLog)))),
		section(wasmbin.SectionFunction, vec(
			u32(tVoid), u32(tUnary), u32(tUnary), u32(tBinary), u32(tConst),
			u32(tConst), u32(tConst), u32(tUnary), u32(tConst),
		)),
		section(wasmbin.SectionTable, vec([]byte{funcref, 0x00, 5})),
		section(wasmbin.SectionGlobal, vec(
			globalEntry(i32, true, constExpr(i32Const(0))),
			globalEntry(funcref, false, constExpr(refFunc(2))),
		)),
		section(wasmbin.SectionExport, vec(
			exportFunc("dispatch", 4), exportFunc("get_g", 5), exportFunc("via_ref", 6),
			exportFunc("via_global", 7), exportFunc("call_log", 8), exportFunc("elem_expr", 9),
		)),
		section(wasmbin.SectionStart, u32(1)),
		section(wasmbin.SectionElement, vec(
			cat(u32(0), constExpr(i32Const(0)), vec(u32(2), u32(3))),
			cat(u32(4), constExpr(i32Const(3)), vec(constExpr(refFunc(3)))),
			cat(u32(2), u32(0), constExpr(i32Const(4)), []byte{0x00}, vec(u32(8))),
			cat(u32(3), []byte{0x00}, vec(u32(3))),
		)),
		section(wasmbin.SectionCode, vec(
			fn(nil, i32Const(42), globalSet(0)),
			fn(nil, localGet(0), i32Const(2), []byte{i32Mul}),
			fn(nil, localGet(0), i32Const(3), []byte{i32Mul}),
			fn(nil, localGet(1), localGet(0), callIndirect(tUnary)),
			fn(nil, globalGet(0)),
			fn(nil, i32Const(2), refFunc(3), op(opTableSt, 0), i32Const(7), i32Const(2), callIndirect(tUnary)),
			fn(nil, i32Const(2), globalGet(1), op(opTableSt, 0), i32Const(8), i32Const(2), callIndirect(tUnary)),
			fn(nil, localGet(0), call(0), localGet(0), call(2)),
			fn(nil, i32Const(9), i32Const(3), callIndirect(tUnary)),
		)),
		customSection("name", names),
	)
}

func TestFunctionIndicesAreFixed(t *testing.T) {
	ctx := context.Background()
	plain := indexModule()
	instrumented := mustInstrument(t, plain)

	calls := []struct {
		fn     string
		params []uint64
		want   uint64
		logged []uint32
	}{
		{"get_g", nil, 42, nil}, // the start function ran
		{"dispatch", []uint64{0, 5}, 10, nil},
		{"dispatch", []uint64{1, 5}, 15, nil},
		{"dispatch", []uint64{3, 5}, 15, nil},
		{"dispatch", []uint64{4, 5}, 10, []uint32{5}},
		{"via_ref", nil, 21, nil},
		{"via_global", nil, 16, nil},
		{"call_log", []uint64{7}, 14, []uint32{7}},
		{"elem_expr", nil, 27, nil},
	}
	for name, wasm := range map[string][]byte{"plain": plain, "instrumented": instrumented} {
		t.Run(name, func(t *testing.T) {
			r := newRuntime(t, ctx)
			var logged []uint32
			_, err := r.NewHostModuleBuilder("env").NewFunctionBuilder().
				WithFunc(func(x uint32) { logged = append(logged, x) }).Export("log").Instantiate(ctx)
			require.NoError(t, err)
			m := &meter{refill: 1000}
			if name == "instrumented" {
				instantiateMeter(t, ctx, r, m)
			}
			mod, err := r.Instantiate(ctx, wasm)
			require.NoError(t, err)
			for _, c := range calls {
				logged = nil
				res, err := mod.ExportedFunction(c.fn).Call(ctx, c.params...)
				require.NoError(t, err, c.fn)
				assert.Equal(t, c.want, res[0], "%s%v", c.fn, c.params)
				assert.Equal(t, c.logged, logged, "%s%v logged", c.fn, c.params)
			}
			if name == "instrumented" {
				assert.Positive(t, m.used(t, mod))
			}

			// The name section still names the right functions.
			cm, err := r.CompileModule(ctx, wasm)
			require.NoError(t, err)
			exported := cm.ExportedFunctions()
			assert.Equal(t, "dispatch_impl", exported["dispatch"].Name())
			assert.Equal(t, []string{"idx", "arg"}, exported["dispatch"].ParamNames())
			assert.Equal(t, "call_log_impl", exported["call_log"].Name())
			assert.Equal(t, "", exported["get_g"].Name())
		})
	}
}

// TestWideIndices checks indices whose encoding grows when shifted: function
// 127 takes one byte in the input and two in the output.
func TestWideIndices(t *testing.T) {
	ctx := context.Background()
	const n = 200
	var types, bodies [][]byte
	for i := range n {
		types = append(types, u32(0))
		bodies = append(bodies, fn(nil, i32Const(int32(i))))
	}
	types = append(types, u32(0))
	bodies = append(bodies, fn(nil, call(126), call(127), []byte{i32Add}, call(128), []byte{i32Add}))
	wasm := module(
		section(wasmbin.SectionType, vec(functype(nil, []byte{i32}))),
		section(wasmbin.SectionFunction, vec(types...)),
		section(wasmbin.SectionExport, vec(exportFunc("f127", 127), exportFunc("f199", 199), exportFunc("sum", n))),
		section(wasmbin.SectionCode, vec(bodies...)),
	)
	mod := instantiate(t, ctx, wasm, &meter{refill: 1000})
	for name, want := range map[string]uint64{"f127": 127, "f199": 199, "sum": 126 + 127 + 128} {
		res, err := mod.ExportedFunction(name).Call(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, res[0], name)
	}
}

func TestModuleWithoutSections(t *testing.T) {
	ctx := context.Background()
	out := mustInstrument(t, module())
	want := module(
		section(wasmbin.SectionType, vec(functype(nil, nil))),
		section(wasmbin.SectionImport, vec(cat(str("fumehood"), str("out_of_fuel"), []byte{0x00}, u32(0)))),
		section(wasmbin.SectionGlobal, vec(globalEntry(i64, true, constExpr(i64Const(0))))),
		section(wasmbin.SectionExport, vec(cat(str("fumehood_fuel"), []byte{0x03}, u32(0)))),
	)
	assert.Equal(t, want, out)
	r := newRuntime(t, ctx)
	_, err := r.CompileModule(ctx, out)
	assert.NoError(t, err)
}

func TestGlobalIndexFollowsImportedAndDefinedGlobals(t *testing.T) {
	ctx := context.Background()
	// Imports one global and defines two: the fuel global is index 3.
	wasm := module(
		section(wasmbin.SectionType, vec(functype(nil, []byte{i32}))),
		section(wasmbin.SectionImport, vec(cat(str("env"), str("g"), []byte{0x03, i32, 0}))),
		section(wasmbin.SectionFunction, vec(u32(0))),
		section(wasmbin.SectionGlobal, vec(
			globalEntry(i32, false, constExpr(i32Const(5))),
			globalEntry(i32, true, constExpr(i32Const(6))),
		)),
		section(wasmbin.SectionExport, vec(exportFunc("f", 0))),
		section(wasmbin.SectionCode, vec(fn(nil, globalGet(0), globalGet(1), []byte{i32Add}, globalGet(2), []byte{i32Add}))),
	)
	out := mustInstrument(t, wasm)
	m, err := wasmbin.Parse(out)
	require.NoError(t, err)
	assert.Contains(t, string(m.Section(wasmbin.SectionExport).Payload), string(cat(str(GlobalName), []byte{0x03}, u32(3))))

	r := newRuntime(t, ctx)
	env := module(
		section(wasmbin.SectionGlobal, vec(globalEntry(i32, false, constExpr(i32Const(4))))),
		section(wasmbin.SectionExport, vec(cat(str("g"), []byte{0x03}, u32(0)))),
	)
	_, err = r.InstantiateWithConfig(ctx, env, wazero.NewModuleConfig().WithName("env"))
	require.NoError(t, err)
	mt := &meter{refill: 100}
	instantiateMeter(t, ctx, r, mt)
	mod, err := r.Instantiate(ctx, out)
	require.NoError(t, err)
	res, err := mod.ExportedFunction("f").Call(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(4+5+6), res[0])
	assert.Equal(t, api.ValueTypeI64, mod.ExportedGlobal(GlobalName).Type())
	assert.Equal(t, int64(5), mt.used(t, mod))
}

func TestAlreadyInstrumented(t *testing.T) {
	once := mustInstrument(t, sumModule())
	_, err := Instrument(once)
	assert.ErrorIs(t, err, ErrInstrumented)

	exportsFuel := module(section(wasmbin.SectionExport, vec(cat(str(GlobalName), []byte{0x03}, u32(0)))))
	_, err = Instrument(exportsFuel)
	assert.ErrorIs(t, err, ErrInstrumented)

	importsOutOfFuel := module(
		section(wasmbin.SectionType, vec(functype(nil, nil))),
		section(wasmbin.SectionImport, vec(cat(str(ImportModule), str(ImportName), []byte{0x00}, u32(0)))),
	)
	_, err = Instrument(importsOutOfFuel)
	assert.ErrorIs(t, err, ErrInstrumented)
}

func TestDropsDebugSections(t *testing.T) {
	wasm := append(sumModule(), customSection(".debug_info", []byte{1, 2, 3})...)
	wasm = append(wasm, customSection("producers", []byte{0})...)
	m, err := wasmbin.Parse(mustInstrument(t, wasm))
	require.NoError(t, err)
	var customs []string
	for _, s := range m.Sections {
		if s.ID == wasmbin.SectionCustom {
			customs = append(customs, s.Name)
		}
	}
	assert.Equal(t, []string{"producers"}, customs)
}

func TestMalformedNameSectionIsDropped(t *testing.T) {
	wasm := append(sumModule(), customSection("name", []byte{1, 5, 1, 0})...) // subsection runs past the end
	m, err := wasmbin.Parse(mustInstrument(t, wasm))
	require.NoError(t, err)
	for _, s := range m.Sections {
		assert.NotEqual(t, "name", s.Name)
	}
}

func TestMalformed(t *testing.T) {
	typ := section(wasmbin.SectionType, vec(functype(nil, nil)))
	fns := section(wasmbin.SectionFunction, vec(u32(0)))
	codeOf := func(body []byte) []byte {
		return section(wasmbin.SectionCode, vec(append(u32(uint32(len(body))), body...)))
	}
	cases := map[string][]byte{
		"truncated type section":   module(section(wasmbin.SectionType, []byte{2, 0x60, 0, 0})),
		"unknown import kind":      module(section(wasmbin.SectionImport, vec(cat(str("a"), str("b"), []byte{0x09, 0})))),
		"import section trailing":  module(section(wasmbin.SectionImport, append(vec(), 0))),
		"bad limits":               module(section(wasmbin.SectionImport, vec(cat(str("a"), str("b"), []byte{0x02, 0x80, 0})))),
		"global without end":       module(section(wasmbin.SectionGlobal, vec(cat([]byte{i32, 0}, i32Const(1))))),
		"export past the end":      module(section(wasmbin.SectionExport, []byte{1, 9, 'a'})),
		"start with trailing byte": module(section(wasmbin.SectionStart, []byte{0, 0})),
		"element flags":            module(section(wasmbin.SectionElement, vec(u32(8)))),
		"unknown opcode":           module(typ, fns, codeOf([]byte{0, 0xFF, end})),
		"unknown SIMD opcode":      module(typ, fns, codeOf([]byte{0, 0xFD, 0x9A, 0x01, end})),
		"body without end":         module(typ, fns, codeOf([]byte{0, opNop})),
		"code after the end":       module(typ, fns, codeOf([]byte{0, end, opNop})),
		"unbalanced end":           module(typ, fns, codeOf([]byte{0, opBlock, empty, end})),
		"truncated immediate":      module(typ, fns, codeOf([]byte{0, 0x41, 0x80})),
		"locals past the end":      module(typ, fns, codeOf([]byte{5, 1, i32})),
		"body past the end":        module(typ, fns, section(wasmbin.SectionCode, []byte{1, 9, 0, end})),
		"code section trailing":    module(typ, fns, section(wasmbin.SectionCode, append(vec(fn(nil)), 0))),
		"function index overflow":  module(typ, fns, codeOf(cat([]byte{0}, call(0xFFFFFFFF), []byte{end}))),
		"bad section structure":    append(module(), 1, 5, 0),
		// Invalid as written, valid once the fuel global is added: code
		// that could refill its own fuel.
		"code names the fuel global": module(typ, fns, codeOf([]byte{0, 0x42, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 0x24, 0, end})),
		"code reads the fuel global": module(typ, fns, codeOf([]byte{0, 0x23, 3, 0x1A, end})),
	}
	for name, wasm := range cases {
		t.Run(name, func(t *testing.T) {
			out, err := Instrument(wasm)
			assert.ErrorIs(t, err, wasmbin.ErrMalformed)
			assert.Nil(t, out)
		})
	}
	_, err := Instrument([]byte("not wasm"))
	assert.ErrorIs(t, err, wasmbin.ErrNotWasm)

	_, err = Instrument(module(section(wasmbin.SectionType, vec([]byte{0x4E, 0x01, 0x60, 0, 0}))))
	assert.ErrorIs(t, err, ErrUnsupported, "GC type forms are not supported")
}

func ExampleInstrument() {
	// (module (func (export "spin") (loop br 0)))
	wasm := spinModule()
	instrumented, err := Instrument(wasm)
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)

	budget := int64(1000) // refills the host may grant, in total
	errOutOfFuel := errors.New("out of fuel")
	_, err = r.NewHostModuleBuilder(ImportModule).NewFunctionBuilder().
		WithFunc(func(ctx context.Context, m api.Module) {
			if budget == 0 {
				panic(errOutOfFuel)
			}
			g := m.ExportedGlobal(GlobalName).(api.MutableGlobal)
			g.Set(uint64(int64(g.Get()) + 500))
			budget -= 500
		}).Export(ImportName).Instantiate(ctx)
	if err != nil {
		panic(err)
	}
	mod, err := r.Instantiate(ctx, instrumented)
	if err != nil {
		panic(err)
	}
	_, err = mod.ExportedFunction("spin").Call(ctx)
	fmt.Println(errors.Is(err, errOutOfFuel))
	// Output: true
}

func TestElementSegmentsOfEveryKind(t *testing.T) {
	ctx := context.Background()
	// Functions 0 and 1 become 1 and 2; segments of flags 0 to 7 refer to them.
	segments := func(f0, f1 uint32) []byte {
		nullFunc := []byte{0xD0, funcref}
		return vec(
			cat(u32(0), constExpr(i32Const(0)), vec(u32(f0), u32(f1))),
			cat(u32(1), []byte{0x00}, vec(u32(f1))),
			cat(u32(2), u32(0), constExpr(i32Const(2)), []byte{0x00}, vec(u32(f0))),
			cat(u32(3), []byte{0x00}, vec(u32(f1))),
			cat(u32(4), constExpr(i32Const(4)), vec(constExpr(refFunc(f1)), constExpr(nullFunc))),
			cat(u32(5), []byte{funcref}, vec(constExpr(refFunc(f0)))),
			cat(u32(6), u32(0), constExpr(i32Const(6)), []byte{funcref}, vec(constExpr(refFunc(f1)))),
			cat(u32(7), []byte{funcref}, vec(constExpr(refFunc(f0)))),
		)
	}
	wasm := module(
		section(wasmbin.SectionType, vec(functype(nil, nil))),
		section(wasmbin.SectionFunction, vec(u32(0), u32(0))),
		section(wasmbin.SectionTable, vec([]byte{funcref, 0x00, 10})),
		section(wasmbin.SectionElement, segments(0, 1)),
		section(wasmbin.SectionCode, vec(fn(nil), fn(nil))),
	)
	out := mustInstrument(t, wasm)
	m, err := wasmbin.Parse(out)
	require.NoError(t, err)
	assert.Equal(t, segments(1, 2), m.Section(wasmbin.SectionElement).Payload)

	r := newRuntime(t, ctx)
	for _, b := range [][]byte{wasm, out} {
		_, err := r.CompileModule(ctx, b)
		assert.NoError(t, err)
	}
}

func TestTableInitializerIsFixed(t *testing.T) {
	// A table with an initialiser (typed function references):
	// 0x40 0x00 tabletype expr.
	table := func(f uint32) []byte {
		return vec(cat([]byte{0x40, 0x00, funcref, 0x00, 1}, constExpr(refFunc(f))), []byte{funcref, 0x00, 1})
	}
	wasm := module(
		section(wasmbin.SectionType, vec(functype(nil, nil))),
		section(wasmbin.SectionFunction, vec(u32(0))),
		section(wasmbin.SectionTable, table(0)),
		section(wasmbin.SectionCode, vec(fn(nil))),
	)
	m, err := wasmbin.Parse(mustInstrument(t, wasm))
	require.NoError(t, err)
	assert.Equal(t, table(1), m.Section(wasmbin.SectionTable).Payload)
}

func TestInputIsNotModified(t *testing.T) {
	for _, wasm := range [][]byte{indexModule(), proposalsModule()} {
		orig := bytes.Clone(wasm)
		out := mustInstrument(t, wasm)
		assert.Equal(t, orig, wasm)
		assert.NotEqual(t, orig, out)
	}
}
