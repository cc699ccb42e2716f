package errnoshim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// wasiRun is how to run a WASI command and what it did.
type wasiRun struct {
	args []string
	env  map[string]string
	root string // host directory mounted as "/", or ""

	exitCode int
	trap     string // the first line of the error, if it was not an exit
	stdout   string
	stderr   string
}

// run instantiates cm and runs its _start.
func (w *wasiRun) run(t *testing.T, ctx context.Context, r wazero.Runtime, cm wazero.CompiledModule) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions().
		WithArgs(w.args...).WithStdout(&stdout).WithStderr(&stderr)
	keys := make([]string, 0, len(w.env))
	for k := range w.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cfg = cfg.WithEnv(k, w.env[k])
	}
	if w.root != "" {
		cfg = cfg.WithFSConfig(wazero.NewFSConfig().WithDirMount(w.root, "/"))
	}
	mod, err := r.InstantiateModule(ctx, cm, cfg)
	require.NoError(t, err)
	defer mod.Close(ctx)
	_, err = mod.ExportedFunction("_start").Call(ctx)
	var exit *sys.ExitError
	switch {
	case errors.As(err, &exit):
		w.exitCode = int(exit.ExitCode())
	case err != nil:
		w.trap, _, _ = strings.Cut(err.Error(), "\n")
	}
	w.stdout, w.stderr = stdout.String(), stderr.String()
}

