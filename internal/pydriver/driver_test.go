package pydriver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
	"github.com/fumehood/fumehood/internal/cache"
	"github.com/fumehood/fumehood/internal/errnoshim"
	"github.com/fumehood/fumehood/internal/fuel"
	"github.com/fumehood/fumehood/internal/pydriver"
	"github.com/fumehood/fumehood/internal/wasmbin"
	"github.com/fumehood/fumehood/wasi"
)

// preinitGuest is the built guest, prepared (cpython.Steps: the errno shim
// and fuel) and with every mutable global exported, compiled on its own
// wazero runtime with the WASI and fuel host modules: what a host needs to
// run the driver's entry points, without the sandbox package.
type preinitGuest struct {
	rt      wazero.Runtime
	cm      wazero.CompiledModule
	wasm    []byte // the module cm was compiled from
	lib     afero.Fs
	globals []string // every mutable global's export name
}

var (
	preinitOnce sync.Once
	preinitG    *preinitGuest
	preinitErr  error
)

// chunk is the fuel granted per out_of_fuel call.
const chunk = 1 << 24

// budgetKey carries a *int64 budget of fuel in a call's context; without
// one, fuel is unlimited.
type budgetKey struct{}

var errFuel = errors.New("out of fuel")

// wasmEnv names a python.wasm to test instead of the built guest's (to try
// a change of the driver with a relink, before a build); cpython.Steps are
// applied to it here.
const wasmEnv = "FUMEHOOD_TEST_PREINIT_WASM"

// loadPreinit compiles the guest once per test binary, skipping the test
// when the guest is not built (failing it with $FUMEHOOD_REQUIRE_GUEST).
func loadPreinit(t testing.TB) *preinitGuest {
	t.Helper()
	if os.Getenv(wasmEnv) == "" {
		sandboxtest.Built(t)
	}
	preinitOnce.Do(func() { preinitG, preinitErr = compilePreinit(context.Background()) })
	require.NoError(t, preinitErr)
	return preinitG
}

func compilePreinit(ctx context.Context) (*preinitGuest, error) {
	var wasm []byte
	var err error
	if file := os.Getenv(wasmEnv); file != "" {
		if wasm, err = os.ReadFile(file); err != nil {
			return nil, err
		}
		for _, s := range cpython.Steps {
			if wasm, err = s.Apply(ctx, wasm); err != nil {
				return nil, err
			}
		}
	} else if wasm, _, err = cpython.Load(ctx, nil); err != nil {
		return nil, err
	}
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		return nil, err
	}
	globals, err := wasmbin.ExportMutableGlobals(m, "fumehood_global_")
	if err != nil {
		return nil, err
	}
	dir, err := cache.Dir("")
	if err != nil {
		return nil, err
	}
	cache, err := wazero.NewCompilationCacheWithDir(filepath.Join(dir, "wazero"))
	if err != nil {
		return nil, err
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache).WithDebugInfoEnabled(false))
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	_, err = rt.NewHostModuleBuilder(fuel.ImportModule).NewFunctionBuilder().
		WithFunc(func(ctx context.Context, mod api.Module) {
			if b, ok := ctx.Value(budgetKey{}).(*int64); ok {
				if *b <= 0 {
					panic(errFuel)
				}
				*b -= chunk
			}
			mod.ExportedGlobal(fuel.GlobalName).(api.MutableGlobal).Set(chunk)
		}).Export(fuel.ImportName).Instantiate(ctx)
	if err != nil {
		return nil, err
	}
	wasm = m.Encode()
	cm, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, err
	}
	lib, err := cpython.StdlibFS(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &preinitGuest{rt: rt, cm: cm, wasm: wasm, lib: lib, globals: globals}, nil
}

