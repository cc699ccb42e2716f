// Package sandbox runs untrusted code inside WebAssembly, in the caller's
// own process: CPython 3.13, the guest fumehood builds (see CompilePython),
// or any WASI preview 1 program.
//
// Compile a guest once and run it many times; a [Guest] is safe for
// concurrent use:
//
//	py, err := sandbox.CompilePython(ctx, nil)
//	if err != nil { ... }
//	defer py.Close()
//	res, err := py.Run(ctx, "print(6 * 7)", nil)
//	fmt.Printf("%s", res.Stdout) // 42
//
// Every run is a clean room. It has no network, no host files, an empty
// environment, empty standard input unless one is given, bounded captured
// output and a deadline. Everything else is opted into through [Config].
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/spf13/afero"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/cache"
	_ "github.com/fumehood/fumehood/internal/cxxrt" // the C++ runtime that variants with C++ exceptions link (guests/cpython.RegisterCxxRuntime)
	"github.com/fumehood/fumehood/internal/emeh"
	"github.com/fumehood/fumehood/internal/errnoshim"
	"github.com/fumehood/fumehood/internal/exnref"
	"github.com/fumehood/fumehood/internal/fuel"
	"github.com/fumehood/fumehood/internal/pipeline"
	"github.com/fumehood/fumehood/internal/pydriver"
	"github.com/fumehood/fumehood/internal/wasmbin"
)

// ErrGuestNotBuilt reports that the Python guest (or the variant
// Options.With asks for) is not built: not in the cache. Its message names
// the command that builds it, `fumehood guest build` (or `fumehood guest
// import` of a guest file built elsewhere).
var ErrGuestNotBuilt = cpython.ErrNotBuilt

// ErrUnknownPart reports an Options.With entry that is not an optional
// part of the Python guest.
var ErrUnknownPart = cpython.ErrUnknownPart

// ErrInvalidModule reports bytes that are not a WebAssembly module wazero
// can compile, or a module that imports something a sandbox does not offer.
var ErrInvalidModule = errors.New("sandbox: invalid guest module")

// ErrNotPython reports a call that needs the Python guest on another guest.
var ErrNotPython = errors.New("sandbox: not the Python guest")

// ErrClosed reports use of a closed Guest, Sandbox or Session, or of a
// session that a failed run could not roll back (the error then wraps the
// reason too).
var ErrClosed = errors.New("sandbox: closed")

// Options configure how a guest is compiled. The zero value uses the
// defaults.
type Options struct {
	// CacheDir holds built guests, base images and wazero's compilation
	// cache. If empty, $FUMEHOOD_CACHE_DIR or the user's cache directory.
	CacheDir string
	// Progress is told how the loading of a guest proceeds (the
	// preparation of a built guest whose preparation steps changed).
	Progress func(Progress)
	// OnRun, if set, is told of every run of the guest's sandboxes and
	// sessions when it ends, on the run's goroutine: a hook for an
	// embedder's metrics or logs (OpenTelemetry, slog, Prometheus). It
	// must not block, nor call the guest's sandboxes or sessions.
	OnRun func(RunEvent)
	// With asks for the variant of the built guest with these optional
	// parts compiled in: "numpy" (numpy 2.2.5, built by `fumehood guest
	// build --with numpy`), "pandas" (pandas 2.2.3 with numpy, `fumehood
	// guest build --with pandas`), "matplotlib" (matplotlib 3.10.9 with
	// numpy; not working yet, see docs/ARCHITECTURE.md) or "data" (numpy,
	// pandas and matplotlib). A variant that is not built is an
	// error matching ErrGuestNotBuilt that names its build command.
	With []string
	// ExceptionHandling lets Compile accept a module that uses WebAssembly
	// exception handling: C++ built with clang's -fwasm-exceptions (whose
	// legacy instructions Compile rewrites, see internal/exnref). C++
	// built with Emscripten-style exceptions (-mllvm
	// -enable-emscripten-cxx-exceptions, as internal/cxxrt builds it) needs
	// no option: Compile supports its env.invoke_* imports for every
	// module, with the bounds docs/SECURITY.md gives. This one is off by default,
	// and such a module is then an ErrInvalidModule: wazero v1.12's
	// exception handling is experimental, and each try_table the guest
	// enters copies the guest's whole call stack on the host (about 8 µs:
	// C++ enters one for each scope with a destructor), so a hostile module can make the host allocate memory
	// quadratic in its call depth, which Limits.Memory does not bound (see
	// docs/SECURITY.md). Enable it for code that needs exceptions and that
	// you trust not to nest them without bound.
	ExceptionHandling bool
}

