//go:build linux

// Command cpuexp times the CPU set (bench/cpuset) on several builds of the
// Python guest and wazero settings, alternating between them, and prints
// the medians and their ratios to the first variant. It is how the
// experiments in bench/README.md were measured:
//
//	go run ./bench/cpuexp -variants native,fuel,plain -reps 5
//	go run ./bench/cpuexp -dump-plain /tmp/plain.wasm   # for wasm-opt
//	go run ./bench/cpuexp -variants plain,wasm:/tmp/plain-O2.wasm,fuelwasm:/tmp/plain-O2.wasm
//
// Variants: native (the machine's python3), fuel (the Python guest, as
// sandbox.CompilePython runs it), plain (the built guest's interpreter,
// debug sections stripped, no fuel, on bare wazero, with -root and -env as
// for wasmfs), interp (plain on wazero's interpreter),
// wasm:FILE (any CPython build, no fuel, bare wazero), fuelwasm:FILE (FILE
// through sandbox.Compile: errno shim and fuel, as a user's module), v8:FILE
// (FILE on Node.js's WASI, V8's optimizing compiler only); wasmfs:FILE and
// v8fs:FILE are wasm and v8 with -root mounted at / and -env set, for a
// CPython build whose standard library is on disk; fuelfs:FILE is fuelwasm
// with -root mounted at /py and /py put before every path in -env; built is
// the guest `fumehood guest build` made (guests/cpython) through
// sandbox.Compile, its standard library mounted read-only at /usr; numpy
// is built's variant with numpy (`fumehood guest build --with numpy`);
// builtwasm:FILE is built with FILE as the interpreter (another build of
// the same recipe: flags, patches), its standard library the built one's;
// builtwasm:FILE?K=V&K=V runs it with that environment.
package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"github.com/fumehood/fumehood/wasi"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/fumehood/fumehood/bench/internal/cpuset"
	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/cache"
	"github.com/fumehood/fumehood/internal/pipeline"
	"github.com/fumehood/fumehood/sandbox"
)

//go:embed nodewasi.js
var nodeWASI []byte

// rootDir and env are the file system and environment of the wasmfs and
// v8fs variants: a CPython build whose standard library is on disk, not
// embedded.
var (
	rootDir string
	env     []string
)

// noCache turns wazero's file compilation cache off: a build with -tags
// perfmap writes /tmp/perf-PID.map only for code it compiles.
var noCache bool

// runner runs one program's harness and returns its output and the CPU
// milliseconds the run took.
type runner func(ctx context.Context, code string) (out string, cpuMs float64, err error)

// rusageThread is Linux's RUSAGE_THREAD, which package syscall lacks.
const rusageThread = 1

// threadCPU runs f on a locked OS thread (wazero runs the guest on the
// calling goroutine) and returns the CPU milliseconds that thread used.
func threadCPU(f func() error) (float64, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &before); err != nil {
		return 0, err
	}
	err := f()
	if err := syscall.Getrusage(rusageThread, &after); err != nil {
		return 0, err
	}
	return tvMs(after.Utime) + tvMs(after.Stime) - tvMs(before.Utime) - tvMs(before.Stime), err
}

func tvMs(t syscall.Timeval) float64 { return float64(t.Sec)*1000 + float64(t.Usec)/1000 }

