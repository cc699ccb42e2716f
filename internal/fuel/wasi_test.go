package fuel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
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

	"github.com/fumehood/fumehood/internal/wasmbin"
)

// wasiRun is how to run a WASI command and what it did.
type wasiRun struct {
	args []string
	env  map[string]string
	root string // host directory preopened as "/", or ""

	exitCode int
	trap     string // the first line of the error, if it was not an exit
	stdout   string
	stderr   string
	fuel     int64
}

// run compiles wasm in r (with wasi_snapshot_preview1 and, for an
// instrumented module, m as out_of_fuel already instantiated), runs its
// _start and records the outcome in w.
func (w *wasiRun) run(t *testing.T, ctx context.Context, r wazero.Runtime, wasm []byte, m *meter) {
	t.Helper()
	cm, err := r.CompileModule(ctx, wasm)
	require.NoError(t, err)
	defer cm.Close(ctx)

	var stdout, stderr bytes.Buffer
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions().
		WithArgs(w.args...).
		WithStdout(&stdout).
		WithStderr(&stderr)
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
	if m != nil {
		w.fuel = m.used(t, mod)
	}
}

// wasiRuntime returns a runtime with WASI and the meter m as out_of_fuel.
func wasiRuntime(t *testing.T, ctx context.Context, cfg wazero.RuntimeConfig, m *meter) wazero.Runtime {
	r := wazero.NewRuntimeWithConfig(ctx, cfg)
	t.Cleanup(func() { _ = r.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	instantiateMeter(t, ctx, r, m)
	return r
}

// TestGoProgram builds a Go program for wasip1, instruments it, and checks
// that it still works and uses fuel.
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
	"sort"
	"strings"
)

func main() {
	// Primes below 50000, counted by workers in goroutines.
	const n = 50000
	sieve := make([]bool, n)
	var primes []int
	for i := 2; i < n; i++ {
		if !sieve[i] {
			primes = append(primes, i)
			for j := i * i; j < n; j += i {
				sieve[j] = true
			}
		}
	}
	sums := make(chan int)
	for w := 0; w < 4; w++ {
		go func(w int) {
			s := 0
			for i := w; i < len(primes); i += 4 {
				s += primes[i]
			}
			sums <- s
		}(w)
	}
	total := 0
	for w := 0; w < 4; w++ {
		total += <-sums
	}
	words := map[string]int{}
	for _, w := range strings.Fields("the quick brown fox jumps over the lazy dog the end") {
		words[w]++
	}
	keys := make([]string, 0, len(words))
	for k := range words {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Println(len(primes), total, keys, words["the"], os.Args[1:])
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
	instrumented := mustInstrument(t, wasm)
	t.Logf("instrumented %d bytes in %v, %d bytes after", len(wasm), time.Since(start), len(instrumented))

	ctx := context.Background()
	const want = "5133 121013308 [brown dog end fox jumps lazy over quick the] 3 [a b]\n"
	var fuel []int64
	for range 2 {
		m := &meter{refill: 1 << 40}
		r := wasiRuntime(t, ctx, wazero.NewRuntimeConfig(), m)
		w := &wasiRun{args: []string{"prog", "a", "b"}}
		w.run(t, ctx, r, instrumented, m)
		assert.Empty(t, w.trap)
		assert.Equal(t, 3, w.exitCode)
		assert.Equal(t, want, w.stdout)
		assert.Equal(t, 1, m.calls, "one refill lasts the whole run")
		assert.Positive(t, w.fuel)
		fuel = append(fuel, w.fuel)
	}
	assert.Equal(t, fuel[0], fuel[1], "the same run uses the same fuel")
	t.Logf("fuel used: %d", fuel[0])
}

// wasiTestsuite is the public WASI conformance suite, in shared/ beside the
// repository.
const wasiTestsuite = "../../../shared/wasi-testsuite"

// wasiSpec is the legacy JSON specification of a wasi-testsuite program.
type wasiSpec struct {
	Args []string          `json:"args"`
	Env  map[string]string `json:"env"`
	Root string            `json:"root"`
}

// TestWASITestsuite instruments every program of the WASI conformance suite,
// runs it with and without instrumentation under wazero's WASI, and checks
// that instrumentation changes nothing the program does.
func TestWASITestsuite(t *testing.T) {
	programs, _ := filepath.Glob(filepath.Join(wasiTestsuite, "tests", "*", "testsuite", "*", "*.wasm"))
	if len(programs) == 0 {
		t.Skipf("no WASI test programs in %s", wasiTestsuite)
	}
	ctx := context.Background()
	// Debug info only slows compilation; the instrumented copies have none.
	cfg := wazero.NewRuntimeConfig().WithDebugInfoEnabled(false).WithCloseOnContextDone(true)
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
			instrumented, err := Instrument(wasm)
			require.NoError(t, err)

			ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			m := &meter{refill: 1 << 40}
			r := wasiRuntime(t, ctx, cfg, m)
			var runs [2]wasiRun
			for i, bin := range [][]byte{wasm, instrumented} {
				w := &runs[i]
				w.args = append([]string{name + ".wasm"}, spec.Args...)
				w.env = spec.Env
				if spec.Root != "" {
					w.root = copyDir(t, filepath.Join(filepath.Dir(path), spec.Root))
				}
				if i == 0 {
					w.run(t, ctx, r, bin, nil)
				} else {
					w.run(t, ctx, r, bin, m)
				}
			}
			plain, metered := runs[0], runs[1]
			assert.Equal(t, plain.exitCode, metered.exitCode, "exit code")
			assert.Equal(t, plain.trap, metered.trap, "trap")
			assert.Equal(t, plain.stdout, metered.stdout, "stdout")
			// stderr is not compared: some failure messages quote host file times.
			assert.Positive(t, metered.fuel)
			t.Logf("exit code %d, trap %q, %d bytes of stdout, %d of stderr, fuel %d",
				metered.exitCode, metered.trap, len(metered.stdout), len(metered.stderr), metered.fuel)
		})
	}
}