// Guest is a compiled guest module. It is safe for concurrent use: each run
// gets its own instance. Close it to release the compiled code.
type Guest struct {
	onRun      func(RunEvent) // Options.OnRun
	rt         wazero.Runtime
	compiled   wazero.CompiledModule
	cache      wazero.CompilationCache
	python     bool
	fuel       bool // the guest meters fuel (always, for now)
	id         string
	imageID    string       // what the guest's base images depend on: id, and the standard library's digest
	minMemory  int64        // the memory the guest declares it needs to start
	stack      stackPointer // where the guest keeps its C stack pointer, if it does
	eh         *ehHost      // the guest's C++ invoke functions, if it has any (emeh.go)
	closed     atomic.Bool
	bases      baseImages               // session base images, by mount layout
	cacheDir   string                   // where base images are kept between processes
	prefetched atomic.Pointer[prefetch] // the default layout's base image, being read
	pyInfo     PythonInfo               // which Python guest (zero if not Python)
	stdlib     afero.Fs                 // the built guest's standard library, mounted at stdlibPath
	mems       memPool                  // the linear memories of closed instances (newInstance)
	background sync.WaitGroup           // sessions' checkpoints and releases after Run or Close returned

	closeOnce sync.Once
	closeErr  error
}

// stdlibPath is where a sandbox of the built guest mounts its standard
// library, read-only and shared by every sandbox of the process. Mounts may
// not use it.
const stdlibPath = cpython.StdlibMountPath

// PythonInfo says which Python guest a Guest is.
type PythonInfo struct {
	// Version is the CPython version, such as "3.13.5".
	Version string
	// SHA256 is the digest of the compiled binary (Guest.ID).
	SHA256 string
	// With lists the optional parts built into the guest (Options.With),
	// sorted, such as ["numpy"]; empty for the default guest.
	With []string
}

// Python says which Python guest g is; the zero PythonInfo for a guest
// that is not Python.
func (g *Guest) Python() PythonInfo { return g.pyInfo }

// CompilePython compiles the Python guest: CPython 3.13, built by
// `fumehood guest build` (or imported by `fumehood guest import`), or its
// variant with opts.With. One that is not built is an error matching
// ErrGuestNotBuilt that names the command. Every run of the guest, one-shot
// or in a session, starts from a pre-initialized image through the
// driver's entry points; CompilePython starts reading the cached image of
// the default layout while it compiles (about 10 MB, kept for the first
// run or session).
func CompilePython(ctx context.Context, opts *Options) (*Guest, error) {
	if opts == nil {
		opts = &Options{}
	}
	l, err := loadBuilt(ctx, opts)
	if err != nil {
		return nil, err
	}
	info := PythonInfo{Version: l.version, SHA256: l.sha256, With: l.with}
	// A base image holds the interpreter's state after start-up, which
	// read the standard library (zipimport's offsets into its zip, the
	// modules imported): a build that changed only the library needs new
	// images, so their name depends on its digest too.
	imageID := info.SHA256 + " " + l.stdlibSHA256
	var pre *prefetch
	if dir, err := cache.Dir(opts.CacheDir); err == nil {
		pre = startPrefetch(baseFileName(dir, imageID, sessionSourceFor(l.with), defaultLayout))
	}
	// The prepared guest is fuel-instrumented by the pipeline (cpython.Steps).
	g, err := compileMapped(ctx, l.wasm, opts, l.done)
	if err != nil {
		return nil, err
	}
	g.python = true
	g.id = info.SHA256
	g.imageID = imageID
	g.pyInfo = info
	g.stdlib = l.stdlib
	if !pydriver.HasDriver(g.compiled) {
		g.Close()
		return nil, fmt.Errorf("%w: the built guest exports no driver entry points (rebuild it: %s)", ErrInvalidModule, cpython.BuildCommand)
	}
	g.prefetched.Store(pre)
	g.onRun = opts.OnRun
	return g, nil
}

