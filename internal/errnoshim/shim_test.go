package errnoshim

import (
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

// fakeWASI is a host "wasi_snapshot_preview1" whose fd_write returns ret
// and, if set is not 0, first writes set into the caller's errno global, as
// fumehood's filesystem does for an errno wazero cannot express.
type fakeWASI struct {
	ret, set  uint32
	args      [][4]uint32
	exitCodes []uint32
}

func (h *fakeWASI) fdWrite(_ context.Context, mod api.Module, fd, iovs, n, written uint32) uint32 {
	h.args = append(h.args, [4]uint32{fd, iovs, n, written})
	if h.set != 0 {
		g, ok := mod.ExportedGlobal(GlobalName).(api.MutableGlobal)
		if !ok {
			panic("the caller has no mutable " + GlobalName)
		}
		g.Set(uint64(h.set))
	}
	return h.ret
}

func (h *fakeWASI) procExit(_ context.Context, code uint32) { h.exitCodes = append(h.exitCodes, code) }

func fakeRuntime(t *testing.T, h *fakeWASI) (context.Context, wazero.Runtime) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
		WithCoreFeatures(api.CoreFeaturesV2|experimental.CoreFeaturesTailCall))
	t.Cleanup(func() { _ = r.Close(ctx) })
	_, err := r.NewHostModuleBuilder(ImportModule).
		NewFunctionBuilder().WithFunc(h.fdWrite).Export("fd_write").
		NewFunctionBuilder().WithFunc(h.procExit).Export("proc_exit").
		Instantiate(ctx)
	require.NoError(t, err)
	return ctx, r
}

var entryPoints = []string{"direct", "indirect", "indirect_expr", "via_global", "via_ref", "tail", "fd_write"}

func TestShimRuns(t *testing.T) {
	plain := wasiModule()
	shimmed := mustShim(t, plain)
	h := &fakeWASI{}
	ctx, r := fakeRuntime(t, h)

	// Unshimmed, the guest sees wazero's EIO whatever the host wanted.
	mod, err := r.Instantiate(ctx, plain)
	require.NoError(t, err, "the test module is valid")
	require.Nil(t, mod.ExportedGlobal(GlobalName))
	h.ret, h.set = EIO, 0
	res, err := mod.ExportedFunction("direct").Call(ctx, 1, 2, 3, 4)
	require.NoError(t, err)
	assert.Equal(t, []uint64{EIO}, res)
	require.NoError(t, mod.Close(ctx))

	mod, err = r.InstantiateModule(ctx, mustCompile(t, ctx, r, shimmed), wazero.NewModuleConfig().WithName("shimmed"))
	require.NoError(t, err)
	g := mod.ExportedGlobal(GlobalName)
	require.NotNil(t, g)
	assert.Equal(t, uint64(0), g.Get(), "the global starts at 0")

	for _, name := range entryPoints {
		t.Run(name, func(t *testing.T) {
			f := mod.ExportedFunction(name)
			require.NotNil(t, f)
			cases := []struct {
				name     string
				ret, set uint32
				want     uint64
			}{
				{"EIO with ENOSPC set", EIO, 51, 51},
				{"EIO alone", EIO, 0, EIO},
				{"EBADF with ENOSPC set", 8, 51, 8},
				{"success", 0, 0, 0},
				{"success with a stale global", 0, 51, 0},
				{"EIO with EDQUOT set", EIO, 19, 19},
			}
			for _, c := range cases {
				h.ret, h.set, h.args = c.ret, c.set, nil
				res, err := f.Call(ctx, 7, 100, 2, 0xFFFF_FFF0)
				require.NoError(t, err, c.name)
				assert.Equal(t, []uint64{c.want}, res, c.name)
				assert.Equal(t, uint64(0), g.Get(), "%s: the global is cleared after the call", c.name)
				assert.Equal(t, [][4]uint32{{7, 100, 2, 0xFFFF_FFF0}}, h.args, "%s: the host gets the parameters", c.name)
			}
		})
	}

	// proc_exit returns nothing and is not wrapped; it still works.
	h.exitCodes = nil
	_, err = mod.ExportedFunction("exit").Call(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, []uint32{3}, h.exitCodes)
}

func mustCompile(t *testing.T, ctx context.Context, r wazero.Runtime, wasm []byte) wazero.CompiledModule {
	t.Helper()
	cm, err := r.CompileModule(ctx, wasm)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cm.Close(ctx) })
	return cm
}