// config is the configuration of a new instance: no start function
// unless start names one (its arguments following), the standard library
// at /usr, the given stdin (nil: empty).
func (g *preinitGuest) config(stdin io.Reader, stdout, stderr io.Writer, start ...string) wazero.ModuleConfig {
	fsys, err := wasi.NewFS(g.lib, wasi.Options{ReadOnly: true})
	if err != nil {
		panic(err) // only for a nil afero.Fs or a negative quota
	}
	if stdin == nil {
		stdin = bytes.NewReader(nil)
	}
	args := []string{"python"}
	if len(start) > 1 {
		args = append(args, start[1:]...)
	}
	return wazero.NewModuleConfig().WithName("").WithArgs(args...).
		WithEnv("PYTHONHASHSEED", "0").
		WithStdin(stdin).WithStdout(stdout).WithStderr(stderr).
		WithFSConfig(wazero.NewFSConfig().(sysfs.FSConfig).WithSysFSMount(fsys, cpython.StdlibMountPath)).
		WithStartFunctions(start[:min(len(start), 1)]...)
}

// instantiate makes a new instance with config's arguments.
func (g *preinitGuest) instantiate(t testing.TB, stdin io.Reader, stdout, stderr io.Writer, start ...string) (api.Module, error) {
	t.Helper()
	return g.rt.InstantiateModule(context.Background(), g.cm, g.config(stdin, stdout, stderr, start...))
}

// initialized returns an instance that ran fumehood_init with
// DriverPython, and its output buffers.
func (g *preinitGuest) initialized(t testing.TB, stdin io.Reader) (*pydriver.Driver, api.Module, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var out, errb bytes.Buffer
	mod, err := g.instantiate(t, stdin, &out, &errb)
	require.NoError(t, err)
	t.Cleanup(func() { mod.Close(context.Background()) })
	d, err := pydriver.Attach(mod)
	require.NoError(t, err)
	require.NoError(t, d.Init(context.Background(), []byte(pydriver.DriverPython)), "stderr: %s", errb.String())
	require.Empty(t, errb.String(), "start-up writes nothing")
	require.Empty(t, out.String())
	return d, mod, &out, &errb
}

// run execs code and returns its outcome, resetting the output buffers
// first.
func run(t testing.TB, d *pydriver.Driver, n int, code string, out, errb *bytes.Buffer) *pydriver.Outcome {
	t.Helper()
	out.Reset()
	errb.Reset()
	req, err := json.Marshal(pydriver.Request{Code: code, N: n})
	require.NoError(t, err)
	o, err := d.Exec(context.Background(), req, 1<<20)
	require.NoError(t, err, "stderr: %s", errb.String())
	return o
}

// TestDriverExports checks that the built guest exports the driver's entry
// points and _start, and that a module without them is refused.
func TestDriverExports(t *testing.T) {
	g := loadPreinit(t)
	assert.True(t, pydriver.HasDriver(g.cm))
	assert.Contains(t, g.cm.ExportedFunctions(), "_start")

	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	// A module that exports only a memory.
	empty := []byte("\x00asm\x01\x00\x00\x00\x05\x03\x01\x00\x01\x07\x0a\x01\x06memory\x02\x00")
	cm, err := rt.CompileModule(ctx, empty)
	require.NoError(t, err)
	assert.False(t, pydriver.HasDriver(cm))
	mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig())
	require.NoError(t, err)
	_, err = pydriver.Attach(mod)
	assert.ErrorIs(t, err, pydriver.ErrNoDriver)
}