// loaded is a Python guest's binary as its provider gave it.
type loaded struct {
	wasm         []byte
	sha256       string
	version      string
	stdlibSHA256 string       // the standard library tar's digest
	stdlib       afero.Fs     // the guest's standard library
	with         []string     // the built guest's optional parts (Info.With)
	done         func() error // releases wasm when it is a mapping of the cache
}

// loadBuilt maps the built guest, or its variant with opts.With, from the
// cache.
func loadBuilt(ctx context.Context, opts *Options) (l loaded, err error) {
	copts := &cpython.Options{CacheDir: opts.CacheDir, Progress: opts.progress(), With: opts.With}
	var built cpython.Info
	l.wasm, built, l.done, err = cpython.Open(ctx, copts)
	l.sha256 = built.PreparedSHA256
	if err != nil {
		return l, err
	}
	if l.stdlib, err = cpython.StdlibFS(ctx, copts); err != nil {
		if l.done != nil {
			l.done()
		}
		return l, err
	}
	l.version, l.with, l.stdlibSHA256 = built.Python, built.With, built.StdlibSHA256
	return l, nil
}

// Compile compiles a WASI preview 1 program. The module may import only
// wasi_snapshot_preview1, and the env.invoke_* and env.fumehood_unwind
// functions of C++ exceptions built with internal/cxxrt's runtime. Compile instruments it with fuel metering first,
// which takes about a second for every 10 MB of code.
func Compile(ctx context.Context, wasm []byte, opts *Options) (*Guest, error) {
	if opts == nil {
		opts = &Options{}
	}
	if !wasmbin.IsWasm(wasm) {
		return nil, fmt.Errorf("%w: not a WebAssembly binary module", ErrInvalidModule)
	}
	bounded, err := boundModule(wasm)
	if err != nil {
		return nil, err
	}
	// The same preparation as the Python guest's pipeline: legacy
	// exception handling (C++ built with clang 19's -fwasm-exceptions)
	// rewritten to the form wazero runs, the errno shim, then fuel, which
	// also meters the shim.
	translated := bounded
	if opts.ExceptionHandling {
		if translated, err = exnref.Translate(bounded); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
		}
	} else if exnref.Uses(bounded) {
		return nil, fmt.Errorf("%w: the module uses exception handling (C++ exceptions): Options.ExceptionHandling enables it", ErrInvalidModule)
	}
	prepared, err := emeh.Prepare(translated)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	shimmed, err := errnoshim.Shim(prepared)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	metered, err := fuel.Instrument(shimmed)
	if err != nil {
		// Including ErrInstrumented: a module that brings its own fuel
		// import could skip the metering that deadlines rely on.
		return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	g, err := compile(ctx, metered, opts)
	if err != nil {
		return nil, err
	}
	g.id = pipeline.Digest(wasm)
	g.onRun = opts.OnRun
	return g, nil
}

// compileMapped compiles wasm as compile does. If done is set, wasm is a
// mapping of the cache (cpython.Open): a fault reading it (its
// file truncated meanwhile) is an error (pipeline.SafeCopy), and
// done, called once wazero has read it (wazero v1.12 copies what it keeps
// of a module while decoding it), unmaps it and reports a file that changed
// while it was read; that error wins, since what was compiled may not be
// what was checked.
func compileMapped(ctx context.Context, wasm []byte, opts *Options, done func() error) (*Guest, error) {
	if done == nil {
		return compile(ctx, wasm, opts)
	}
	var (
		g   *Guest
		err error
	)
	if ferr := pipeline.SafeCopy(func() { g, err = compile(ctx, wasm, opts) }); ferr != nil {
		g, err = nil, fmt.Errorf("%w: %w", ErrInvalidModule, ferr)
	}
	if derr := done(); derr != nil {
		if g != nil {
			g.Close()
		}
		return nil, fmt.Errorf("sandbox: the cached guest: %w", derr)
	}
	return g, err
}

