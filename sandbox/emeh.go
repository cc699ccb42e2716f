package sandbox

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/fumehood/fumehood/internal/emeh"
)

// This file implements C++ exceptions the Emscripten way (internal/emeh,
// internal/cxxrt): the env.invoke_<sig> functions a module compiled with
// clang's -mllvm -enable-emscripten-cxx-exceptions imports, and
// env.fumehood_unwind, which a throw calls.
//
// An invoke calls its callee through the module's dyncall export in a
// nested call; a throw panics with errUnwound, which ends the innermost
// nested call (wazero turns the panic into that call's error), and the
// invoke returns with the module's __THREW__ set by the throw. The frames
// the throw left have not restored the C stack pointer, so the invoke
// does. No WebAssembly exception handling is involved: wazero v1.12's
// copies the whole call stack at every try_table (docs/SECURITY.md).

// Each level of invokes (a C++ call that may throw, in a function with a
// destructor or a catch, calling another) is a nested call into the module
// with a call stack of its own, which wazero lets grow to about 100 MB,
// and holds besides levelCost of the host's memory. What the levels below
// the innermost hold together, stacks and levelCost, is bounded by
// MaxNestedStack, and their number by MaxInvokeDepth; a guest that goes
// past either traps with ErrStackOverflow. So a guest holds at most the
// outermost call's stack, MaxNestedStack and the innermost level's.
const (
	// MaxNestedStack bounds what the levels of invokes below the
	// innermost hold, together: 64 MiB is over 3,600 levels of recursion
	// through C++ with destructors (a 10 KB stack and levelCost each).
	MaxNestedStack = 64 << 20
	// MaxInvokeDepth bounds the levels of invokes.
	MaxInvokeDepth = 4096
)

// levelCost is what a level of invokes holds on the host besides its call
// stack: wazero's call engine for its function (1,440 bytes in v1.12) and
// the Go frames from the guest's call of the invoke to the nested call
// (2,936 bytes on amd64), twice, since a goroutine's stack grows by
// doubling.
const levelCost = 8 << 10

// cachedDepths is how many levels keep their nested call's function
// between invokes (a new one allocates a 10 KB stack), as long as its
// stack stays under cachedStack: an idle instance keeps no grown stack.
const (
	cachedDepths = 4
	cachedStack  = 64 << 10
)

// fallbackStack is what a level counts for when its stack's size cannot
// be read (stackSize): a wazero other than the one this was written for.
const fallbackStack = 1 << 20

// errUnwound ends the innermost invoke: a C++ throw.
var errUnwound = errors.New("C++ exception")

// errNested is what an invoke below the outermost panics with when the
// call it made failed (a trap, fuel, the deadline, an exit): the invoker
// keeps the failure, and only the outermost invoke panics with it. wazero
// wraps a host function's panic in an error carrying the level's stack
// trace, so a failure passed up level by level would be rebuilt with
// every trace below it at every level: quadratic in the depth, gigabytes
// for a few thousand levels. This way the failure is wrapped twice, at its
// own level and at the outermost.
var errNested = errors.New("a C++ invoke nested in this one failed")

// errInvokeDepth is the trap of invokes nested past MaxInvokeDepth or
// MaxNestedStack.
var errInvokeDepth = fmt.Errorf("C++ calls through invokes nested past %d levels or %d MiB of call stacks", MaxInvokeDepth, MaxNestedStack>>20)

// ehHost is a compiled module's invoke functions.
type ehHost struct {
	invokes []ehInvoke
}

type ehInvoke struct {
	name, export    string
	params, results []api.ValueType
}

// newEHHost checks what compiled imports from emeh.ImportModule and
// returns the host functions it needs, or nil if it imports none. Each
// invoke needs the export emeh.Prepare adds, of the same type.
func newEHHost(compiled wazero.CompiledModule) (*ehHost, error) {
	var h *ehHost
	exports := compiled.ExportedFunctions()
	for _, f := range compiled.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod != emeh.ImportModule {
			continue
		}
		if h == nil {
			h = &ehHost{}
		}
		switch {
		case name == emeh.UnwindName:
			if len(f.ParamTypes()) != 0 || len(f.ResultTypes()) != 0 {
				return nil, fmt.Errorf("%w: it imports %s.%s with parameters or results", ErrInvalidModule, mod, name)
			}
		case strings.HasPrefix(name, emeh.InvokePrefix):
			iv := emeh.Invoke{Name: name}
			e, ok := exports[iv.Export()]
			if !ok {
				return nil, fmt.Errorf("%w: it imports %s.%s but exports no %s (not prepared by emeh.Prepare)", ErrInvalidModule, mod, name, iv.Export())
			}
			if !sameTypes(e.ParamTypes(), f.ParamTypes()) || !sameTypes(e.ResultTypes(), f.ResultTypes()) {
				return nil, fmt.Errorf("%w: its %s is not of the type of %s.%s", ErrInvalidModule, iv.Export(), mod, name)
			}
			h.invokes = append(h.invokes, ehInvoke{name: name, export: iv.Export(), params: f.ParamTypes(), results: f.ResultTypes()})
		default:
			return nil, fmt.Errorf("%w: it imports %s.%s, and a sandbox offers only %s's invoke functions and %s", ErrInvalidModule, mod, name, mod, emeh.UnwindName)
		}
	}
	return h, nil
}

func sameTypes(a, b []api.ValueType) bool {
	return string(a) == string(b)
}