// TestDriverInitExec starts the interpreter once and runs several requests
// on the same instance: state is kept between them, the last expression's
// repr comes back as the value, output goes to the instance's stdout and
// stderr, exceptions and SystemExit come back as data.
func TestDriverInitExec(t *testing.T) {
	g := loadPreinit(t)
	d, _, out, errb := g.initialized(t, nil)

	o := run(t, d, 1, "x = 41", out, errb)
	assert.Equal(t, &pydriver.Outcome{}, o)
	o = run(t, d, 2, "x + 1", out, errb)
	assert.Equal(t, &pydriver.Outcome{HasValue: true, Value: "42"}, o)
	o = run(t, d, 3, "import sys\nprint(x)\nprint('e', file=sys.stderr)\n_ * 2", out, errb)
	assert.Equal(t, "84", o.Value, "_ is the last value")
	assert.Equal(t, "41\n", out.String())
	assert.Equal(t, "e\n", errb.String())
	o = run(t, d, 4, "import sys, os\n(sys.version_info[:3], sys.stdout.write_through, sys.dont_write_bytecode, __name__, sys.path[0], 'site' in sys.modules)", out, errb)
	assert.Equal(t, "((3, 13, 5), True, True, '__main__', '', True)", o.Value, "exception: %+v", o.Exception)

	o = run(t, d, 5, "def f():\n    return 1 / 0\nf()", out, errb)
	require.NotNil(t, o.Exception)
	assert.Equal(t, "ZeroDivisionError", o.Exception.Type)
	assert.Equal(t, "division by zero", o.Exception.Message)
	assert.Contains(t, o.Exception.Traceback, `File "<run-5>", line 2, in f`)
	assert.Contains(t, o.Exception.Traceback, "    return 1 / 0\n", "the source line, from linecache")
	assert.NotContains(t, o.Exception.Traceback, "fumehood_exec", "no frame of the driver")
	assert.Equal(t, o.Exception.Traceback, errb.String(), "the traceback also goes to stderr")
	assert.False(t, o.HasValue)

	o = run(t, d, 6, "class E(Exception): pass\nraise E('boom')", out, errb)
	require.NotNil(t, o.Exception)
	assert.Equal(t, "E", o.Exception.Type)
	assert.Equal(t, "boom", o.Exception.Message)
	o = run(t, d, 7, "import json\njson.loads('{')", out, errb)
	require.NotNil(t, o.Exception)
	assert.Equal(t, "json.decoder.JSONDecodeError", o.Exception.Type)
	o = run(t, d, 8, "1 +", out, errb)
	require.NotNil(t, o.Exception)
	assert.Equal(t, "SyntaxError", o.Exception.Type)

	o = run(t, d, 9, "raise SystemExit(3)", out, errb)
	require.NotNil(t, o.Exit)
	assert.Equal(t, 3, *o.Exit)
	assert.Nil(t, o.Exception)
	o = run(t, d, 10, "import sys; sys.exit()", out, errb)
	require.NotNil(t, o.Exit)
	assert.Equal(t, 0, *o.Exit)

	// The interpreter survived all of it, with its state.
	o = run(t, d, 11, "x", out, errb)
	assert.Equal(t, "41", o.Value)

	// A long value is cut by the host's limit, at a character boundary.
	req, _ := json.Marshal(pydriver.Request{Code: "'é' * 100", N: 12})
	o, err := d.Exec(context.Background(), req, 10)
	require.NoError(t, err)
	assert.Equal(t, "'éééé", o.Value)
	assert.True(t, o.Truncated)
}

// TestDriverCompile checks the C side's _fumehood_compile, which the
// Python side compiles code with, and the outcome of a plain run, which
// the host decodes without a JSON decoder; and that requests of any size
// reach the guest through the driver's one request buffer.
func TestDriverCompile(t *testing.T) {
	g := loadPreinit(t)
	d, _, out, errb := g.initialized(t, nil)
	// The driver's namespace is fumehood_exec's globals.
	o := run(t, d, 1, `import gc
exec_ = [f for f in gc.get_objects() if getattr(f, '__name__', '') == 'fumehood_exec'][0]
split = exec_.__globals__['_fumehood_compile']
def shape(code):
    try:
        body, last = split(code, '<t>')
    except BaseException as e:
        return type(e).__name__
    ns = {}
    exec(body, ns)
    return (sorted(k for k in ns if k != '__builtins__'), last and eval(last, ns))
[shape('x = 1'), shape('x = 1\nx + 1'), shape(''), shape('1 +'), shape('a\0b'), shape('if 1:\n  2')]`, out, errb)
	require.Nil(t, o.Exception, "%+v", o.Exception)
	assert.Equal(t, "[(['x'], None), (['x'], 2), ([], None), 'SyntaxError', 'SyntaxError', ([], None)]", o.Value)
	o = run(t, d, 2, `errs = []
for args in [(b'x', '<t>'), ('x',), ('x', 1)]:
    try:
        split(*args)
    except TypeError:
        errs.append('TypeError')
errs`, out, errb)
	assert.Equal(t, "['TypeError', 'TypeError', 'TypeError']", o.Value)

	o = run(t, d, 3, `plain = b'{"value": false, "exception": false, "exit": null}'
exec_(b'{"code": "pass", "n": 3}') == len(plain).to_bytes(4, 'little') + plain + bytes(16)`, out, errb)
	assert.Equal(t, "True", o.Value, "the plain outcome's form, which DecodeOutcome knows")

	// A request larger than the buffer grows it; smaller ones reuse it.
	for i, n := range []int{100_000, 10, 5000, 1 << 20, 4096} {
		o = run(t, d, 4+i, fmt.Sprintf("s = '%s'\nlen(s)", strings.Repeat("a", n)), out, errb)
		assert.Equal(t, fmt.Sprint(n), o.Value)
	}
}