// compile compiles a fuel-instrumented module. The caller sets the guest's
// id: CompilePython has the digest from the store already, and hashing
// the module again would cost a pass over it in every process.
func compile(ctx context.Context, wasm []byte, opts *Options) (g *Guest, err error) {
	if !wasmbin.IsWasm(wasm) {
		return nil, fmt.Errorf("%w: not a WebAssembly binary module", ErrInvalidModule)
	}
	minMem, stack, err := memoryLayout(wasm)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	dir, err := cache.Dir(opts.CacheDir)
	if err != nil {
		return nil, err
	}
	cache, err := wazero.NewCompilationCacheWithDir(filepath.Join(dir, "wazero"))
	if err != nil {
		return nil, fmt.Errorf("sandbox: compilation cache: %w", err)
	}
	features := api.CoreFeaturesV2
	if opts.ExceptionHandling {
		features |= experimental.CoreFeaturesExceptionHandling
	}
	cfg := wazero.NewRuntimeConfigCompiler().
		WithCoreFeatures(features).
		WithCompilationCache(cache).
		WithDebugInfoEnabled(false)
	// Deadlines do not use WithCloseOnContextDone, which costs 2-3x CPU:
	// a watchdog poisons the fuel global instead (see limits.go).
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: compiler panicked: %v", ErrInvalidModule, r)
		}
		if err != nil {
			rt.Close(ctx)
			cache.Close(ctx)
		}
	}()
	if err = instantiateWASI(ctx, rt); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if err = instantiateFuelHost(ctx, rt); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidModule, err)
	}
	eh, err := newEHHost(compiled)
	if err != nil {
		return nil, err
	}
	if eh != nil {
		if err = eh.instantiate(ctx, rt); err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
	}
	for _, f := range compiled.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod != wasi_snapshot_preview1.ModuleName && (mod != fuel.ImportModule || name != fuel.ImportName) && mod != emeh.ImportModule {
			return nil, fmt.Errorf("%w: it imports %s.%s, and a sandbox offers only %s", ErrInvalidModule, mod, name, wasi_snapshot_preview1.ModuleName)
		}
	}
	if len(compiled.ImportedMemories()) > 0 {
		return nil, fmt.Errorf("%w: it imports its memory", ErrInvalidModule)
	}
	if _, ok := compiled.ExportedFunctions()["_start"]; !ok {
		return nil, fmt.Errorf("%w: it exports no _start function (not a WASI command)", ErrInvalidModule)
	}
	g = &Guest{
		rt: rt, compiled: compiled, cache: cache, cacheDir: dir,
		fuel: true, minMemory: minMem, stack: stack, eh: eh,
	}
	g.mems.wg = &g.background
	return g, nil
}

// memoryLayout returns the initial size, in bytes, of the module's memory
// and where it keeps its C stack pointer (see findStackPointer).
func memoryLayout(wasm []byte) (int64, stackPointer, error) {
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		return 0, stackPointer{}, err
	}
	stack := findStackPointer(m)
	sec := m.Section(wasmbin.SectionMemory)
	if sec == nil {
		return 0, stack, nil
	}
	count, n, err := wasmbin.U32(sec.Payload)
	if err != nil || count == 0 || n >= len(sec.Payload) {
		return 0, stack, nil // the runtime rejects what is malformed here
	}
	pages, _, err := wasmbin.U32(sec.Payload[n+1:]) // after the limits flag
	if err != nil {
		return 0, stack, nil
	}
	return int64(pages) << 16, stack, nil
}

// ID identifies the guest build: the SHA-256 of the binary that was compiled.
func (g *Guest) ID() string { return g.id }

// IsPython reports whether g is the Python guest.
func (g *Guest) IsPython() bool { return g.python }

// Close releases the compiled code. Runs in progress are stopped. It is
// safe to call more than once; later calls return the first call's error.
func (g *Guest) Close() error {
	ctx := context.Background()
	g.closeOnce.Do(func() {
		g.closed.Store(true)
		g.mems.close()
		g.background.Wait() // they read instances the runtime closes
		g.closeErr = g.rt.Close(ctx)
		if err := g.cache.Close(ctx); g.closeErr == nil {
			g.closeErr = err
		}
	})
	return g.closeErr
}

func (g *Guest) isClosed() bool { return g.closed.Load() }

// Progress reports how the preparation of a guest proceeds, to
// Options.Progress.
type Progress struct {
	// Stage is "prepare" (or "fetch" and "build" while a guest is built).
	Stage string
	// Step names the step of the stage.
	Step string
	// Done and Total count the stage's steps.
	Done, Total int64
}

// progress adapts Options.Progress to the providers' callback.
func (o *Options) progress() func(cache.Progress) {
	if o.Progress == nil {
		return nil
	}
	return func(p cache.Progress) { o.Progress(Progress(p)) }
}
