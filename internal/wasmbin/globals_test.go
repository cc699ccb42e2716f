package wasmbin

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

func gU32(v uint32) []byte { return AppendU32(nil, v) }

func gName(s string) []byte { return append(gU32(uint32(len(s))), s...) }

func gVec(items ...[]byte) []byte {
	return append(gU32(uint32(len(items))), bytes.Join(items, nil)...)
}

func gGlobal(typ byte, mut bool, init ...byte) []byte {
	m := byte(0)
	if mut {
		m = 1
	}
	return append(append([]byte{typ, m}, init...), 0x0B)
}

func gExport(name string, kind byte, idx uint32) []byte {
	return append(append(gName(name), kind), gU32(idx)...)
}

// globalsModule imports one mutable global ("env" "g", index 0) and defines
// four: 1 mutable i32, 2 immutable i64, 3 mutable f64, 4 mutable i64. It has
// a function, a memory and the given exports.
func globalsModule(exports ...[]byte) []byte {
	m := &Module{Sections: []Section{
		{ID: SectionType, Payload: gVec([]byte{0x60, 0x00, 0x00})},
		{ID: SectionImport, Payload: gVec(
			append(append(gName("env"), gName("g")...), externGlobal, 0x7F, 0x01),
		)},
		{ID: SectionFunction, Payload: gVec(gU32(0))},
		{ID: SectionMemory, Payload: gVec([]byte{0x00, 0x01})},
		{ID: SectionGlobal, Payload: gVec(
			gGlobal(0x7F, true, 0x41, 0x80, 0x08), // i32.const 1024
			gGlobal(0x7E, false, 0x42, 0x07),
			gGlobal(0x7C, true, 0x44, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F), // f64.const 1
			gGlobal(0x7E, true, 0x42, 0x00),
		)},
		{ID: SectionExport, Payload: gVec(exports...)},
		{ID: SectionCode, Payload: gVec([]byte{0x02, 0x00, 0x0B})},
		{ID: SectionCustom, Name: "name", Payload: []byte{}},
	}}
	return m.Encode()
}

func defaultExports() [][]byte {
	return [][]byte{
		gExport("run", externFunc, 0),
		gExport("sp", externGlobal, 1),
		gExport("memory", externMemory, 0),
	}
}

func TestMutableGlobals(t *testing.T) {
	m, err := Parse(globalsModule(defaultExports()...))
	require.NoError(t, err)
	got, err := MutableGlobals(m)
	require.NoError(t, err)
	assert.Equal(t, []MutableGlobal{
		{Index: 1, Type: 0x7F, Export: "sp"},
		{Index: 3, Type: 0x7C},
		{Index: 4, Type: 0x7E},
	}, got)
}

func TestExportMutableGlobals(t *testing.T) {
	in := globalsModule(defaultExports()...)
	orig := bytes.Clone(in)
	m, err := Parse(in)
	require.NoError(t, err)
	names, err := ExportMutableGlobals(m, "fumehood_global_")
	require.NoError(t, err)
	assert.Equal(t, []string{"sp", "fumehood_global_3", "fumehood_global_4"}, names)
	out := m.Encode()
	assert.Equal(t, orig, in, "input bytes modified")

	// Only the export section changed.
	before, _ := Parse(orig)
	after, err := Parse(out)
	require.NoError(t, err)
	require.Len(t, after.Sections, len(before.Sections))
	for i := range before.Sections {
		if before.Sections[i].ID == SectionExport {
			assert.Equal(t, gVec(append(defaultExports(),
				gExport("fumehood_global_3", externGlobal, 3),
				gExport("fumehood_global_4", externGlobal, 4))...), after.Sections[i].Payload)
			continue
		}
		assert.Equal(t, before.Sections[i], after.Sections[i])
	}

	// Idempotent: a second run adds nothing and returns the same names.
	again, err := ExportMutableGlobals(after, "fumehood_global_")
	require.NoError(t, err)
	assert.Equal(t, names, again)
	assert.Equal(t, out, after.Encode())

	// wazero accepts the result, and the host can now write the globals.
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	// The import needs a real mutable global: a tiny "env" module exports one.
	env := (&Module{Sections: []Section{
		{ID: SectionGlobal, Payload: gVec(gGlobal(0x7F, true, 0x41, 0x05))},
		{ID: SectionExport, Payload: gVec(gExport("g", externGlobal, 0))},
	}}).Encode()
	_, err = rt.InstantiateWithConfig(ctx, env, wazero.NewModuleConfig().WithName("env"))
	require.NoError(t, err)
	inst, err := rt.Instantiate(ctx, out)
	require.NoError(t, err)
	for _, name := range names {
		g, ok := inst.ExportedGlobal(name).(api.MutableGlobal)
		require.True(t, ok, name)
		g.Set(42)
		assert.Equal(t, uint64(42), g.Get(), name)
	}
}

