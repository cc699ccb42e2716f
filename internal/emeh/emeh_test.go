package emeh_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/fumehood/fumehood/internal/emeh"
	"github.com/fumehood/fumehood/internal/wasmbin"
)

// module builds a binary module from its sections' entries.
type module struct {
	types, imports, funcs, tables, exports, elems, code [][]byte
}

func u32(v uint32) []byte { return wasmbin.AppendU32(nil, v) }

func name(s string) []byte { return append(u32(uint32(len(s))), s...) }

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func (m module) encode() []byte {
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	for _, s := range []struct {
		id    byte
		items [][]byte
	}{{1, m.types}, {2, m.imports}, {3, m.funcs}, {4, m.tables}, {7, m.exports}, {9, m.elems}, {10, m.code}} {
		if s.items == nil {
			continue
		}
		p := u32(uint32(len(s.items)))
		for _, it := range s.items {
			p = append(p, it...)
		}
		out = append(append(append(out, s.id), u32(uint32(len(p)))...), p...)
	}
	return out
}

const i32 = 0x7F

func funcImport(mod, nm string, typ uint32) []byte {
	return cat(name(mod), name(nm), []byte{0}, u32(typ))
}

// invokeModule imports env.invoke_iii ((table index, a, b) -> i32),
// env.invoke_vi and env.fumehood_unwind, and has two functions in its
// table: add (a, b) -> a+b and sub (a, b) -> a-b.
func invokeModule() module {
	body := func(op byte) []byte {
		b := []byte{0, 0x20, 0, 0x20, 1, op, 0x0B}
		return append(u32(uint32(len(b))), b...)
	}
	return module{
		types: [][]byte{
			{0x60, 3, i32, i32, i32, 1, i32}, // 0: invoke_iii
			{0x60, 2, i32, i32, 1, i32},      // 1: (a, b) -> i32
			{0x60, 2, i32, i32, 0},           // 2: invoke_vi
			{0x60, 0, 0},                     // 3: unwind
		},
		imports: [][]byte{
			funcImport("env", "invoke_iii", 0),
			funcImport("env", "invoke_vi", 2),
			funcImport("env", "fumehood_unwind", 3),
		},
		funcs:  [][]byte{{1}, {1}},
		tables: [][]byte{{0x70, 0, 2}},
		elems:  [][]byte{cat([]byte{0, 0x41, 0, 0x0B}, u32(2), u32(3), u32(4))},
		code:   [][]byte{body(0x6A), body(0x6B)},
	}
}

func TestFind(t *testing.T) {
	m, err := wasmbin.Parse(invokeModule().encode())
	require.NoError(t, err)
	im, err := emeh.Find(m)
	require.NoError(t, err)
	assert.True(t, im.Unwind)
	assert.True(t, im.Uses())
	require.Len(t, im.Invokes, 2)
	assert.Equal(t, emeh.Invoke{Name: "invoke_iii", Params: []byte{i32, i32, i32}, Results: []byte{i32}}, im.Invokes[0])
	assert.Equal(t, "fumehood_dyncall_vi", im.Invokes[1].Export())
}

// TestPrepare runs the dyncall functions Prepare adds: each calls the
// table's function at its first argument with the others.
func TestPrepare(t *testing.T) {
	out, err := emeh.Prepare(invokeModule().encode())
	require.NoError(t, err)

	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	env := rt.NewHostModuleBuilder("env")
	env.NewFunctionBuilder().WithFunc(func(int32, int32, int32) int32 { return 0 }).Export("invoke_iii")
	env.NewFunctionBuilder().WithFunc(func(int32, int32) {}).Export("invoke_vi")
	env.NewFunctionBuilder().WithFunc(func() {}).Export("fumehood_unwind")
	_, err = env.Instantiate(ctx)
	require.NoError(t, err)
	mod, err := rt.Instantiate(ctx, out)
	require.NoError(t, err)
	dyncall := mod.ExportedFunction("fumehood_dyncall_iii")
	require.NotNil(t, dyncall)
	assert.Equal(t, []api.ValueType{i32, i32, i32}, dyncall.Definition().ParamTypes())
	for _, c := range []struct {
		fn, a, b, want uint64
	}{{0, 7, 5, 12}, {1, 7, 5, 2}} {
		res, err := dyncall.Call(ctx, c.fn, c.a, c.b)
		require.NoError(t, err)
		assert.Equal(t, c.want, res[0])
	}
	// The callee's type is checked: table entry 0 is not a (i32) -> ().
	_, err = mod.ExportedFunction("fumehood_dyncall_vi").Call(ctx, 0, 1)
	assert.ErrorContains(t, err, "indirect call type mismatch")

	_, err = emeh.Prepare(out)
	assert.ErrorIs(t, err, emeh.ErrPrepared, "a prepared module is refused")
}

func TestPrepareLeavesOtherModules(t *testing.T) {
	m := invokeModule()
	m.imports = [][]byte{funcImport("wasi_snapshot_preview1", "proc_exit", 3)}
	in := m.encode()
	out, err := emeh.Prepare(in)
	require.NoError(t, err)
	assert.Equal(t, in, out)
}

func TestPrepareRejects(t *testing.T) {
	for name, f := range map[string]func(*module){
		"no table index": func(m *module) { m.imports[0] = funcImport("env", "invoke_v", 3) },
		"index not i32":  func(m *module) { m.types[0][2] = 0x7E },
		"two results":    func(m *module) { m.types[0] = []byte{0x60, 1, i32, 2, i32, i32} },
		"imported twice": func(m *module) { m.imports[1] = funcImport("env", "invoke_iii", 0) },
	} {
		t.Run(name, func(t *testing.T) {
			mod := invokeModule()
			f(&mod)
			_, err := emeh.Prepare(mod.encode())
			assert.ErrorIs(t, err, emeh.ErrInvoke)
		})
	}
	t.Run("no table", func(t *testing.T) {
		mod := invokeModule()
		mod.tables, mod.elems = nil, nil
		_, err := emeh.Prepare(mod.encode())
		assert.ErrorIs(t, err, wasmbin.ErrMalformed)
	})
	t.Run("type out of range", func(t *testing.T) {
		mod := invokeModule()
		mod.imports[0] = funcImport("env", "invoke_iii", 9)
		_, err := emeh.Prepare(mod.encode())
		assert.ErrorIs(t, err, wasmbin.ErrMalformed)
	})
}

// FuzzPrepare checks that Prepare never panics on any input, and that what
// it returns parses and is refused a second time when it added anything.
func FuzzPrepare(f *testing.F) {
	f.Add(invokeModule().encode())
	f.Add([]byte{0, 'a', 's', 'm', 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := emeh.Prepare(in)
		if err != nil {
			return
		}
		m, err := wasmbin.Parse(out)
		require.NoError(t, err)
		im, err := emeh.Find(m)
		require.NoError(t, err)
		if len(im.Invokes) > 0 {
			_, err := emeh.Prepare(out)
			assert.ErrorIs(t, err, emeh.ErrPrepared)
		}
	})
}
