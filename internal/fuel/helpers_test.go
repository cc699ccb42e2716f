package fuel

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// Helpers that encode hand-built test modules.

func u32(v uint32) []byte { return wasmbin.AppendU32(nil, v) }

func str(s string) []byte { return append(u32(uint32(len(s))), s...) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// vec encodes a vector: its length, then its items.
func vec(items ...[]byte) []byte { return cat(append([][]byte{u32(uint32(len(items)))}, items...)...) }

func section(id byte, payload []byte) []byte {
	return cat([]byte{id}, u32(uint32(len(payload))), payload)
}

func module(sections ...[]byte) []byte {
	return cat(append([][]byte{{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}}, sections...)...)
}

func customSection(name string, payload []byte) []byte { return section(0, cat(str(name), payload)) }

// functype encodes a function type from its parameter and result types.
func functype(params, results []byte) []byte {
	return cat([]byte{0x60}, u32(uint32(len(params))), params, u32(uint32(len(results))), results)
}

// fn encodes a function body: local declarations (already a vector) and code,
// to which it adds the final end.
func fn(locals []byte, code ...[]byte) []byte {
	if locals == nil {
		locals = []byte{0}
	}
	b := cat(locals, cat(code...), []byte{end})
	return append(u32(uint32(len(b))), b...)
}

// exportFunc encodes an export entry of a function.
func exportFunc(name string, idx uint32) []byte { return cat(str(name), []byte{0x00}, u32(idx)) }

// Instructions.
const (
	i32       = 0x7F
	i64       = 0x7E
	funcref   = 0x70
	empty     = 0x40 // block type []
	end       = 0x0B
	i32Eqz    = 0x45
	i32Add    = 0x6A
	i32Sub    = 0x6B
	i32Mul    = 0x6C
	opDrop    = 0x1A
	opNop     = 0x01
	opElse    = 0x05
	opReturn  = 0x0F
	i64Sub    = 0x7D
	i64LtS    = 0x53
	opBlock   = 0x02
	opLoop    = 0x03
	opIf      = 0x04
	opTableSt = 0x26
)

func op(code byte, imm ...uint32) []byte {
	b := []byte{code}
	for _, v := range imm {
		b = append(b, u32(v)...)
	}
	return b
}

func i32Const(v int32) []byte         { return append([]byte{0x41}, wasmbin.AppendS32(nil, v)...) }
func localGet(i uint32) []byte        { return op(0x20, i) }
func localSet(i uint32) []byte        { return op(0x21, i) }
func globalGet(i uint32) []byte       { return op(0x23, i) }
func globalSet(i uint32) []byte       { return op(0x24, i) }
func call(f uint32) []byte            { return op(0x10, f) }
func callIndirect(typ uint32) []byte  { return op(0x11, typ, 0) }
func br(l uint32) []byte              { return op(0x0C, l) }
func brIf(l uint32) []byte            { return op(0x0D, l) }
func refFunc(f uint32) []byte         { return op(0xD2, f) }
func block(code ...[]byte) []byte     { return cat([]byte{opBlock, empty}, cat(code...), []byte{end}) }
func loop(code ...[]byte) []byte      { return cat([]byte{opLoop, empty}, cat(code...), []byte{end}) }
func constExpr(code ...[]byte) []byte { return cat(cat(code...), []byte{end}) }
func globalEntry(typ byte, mut bool, init []byte) []byte {
	m := byte(0)
	if mut {
		m = 1
	}
	return cat([]byte{typ, m}, init)
}

// sumModule exports "sum", which adds n, n-1, ..., 1 in a loop:
//
//	(func (export "sum") (param $n i32) (result i32) (local $acc i32)
//	  block
//	    loop
//	      local.get $n  i32.eqz  br_if 1
//	      local.get $acc  local.get $n  i32.add  local.set $acc
//	      local.get $n  i32.const 1  i32.sub  local.set $n
//	      br 0
//	    end
//	  end
//	  local.get $acc)
//
// Instrumented, each iteration of the loop costs 12, and the exit costs 1:
// sum(n) uses 12*(n+1) + 1.
func sumModule() []byte {
	return module(
		section(wasmbin.SectionType, vec(functype([]byte{i32}, []byte{i32}))),
		section(wasmbin.SectionFunction, vec(u32(0))),
		section(wasmbin.SectionExport, vec(exportFunc("sum", 0))),
		section(wasmbin.SectionCode, vec(fn(vec(cat(u32(1), []byte{i32})),
			block(loop(
				localGet(0), []byte{i32Eqz}, brIf(1),
				localGet(1), localGet(0), []byte{i32Add}, localSet(1),
				localGet(0), i32Const(1), []byte{i32Sub}, localSet(0),
				br(0),
			)),
			localGet(1),
		))),
	)
}

func sumFuel(n int64) int64 { return 12*(n+1) + 1 }

// meter is the host side of out_of_fuel: it refills the fuel global by
// refill each call, or panics with stop once it was called limit times.
type meter struct {
	refill int64
	limit  int   // 0: no limit
	stop   error // what to panic with at the limit
	calls  int
	given  int64
}

// used returns the fuel that mod has consumed so far.
func (m *meter) used(t testing.TB, mod api.Module) int64 {
	t.Helper()
	g := mod.ExportedGlobal(GlobalName)
	require.NotNil(t, g, "the instrumented module exports %s", GlobalName)
	return m.given - int64(g.Get())
}

func (m *meter) outOfFuel(_ context.Context, mod api.Module) {
	m.calls++
	g := mod.ExportedGlobal(GlobalName).(api.MutableGlobal)
	if m.limit > 0 && m.calls >= m.limit {
		panic(m.stop)
	}
	g.Set(uint64(int64(g.Get()) + m.refill))
	m.given += m.refill
}

// instantiateMeter adds the fumehood module with out_of_fuel to r.
func instantiateMeter(t testing.TB, ctx context.Context, r wazero.Runtime, m *meter) {
	t.Helper()
	_, err := r.NewHostModuleBuilder(ImportModule).
		NewFunctionBuilder().WithFunc(m.outOfFuel).Export(ImportName).
		Instantiate(ctx)
	require.NoError(t, err)
}

var errStop = errors.New("test: out of fuel")

func mustInstrument(t testing.TB, wasm []byte) []byte {
	t.Helper()
	out, err := Instrument(wasm)
	require.NoError(t, err)
	return out
}
