package fuel

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/api"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// work returns code that costs n: n times i32.const 0, drop.
func work(n int) []byte {
	return bytes.Repeat(cat(i32Const(0), []byte{opDrop}), n)
}

func returnCall(f uint32) []byte { return op(0x12, f) }

// graphModule builds a module without globals whose functions have the
// given types and bodies: imports, of type 0, come first; exports name
// functions, and table, if not nil, lists the functions of a table.
type graphModule struct {
	types   [][]byte // encoded function types; 0 is [] -> []
	imports int
	funcs   []uint32 // type of each defined function
	bodies  [][]byte // code of each defined function, without the final end
	exports []uint32
	table   []uint32
}

func (g graphModule) encode() []byte {
	types := g.types
	if types == nil {
		types = [][]byte{functype(nil, nil)}
	}
	var imports, funcs, bodies, exports [][]byte
	for i := range g.imports {
		imports = append(imports, cat(str("env"), str(string(rune('a'+i))), []byte{0x00}, u32(0)))
	}
	for i, t := range g.funcs {
		funcs = append(funcs, u32(t))
		bodies = append(bodies, fn(nil, g.bodies[i]))
	}
	for i, f := range g.exports {
		exports = append(exports, exportFunc(string(rune('a'+i)), f))
	}
	sections := [][]byte{section(wasmbin.SectionType, vec(types...))}
	if g.imports > 0 {
		sections = append(sections, section(wasmbin.SectionImport, vec(imports...)))
	}
	sections = append(sections, section(wasmbin.SectionFunction, vec(funcs...)))
	if g.table != nil {
		sections = append(sections, section(wasmbin.SectionTable, vec(cat([]byte{funcref, 0}, u32(uint32(len(g.table)))))))
	}
	sections = append(sections, section(wasmbin.SectionExport, vec(exports...)))
	if g.table != nil {
		var elems [][]byte
		for _, f := range g.table {
			elems = append(elems, u32(f))
		}
		sections = append(sections, section(wasmbin.SectionElement, vec(cat(u32(0), constExpr(i32Const(0)), vec(elems...)))))
	}
	sections = append(sections, section(wasmbin.SectionCode, vec(bodies...)))
	return module(sections...)
}

// entryChecks instruments g, which has no loops, and reports for each of
// its defined functions whether it checks its fuel (on entry, as it has no
// loop).
func entryChecks(t *testing.T, g graphModule) []bool {
	t.Helper()
	m, err := wasmbin.Parse(mustInstrument(t, g.encode()))
	require.NoError(t, err)
	// out_of_fuel comes after the other imports.
	check := cat(globalGet(0), i64Const(0), []byte{i64LtS, opIf, empty}, call(uint32(g.imports)), []byte{end})
	r := reader{B: m.Section(wasmbin.SectionCode).Payload}
	n := r.Count(1)
	var checked []bool
	for i := uint32(0); i < n; i++ {
		checked = append(checked, bytes.Contains(r.Bytes(r.U32()), check))
	}
	require.NoError(t, r.Err)
	return checked
}

func TestEntryChecks(t *testing.T) {
	// Types for the cases with indirect calls.
	t0, t1 := functype(nil, nil), functype([]byte{i32}, nil)
	callT1 := cat(i32Const(0), i32Const(0), callIndirect(1)) // table[0](0)
	cases := []struct {
		name string
		g    graphModule
		want []bool
	}{{
		name: "helpers that cannot recur do not check",
		g: graphModule{
			funcs:   []uint32{0, 0, 0},
			bodies:  [][]byte{call(1), cat(call(2), work(5)), work(3)},
			exports: []uint32{0},
		},
		// The host may call 0, and 0 makes calls.
		want: []bool{true, false, false},
	}, {
		name: "an exported function that makes no calls does not check",
		g: graphModule{
			funcs:   []uint32{0},
			bodies:  [][]byte{work(3)},
			exports: []uint32{0},
		},
		want: []bool{false},
	}, {
		name: "functions that call each other check",
		g: graphModule{
			funcs:   []uint32{0, 0, 0, 0},
			bodies:  [][]byte{call(1), call(2), cat(call(1), call(3)), nil},
			exports: []uint32{0},
		},
		want: []bool{true, true, true, false},
	}, {
		name: "a function that calls itself checks",
		g: graphModule{
			funcs:   []uint32{0, 0, 0},
			bodies:  [][]byte{call(1), cat(call(2), call(1)), nil},
			exports: []uint32{0},
		},
		want: []bool{true, true, false},
	}, {
		name: "a tail call to itself checks",
		g: graphModule{
			funcs:   []uint32{0, 0},
			bodies:  [][]byte{call(1), returnCall(1)},
			exports: []uint32{0},
		},
		want: []bool{true, true},
	}, {
		name: "a function in a table that makes calls checks",
		g: graphModule{
			types:   [][]byte{t0, t1},
			funcs:   []uint32{0, 0, 1, 1},
			bodies:  [][]byte{call(1), callT1, call(1), work(3)},
			exports: []uint32{0},
			table:   []uint32{2, 3},
		},
		// 1 may call 2 through the table, which calls 1: the check in 2
		// is on that cycle.
		want: []bool{true, false, true, false},
	}, {
		name: "a function a reference names that makes calls checks",
		g: graphModule{
			funcs:   []uint32{0, 0, 0},
			bodies:  [][]byte{cat(refFunc(1), []byte{opDrop}, call(2)), call(2), nil},
			exports: []uint32{0},
		},
		want: []bool{true, true, false},
	}, {
		name: "a function the host may call back checks",
		g: graphModule{
			imports: 1,
			funcs:   []uint32{0, 0},
			bodies:  [][]byte{call(2), call(0)},
			exports: []uint32{1},
		},
		// 0 calls 1, which calls the import, which may call 0.
		want: []bool{true, false},
	}, {
		name: "a helper whose callees may run too long checks",
		g: graphModule{
			funcs:   []uint32{0, 0, 0, 0},
			bodies:  [][]byte{call(1), cat(call(2), call(2)), call(3), work(maxUnchecked / 2)},
			exports: []uint32{0},
		},
		// 2 runs 1 + 5,000 + the entry of 3; 1 runs twice that.
		want: []bool{true, true, false, false},
	}, {
		name: "an indirect call counts the costliest leaf of its signature",
		g: graphModule{
			types:   [][]byte{t0, t1},
			funcs:   []uint32{0, 0, 1, 1},
			bodies:  [][]byte{call(1), cat(callT1, callT1), work(5), cat(work(maxUnchecked/2), []byte{opDrop})},
			exports: []uint32{0},
			table:   []uint32{2, 3},
		},
		// 1 may run 3 twice.
		want: []bool{true, true, false, false},
	}, {
		name: "an identical signature under another type index counts",
		g: graphModule{
			types:   [][]byte{t0, t1, t1},
			funcs:   []uint32{0, 0, 2},
			bodies:  [][]byte{call(1), callT1, cat(work(maxUnchecked), []byte{opDrop})},
			exports: []uint32{0},
			table:   []uint32{2},
		},
		want: []bool{true, true, false},
	}, {
		name: "functions of other signatures do not count",
		g: graphModule{
			types:   [][]byte{t0, t1},
			funcs:   []uint32{0, 0, 1, 0},
			bodies:  [][]byte{call(1), callT1, work(5), work(2 * maxUnchecked)},
			exports: []uint32{0},
			table:   []uint32{2, 3},
		},
		want: []bool{true, false, false, false},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, entryChecks(t, c.g))
		})
	}
}

