// Package sandbox runs untrusted code inside WebAssembly, in the caller's
// own process: CPython (3.13, the guest fumehood builds, or 3.12, the npm
// guest; see CompilePython) or any WASI preview 1 program.
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
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/spf13/afero"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/fumehood/fumehood/internal/errnoshim"
	"github.com/fumehood/fumehood/internal/fuel"
	"github.com/fumehood/fumehood/internal/guests/cpython"
	"github.com/fumehood/fumehood/internal/guests/npm"
	"github.com/fumehood/fumehood/internal/pipeline"
	"github.com/fumehood/fumehood/internal/wasmbin"
)

// ErrGuestNotInstalled reports that the Python guest is not in the cache.
// Its message names the command that installs it.
var ErrGuestNotInstalled = npm.ErrGuestNotInstalled

// ErrGuestNotBuilt reports that GuestBuilt was asked for and the built guest
// is not in the cache. Its message names the command that builds it.
var ErrGuestNotBuilt = cpython.ErrNotBuilt

// ErrUnknownPart reports an Options.With entry that is not an optional
// part of the chosen guest.
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
	// CacheDir holds installed guests and wazero's compilation cache. If
	// empty, npm.CacheDir("") decides ($FUMEHOOD_CACHE_DIR or the
	// user's cache directory).
	CacheDir string
	// Install makes CompilePython install the Python guest when it is not
	// in the cache, instead of returning ErrGuestNotInstalled.
	Install bool
	// Progress is told how an installation proceeds.
	Progress func(Progress)
	// Sessions makes CompilePython load a guest that Guest.NewSession
	// can use. The built guest needs nothing more: its one build has the
	// driver's entry points, and its sessions, like its one-shot runs,
	// start from pre-initialized images, whatever Sessions says. For the
	// npm guest it compiles the session build: CPython prepared so that it
	// can pause between runs (asyncify, by Binaryen's wasm-opt; `fumehood
	// guest install --session` prepares it), which runs code 25-50% slower
	// than the plain build, so ask for it only where sessions are used.
	// With Sessions, CompilePython also reads the cached base image of
	// sessions without mounts while it compiles (about 10 MB, kept for the
	// first NewSession or run).
	Sessions bool
	// Guest chooses the Python guest CompilePython loads: GuestBuilt,
	// GuestNPM, or empty for $FUMEHOOD_GUEST (GuestEnv) or, without it, the
	// built guest where it is built and the npm guest elsewhere.
	Guest string
	// OnRun, if set, is told of every run of the guest's sandboxes and
	// sessions when it ends, on the run's goroutine: a hook for an
	// embedder's metrics or logs (OpenTelemetry, slog, Prometheus). It
	// must not block, nor call the guest's sandboxes or sessions.
	OnRun func(RunEvent)
	// With asks for the variant of the built guest with these optional
	// parts compiled in: "numpy" (numpy 2.2.5, built by `fumehood guest
	// build --with numpy`). It implies GuestBuilt; the npm guest has no
	// parts (ErrUnknownPart). A variant that is not built is an error
	// matching ErrGuestNotBuilt that names its build command.
	With []string
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
	minMemory  int64        // the memory the guest declares it needs to start
	stack      stackPointer // where the guest keeps its C stack pointer, if it does
	closed     atomic.Bool
	sessions   bool                     // NewSession works: the session build, or driver
	driver     bool                     // the guest has the driver's entry points: runs start from images
	globals    []string                 // the exported mutable globals but fuel
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

// The Python guests CompilePython can load (Options.Guest, Guest.Python).
const (
	// GuestBuilt is the project's own CPython 3.13 guest, built by
	// `fumehood guest build` (package internal/guests/cpython), with its standard
	// library mounted read-only at /usr.
	GuestBuilt = "built"
	// GuestNPM is the CPython 3.12 guest of an npm package, installed by
	// `fumehood guest install` (package internal/guests/npm): the fallback that
	// needs no toolchain.
	GuestNPM = "npm"
)

// GuestEnv is the environment variable that chooses the Python guest when
// Options.Guest is empty: GuestBuilt or GuestNPM; unset (or "auto") means
// the built guest where it is built, else the npm guest.
const GuestEnv = "FUMEHOOD_GUEST"

// ErrUnknownGuest reports an Options.Guest (or $FUMEHOOD_GUEST) that names
// no Python guest.
var ErrUnknownGuest = errors.New("sandbox: unknown Python guest")

