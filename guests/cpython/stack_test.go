package cpython_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/fumehood/fumehood/guests/cpython"
)

// lowWater records the lowest value of the C stack pointer (global 0, by
// wasm-ld's convention) seen at any function entry.
type lowWater struct{ min uint32 }

func (l *lowWater) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	if def.GoFunction() != nil {
		return nil
	}
	return l
}

func (l *lowWater) Before(_ context.Context, mod api.Module, _ api.FunctionDefinition, _ []uint64, _ experimental.StackIterator) {
	if im, ok := mod.(experimental.InternalModule); ok {
		l.min = min(l.min, uint32(im.Global(0).Get()))
	}
}

func (l *lowWater) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}
func (l *lowWater) Abort(context.Context, api.Module, api.FunctionDefinition, error)    {}

// recursionPaths are ways code recurses through C, each run past
// CPython's C recursion limit (N levels).
var recursionPaths = map[string]string{
	"lru_cache": "import functools\n@functools.lru_cache(None)\ndef f(n): return 0 if n == 0 else f(n-1) + 1\nf(N)",
	"sum_gen":   "def f(n): return 0 if n == 0 else 1 + sum(f(n-1) for _ in range(1))\nf(N)",
	"map":       "def f(n): return 0 if n == 0 else list(map(f, [n-1]))[0]\nf(N)",
	"repr":      "class A:\n  def __init__(s, c): s.c = c\n  def __repr__(s): return 'A(%r)' % (s.c,)\nx = None\nfor _ in range(N): x = A(x)\nrepr(x)",
	"getattr":   "class A:\n  def __getattr__(s, k):\n    global d\n    d -= 1\n    return 0 if d <= 0 else getattr(s, k)\nd = N\nA().x",
	"sorted":    "def f(n): return 0 if n == 0 else sorted([n], key=lambda x: f(x-1))[0]\nf(N)",
	"list_sort": "class A:\n  def __init__(s, n): s.n = n\n  def __lt__(s, o): return [A(s.n-1), A(s.n-1)].sort() if s.n else False\n[A(N), A(N)].sort()",
	"re_sub":    "import re\ndef f(n): return '' if n == 0 else re.sub('a', lambda m: f(n-1), 'a')\nf(N)",
	"json_hook": "import json\ndef h(d):\n  global n\n  n -= 1\n  return d if n <= 0 else json.loads('{}', object_hook=h)\nn = N\njson.loads('{}', object_hook=h)",
	"expat":     "import pyexpat\ndef f(n):\n  if n == 0: return\n  p = pyexpat.ParserCreate()\n  p.StartElementHandler = lambda *a: f(n-1)\n  p.Parse('<a/>', True)\nf(N)",
	"sqlite":    "import sqlite3\ndb = sqlite3.connect(':memory:')\ndef f(n): return 0 if n == 0 else db.execute('select f(?)', (n-1,)).fetchone()[0]\ndb.create_function('f', 1, f)\ntry:\n  f(N)\nexcept sqlite3.OperationalError as e:\n  raise RecursionError from e",
	"format":    "class A:\n  def __init__(s, n): s.n = n\n  def __format__(s, spec): return '' if s.n == 0 else format(A(s.n-1), '')\nformat(A(N), '')",
}

// TestCStackAtRecursionLimit measures, for each of recursionPaths, the C
// stack the built guest uses when CPython's C recursion limit stops it
// (the lowest stack pointer any function entry sees, through a wazero
// function listener), and checks that it raised RecursionError and used
// at most two thirds of cpython.StackSize. It takes minutes (every call
// is listened to), so it runs only with FUMEHOOD_TEST_STACK=1.
func TestCStackAtRecursionLimit(t *testing.T) {
	if os.Getenv("FUMEHOOD_TEST_STACK") == "" {
		t.Skip("set FUMEHOOD_TEST_STACK=1 to measure the C stack used at the recursion limit")
	}
	built(t)
	ctx := context.Background()
	wasm, _, err := cpython.LoadUnprepared(ctx, nil)
	require.NoError(t, err)
	lib, err := cpython.StdlibFS(ctx, nil)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, afero.Walk(lib, "/", func(p string, fi fs.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		b, err := afero.ReadFile(lib, p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), b, 0o644)
	}))
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	lw := &lowWater{}
	lctx := experimental.WithFunctionListenerFactory(ctx, lw)
	cm, err := rt.CompileModule(lctx, wasm)
	require.NoError(t, err)
	names := make([]string, 0, len(recursionPaths))
	for name := range recursionPaths {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		lw.min = ^uint32(0)
		code := fmt.Sprintf("import sys\nsys.setrecursionlimit(10**6)\nN = 100000\ntry:\n%s\nexcept RecursionError:\n  print('RecursionError')\n",
			indent(recursionPaths[name]))
		var out strings.Builder
		mc := wazero.NewModuleConfig().WithName("").WithArgs("python", "-c", code).WithStdout(&out).WithStderr(&out).
			WithFSConfig(wazero.NewFSConfig().WithReadOnlyDirMount(dir, "/usr"))
		mod, err := rt.InstantiateModule(lctx, cm, mc)
		if mod != nil {
			mod.Close(ctx)
		}
		require.NoError(t, err, "%s: %s", name, out.String())
		used := cpython.StackSize - int(lw.min)
		t.Logf("%-10s %7d bytes of C stack at the limit (%.0f%% of %d MiB)", name, used, 100*float64(used)/cpython.StackSize, cpython.StackSize>>20)
		assert.Contains(t, out.String(), "RecursionError", name)
		assert.Less(t, used, cpython.StackSize*2/3, name)
	}
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }
