package exnref

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

// Helpers that encode hand-built test modules.

func u32(v uint32) []byte { return wasmbin.AppendU32(nil, v) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func vec(items ...[]byte) []byte { return cat(append([][]byte{u32(uint32(len(items)))}, items...)...) }

func section(id byte, payload []byte) []byte {
	return cat([]byte{id}, u32(uint32(len(payload))), payload)
}

func str(s string) []byte { return append(u32(uint32(len(s))), s...) }

func i32Const(v int32) []byte { return append([]byte{0x41}, wasmbin.AppendS32(nil, v)...) }

func op(code byte, imm ...uint32) []byte {
	b := []byte{code}
	for _, v := range imm {
		b = append(b, u32(v)...)
	}
	return b
}

const (
	i32      = 0x7F
	end      = 0x0B
	add      = 0x6A
	drop     = 0x1A
	ret      = 0x0F
	catchAll = 0x19
	i32LtS   = 0x48
	i32Eq    = 0x46
)

func try(bt byte) []byte         { return []byte{opTry, bt} }
func catchTag(tag uint32) []byte { return op(opCatch, tag) }
func delegate(l uint32) []byte   { return op(opDelegate, l) }
func rethrow(l uint32) []byte    { return op(opRethrow, l) }
func call(f uint32) []byte       { return op(0x10, f) }
func localGet(i uint32) []byte   { return op(opLocalGet, i) }
func localSet(i uint32) []byte   { return op(opLocalSet, i) }
func br(l uint32) []byte         { return op(opBr, l) }
func block(bt byte, code ...[]byte) []byte {
	return cat([]byte{opBlock, bt}, cat(code...), []byte{end})
}

// Function indices and types of the test module.
const (
	fThrow0 = 0 // (param i32): throw tag 0 with it
	fThrow1 = 1 // (param i32): throw tag 1 with it
	fFirst  = 2 // the test functions follow

	tVoid   = 0 // [] -> []
	tResult = 1 // [] -> [i32]
	tParam  = 2 // [i32] -> []
	tUnary  = 3 // [i32] -> [i32]

	stackTop = 65536
)

// testFunc is a function of the test module, exported under its name.
type testFunc struct {
	name   string
	typ    uint32
	locals []byte // local declarations, a vector; nil for none
	code   []byte // without the final end
}

// ehModule builds a module with two tags of type [i32], a memory, a C
// stack pointer (exported as "sp"), the two throwing functions and funcs.
func ehModule(funcs ...testFunc) []byte {
	all := append([]testFunc{
		{"throw0", tParam, nil, cat(localGet(0), op(0x08, 0))},
		{"throw1", tParam, nil, cat(localGet(0), op(0x08, 1))},
	}, funcs...)
	var types, exports, code [][]byte
	for i, f := range all {
		types = append(types, u32(f.typ))
		exports = append(exports, cat(str(f.name), []byte{0x00}, u32(uint32(i))))
		locals := f.locals
		if locals == nil {
			locals = []byte{0}
		}
		body := cat(locals, f.code, []byte{end})
		code = append(code, cat(u32(uint32(len(body))), body))
	}
	exports = append(exports, cat(str("sp"), []byte{0x03, 0}))
	return cat([]byte{0, 'a', 's', 'm', 1, 0, 0, 0},
		section(wasmbin.SectionType, vec(
			[]byte{0x60, 0, 0},
			[]byte{0x60, 0, 1, i32},
			[]byte{0x60, 1, i32, 0},
			[]byte{0x60, 1, i32, 1, i32},
		)),
		section(wasmbin.SectionFunction, vec(types...)),
		section(wasmbin.SectionMemory, vec([]byte{0, 2})),
		section(wasmbin.SectionTag, vec([]byte{0, tParam}, []byte{0, tParam})),
		section(wasmbin.SectionGlobal, vec(cat([]byte{i32, 1}, i32Const(stackTop), []byte{end}))),
		section(wasmbin.SectionExport, vec(exports...)),
		section(wasmbin.SectionCode, vec(code...)),
	)
}

// engines are the runtimes the translated modules run on: wazero's
// compiler (which the sandbox uses) and its interpreter.
var engines = map[string]func() wazero.RuntimeConfig{
	"compiler":    wazero.NewRuntimeConfigCompiler,
	"interpreter": wazero.NewRuntimeConfigInterpreter,
}

const features = api.CoreFeaturesV2 | experimental.CoreFeaturesExceptionHandling

// run translates wasm, instantiates it on each engine and calls fn with
// args on each, checking that both return want and leave the stack
// pointer where it was.
func run(t *testing.T, wasm []byte, fn string, want int32, args ...uint64) {
	t.Helper()
	out, err := Translate(wasm)
	require.NoError(t, err)
	ctx := context.Background()
	for name, cfg := range engines {
		r := wazero.NewRuntimeWithConfig(ctx, cfg().WithCoreFeatures(features))
		mod, err := r.Instantiate(ctx, out)
		require.NoError(t, err, name)
		res, err := mod.ExportedFunction(fn).Call(ctx, args...)
		require.NoError(t, err, name)
		assert.Equal(t, want, int32(res[0]), "%s on the %s", fn, name)
		assert.Equal(t, uint64(stackTop), mod.ExportedGlobal("sp").Get(), "the stack pointer after %s on the %s", fn, name)
		require.NoError(t, r.Close(ctx))
	}
}

func TestTranslate(t *testing.T) {
	cases := []struct {
		name string
		f    testFunc
		want int32
		args []uint64
	}{
		{"catch with the tag's value", testFunc{code: cat(
			try(i32), i32Const(5), call(fThrow0), i32Const(0),
			catchTag(0), i32Const(1), []byte{add}, []byte{end},
		)}, 6, nil},
		{"the clause of the tag thrown", testFunc{code: cat(
			try(i32), i32Const(9), call(fThrow1), i32Const(0),
			catchTag(0), []byte{drop}, i32Const(10),
			catchTag(1), i32Const(100), []byte{add},
			[]byte{catchAll}, i32Const(1000), []byte{end},
		)}, 109, nil},
		{"catch_all", testFunc{code: cat(
			try(i32), i32Const(3), call(fThrow1), i32Const(0),
			catchTag(0), []byte{catchAll}, i32Const(77), []byte{end},
		)}, 77, nil},
		{"rethrow from a block in a handler", testFunc{code: cat(
			try(i32),
			try(0x40), i32Const(4), call(fThrow0),
			catchTag(0), []byte{drop}, block(0x40, rethrow(1)), []byte{end},
			i32Const(0),
			catchTag(0), i32Const(1000), []byte{add}, []byte{end},
		)}, 1004, nil},
		{"rethrow of the outer catch from an inner one", testFunc{code: cat(
			try(i32),
			try(0x40), i32Const(4), call(fThrow0),
			catchTag(0), []byte{drop},
			try(0x40), i32Const(5), call(fThrow1),
			[]byte{catchAll}, rethrow(1), []byte{end},
			[]byte{end},
			i32Const(0),
			catchTag(1), i32Const(2000), []byte{add},
			catchTag(0), i32Const(1000), []byte{add}, []byte{end},
		)}, 1004, nil},
		{"delegate past a try to the outer one", testFunc{code: cat(
			try(i32),
			try(0x40),
			try(0x40), i32Const(2), call(fThrow0), delegate(1),
			[]byte{catchAll}, i32Const(100), []byte{ret}, []byte{end},
			i32Const(0),
			catchTag(0), i32Const(200), []byte{add}, []byte{end},
		)}, 202, nil},
		{"delegate to the try around", testFunc{code: cat(
			try(i32),
			try(0x40),
			try(0x40), i32Const(2), call(fThrow0), delegate(0),
			[]byte{catchAll}, i32Const(100), []byte{ret}, []byte{end},
			i32Const(0),
			catchTag(0), i32Const(200), []byte{add}, []byte{end},
		)}, 100, nil},
		{"delegate to the caller", testFunc{code: cat(
			try(i32), call(fFirst+1),
			catchTag(0), i32Const(40), []byte{add}, []byte{end},
		)}, 48, nil},
		{"br out of a try body and of a handler", testFunc{code: cat(
			block(i32,
				try(0x40), i32Const(55), br(1), []byte{end}, i32Const(0), []byte{drop},
				try(0x40), i32Const(1), call(fThrow0), []byte{catchAll}, i32Const(66), br(1), []byte{end},
				i32Const(0),
			),
		)}, 55, nil},
		{"a try without catch", testFunc{code: cat(try(i32), i32Const(3), []byte{end})}, 3, nil},
		{"a local the body changed, in the handler", testFunc{locals: vec(cat(u32(1), []byte{i32})), code: cat(
			i32Const(1), localSet(0),
			try(0x40), i32Const(2), localSet(0), i32Const(0), call(fThrow0),
			catchTag(0), []byte{drop}, []byte{end},
			localGet(0),
		)}, 2, nil},
		{"locals of each activation", testFunc{typ: tUnary, locals: vec(cat(u32(1), []byte{i32})), code: cat(
			// x = n + 100 in the body; n < 3 calls itself with n+1, which
			// throws after its own try when n+1 == 3; the handler
			// returns x, which must be this activation's.
			try(0x40),
			localGet(0), i32Const(100), []byte{add}, localSet(1),
			localGet(0), i32Const(3), []byte{i32LtS}, []byte{opIf, 0x40},
			localGet(0), i32Const(1), []byte{add}, call(fFirst), []byte{drop},
			[]byte{end},
			[]byte{catchAll}, localGet(1), []byte{ret}, []byte{end},
			localGet(0), i32Const(3), []byte{i32Eq}, []byte{opIf, 0x40},
			i32Const(0), call(fThrow0), []byte{end},
			i32Const(-1),
		)}, 102, []uint64{2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := c.f
			f.name = "f"
			if f.typ == 0 {
				f.typ = tResult
			}
			// Function fFirst+1, for "delegate to the caller": an exception
			// it delegates to its caller skips its own catch_all.
			escapes := testFunc{"escapes", tResult, nil, cat(
				try(i32),
				try(0x40), i32Const(8), call(fThrow0), delegate(1),
				i32Const(0),
				[]byte{catchAll}, i32Const(1), []byte{end},
			)}
			run(t, ehModule(f, escapes), "f", c.want, c.args...)
		})
	}
}

func TestTranslateKeepsOtherModules(t *testing.T) {
	plain := ehModule(testFunc{"f", tResult, nil, i32Const(1)})
	out, err := Translate(plain)
	require.NoError(t, err)
	assert.Same(t, &plain[0], &out[0], "a module without legacy instructions is returned as is")
}

func TestTranslateRejects(t *testing.T) {
	cases := map[string]struct {
		code []byte
		want error
	}{
		"rethrow outside a catch":  {cat(try(0x40), rethrow(0), []byte{end}), wasmbin.ErrMalformed},
		"delegate past the caller": {cat(try(0x40), delegate(1)), wasmbin.ErrMalformed},
		"catch outside a try":      {cat(block(0x40, catchTag(0))), wasmbin.ErrMalformed},
		"a try with parameters":    {cat(i32Const(1), []byte{opTry, tParam}, []byte{drop, catchAll, end}), ErrUnsupported},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			wasm := ehModule(testFunc{"f", tVoid, nil, c.code})
			_, err := Translate(wasm)
			require.Error(t, err)
			assert.True(t, errors.Is(err, c.want), "%v", err)
		})
	}
}