func TestShimStructure(t *testing.T) {
	before := summarize(t, wasiModule())
	after := summarize(t, mustShim(t, wasiModule()))
	const shim = numFuncs // the one wrapper, after the defined functions

	assert.Equal(t, append(before.funcTypes, 0), after.funcTypes, "one wrapper, of fd_write's type")
	require.Len(t, after.calls, len(before.calls)+1)
	assert.Equal(t, []uint32{fdWrite}, after.calls[len(after.calls)-1], "the wrapper calls the import")
	assert.Equal(t, [][]uint32{{shim}, nil, nil, nil, {shim}, {shim}, {procExit}}, after.calls[:len(before.calls)])
	assert.Equal(t, [][]uint32{{fdWrite}, nil, nil, nil, {fdWrite}, {fdWrite}, {procExit}}, before.calls)
	assert.Equal(t, []uint32{fdWrite, fdWrite}, before.elements)
	assert.Equal(t, []uint32{shim, shim}, after.elements)
	assert.Equal(t, [2]uint32{externFunc, fdWrite}, before.exports["fd_write"])
	assert.Equal(t, [2]uint32{externFunc, shim}, after.exports["fd_write"])
	assert.Equal(t, [2]uint32{externFunc, fnExit}, after.exports["exit"])
	assert.Equal(t, [2]uint32{externGlob, 1}, after.exports[GlobalName], "the global after the funcref one")
	assert.Len(t, after.exports, len(before.exports)+1)
	require.Len(t, after.globals, 2)
	assert.Equal(t, cat([]byte{funcref, 0}, constExpr(refFunc(shim))), after.globals[0])
	assert.Equal(t, []byte{i32, 1, opI32Const, 0, opEnd}, after.globals[1])
	for idx, name := range before.names {
		assert.Equal(t, name, after.names[idx], "function %d keeps its name", idx)
	}
	assert.Equal(t, "fumehood_shim_fd_write", after.names[shim])
	assert.Len(t, after.names, len(before.names)+1)
}

// TestShimEdges covers what a runnable test module cannot: a start
// function naming an import, several wrapped imports, imported globals,
// modules without the sections the shim adds to, and name sections without
// function names.
func TestShimEdges(t *testing.T) {
	t.Run("start and imported globals", func(t *testing.T) {
		wasm := module(
			section(wasmbin.SectionType, vec(functype(nil, []byte{i32}), functype([]byte{i32}, []byte{i32}))),
			section(wasmbin.SectionImport, vec(
				importFunc(ImportModule, "sched_yield", 0),
				cat(str("env"), str("g"), []byte{externGlob, i32, 0}),
				importFunc("env", "other", 0),
				importFunc(ImportModule, "fd_close", 1),
			)),
			section(wasmbin.SectionStart, u32(0)),
			customSection(".debug_info", []byte{1, 2, 3}),
		)
		s := summarize(t, mustShim(t, wasm))
		assert.Equal(t, []uint32{0, 1}, s.funcTypes)
		assert.Equal(t, [][]uint32{{0}, {2}}, s.calls)
		assert.Equal(t, int64(3), s.start, "the start function is sched_yield's wrapper")
		assert.Equal(t, [2]uint32{externGlob, 1}, s.exports[GlobalName], "after the imported global")
		assert.Empty(t, s.names, "no name section is added")
		assert.Contains(t, s.customs, ".debug_info", "DWARF is kept when no code moves")
	})
	t.Run("DWARF dropped when code moves", func(t *testing.T) {
		imports := [][]byte{importFunc(ImportModule, "sched_yield", 0)}
		for range 130 {
			imports = append(imports, importFunc("env", "other", 0))
		}
		wasm := module(
			section(wasmbin.SectionType, vec(functype(nil, []byte{i32}))),
			section(wasmbin.SectionImport, vec(imports...)),
			section(wasmbin.SectionFunction, vec(u32(0))),
			section(wasmbin.SectionCode, vec(fn(call(0)))),
			customSection(".debug_info", []byte{1, 2, 3}),
			customSection("name", []byte{0, 4, 3, 'm', 'o', 'd'}),
		)
		s := summarize(t, mustShim(t, wasm))
		assert.Equal(t, [][]uint32{{132}, {0}}, s.calls)
		assert.NotContains(t, s.customs, ".debug_info", "the call's index takes two bytes now")
		assert.Contains(t, s.customs, "name")
		assert.Equal(t, map[uint32]string{132: "fumehood_shim_sched_yield"}, s.names, "function names added after the module name")
	})
	t.Run("name section without function names", func(t *testing.T) {
		mod := []byte{0, 4, 3, 'm', 'o', 'd'} // module name
		locals := []byte{2, 1, 0}             // no local names
		wasm := append(wasiModule()[:0:0], wasiModule()...)
		m, err := wasmbin.Parse(wasm)
		require.NoError(t, err)
		m.RemoveCustom(func(string) bool { return true })
		wasm = append(m.Encode(), customSection("name", cat(mod, locals))...)
		out := mustShim(t, wasm)
		s := summarize(t, out)
		assert.Equal(t, map[uint32]string{numFuncs: "fumehood_shim_fd_write"}, s.names)
		m, err = wasmbin.Parse(out)
		require.NoError(t, err)
		last := m.Sections[len(m.Sections)-1]
		require.Equal(t, "name", last.Name)
		sub := vec(nameAssoc(numFuncs, "fumehood_shim_fd_write"))
		assert.Equal(t, cat(mod, []byte{1}, u32(uint32(len(sub))), sub, locals), last.Payload,
			"function names go between the module name and the local names")
	})
	t.Run("bad name section kept", func(t *testing.T) {
		bad := customSection("name", []byte{1, 9, 1})
		out := mustShim(t, wasiModule())
		out2 := mustShim(t, append(append([]byte{}, wasiModule()...), bad...))
		assert.Equal(t, append(out, bad...), out2, "a name section the shim cannot read stays as it was")
	})
}