func main() {
	variants := flag.String("variants", "native,fuel,plain", "comma-separated variants; ratios are to the first")
	progs := flag.String("programs", "", "comma-separated program names (default: all)")
	reps := flag.Int("reps", 5, "rounds; each runs every program once in every variant")
	dump := flag.String("dump-plain", "", "write the strip-debug-only guest to this file and exit")
	flag.StringVar(&rootDir, "root", "", "with wasmfs:FILE and v8fs:FILE, the host directory mounted as the guest's /")
	flag.Func("env", "with wasmfs:FILE and v8fs:FILE, an environment variable K=V for the guest (repeatable)", func(kv string) error {
		env = append(env, kv)
		return nil
	})
	flag.BoolVar(&noCache, "no-cache", false, "compile afresh, without wazero's file cache (needed for -tags perfmap)")
	flag.Parse()
	if err := run(context.Background(), strings.Split(*variants, ","), *progs, *reps, *dump); err != nil {
		fmt.Fprintln(os.Stderr, "cpuexp:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, variants []string, progs string, reps int, dump string) error {
	if dump != "" {
		wasm, err := plainGuest()
		if err != nil {
			return err
		}
		return os.WriteFile(dump, wasm, 0o644)
	}
	var set []cpuset.Program
	for _, p := range cpuset.Programs {
		if progs == "" || slices.Contains(strings.Split(progs, ","), p.Name) {
			set = append(set, p)
		}
	}
	runners := make([]runner, len(variants))
	for i, v := range variants {
		r, closer, err := newRunner(ctx, v)
		if err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
		defer closer()
		runners[i] = r
	}
	// Wall time inside the interpreter is what users see, but on a shared
	// machine it mostly measures the neighbours. CPU time of the thread that
	// runs the guest (of the child, for native) is far steadier; start-up is
	// taken out by subtracting the CPU time of an empty program.
	ms := map[string][][]float64{}  // program -> variant -> wall samples
	cpu := map[string][][]float64{} // program -> variant -> CPU samples
	for _, p := range set {
		ms[p.Name] = make([][]float64, len(variants))
		cpu[p.Name] = make([][]float64, len(variants))
	}
	empty := make([]float64, len(variants))
	for i, r := range runners {
		var e []float64
		for range 3 {
			_, c, err := r(ctx, "pass")
			if err != nil {
				return fmt.Errorf("%s: %w", variants[i], err)
			}
			e = append(e, c)
		}
		empty[i] = median(e)
	}
	for round := range reps {
		fmt.Fprintf(os.Stderr, "round %d/%d\n", round+1, reps)
		for _, p := range set {
			for i, r := range runners {
				out, c, err := r(ctx, cpuset.Harness(p))
				if err != nil {
					return fmt.Errorf("%s %s: %w", variants[i], p.Name, err)
				}
				lines := strings.Split(strings.TrimSpace(out), "\n")
				s, err := strconv.ParseFloat(lines[len(lines)-1], 64)
				if err != nil {
					return fmt.Errorf("%s %s: no timing in %q", variants[i], p.Name, out)
				}
				ms[p.Name][i] = append(ms[p.Name][i], s*1000)
				cpu[p.Name][i] = append(cpu[p.Name][i], c-empty[i])
			}
		}
	}
	table("wall time inside the interpreter", variants, set, ms)
	table("CPU time of the run less an empty run's", variants, set, cpu)
	return nil
}

func table(title string, variants []string, set []cpuset.Program, ms map[string][][]float64) {
	writeTable(os.Stdout, title, variants, set, ms)
}

func writeTable(w io.Writer, title string, variants []string, set []cpuset.Program, ms map[string][][]float64) {
	fmt.Fprintf(w, "\n%s, median ms (ratio to %s):\n\n", title, variants[0])
	fmt.Fprintf(w, "| program | %s |\n|---|%s\n", strings.Join(variants, " | "), strings.Repeat("---:|", len(variants)))
	logs := make([]float64, len(variants))
	for _, p := range set {
		cells := []string{p.Name}
		base := median(ms[p.Name][0])
		for i := range variants {
			m := median(ms[p.Name][i])
			cell := fmt.Sprintf("%.0f", m)
			if i > 0 {
				cell += fmt.Sprintf(" (%.2fx)", m/base)
			}
			logs[i] += ln(m / base)
			cells = append(cells, cell)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	cells := []string{"geometric mean of ratios"}
	for i := range variants {
		cells = append(cells, fmt.Sprintf("%.2fx", exp(logs[i]/float64(len(set)))))
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

func newRunner(ctx context.Context, v string) (runner, func(), error) {
	kind, file, _ := strings.Cut(v, ":")
	var venv string
	if kind == "builtwasm" {
		file, venv, _ = strings.Cut(file, "?")
	}
	switch kind {
	case "native", "v8", "v8fs":
		py, err := exec.LookPath("python3")
		if err != nil {
			return nil, nil, err
		}
		argv := func(code string) []string { return []string{py, "-c", code} }
		if kind != "native" {
			dir, err := os.MkdirTemp("", "cpuexp")
			if err != nil {
				return nil, nil, err
			}
			js := filepath.Join(dir, "nodewasi.js")
			if err := os.WriteFile(js, nodeWASI, 0o644); err != nil {
				return nil, nil, err
			}
			// TurboFan only: Liftoff's baseline code would be timed otherwise.
			argv = func(code string) []string { return []string{"node", "--no-warnings", "--no-liftoff", js, file, code} }
			if kind == "v8fs" {
				argv = func(code string) []string {
					return []string{"env", "WASI_ROOT=" + rootDir, "WASI_ENV=" + strings.Join(env, "\n"),
						"node", "--no-warnings", "--no-liftoff", js, file, code}
				}
			}
		}
		return func(_ context.Context, code string) (string, float64, error) {
			a := argv(code)
			cmd := exec.Command(a[0], a[1:]...)
			out, err := cmd.Output()
			if err != nil {
				return "", 0, err
			}
			st := cmd.ProcessState
			return string(out), float64((st.UserTime() + st.SystemTime()).Microseconds()) / 1000, nil
		}, func() {}, nil
	case "fuel":
		g, err := sandbox.CompilePython(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, code string) (string, float64, error) {
			var res *sandbox.Result
			c, err := threadCPU(func() (err error) {
				res, err = g.Run(ctx, code, &sandbox.RunOptions{Limits: sandbox.Limits{Fuel: sandbox.UnlimitedFuel, Timeout: -1}})
				return err
			})
			if err != nil {
				return "", 0, fmt.Errorf("%w: %s", err, res.Stderr)
			}
			return string(res.Stdout), c, nil
		}, func() { g.Close() }, nil
	case "fuelwasm", "fuelfs", "built", "numpy", "builtwasm":
		var wasm []byte
		var err error
		var copts *cpython.Options
		if kind == "numpy" {
			copts, kind = &cpython.Options{With: []string{cpython.Numpy}}, "built"
		}
		if kind == "built" {
			wasm, _, err = cpython.LoadUnprepared(ctx, copts)
		} else {
			wasm, err = os.ReadFile(file)
		}
		if err != nil {
			return nil, nil, err
		}
		opts := &sandbox.Options{}
		if noCache {
			if opts.CacheDir, err = os.MkdirTemp("", "cpuexp"); err != nil {
				return nil, nil, err
			}
			defer os.RemoveAll(opts.CacheDir)
		}
		g, err := sandbox.Compile(ctx, wasm, opts)
		if err != nil {
			return nil, nil, err
		}
		scfg := &sandbox.Config{Limits: sandbox.Limits{Fuel: sandbox.UnlimitedFuel, Timeout: -1}}
		if kind == "builtwasm" {
			kind = "built"
		}
		if kind == "built" {
			// The built guest's standard library, read-only at /usr, one
			// copy for every sandbox.
			lib, err := cpython.StdlibFS(ctx, copts)
			if err != nil {
				return nil, nil, err
			}
			scfg.Mounts = []sandbox.Mount{{Path: cpython.StdlibMountPath, FS: lib, ReadOnly: true}}
			if venv != "" {
				// builtwasm:FILE?K=V&K=V: the variant's own environment
				// (PYTHONMALLOC=mimalloc, say).
				scfg.Env = map[string]string{}
				for _, kv := range strings.Split(venv, "&") {
					k, v, _ := strings.Cut(kv, "=")
					scfg.Env[k] = v
				}
			}
		}
		if kind == "fuelfs" {
			// The sandbox's root is its own; the build's tree goes at /py,
			// so -env paths must start with /py.
			pyFs, err := wasi.HostDir(rootDir)
			if err != nil {
				return nil, nil, err
			}
			scfg.Mounts = []sandbox.Mount{{Path: "/py", FS: pyFs, ReadOnly: true}}
			scfg.Env = map[string]string{}
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				parts := strings.Split(v, ":")
				for i := range parts {
					parts[i] = "/py" + parts[i]
				}
				scfg.Env[k] = strings.Join(parts, ":")
			}
		}
		return func(ctx context.Context, code string) (string, float64, error) {
			var res *sandbox.Result
			c, err := threadCPU(func() (err error) {
				sb, err := g.NewSandbox(scfg)
				if err != nil {
					return err
				}
				defer sb.Close()
				res, err = sb.Exec(ctx, nil, "-u", "-B", "-c", code)
				return err
			})
			if err != nil {
				return "", 0, fmt.Errorf("%w: %s", err, res.Stderr)
			}
			return string(res.Stdout), c, nil
		}, func() { g.Close() }, nil
	case "plain", "interp", "wasm", "wasmfs":
		var wasm []byte
		var err error
		if kind == "wasm" || kind == "wasmfs" {
			wasm, err = os.ReadFile(file)
		} else {
			wasm, err = plainGuest()
		}
		if err != nil {
			return nil, nil, err
		}
		return bare(ctx, wasm, kind == "interp", kind != "wasm")
	}
	return nil, nil, fmt.Errorf("unknown variant %q", v)
}

// plainGuest returns the built guest's interpreter before its preparation
// steps (debug sections stripped, no errno shim, no fuel).
func plainGuest() ([]byte, error) {
	info, err := cpython.Built(nil)
	if err != nil {
		return nil, err
	}
	dir, err := cache.Dir("")
	if err != nil {
		return nil, err
	}
	return pipeline.NewStore(filepath.Join(dir, "guests")).Get(info.WasmSHA256)
}

// bare runs a WASI module on plain wazero: real clocks, no fuel, no limits.
func bare(ctx context.Context, wasm []byte, interp, withFS bool) (runner, func(), error) {
	cfg := wazero.NewRuntimeConfigCompiler()
	if interp {
		cfg = wazero.NewRuntimeConfigInterpreter()
	} else if !noCache {
		dir, err := cache.Dir("")
		if err != nil {
			return nil, nil, err
		}
		cc, err := wazero.NewCompilationCacheWithDir(filepath.Join(dir, "bench", "wazero"))
		if err != nil {
			return nil, nil, err
		}
		cfg = cfg.WithCompilationCache(cc)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, cfg.WithDebugInfoEnabled(false))
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, code string) (string, float64, error) {
		var out, errOut bytes.Buffer
		mc := wazero.NewModuleConfig().WithName("").WithArgs("python", "-B", "-c", code).
			WithStdout(&out).WithStderr(&errOut).WithSysNanotime().WithSysWalltime()
		if withFS {
			mc = mc.WithFSConfig(wazero.NewFSConfig().WithReadOnlyDirMount(rootDir, "/"))
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				mc = mc.WithEnv(k, v)
			}
		}
		c, err := threadCPU(func() error {
			mod, err := rt.InstantiateModule(ctx, compiled, mc)
			if mod != nil {
				mod.Close(ctx)
			}
			return err
		})
		var exit *sys.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 0 {
			err = nil
		}
		if err != nil {
			return "", 0, fmt.Errorf("%w: %s", err, errOut.String())
		}
		return out.String(), c, nil
	}, func() { rt.Close(ctx) }, nil
}
