package sandbox

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/fumehood/fumehood/internal/fuel"
	"github.com/fumehood/fumehood/internal/testenv"
	"github.com/fumehood/fumehood/internal/wasmbin"
)

// TestInvokeStackSize pins what stackSize reads of wazero's internals: a
// wazero upgrade that moves the call engine's stack field fails here
// rather than leaving invokes bounded only by fallbackStack.
func TestInvokeStackSize(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	defer rt.Close(ctx)
	// (module (func (export "f")))
	wasm := []byte{0, 'a', 's', 'm', 1, 0, 0, 0,
		1, 4, 1, 0x60, 0, 0,
		3, 2, 1, 0,
		7, 5, 1, 1, 'f', 0, 0,
		10, 4, 1, 2, 0, 0x0B}
	mod, err := rt.Instantiate(ctx, wasm)
	require.NoError(t, err)
	fn := mod.ExportedFunction("f")
	_, err = fn.Call(ctx)
	require.NoError(t, err)
	size := stackSize(fn)
	assert.NotEqual(t, fallbackStack, size, "stackSize cannot read this wazero's call stack")
	assert.Greater(t, size, 0)
	assert.Less(t, size, cachedStack, "a fresh call stack is small enough to keep")
	assert.Equal(t, fallbackStack, stackSize(nil))
}

// invokeResultModule is a WASI command that calls, through invokes, a
// function returning the i64 0xDEADBEEF00000005, then one returning its
// i32 argument 8, and exits with 1 unless the i32 at that address (a data
// segment's 42) is 42. The first call leaves 0xDEADBEEF in the upper half
// of the slot wazero gives both host calls for their first parameter and
// result.
func invokeResultModule() []byte {
	u32 := func(v uint32) []byte { return wasmbin.AppendU32(nil, v) }
	name, sec := testenv.WasmName, testenv.WasmSection
	fimport := func(mod, nm string, typ byte) []byte {
		return append(append(name(mod), name(nm)...), 0, typ)
	}
	body := func(code ...byte) []byte {
		b := append([]byte{0}, code...) // no locals
		b = append(b, 0x0B)
		return append(u32(uint32(len(b))), b...)
	}
	// bodyLocals is body with one i32 local.
	bodyLocals := func(code ...byte) []byte {
		b := append([]byte{1, 1, 0x7F}, code...)
		b = append(b, 0x0B)
		return append(u32(uint32(len(b))), b...)
	}
	const i32, i64 = 0x7F, 0x7E
	var m []byte
	m = append(m, 0, 'a', 's', 'm', 1, 0, 0, 0)
	m = append(m, sec(wasmbin.SectionType,
		[]byte{0x60, 2, i32, i32, 1, i64}, // 0: invoke_ji
		[]byte{0x60, 2, i32, i32, 1, i32}, // 1: invoke_ii
		[]byte{0x60, 1, i32, 0},           // 2: proc_exit
		[]byte{0x60, 1, i32, 1, i64},      // 3: (i32) -> i64
		[]byte{0x60, 1, i32, 1, i32},      // 4: (i32) -> i32
		[]byte{0x60, 0, 0},                // 5: _start
	)...)
	m = append(m, sec(wasmbin.SectionImport,
		fimport("env", "invoke_ji", 0), fimport("env", "invoke_ii", 1),
		fimport("wasi_snapshot_preview1", "proc_exit", 2))...)
	m = append(m, sec(wasmbin.SectionFunction, []byte{3}, []byte{4}, []byte{5})...)
	m = append(m, sec(wasmbin.SectionTable, []byte{0x70, 0, 2})...)
	m = append(m, sec(wasmbin.SectionMemory, []byte{0, 1})...)
	m = append(m, sec(wasmbin.SectionExport, append(name("_start"), 0, 5), append(name("memory"), 2, 0))...)
	m = append(m, sec(wasmbin.SectionElement, []byte{0, 0x41, 0, 0x0B, 2, 3, 4})...)
	data := []byte{0, 0x41, 8, 0x0B, 4, 42, 0, 0, 0}                     // 42 at address 8
	big := wasmbin.AppendS64([]byte{0x42}, int64(-0x2152411100000000+5)) // i64.const 0xDEADBEEF00000005
	m = append(m, sec(wasmbin.SectionCode,
		body(big...),
		body(0x20, 0), // local.get 0
		bodyLocals(0x41, 0, 0x41, 0, 0x10, 0, 0x1A, // invoke_ji(0, 0); drop
			0x41, 1, 0x41, 8, 0x10, 1, 0x21, 0, // invoke_ii(1, 8); local.set 0
			0x41, 0, 0x41, 0, 0x10, 0, 0x1A, // invoke_ji(0, 0); drop: the i32 kept across a call
			0x20, 0, 0x28, 2, 0, // local.get 0; i32.load
			0x41, 42, 0x47, // i32.const 42; i32.ne
			0x10, 2), // proc_exit
	)...)
	return append(m, sec(wasmbin.SectionData, data)...)
}