// copyDir copies the directory tree at src into a new temporary directory,
// writable whatever the source's permissions, and returns its path.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		default:
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
	})
	require.NoError(t, err)
	return dst
}

// pythonWasm is where a developer may have unpacked the CPython guest.
const pythonWasm = "/tmp/pyw/x/package/dist/python.wasm"

// TestPython instruments the CPython guest, compiles it with wazero's
// compiler and runs a line of Python.
func TestPython(t *testing.T) {
	wasm, err := os.ReadFile(pythonWasm)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s is absent", pythonWasm)
	}
	require.NoError(t, err)
	m, err := wasmbin.Parse(wasm)
	require.NoError(t, err)
	m.RemoveCustom(func(n string) bool { return strings.HasPrefix(n, ".debug") })
	stripped := m.Encode()

	start := time.Now()
	instrumented, err := Instrument(stripped)
	elapsed := time.Since(start)
	require.NoError(t, err)
	t.Logf("instrumented in %v: %d bytes -> %d bytes (+%.1f%%)", elapsed, len(stripped), len(instrumented),
		100*float64(len(instrumented)-len(stripped))/float64(len(stripped)))

	ctx := context.Background()
	mt := &meter{refill: 1 << 24} // about 15 refills per run
	r := wasiRuntime(t, ctx, wazero.NewRuntimeConfigCompiler().WithDebugInfoEnabled(false), mt)
	start = time.Now()
	cm, err := r.CompileModule(ctx, instrumented)
	require.NoError(t, err)
	t.Logf("compiled in %v", time.Since(start))

	var fuel []int64
	for range 2 {
		var stdout, stderr bytes.Buffer
		mt.given, mt.calls = 0, 0
		mod, err := r.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").
			WithStartFunctions().WithArgs("python", "-c", "print(sum(range(1000)))").
			WithStdout(&stdout).WithStderr(&stderr))
		require.NoError(t, err)
		start = time.Now()
		_, err = mod.ExportedFunction("_start").Call(ctx)
		var exit *sys.ExitError
		if err != nil {
			require.ErrorAs(t, err, &exit)
			require.Equal(t, uint32(0), exit.ExitCode(), "stderr: %s", stderr.String())
		}
		assert.Equal(t, "499500\n", stdout.String(), "stderr: %s", stderr.String())
		used := mt.used(t, mod)
		t.Logf("ran in %v, fuel used %d, out_of_fuel called %d times", time.Since(start), used, mt.calls)
		assert.Greater(t, used, int64(mt.calls-1)<<24, "all but the last refill was spent")
		assert.Greater(t, mt.calls, 1)
		fuel = append(fuel, used)
		require.NoError(t, mod.Close(ctx))
	}
	assert.Equal(t, fuel[0], fuel[1], "with wazero's fixed clocks and random source, fuel is deterministic")

	// An endless loop ends when the host stops refilling.
	*mt = meter{refill: 1 << 24, limit: 40, stop: errStop}
	mod, err := r.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").
		WithStartFunctions().WithArgs("python", "-c", "while True: pass"))
	require.NoError(t, err)
	_, err = mod.ExportedFunction("_start").Call(ctx)
	assert.ErrorIs(t, err, errStop)
	assert.Equal(t, 40, mt.calls)
}