// TestDriverStdin checks that code reading stdin reads the instance's
// stdin, and gets end of file when it is empty: never the next request,
// which the host passes in memory.
func TestDriverStdin(t *testing.T) {
	g := loadPreinit(t)
	d, _, out, errb := g.initialized(t, nil)
	o := run(t, d, 1, "import sys\nsys.stdin.read()", out, errb)
	assert.Equal(t, "''", o.Value)
	o = run(t, d, 2, "input()", out, errb)
	require.NotNil(t, o.Exception)
	assert.Equal(t, "EOFError", o.Exception.Type)

	d, _, out, errb = g.initialized(t, strings.NewReader("hello\nrest"))
	o = run(t, d, 1, "input()", out, errb)
	assert.Equal(t, "'hello'", o.Value)
	o = run(t, d, 2, "import sys\nsys.stdin.read()", out, errb)
	assert.Equal(t, "'rest'", o.Value)
	o = run(t, d, 3, "sys.stdin.read()", out, errb)
	assert.Equal(t, "''", o.Value)
}

// TestDriverStartStillWorks runs the same module as a command: _start with
// -c, as one-shot runs do today.
func TestDriverStartStillWorks(t *testing.T) {
	g := loadPreinit(t)
	var out, errb bytes.Buffer
	mod, err := g.instantiate(t, nil, &out, &errb, "_start", "-c", "import sys; print(6 * 7, sys.version_info[:2])")
	require.NoError(t, err, "stderr: %s", errb.String())
	defer mod.Close(context.Background())
	assert.Equal(t, "42 (3, 13)\n", out.String())

	out.Reset()
	_, err = g.instantiate(t, nil, &out, &errb, "_start", "-c", "raise SystemExit(5)")
	var exit *sys.ExitError
	require.ErrorAs(t, err, &exit)
	assert.EqualValues(t, 5, exit.ExitCode())
}