// TestRecursionRunsOutOfFuel runs recursions that pass only through
// functions the instrumentation may leave without an entry check, and
// checks that fuel stops each.
func TestRecursionRunsOutOfFuel(t *testing.T) {
	cases := []struct {
		name string
		g    graphModule
	}{{
		name: "two helpers calling each other",
		g: graphModule{
			funcs:   []uint32{0, 0, 0},
			bodies:  [][]byte{call(1), cat(work(1), call(2)), cat(work(1), call(1))},
			exports: []uint32{0},
		},
	}, {
		name: "a helper called back through a table",
		g: graphModule{
			funcs:   []uint32{0, 0, 0},
			bodies:  [][]byte{call(1), cat(work(1), i32Const(0), callIndirect(0)), cat(work(1), call(1))},
			exports: []uint32{0},
			table:   []uint32{2},
		},
	}, {
		name: "a helper calling itself",
		g: graphModule{
			funcs:   []uint32{0, 0},
			bodies:  [][]byte{call(1), cat(work(1), call(1))},
			exports: []uint32{0},
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			m := &meter{refill: 1000, limit: 3, stop: errStop}
			mod := instantiate(t, ctx, c.g.encode(), m)
			_, err := mod.ExportedFunction("a").Call(ctx)
			require.ErrorIs(t, err, errStop)
			assert.Equal(t, 3, m.calls)
		})
	}
}

// TestCallTreeRunsOutOfFuel runs a tree of calls without recursion that
// would take 2^40 calls: each of 40 helpers calls the next twice. Checks on
// entry in some of the helpers stop it, not long after the fuel ran out.
func TestCallTreeRunsOutOfFuel(t *testing.T) {
	const depth = 40
	g := graphModule{exports: []uint32{0}}
	for i := uint32(0); i < depth; i++ {
		g.funcs = append(g.funcs, 0)
		g.bodies = append(g.bodies, cat(work(3), call(i+1), call(i+1)))
	}
	g.funcs = append(g.funcs, 0)
	g.bodies = append(g.bodies, work(3))

	ctx := context.Background()
	m := &meter{refill: 1000, limit: 5, stop: errStop}
	// The most fuel spent between two checks: from the value the host
	// left in the global to the value at the next call.
	var last, most int64
	r := newRuntime(t, ctx)
	_, err := r.NewHostModuleBuilder(ImportModule).
		NewFunctionBuilder().WithFunc(func(ctx context.Context, mod api.Module) {
		g := mod.ExportedGlobal(GlobalName)
		most = max(most, last-int64(g.Get()))
		m.outOfFuel(ctx, mod)
		last = int64(g.Get())
	}).Export(ImportName).Instantiate(ctx)
	require.NoError(t, err)
	mod, err := r.Instantiate(ctx, mustInstrument(t, g.encode()))
	require.NoError(t, err)
	_, err = mod.ExportedFunction("a").Call(ctx)
	require.ErrorIs(t, err, errStop)
	assert.Equal(t, 5, m.calls)
	assert.Greater(t, most, int64(1000), "the tree runs unchecked for a while")
	assert.LessOrEqual(t, most, int64(2*maxUnchecked), "but not for long")
	checks := entryChecks(t, g)
	assert.Contains(t, checks[1:], true, "some helper checks")
	assert.Contains(t, checks[1:], false, "some helper does not")
}