// TestInvokeResultsZeroExtended: an invoke's 32-bit parameters reach the
// callee, and its 32-bit results the caller, zero-extended, whatever the
// slot held before. wazero v1.12 gives a host function its i32 parameters
// with the upper half of their slots as it found them, and a call from Go
// writes an i32 result as 32 bits; but it reads a host function's results
// whole, and its compiled code can use an i32 result as a 64-bit memory
// offset as it is: importing matplotlib (pybind11) faulted in compiled
// code and killed the host process.
func TestInvokeResultsZeroExtended(t *testing.T) {
	ctx := context.Background()
	g, err := Compile(ctx, invokeResultModule(), &Options{CacheDir: t.TempDir()})
	require.NoError(t, err)
	defer g.Close()
	mod, err := g.rt.InstantiateModule(ctx, g.compiled, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	require.NoError(t, err)
	defer mod.Close(ctx)
	inv := g.newInvoker(mod)
	require.NotNil(t, inv)
	r := &runState{ctx: ctx, invoker: inv}
	ctx = context.WithValue(ctx, runKey{}, r)
	fuelGlobal, _ := mod.ExportedGlobal(fuel.GlobalName).(api.MutableGlobal)
	require.NotNil(t, fuelGlobal)
	defer r.supervise(ctx, fuelGlobal, nil, 1e6, nil)()
	ii := -1
	for i, iv := range g.eh.invokes {
		if iv.name == "invoke_ii" {
			ii = i
		}
	}
	require.GreaterOrEqual(t, ii, 0)
	stack := []uint64{0xDEADBEEF_00000001, 0xDEADBEEF_00000008} // table index 1, argument 8
	inv.call(ctx, ii, stack)
	assert.Equal(t, uint64(8), stack[0], "the result's upper half is zero")
	assert.Zero(t, inv.depth)
}

// invokeRecursionModule is a WASI command of under 200 bytes whose _start
// calls itself through env.invoke_v, each call one more level of invokes,
// until the host stops it.
func invokeRecursionModule() []byte {
	name, sec := testenv.WasmName, testenv.WasmSection
	body := []byte{0, 0x41, 0, 0x10, 0, 0x0B} // no locals; i32.const 0; call invoke_v
	var m []byte
	m = append(m, 0, 'a', 's', 'm', 1, 0, 0, 0)
	m = append(m, sec(wasmbin.SectionType,
		[]byte{0x60, 1, 0x7F, 0}, // 0: invoke_v
		[]byte{0x60, 0, 0},       // 1: _start
	)...)
	m = append(m, sec(wasmbin.SectionImport, append(append(name("env"), name("invoke_v")...), 0, 0))...)
	m = append(m, sec(wasmbin.SectionFunction, []byte{1})...)
	m = append(m, sec(wasmbin.SectionTable, []byte{0x70, 0, 1})...)
	m = append(m, sec(wasmbin.SectionMemory, []byte{0, 1})...)
	m = append(m, sec(wasmbin.SectionExport, append(name("_start"), 0, 1))...)
	m = append(m, sec(wasmbin.SectionElement, []byte{0, 0x41, 0, 0x0B, 1, 1})...)
	return append(m, sec(wasmbin.SectionCode, append([]byte{byte(len(body))}, body...))...)
}

// TestInvokeRecursionIsCheap: a module of under 100 bytes recursing
// through env.invoke_v, under a 64 KiB memory limit and 52,435 fuel, stops
// with ErrStackOverflow at the nesting bound, each level counted with what
// it holds on the host (levelCost): two at once allocate under 300 MiB of
// Go heap in all (each at most MaxNestedStack and a little), and their
// error, built once and not rebuilt at every level, is short. Run out of
// fuel while nested, the run stops on fuel with as short an error.
func TestInvokeRecursionIsCheap(t *testing.T) {
	ctx := context.Background()
	g, err := Compile(ctx, invokeRecursionModule(), &Options{CacheDir: t.TempDir()})
	require.NoError(t, err)
	defer g.Close()
	exec := func(fuel int64) (*Result, error) {
		return g.Exec(ctx, &RunOptions{Limits: Limits{Memory: 64 << 10, Fuel: fuel}})
	}
	_, err = exec(1000) // compile and warm up outside the measure
	require.ErrorIs(t, err, ErrFuelExhausted)

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	results, errs := make([]*Result, 2), make([]error, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = exec(52_435)
		}()
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	assert.Less(t, allocated, uint64(2*(MaxNestedStack+8<<20)), "two runs allocated %d MiB", allocated>>20)
	for i, err := range errs {
		require.ErrorIs(t, err, ErrStackOverflow, "run %d", i)
		assert.Equal(t, StopStack, results[i].Stop)
		var trap *TrapError
		assert.ErrorAs(t, err, &trap)
		assert.Less(t, len(err.Error()), 4<<10, "the error is built once")
		assert.LessOrEqual(t, strings.Count(err.Error(), "wasm stack trace"), 2, "at the failing level and the outermost")
	}

	res, err := exec(5000)
	require.ErrorIs(t, err, ErrFuelExhausted)
	assert.Equal(t, StopFuel, res.Stop)
	assert.Less(t, len(err.Error()), 4<<10)
}