func TestExportMutableGlobalsWithoutExportSection(t *testing.T) {
	m := &Module{Sections: []Section{
		{ID: SectionGlobal, Payload: gVec(gGlobal(0x7F, true, 0x41, 0x00), gGlobal(0x7F, false, 0x41, 0x00))},
		{ID: SectionCustom, Name: "producers", Payload: []byte{0}},
	}}
	names, err := ExportMutableGlobals(m, "g")
	require.NoError(t, err)
	assert.Equal(t, []string{"g0"}, names)
	require.Len(t, m.Sections, 3)
	assert.Equal(t, SectionExport, m.Sections[2].ID)
	assert.Equal(t, gVec(gExport("g0", externGlobal, 0)), m.Sections[2].Payload)
	_, err = Parse(m.Encode())
	require.NoError(t, err)
}

func TestExportMutableGlobalsNothingToDo(t *testing.T) {
	for name, m := range map[string]*Module{
		"empty":     {},
		"immutable": {Sections: []Section{{ID: SectionGlobal, Payload: gVec(gGlobal(0x7E, false, 0x42, 0x00))}}},
		"exported": {Sections: []Section{
			{ID: SectionGlobal, Payload: gVec(gGlobal(0x7E, true, 0x42, 0x00))},
			{ID: SectionExport, Payload: gVec(gExport("x", externGlobal, 0))},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			before := m.Encode()
			_, err := ExportMutableGlobals(m, "g")
			require.NoError(t, err)
			assert.Equal(t, before, m.Encode())
		})
	}
}

func TestExportMutableGlobalsNameTaken(t *testing.T) {
	m, err := Parse(globalsModule(append(defaultExports(), gExport("fumehood_global_3", externFunc, 0))...))
	require.NoError(t, err)
	before := m.Encode()
	_, err = ExportMutableGlobals(m, "fumehood_global_")
	assert.ErrorIs(t, err, ErrExportName)
	assert.Equal(t, before, m.Encode(), "module changed on error")
}

func TestExportMutableGlobalsMalformed(t *testing.T) {
	cases := map[string][]Section{
		"import kind":       {{ID: SectionImport, Payload: append(gVec(), 1, 0, 0, 0x09)}},
		"import truncated":  {{ID: SectionImport, Payload: []byte{1, 1, 'a', 1, 'b', 0x03, 0x7F}}},
		"global count":      {{ID: SectionGlobal, Payload: []byte{5, 0x7F, 0x01, 0x41, 0x00, 0x0B}}},
		"global mutability": {{ID: SectionGlobal, Payload: gVec([]byte{0x7F, 0x07, 0x41, 0x00, 0x0B})}},
		"global no end":     {{ID: SectionGlobal, Payload: gVec([]byte{0x7F, 0x01, 0x41, 0x00})}},
		"global bad op":     {{ID: SectionGlobal, Payload: gVec([]byte{0x7F, 0x01, 0xFF, 0x0B})}},
		"trailing bytes":    {{ID: SectionGlobal, Payload: append(gVec(gGlobal(0x7F, true, 0x41, 0x00)), 0)}},
		"export name":       {{ID: SectionExport, Payload: []byte{1, 9, 'a'}}},
		"export duplicate": {{ID: SectionExport, Payload: gVec(
			gExport("a", externFunc, 0), gExport("a", externGlobal, 0))}},
	}
	for name, secs := range cases {
		t.Run(name, func(t *testing.T) {
			m := &Module{Sections: secs}
			_, err := ExportMutableGlobals(m, "g")
			assert.ErrorIs(t, err, ErrMalformed)
			_, err = MutableGlobals(m)
			assert.ErrorIs(t, err, ErrMalformed)
		})
	}
}

func FuzzExportMutableGlobals(f *testing.F) {
	f.Add(globalsModule(defaultExports()...))
	f.Add(globalsModule())
	f.Add((&Module{Sections: []Section{
		{ID: SectionGlobal, Payload: gVec(gGlobal(0x7F, true, 0x41, 0x00))},
	}}).Encode())
	f.Add(tiny())
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		names, err := ExportMutableGlobals(m, "g")
		if err != nil {
			return
		}
		out := m.Encode()
		m2, err := Parse(out)
		require.NoError(t, err, "output does not parse")
		again, err := ExportMutableGlobals(m2, "g")
		require.NoError(t, err)
		assert.Equal(t, names, again, "second run differs")
		assert.Equal(t, out, m2.Encode(), "second run changed the module")
		// A module wazero accepts stays acceptable. Only small integers,
		// so that wazero does not allocate for huge counts, and only
		// function bodies that read as the sandbox checks them before
		// wazero sees a module (CheckLocals, CheckTags): wazero v1.12's
		// decoder panics on a body shorter than its local declarations
		// ("makeslice: len out of range"), which sandbox.Compile never
		// lets through.
		if !smallLEB(b) || CheckLocals(m, 50_000) != nil || CheckTags(m) != nil {
			return
		}
		if c, err := rt.CompileModule(ctx, b); err == nil {
			c.Close(ctx)
			c2, err := rt.CompileModule(ctx, out)
			require.NoError(t, err, "wazero rejects the output of a module it accepts")
			c2.Close(ctx)
		}
	})
}

// smallLEB reports whether no two bytes in a row have their high bit set,
// so that every LEB128 integer in b is below 2^14.
func smallLEB(b []byte) bool {
	for i := 1; i < len(b); i++ {
		if b[i-1]&b[i]&0x80 != 0 {
			return false
		}
	}
	return true
}