func TestShimUnchanged(t *testing.T) {
	for name, wasm := range map[string][]byte{
		"plain":              plainModule(),
		"empty":              module(),
		"proc_exit only":     module(section(wasmbin.SectionType, vec(functype([]byte{i32}, nil))), section(wasmbin.SectionImport, vec(importFunc(ImportModule, "proc_exit", 0)))),
		"i64 result":         module(section(wasmbin.SectionType, vec(functype(nil, []byte{0x7E}))), section(wasmbin.SectionImport, vec(importFunc(ImportModule, "x", 0)))),
		"two results":        module(section(wasmbin.SectionType, vec(functype(nil, []byte{i32, i32}))), section(wasmbin.SectionImport, vec(importFunc(ImportModule, "x", 0)))),
		"other module":       module(section(wasmbin.SectionType, vec(functype(nil, []byte{i32}))), section(wasmbin.SectionImport, vec(importFunc("wasi_unstable", "fd_write", 0)))),
		"wasi debug section": append(plainModule(), customSection(".debug_info", []byte{1})...),
	} {
		t.Run(name, func(t *testing.T) {
			out, err := Shim(wasm)
			require.NoError(t, err)
			assert.Equal(t, wasm, out)
		})
	}
}

func TestShimErrors(t *testing.T) {
	shimmed := mustShim(t, wasiModule())
	_, err := Shim(shimmed)
	assert.ErrorIs(t, err, ErrShimmed)
	exportsGlobal := module(
		section(wasmbin.SectionGlobal, vec([]byte{i32, 1, opI32Const, 0, opEnd})),
		section(wasmbin.SectionExport, vec(cat(str(GlobalName), []byte{externGlob, 0}))),
	)
	_, err = Shim(exportsGlobal)
	assert.ErrorIs(t, err, ErrShimmed)

	_, err = Shim([]byte("not wasm"))
	assert.ErrorIs(t, err, wasmbin.ErrNotWasm)

	full := wasiModule()
	for n := 8; n < len(full); n++ {
		out, err := Shim(full[:n])
		if err == nil {
			// A cut at a section boundary leaves a module with fewer sections.
			_, perr := wasmbin.Parse(full[:n])
			require.NoError(t, perr)
			assert.NotNil(t, out)
			continue
		}
		assert.True(t, errors.Is(err, wasmbin.ErrMalformed), "cut at %d: %v", n, err)
	}

	for name, wasm := range map[string][]byte{
		"type out of range": module(section(wasmbin.SectionImport, vec(importFunc(ImportModule, "fd_write", 0)))),
		"unknown type form": module(section(wasmbin.SectionType, vec([]byte{0x5F, 0})), section(wasmbin.SectionImport, vec(importFunc(ImportModule, "fd_write", 0)))),
		"bad body": module(section(wasmbin.SectionType, vec(functype(nil, []byte{i32}))), section(wasmbin.SectionImport, vec(importFunc(ImportModule, "x", 0))),
			section(wasmbin.SectionFunction, vec(u32(0))), section(wasmbin.SectionCode, vec(cat(u32(3), []byte{0, 0xFF, opEnd})))),
		"body without end": module(section(wasmbin.SectionType, vec(functype(nil, []byte{i32}))), section(wasmbin.SectionImport, vec(importFunc(ImportModule, "x", 0))),
			section(wasmbin.SectionFunction, vec(u32(0))), section(wasmbin.SectionCode, vec(cat(u32(3), []byte{0}, call(0))))),
		"code names the errno global": module(section(wasmbin.SectionType, vec(functype(nil, []byte{i32}))), section(wasmbin.SectionImport, vec(importFunc(ImportModule, "fd_write", 0))),
			section(wasmbin.SectionFunction, vec(u32(0))), section(wasmbin.SectionCode, vec(cat(u32(4), []byte{0}, globalGet(0), []byte{opEnd})))),
		"trailing import bytes": module(section(wasmbin.SectionType, vec(functype(nil, []byte{i32}))), section(wasmbin.SectionImport, cat(vec(importFunc(ImportModule, "x", 0)), []byte{0}))),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Shim(wasm)
			assert.ErrorIs(t, err, wasmbin.ErrMalformed)
		})
	}
}

func TestShimDoesNotModifyInput(t *testing.T) {
	wasm := wasiModule()
	orig := append([]byte(nil), wasm...)
	_ = mustShim(t, wasm)
	assert.Equal(t, orig, wasm)
}