// stdlibPath is where a sandbox of the built guest mounts its standard
// library, read-only and shared by every sandbox of the process. Mounts may
// not use it.
const stdlibPath = cpython.StdlibMountPath

// PythonInfo says which Python guest a Guest is.
type PythonInfo struct {
	// Guest is GuestBuilt or GuestNPM.
	Guest string
	// Version is the CPython version, such as "3.13.5".
	Version string
	// SHA256 is the digest of the compiled binary (Guest.ID).
	SHA256 string
	// Sessions reports the session build.
	Sessions bool
	// With lists the optional parts built into the guest (Options.With),
	// sorted, such as ["numpy"]; empty for the default guest.
	With []string
}

// Python says which Python guest g is; the zero PythonInfo for a guest
// that is not Python.
func (g *Guest) Python() PythonInfo { return g.pyInfo }

// ChooseGuest returns the Python guest CompilePython loads for opts:
// opts.Guest, else $FUMEHOOD_GUEST, else GuestBuilt if the built guest is in
// the cache and GuestNPM if not; always GuestBuilt when opts.With names
// optional parts, which only the built guest has (ErrUnknownPart if opts
// or $FUMEHOOD_GUEST ask for the npm guest). It reads only the built
// guest's manifest.
func ChooseGuest(opts *Options) (string, error) {
	if opts == nil {
		opts = &Options{}
	}
	kind := opts.Guest
	if kind == "" {
		kind = os.Getenv(GuestEnv)
	}
	switch kind {
	case GuestNPM:
		if len(opts.With) > 0 {
			return "", fmt.Errorf("%w: the npm guest has none (With %q): use the built guest", ErrUnknownPart, opts.With)
		}
		return kind, nil
	case GuestBuilt:
		return kind, nil
	case "", "auto":
		if len(opts.With) > 0 {
			return GuestBuilt, nil
		}
		if _, err := cpython.Built(&cpython.Options{CacheDir: opts.CacheDir}); err == nil {
			return GuestBuilt, nil
		}
		return GuestNPM, nil
	}
	return "", fmt.Errorf("%w %q (want %q or %q)", ErrUnknownGuest, kind, GuestBuilt, GuestNPM)
}

// CompilePython compiles a Python guest: the one opts.Guest names, else the
// built guest (GuestBuilt) where it is built, else the npm guest
// (GuestNPM); Guest.Python says which. If the npm guest is not installed it
// returns an error matching ErrGuestNotInstalled, unless opts.Install is
// set; the built guest, when asked for and not built, an error matching
// ErrGuestNotBuilt.
func CompilePython(ctx context.Context, opts *Options) (*Guest, error) {
	if opts == nil {
		opts = &Options{}
	}
	kind, err := ChooseGuest(opts)
	if err != nil {
		return nil, err
	}
	// A one-shot build loaded without installing (what the CLI's run
	// does) is a mapping of the cache.
	mapped := !opts.Sessions && !opts.Install
	load := loadNPM
	if kind == GuestBuilt {
		load, mapped = loadBuilt, !opts.Install
	}
	l, err := load(ctx, opts, mapped)
	if err != nil {
		return nil, err
	}
	// The built guest has the driver's entry points (cpython.HasDriver):
	// its runs and sessions start from images, and its one build serves
	// both.
	driver := kind == GuestBuilt
	info := PythonInfo{Guest: kind, Version: l.version, SHA256: l.sha256, Sessions: opts.Sessions || driver, With: l.with}
	var pre *prefetch
	if info.Sessions {
		if dir, err := npm.CacheDir(opts.CacheDir); err == nil {
			pre = startPrefetch(baseFileName(dir, info.SHA256, sessionSourceFor(driver, l.with), defaultLayout))
		}
	}
	// The prepared guest is fuel-instrumented by the pipeline (npm.Steps).
	g, err := compileMapped(ctx, l.wasm, opts, l.done)
	if err != nil {
		return nil, err
	}
	g.python = true
	g.id = info.SHA256
	g.pyInfo = info
	g.stdlib = l.stdlib
	if driver && !cpython.HasDriver(g.compiled) {
		g.Close()
		return nil, fmt.Errorf("%w: the built guest exports no driver entry points (rebuild it: %s)", ErrInvalidModule, cpython.BuildCommand)
	}
	g.driver = driver
	if opts.Sessions && !driver {
		if err := g.sessionGlobals(l.wasm); err != nil {
			g.Close()
			return nil, err
		}
	}
	g.sessions = info.Sessions
	g.prefetched.Store(pre)
	g.onRun = opts.OnRun
	return g, nil
}