func wasiRuntime(t *testing.T, ctx context.Context, cfg wazero.RuntimeConfig) wazero.Runtime {
	r := wazero.NewRuntimeWithConfig(ctx, cfg)
	t.Cleanup(func() { _ = r.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	return r
}

// TestGoProgram builds a Go program for wasip1, shims it, and checks that
// it does the same under wazero's WASI as without the shim.
func TestGoProgram(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	dir := t.TempDir()
	src := `package main

import (
	"fmt"
	"os"
)

func main() {
	if err := os.WriteFile("/out.txt", []byte("hello file\n"), 0o644); err != nil {
		fmt.Println("write:", err)
		os.Exit(1)
	}
	b, err := os.ReadFile("/out.txt")
	fmt.Printf("read %q %v\n", b, err)
	_, err = os.ReadFile("/missing.txt")
	fmt.Println("missing:", err)
	_, err = os.Stat("/out.txt/x")
	fmt.Println("not a dir:", err)
	fmt.Println("args:", os.Args[1:])
	os.Exit(len(os.Args))
}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644))
	cmd := exec.Command(goTool, "build", "-o", "prog.wasm", "main.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "GO111MODULE=on")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	wasm, err := os.ReadFile(filepath.Join(dir, "prog.wasm"))
	require.NoError(t, err)

	start := time.Now()
	shimmed := mustShim(t, wasm)
	t.Logf("shimmed %d bytes in %v, %d bytes after", len(wasm), time.Since(start), len(shimmed))
	require.NotEqual(t, wasm, shimmed, "a Go program calls WASI functions that return errnos")

	ctx := context.Background()
	r := wasiRuntime(t, ctx, wazero.NewRuntimeConfig())
	var runs [2]wasiRun
	for i, bin := range [][]byte{wasm, shimmed} {
		w := &runs[i]
		w.args = []string{"prog", "a", "b"}
		w.root = t.TempDir()
		w.run(t, ctx, r, mustCompile(t, ctx, r, bin))
		file, err := os.ReadFile(filepath.Join(w.root, "out.txt"))
		require.NoError(t, err)
		assert.Equal(t, "hello file\n", string(file))
	}
	assert.Equal(t, runs[0], wasiRun{args: runs[0].args, root: runs[0].root, exitCode: 3, stdout: runs[0].stdout})
	assert.Contains(t, runs[0].stdout, `read "hello file\n" <nil>`)
	assert.Contains(t, runs[0].stdout, "missing: open /missing.txt: No such file or directory")
	runs[1].root = runs[0].root
	assert.Equal(t, runs[0], runs[1])
}

// wasiTestsuite is the public WASI conformance suite, in shared/ beside the
// repository.
const wasiTestsuite = "../../../shared/wasi-testsuite"

// wasiSpec is the JSON specification of a wasi-testsuite program.
type wasiSpec struct {
	Args []string          `json:"args"`
	Env  map[string]string `json:"env"`
	Root string            `json:"root"`
}

// TestWASITestsuite shims every program of the WASI conformance suite,
// checks that wazero compiles it, and runs those that need no directory
// with and without the shim, comparing what they do.
func TestWASITestsuite(t *testing.T) {
	programs, _ := filepath.Glob(filepath.Join(wasiTestsuite, "tests", "*", "testsuite", "wasm32-wasip1", "*.wasm"))
	if len(programs) == 0 {
		t.Skipf("no WASI test programs in %s", wasiTestsuite)
	}
	ctx := context.Background()
	r := wasiRuntime(t, ctx, wazero.NewRuntimeConfig().WithDebugInfoEnabled(false).WithCloseOnContextDone(true))
	ran, changed := 0, 0
	for _, path := range programs {
		suite := filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(path))))
		name := strings.TrimSuffix(filepath.Base(path), ".wasm")
		t.Run(suite+"/"+name, func(t *testing.T) {
			wasm, err := os.ReadFile(path)
			require.NoError(t, err)
			var spec wasiSpec
			if js, err := os.ReadFile(strings.TrimSuffix(path, ".wasm") + ".json"); err == nil {
				require.NoError(t, json.Unmarshal(js, &spec))
			}
			shimmed, err := Shim(wasm)
			require.NoError(t, err)
			if !bytes.Equal(wasm, shimmed) {
				changed++
			}
			cm := mustCompile(t, ctx, r, shimmed)
			if spec.Root != "" {
				t.Logf("compiled; not run: it needs directory %s", spec.Root)
				return
			}
			ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			var runs [2]wasiRun
			for i, c := range []wazero.CompiledModule{mustCompile(t, ctx, r, wasm), cm} {
				runs[i].args = append([]string{name + ".wasm"}, spec.Args...)
				runs[i].env = spec.Env
				runs[i].run(t, ctx, r, c)
			}
			assert.Equal(t, runs[0].exitCode, runs[1].exitCode, "exit code")
			assert.Equal(t, runs[0].trap, runs[1].trap, "trap")
			assert.Equal(t, runs[0].stdout, runs[1].stdout, "stdout")
			ran++
			t.Logf("exit code %d, trap %q, %d bytes of stdout", runs[1].exitCode, runs[1].trap, len(runs[1].stdout))
		})
	}
	t.Logf("%d programs shimmed (%d changed) and compiled, %d run", len(programs), changed, ran)
	assert.Greater(t, changed, len(programs)/2, "most programs call WASI functions that return errnos")
	assert.Positive(t, ran)
}

// pythonSource returns the built CPython guest's interpreter before its
// preparation (debug sections stripped), found through a manifest of
// `fumehood guest build` in the cache (package cpython cannot be imported
// here without a cycle), or skips.
func pythonSource(t testing.TB) []byte {
	dir := os.Getenv("FUMEHOOD_CACHE_DIR")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			t.Skip("no cache directory")
		}
		dir = filepath.Join(base, "fumehood")
	}
	manifests, _ := filepath.Glob(filepath.Join(dir, "cpython", "builds", "*.json"))
	for _, m := range manifests {
		var info struct {
			WasmSHA256 string `json:"wasm_sha256"`
		}
		if b, err := os.ReadFile(m); err != nil || json.Unmarshal(b, &info) != nil || info.WasmSHA256 == "" {
			continue
		}
		if wasm, err := os.ReadFile(filepath.Join(dir, "guests", "blobs", info.WasmSHA256+".wasm")); err == nil {
			return wasm
		}
	}
	t.Skip("the CPython guest is not built (fumehood guest build)")
	return nil
}

// BenchmarkShimPython measures Shim on the CPython guest.
func BenchmarkShimPython(b *testing.B) {
	wasm := pythonSource(b)
	b.SetBytes(int64(len(wasm)))
	for b.Loop() {
		if _, err := Shim(wasm); err != nil {
			b.Fatal(err)
		}
	}
}