// instantiate adds the host module to rt.
func (h *ehHost) instantiate(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(emeh.ImportModule)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(unwind), nil, nil).Export(emeh.UnwindName)
	for i, iv := range h.invokes {
		b.NewFunctionBuilder().WithGoModuleFunction(invokeFunc(i), iv.params, iv.results).Export(iv.name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// unwind is env.fumehood_unwind. With no invoke active nothing can catch
// the exception: it returns, and the guest's runtime calls std::terminate,
// which reports the exception as native code does, and aborts.
func unwind(ctx context.Context, _ api.Module, _ []uint64) {
	if r, _ := ctx.Value(runKey{}).(*runState); r == nil || r.invoker == nil || r.invoker.depth == 0 {
		return
	}
	panic(errUnwound)
}

// invokeFunc is the host function of h.invokes[i].
func invokeFunc(i int) api.GoModuleFunc {
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		r, _ := ctx.Value(runKey{}).(*runState)
		if r == nil || r.invoker == nil {
			panic(fmt.Errorf("%w: a C++ invoke called outside a run", errInternal))
		}
		r.invoker.call(ctx, i, stack)
	}
}

// invoker runs one instance's invokes.
type invoker struct {
	host *ehHost
	mod  api.Module
	// sp is the module's C stack pointer, restored after a throw; nil if
	// the module has none by wasm-ld's convention.
	sp    api.MutableGlobal
	depth int
	fns   [cachedDepths][]api.Function // by depth and invoke
	// running is the function running at each level (running[d-1] at
	// depth d); held is what the levels below the innermost hold.
	running []api.Function
	held    int
	// failed is the failure that ends the run, kept while the levels
	// above the one that failed unwind (errNested).
	failed error
}

// newInvoker returns the invoker of mod, an instance of the guest, or nil
// if the guest has no invokes.
func (g *Guest) newInvoker(mod api.Module) *invoker {
	if g.eh == nil {
		return nil
	}
	inv := &invoker{host: g.eh, mod: mod}
	if g.stack.ok {
		if im, ok := mod.(experimental.InternalModule); ok && g.stack.index < im.NumGlobal() {
			inv.sp, _ = im.Global(g.stack.index).(api.MutableGlobal)
		}
	}
	return inv
}

// call calls the callee of invoke i with the arguments in stack, leaving
// its results there; after a throw it returns zeros, which the module's
// code does not read.
func (inv *invoker) call(ctx context.Context, i int, stack []uint64) {
	// The level calling now stops growing its stack until this returns.
	caller := 0
	if inv.depth > 0 {
		caller = stackSize(inv.running[inv.depth-1]) + levelCost
	}
	if inv.depth >= MaxInvokeDepth || inv.held+caller > MaxNestedStack {
		panic(&stackOverflowError{err: errInvokeDepth})
	}
	fn := inv.function(i)
	var sp uint64
	if inv.sp != nil {
		sp = inv.sp.Get()
	}
	iv := &inv.host.invokes[i]
	zeroExtend(stack, iv.params)
	inv.running = append(inv.running[:inv.depth], fn)
	inv.held += caller
	inv.depth++
	err := fn.CallWithStack(ctx, stack)
	inv.depth--
	inv.held -= caller
	inv.running[inv.depth] = nil
	if inv.depth < cachedDepths && stackSize(fn) > cachedStack {
		inv.fns[inv.depth][i] = nil // do not keep a grown stack
	}
	if err == nil {
		zeroExtend(stack, iv.results)
		return
	}
	if !errors.Is(err, errUnwound) {
		inv.fail(err) // a trap, fuel, the deadline, an exit: the run ends
	}
	if inv.sp != nil {
		inv.sp.Set(sp)
	}
	clear(stack[:len(iv.results)])
}

// fail ends the run for err, what a nested call returned: the first
// failure, or errNested from a level below. An invoke nested in another
// passes errNested up; the outermost panics with the first failure.
func (inv *invoker) fail(err error) {
	if inv.failed == nil || !errors.Is(err, errNested) {
		inv.failed = err
	}
	if inv.depth > 0 {
		panic(errNested)
	}
	err, inv.failed = inv.failed, nil
	panic(err)
}

// zeroExtend clears the upper 32 bits of the 32-bit values (i32, f32) in
// stack, of the given types. wazero v1.12 passes a host function its
// 32-bit parameters with whatever the upper half of their slots held, and
// a call from Go writes 32-bit results as 32 bits: both as the host
// function's slots. But it reads a host function's results whole, as
// encoded by api.EncodeI32, and its compiled code then uses an i32 as a
// 64-bit offset into memory: an invoke that left the upper half of a
// callee's i32 result as it found it (the table index's upper half) made
// matplotlib's import fault in compiled code, killing the host process
// (TestInvokeResultsZeroExtended).
func zeroExtend(stack []uint64, types []api.ValueType) {
	for j, t := range types {
		if t == api.ValueTypeI32 || t == api.ValueTypeF32 {
			stack[j] = uint64(uint32(stack[j]))
		}
	}
}

// function returns invoke i's export for the current depth: a function
// of wazero's runs one call at a time, so each level needs its own.
func (inv *invoker) function(i int) api.Function {
	d := inv.depth
	if d < cachedDepths {
		if inv.fns[d] == nil {
			inv.fns[d] = make([]api.Function, len(inv.host.invokes))
		}
		if f := inv.fns[d][i]; f != nil {
			return f
		}
	}
	f := inv.mod.ExportedFunction(inv.host.invokes[i].export)
	if d < cachedDepths {
		inv.fns[d][i] = f
	}
	return f
}

// stackSize returns the size of the call stack of fn, a function of
// wazero's optimizing compiler: its call engine's stack field, which
// wazero exports no way to read. TestInvokeStackSize fails if a wazero
// upgrade moves it; until then, fallbackStack stands in.
func stackSize(fn api.Function) int {
	v := reflect.ValueOf(fn)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return fallbackStack
	}
	i, ok := stackFields.Load(v.Type())
	if !ok {
		i = -1
		if t := v.Type().Elem(); t.Kind() == reflect.Struct {
			if f, ok := t.FieldByName("stack"); ok && len(f.Index) == 1 && f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Uint8 {
				i = f.Index[0]
			}
		}
		stackFields.Store(v.Type(), i)
	}
	if i.(int) < 0 {
		return fallbackStack
	}
	return v.Elem().Field(i.(int)).Len()
}

// stackFields caches stackSize's field index by type (-1: none).
var stackFields sync.Map