func FuzzTranslate(f *testing.F) {
	f.Add(ehModule(testFunc{"f", tResult, nil, cat(
		try(i32), i32Const(9), call(fThrow1), i32Const(0),
		catchTag(0), []byte{drop}, i32Const(10),
		catchTag(1), block(0x40, rethrow(1)), i32Const(1),
		[]byte{catchAll}, i32Const(1000), []byte{end},
	)}))
	f.Add(ehModule(testFunc{"f", tResult, vec(cat(u32(1), []byte{i32})), cat(
		try(i32),
		try(0x40), i32Const(2), localSet(0), localGet(0), call(fThrow0), delegate(1),
		i32Const(0), []byte{catchAll}, localGet(0), []byte{end},
	)}))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := Translate(b)
		if err != nil {
			return
		}
		// What translates parses, and translates to itself: no legacy
		// instruction is left.
		_, err = wasmbin.Parse(out)
		require.NoError(t, err)
		again, err := Translate(out)
		require.NoError(t, err)
		require.Equal(t, out, again)
	})
}

// TestWazeroCompilerBugs pins the two bugs of wazero v1.12.0's compiler
// that the translation works around. When an upgrade fixes one, this test
// fails: drop the work-around it names.
func TestWazeroCompilerBugs(t *testing.T) {
	const (
		tryTableOp = 0x1F
		throwOp    = 0x08
		unreach    = 0x00
	)
	cases := []struct {
		name              string
		code              []byte
		locals            []byte
		correct, compiler int32
		workAround        string
	}{
		{
			// wazero issue 2503: x is 2 when the callee throws.
			name: "a handler sees the locals of try_table entry", locals: vec(cat(u32(1), []byte{i32})),
			code: cat(i32Const(1), localSet(0),
				block(0x40, []byte{tryTableOp, 0x40, 1, clauseCatchAll, 0}, i32Const(2), localSet(0),
					i32Const(0), call(fThrow0), []byte{end}),
				localGet(0)),
			correct: 2, compiler: 1, workAround: "spill.go",
		},
		{
			// The inner clause branches to $d, past T2; the throw_ref
			// there must reach T1 (200), not T2 (100).
			name: "a clause that branches past a try_table leaves it active",
			code: cat(
				[]byte{opBlock, 0x40, tryTableOp, 0x40, 1, clauseCatchAll, 0}, // $h1, T1
				[]byte{opBlock, valExnref, opBlock, 0x40},                     // $d, $h2
				[]byte{tryTableOp, 0x40, 1, clauseCatchAll, 0},                // T2
				[]byte{tryTableOp, 0x40, 1, clauseCatchAllRef, 2},             // to $d
				i32Const(0), op(throwOp, 0), []byte{end, unreach, end, unreach, end},
				i32Const(100), []byte{ret, end}, // $h2
				[]byte{opThrowRef, end, unreach, end}, // $d, in T1
				i32Const(200)),
			correct: 200, compiler: 100, workAround: "the br of delegate (body.go)",
		},
	}
	ctx := context.Background()
	for _, c := range cases {
		wasm := ehModule(testFunc{"f", tResult, c.locals, c.code})
		for name, cfg := range engines {
			r := wazero.NewRuntimeWithConfig(ctx, cfg().WithCoreFeatures(features))
			mod, err := r.Instantiate(ctx, wasm)
			require.NoError(t, err, c.name)
			res, err := mod.ExportedFunction("f").Call(ctx)
			require.NoError(t, err, c.name)
			want := c.correct
			if name == "compiler" {
				want = c.compiler
			}
			assert.Equal(t, want, int32(res[0]), "%s on the %s: if wazero fixed it, drop the work-around in %s", c.name, name, c.workAround)
			require.NoError(t, r.Close(ctx))
		}
	}
}

