// Package sandbox runs untrusted code inside WebAssembly, in the caller's
// own process: CPython 3.12 (the bundled guest) or any WASI preview 1
// program.
//
// Compile a guest once and run it many times; a [Guest] is safe for
// concurrent use:
//
//	py, err := sandbox.CompilePython(ctx, nil)
//	if err != nil { ... }
//	defer py.Close(ctx)
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

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/fumehood/fumehood/guests/python"
	"github.com/fumehood/fumehood/internal/pipeline"
	"github.com/fumehood/fumehood/internal/wasmbin"
)

// ErrGuestNotInstalled reports that the Python guest is not in the cache.
// Its message names the command that installs it.
var ErrGuestNotInstalled = python.ErrGuestNotInstalled

// ErrInvalidModule reports bytes that are not a WebAssembly module wazero
// can compile, or a module that imports something a sandbox does not offer.
var ErrInvalidModule = errors.New("sandbox: invalid guest module")

// ErrNotPython reports a call that needs the Python guest on another guest.
var ErrNotPython = errors.New("sandbox: not the Python guest")

// ErrClosed reports use of a closed Guest.
var ErrClosed = errors.New("sandbox: guest is closed")

// DefaultMemoryLimit is the most linear memory a guest instance may have.
const DefaultMemoryLimit = 256 << 20

// Options configure how a guest is compiled. The zero value uses the
// defaults.
type Options struct {
	// CacheDir holds installed guests and wazero's compilation cache. If
	// empty, python.CacheDir("") decides ($FUMEHOOD_CACHE_DIR or the
	// user's cache directory).
	CacheDir string
	// MemoryLimit is the most linear memory, in bytes, any instance of the
	// guest may have; 0 means DefaultMemoryLimit. It is rounded down to
	// whole 64 KiB pages.
	MemoryLimit int64
	// Install makes CompilePython install the Python guest when it is not
	// in the cache, instead of returning ErrGuestNotInstalled.
	Install bool
	// Progress is told how an installation proceeds.
	Progress func(python.Progress)
}

// Guest is a compiled guest module. It is safe for concurrent use: each run
// gets its own instance. Close it to release the compiled code.
type Guest struct {
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	cache    wazero.CompilationCache
	python   bool
	id       string

	closeOnce sync.Once
	closeErr  error
}

// CompilePython compiles the installed Python guest. If the guest is not
// installed it returns an error matching ErrGuestNotInstalled, unless
// opts.Install is set.
func CompilePython(ctx context.Context, opts *Options) (*Guest, error) {
	if opts == nil {
		opts = &Options{}
	}
	popts := &python.Options{CacheDir: opts.CacheDir, Progress: opts.Progress}
	load := python.Load
	if opts.Install {
		load = python.Ensure
	}
	wasm, build, err := load(ctx, popts)
	if err != nil {
		return nil, err
	}
	g, err := compile(ctx, wasm, opts)
	if err != nil {
		return nil, err
	}
	g.python = true
	g.id = build.SHA256
	return g, nil
}

// Compile compiles a WASI preview 1 program. The module may import only
// wasi_snapshot_preview1.
func Compile(ctx context.Context, wasm []byte, opts *Options) (*Guest, error) {
	if opts == nil {
		opts = &Options{}
	}
	return compile(ctx, wasm, opts)
}

func compile(ctx context.Context, wasm []byte, opts *Options) (g *Guest, err error) {
	if !wasmbin.IsWasm(wasm) {
		return nil, fmt.Errorf("%w: not a WebAssembly binary module", ErrInvalidModule)
	}
	limit := opts.MemoryLimit
	if limit == 0 {
		limit = DefaultMemoryLimit
	}
	if limit < 1<<16 || limit > 1<<32 {
		return nil, fmt.Errorf("sandbox: memory limit %d is outside 64 KiB to 4 GiB", limit)
	}
	dir, err := python.CacheDir(opts.CacheDir)
	if err != nil {
		return nil, err
	}
	cache, err := wazero.NewCompilationCacheWithDir(filepath.Join(dir, "wazero"))
	if err != nil {
		return nil, fmt.Errorf("sandbox: compilation cache: %w", err)
	}
	cfg := wazero.NewRuntimeConfigCompiler().
		WithCompilationCache(cache).
		WithDebugInfoEnabled(false).
		WithCloseOnContextDone(true).
		WithMemoryLimitPages(uint32(limit >> 16))
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
	if _, err = wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidModule, err)
	}
	for _, f := range compiled.ImportedFunctions() {
		if mod, name, _ := f.Import(); mod != wasi_snapshot_preview1.ModuleName {
			return nil, fmt.Errorf("%w: it imports %s.%s, and a sandbox offers only %s", ErrInvalidModule, mod, name, wasi_snapshot_preview1.ModuleName)
		}
	}
	if _, ok := compiled.ExportedFunctions()["_start"]; !ok {
		return nil, fmt.Errorf("%w: it exports no _start function (not a WASI command)", ErrInvalidModule)
	}
	return &Guest{rt: rt, compiled: compiled, cache: cache, id: pipeline.Digest(wasm)}, nil
}

// ID identifies the guest build: the SHA-256 of the binary that was compiled.
func (g *Guest) ID() string { return g.id }

// IsPython reports whether g is the Python guest.
func (g *Guest) IsPython() bool { return g.python }

// Close releases the compiled code. Runs in progress are stopped.
func (g *Guest) Close(ctx context.Context) error {
	g.closeOnce.Do(func() {
		g.closeErr = g.rt.Close(ctx)
		if err := g.cache.Close(ctx); g.closeErr == nil {
			g.closeErr = err
		}
	})
	return g.closeErr
}