// TestDriverMisuse checks the driver's refusals: exec before init, init
// twice, a Python side without fumehood_exec; and that os._exit and fuel
// exhaustion inside exec come back as errors of the call (the host then
// discards the instance).
func TestDriverMisuse(t *testing.T) {
	g := loadPreinit(t)
	ctx := context.Background()
	var out, errb bytes.Buffer
	mod, err := g.instantiate(t, nil, &out, &errb)
	require.NoError(t, err)
	defer mod.Close(ctx)
	d, err := pydriver.Attach(mod)
	require.NoError(t, err)
	_, err = d.Exec(ctx, []byte(`{"code": "1"}`), 100)
	assert.ErrorIs(t, err, pydriver.ErrDriver, "exec before init")

	mod2, err := g.instantiate(t, nil, &out, &errb)
	require.NoError(t, err)
	defer mod2.Close(ctx)
	d2, err := pydriver.Attach(mod2)
	require.NoError(t, err)
	err = d2.Init(ctx, []byte("x = 1"))
	assert.ErrorIs(t, err, pydriver.ErrDriver)
	assert.Contains(t, errb.String(), "defines no fumehood_exec")

	d3, _, out3, errb3 := g.initialized(t, nil)
	err = d3.Init(ctx, []byte(pydriver.DriverPython))
	assert.ErrorIs(t, err, pydriver.ErrDriver)
	assert.Contains(t, errb3.String(), "called twice")
	o := run(t, d3, 1, "1 + 1", out3, errb3)
	assert.Equal(t, "2", o.Value, "a refused second init leaves the instance working")

	// A request that is not JSON is an exception as data.
	o, err = d3.Exec(ctx, []byte("{"), 1000)
	require.NoError(t, err)
	require.NotNil(t, o.Exception)
	assert.Contains(t, o.Exception.Message, "fumehood driver:")

	_, err = d3.Exec(ctx, []byte(`{"code": "import os; os._exit(3)"}`), 100)
	var exit *sys.ExitError
	require.ErrorAs(t, err, &exit)
	assert.EqualValues(t, 3, exit.ExitCode())

	d4, _, _, _ := g.initialized(t, nil)
	budget := int64(4 * chunk)
	_, err = d4.Exec(context.WithValue(ctx, budgetKey{}, &budget), []byte(`{"code": "while True: pass"}`), 100)
	assert.ErrorIs(t, err, errFuel)
}

// TestDriverImage captures an initialized instance's memory after a
// request, starts new instances from it (the pages that differ from a
// fresh instance's memory written into a fresh instance) and runs requests
// there: the state is the image's, and instances are independent. It also
// checks that memory is all the state there is: after fumehood_init and
// fumehood_exec return, every mutable global but the fuel holds the value
// of a fresh instance (the stack pointer is back where it started), so
// the one-shot build, which exports no global, can serve images.
func TestDriverImage(t *testing.T) {
	g := loadPreinit(t)
	ctx := context.Background()
	d, mod, out, errb := g.initialized(t, nil)
	o := run(t, d, 1, "x = 5\nimport json", out, errb)
	require.Nil(t, o.Exception)

	var fout, ferr bytes.Buffer
	fresh, err := g.instantiate(t, nil, &fout, &ferr)
	require.NoError(t, err)
	defer fresh.Close(ctx)
	for _, name := range g.globals {
		if name == fuel.GlobalName {
			continue
		}
		assert.Equal(t, fresh.ExportedGlobal(name).Get(), mod.ExportedGlobal(name).Get(), "global %s", name)
	}
	assert.Contains(t, g.globals, errnoshim.GlobalName)

	img := captureImage(t, mod, fresh, g.globals)
	assert.GreaterOrEqual(t, img.size, fresh.Memory().Size())
	assert.NotEmpty(t, img.diff)

	var outs [2]bytes.Buffer
	var drivers [2]*pydriver.Driver
	for i := range drivers {
		m, err := g.instantiate(t, nil, &outs[i], errb)
		require.NoError(t, err)
		defer m.Close(ctx)
		require.NoError(t, img.restore(m, true))
		drivers[i], err = pydriver.Attach(m)
		require.NoError(t, err)
	}
	o = run(t, drivers[0], 2, "x += 1\nprint(x)\nx", &outs[0], errb)
	assert.Equal(t, "6", o.Value)
	assert.Equal(t, "6\n", outs[0].String())
	o = run(t, drivers[1], 2, "print(x)\njson.dumps([x])", &outs[1], errb)
	assert.Equal(t, `'[5]'`, o.Value, "the other instance still has the image's x")
	o = run(t, d, 2, "x", out, errb)
	assert.Equal(t, "5", o.Value, "the instance the image came from is untouched")

	// The full copy gives the same.
	m, err := g.instantiate(t, nil, out, errb)
	require.NoError(t, err)
	defer m.Close(ctx)
	require.NoError(t, img.restore(m, false))
	d5, err := pydriver.Attach(m)
	require.NoError(t, err)
	o = run(t, d5, 2, "x * 2", out, errb)
	assert.Equal(t, "10", o.Value)
}