func TestTranslateDropsLabelNames(t *testing.T) {
	// A "name" section with function names (1) and label names (3), and
	// a DWARF section: the labels and DWARF no longer hold.
	funcNames := vec(cat(u32(2), str("f")))
	labelNames := vec(cat(u32(2), vec(cat(u32(0), str("l")))))
	names := cat([]byte{1}, u32(uint32(len(funcNames))), funcNames, []byte{3}, u32(uint32(len(labelNames))), labelNames)
	wasm := cat(ehModule(testFunc{"f", tResult, nil, cat(try(i32), i32Const(1), []byte{catchAll}, i32Const(2), []byte{end})}),
		section(0, cat(str("name"), names)), section(0, cat(str(".debug_info"), []byte{1})))
	out, err := Translate(wasm)
	require.NoError(t, err)
	m, err := wasmbin.Parse(out)
	require.NoError(t, err)
	var custom []string
	for _, s := range m.Sections {
		if s.ID == wasmbin.SectionCustom {
			custom = append(custom, s.Name)
			assert.Equal(t, cat([]byte{1}, u32(uint32(len(funcNames))), funcNames), s.Payload, "function names kept, label names dropped")
		}
	}
	assert.Equal(t, []string{"name"}, custom)
	run(t, wasm, "f", 1)
}