// loaded is a Python guest's binary as its provider gave it.
type loaded struct {
	wasm    []byte
	sha256  string
	version string
	stdlib  afero.Fs     // the built guest's standard library; nil for the npm guest
	with    []string     // the built guest's optional parts (Info.With)
	done    func() error // releases wasm when it is a mapping of the cache
}

// loadBuilt loads the built guest, or its variant with opts.With; mapped
// maps it from the cache instead of reading it. Its one build serves
// sessions too: they start from its images through the driver's entry
// points, with no asyncify.
func loadBuilt(ctx context.Context, opts *Options, mapped bool) (l loaded, err error) {
	copts := &cpython.Options{CacheDir: opts.CacheDir, Progress: opts.progress(), With: opts.With}
	var built cpython.Info
	if mapped {
		l.wasm, built, l.done, err = cpython.Open(ctx, copts)
	} else {
		l.wasm, built, err = cpython.Load(ctx, copts)
	}
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
	l.version, l.with = built.Python, built.With
	return l, nil
}

// loadNPM loads the npm guest as loadBuilt loads the built one.
func loadNPM(ctx context.Context, opts *Options, mapped bool) (l loaded, err error) {
	popts := &npm.Options{CacheDir: opts.CacheDir, Progress: opts.progress()}
	load := npm.Load
	if opts.Install {
		load = npm.Ensure
	}
	if opts.Sessions {
		load = npm.LoadSession
		if opts.Install {
			load = npm.EnsureSession
		}
	}
	var build npm.Build
	if mapped {
		l.wasm, build, l.done, err = npm.Open(ctx, popts)
	} else {
		l.wasm, build, err = load(ctx, popts)
	}
	l.sha256, l.version = build.SHA256, npm.Version
	return l, err
}

// Compile compiles a WASI preview 1 program. The module may import only
// wasi_snapshot_preview1. Compile instruments it with fuel metering first,
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
	// The same preparation as the Python guest's pipeline: the errno shim,
	// then fuel, which also meters the shim.
	shimmed, err := errnoshim.Shim(bounded)
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
// mapping of the cache (npm.Open, cpython.Open): a fault reading it (its
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
	dir, err := npm.CacheDir(opts.CacheDir)
	if err != nil {
		return nil, err
	}
	cache, err := wazero.NewCompilationCacheWithDir(filepath.Join(dir, "wazero"))
	if err != nil {
		return nil, fmt.Errorf("sandbox: compilation cache: %w", err)
	}
	cfg := wazero.NewRuntimeConfigCompiler().
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
	for _, f := range compiled.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod != wasi_snapshot_preview1.ModuleName && (mod != fuel.ImportModule || name != fuel.ImportName) {
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
		fuel: true, minMemory: minMem, stack: stack,
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

// sessionGlobals records the mutable globals a session's state holds:
// every one the build exports, but the fuel meter, which each run sets.
func (g *Guest) sessionGlobals(wasm []byte) error {
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	globals, err := wasmbin.MutableGlobals(m)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	for _, gl := range globals {
		if gl.Export == "" {
			return fmt.Errorf("%w: the session build does not export mutable global %d", ErrInvalidModule, gl.Index)
		}
		if gl.Export != fuel.GlobalName {
			g.globals = append(g.globals, gl.Export)
		}
	}
	return nil
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

// Progress reports how the installation or preparation of a guest
// proceeds, to Options.Progress.
type Progress struct {
	// Stage is "download", "verify", "extract" (installing the npm
	// guest), "fetch", "build" (building our own) or "prepare".
	Stage string
	// Step names the preparation step during the "prepare" stage.
	Step string
	// Done and Total count bytes during "download" (Total is -1 if
	// unknown), and steps during "prepare".
	Done, Total int64
}

// progress adapts Options.Progress to the providers' callback.
func (o *Options) progress() func(npm.Progress) {
	if o.Progress == nil {
		return nil
	}
	return func(p npm.Progress) { o.Progress(Progress(p)) }
}
