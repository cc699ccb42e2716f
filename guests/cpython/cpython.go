// Package cpython is fumehood's Python guest, in one place: how it is
// built, and the code that runs inside it. It builds CPython 3.13.5
// for WASI preview 1, cross-compiled from pinned upstream sources with
// Debian's LLVM 19, with zlib, bz2, lzma, sqlite3, _decimal and pyexpat
// built in, and its standard library compiled to .pyc at build time.
//
// [Build] fetches the pinned [Inputs] with apt's own clients through a
// private apt configuration (see internal/aptfetch), checks each against
// its SHA-256, builds a native CPython of the same source (the build
// Python), cross-builds the libraries and CPython for wasm32-wasi, and
// stores two artifacts content-addressed in the cache directory's pipeline
// store: the interpreter (python.wasm, debug sections stripped) and the
// standard library (a tar holding lib/python313.zip and share/zoneinfo,
// served read-only at /usr by [StdlibFS]). The interpreter then goes
// through the preparation steps (Steps: debug sections stripped, errno
// shim, fuel metering). A manifest
// ([Info]) records the inputs, the flags and the digests; [Load] reads it.
// sandbox.CompilePython loads this guest wherever it is built.
//
// The C driver (cdriver/fhdriver.c) and the KDF module (kdf/) are linked
// into the interpreter; the Python that runs inside (the driver's Python
// side, the start-up code, the fumehood module for host calls) is [Code].
// Its one build serves one-shot runs and sessions alike, from
// pre-initialized images through the driver's entry points, whose host
// side is internal/pydriver.
// [Export] and [Import] move a built guest between machines as one file,
// verified by digest before anything is stored.
//
// From the command line:
//
//	fumehood guest build
//	fumehood guest info --built
//	fumehood guest export FILE
//	fumehood guest import FILE
package cpython

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fumehood/fumehood/internal/cache"
	"github.com/fumehood/fumehood/internal/pipeline"
)

// Recipe is the version of the build recipe: it changes whenever the
// build's output would change for the same inputs.
const Recipe = 1

// SourceDateEpoch is the fixed time every timestamp of the build takes
// (2025-06-11, CPython 3.13.5's release day).
const SourceDateEpoch = 1749600000

// OptFlags are the C optimization flags of the cross build.
const OptFlags = "-O2"

// StdlibMountPath is where the standard library tree is mounted in the
// guest; the interpreter's prefix is /usr, so it finds
// /usr/lib/python313.zip and zoneinfo finds /usr/share/zoneinfo.
const StdlibMountPath = "/usr"

// BuildCommand is the command that builds the guest.
const BuildCommand = "fumehood guest build"

// ErrNotBuilt reports that the built guest is not in the cache.
var ErrNotBuilt = errors.New("cpython: the CPython " + PythonVersion + " guest is not built: run `" + BuildCommand + "`")

// ErrMissingTools reports that programs the build needs are not installed;
// the error's message names the Debian packages to install.
var ErrMissingTools = errors.New("cpython: build tools are missing")

// ErrNoToolchain reports that the build cannot fetch its cross toolchain
// here: a machine without apt or a Debian mirror in its apt sources, or an
// architecture without pinned packages. Its message says how to get the
// guest from another machine.
var ErrNoToolchain = errors.New("cpython: no pinned cross toolchain")

// elsewhere says how to get the guest where it cannot be built.
const elsewhere = "build the guest on a Debian machine or in a Debian container " +
	"(README, \"Building the guest elsewhere\", has the docker run command), " +
	"write it to a file there with `fumehood guest export FILE`, and load it here with `fumehood guest import FILE`"

// Options configure the build. The zero value uses the defaults.
type Options struct {
	// CacheDir overrides the cache directory (see cache.Dir).
	CacheDir string
	// Progress, if set, is told how the build proceeds: stage "fetch"
	// (Step names the file), "build" (Step names the build step; Done and
	// Total count steps) and "prepare".
	Progress func(cache.Progress)
	// Jobs is the number of parallel make jobs; 0 means the number of CPUs.
	Jobs int
	// Force rebuilds even when the guest is in the cache.
	Force bool
	// With lists the optional parts built into the guest: [Numpy]. A guest
	// with parts is a variant with its own cache key and manifest; Load,
	// Built and StdlibFS given the same With find it.
	With []string
	// Sources gives the paths of [LocalInput] files by Name ("numpy",
	// "cython"); an input not given is looked for in the cache's sources
	// directory under its File name. Build copies a given file there once
	// it is verified.
	Sources map[string]string
}

func (o *Options) progress(p cache.Progress) {
	if o.Progress != nil {
		o.Progress(p)
	}
}

// Info describes a built guest: what went in and what came out.
type Info struct {
	// Recipe is the recipe version the guest was built with.
	Recipe int `json:"recipe"`
	// Python is the CPython version.
	Python string `json:"python"`
	// Key identifies the build's inputs and flags (see [Key]).
	Key string `json:"key"`
	// Inputs are the pinned inputs.
	Inputs []Input `json:"inputs"`
	// Toolchain is the compiler's version line.
	Toolchain string `json:"toolchain"`
	// ToolchainInputs are the pinned packages of the cross toolchain the
	// build fetched (ToolchainInputs), for the machine's architecture.
	ToolchainInputs []Input `json:"toolchain_inputs,omitempty"`
	// Flags are the cross build's compiler flags and configure arguments;
	// $W stands for the temporary build directory.
	Flags []string `json:"flags"`
	// WasmSHA256 and WasmSize describe the built interpreter, debug
	// sections stripped, before preparation.
	WasmSHA256 string `json:"wasm_sha256"`
	WasmSize   int64  `json:"wasm_size"`
	// StdlibSHA256 and StdlibSize describe the standard library tar.
	StdlibSHA256 string `json:"stdlib_sha256"`
	StdlibSize   int64  `json:"stdlib_size"`
	// PreparedSHA256 is the interpreter after Steps.
	PreparedSHA256 string `json:"prepared_sha256"`
	// PreparedSteps lists those steps as name@version.
	PreparedSteps []string `json:"prepared_steps"`
	// BuildSeconds is how long the build took.
	BuildSeconds float64 `json:"build_seconds"`
	// With lists the optional parts built in (Options.With), sorted.
	With []string `json:"with,omitempty"`
	// LocalInputs are the inputs of those parts.
	LocalInputs []LocalInput `json:"local_inputs,omitempty"`
	// Builtins lists the extension modules those parts registered as
	// built-in modules, by dotted name.
	Builtins []string `json:"builtins,omitempty"`
}

// Key returns the digest naming a build of the current inputs, flags and
// recipe. The toolchain's version is recorded in Info but not part of the
// key, so that loading a built guest needs no compiler.
func Key() string {
	b, _ := json.Marshal(struct {
		Recipe    int
		Python    string
		Inputs    []Input
		Toolchain []string
		Flags     []string
	}{Recipe, PythonVersion, Inputs, toolchainIDs(toolchainPins), crossFlags("$W")})
	return pipeline.Digest(b)
}

// dirs are the build's places in the cache directory.
type dirs struct {
	cache    string // the cache directory
	store    *pipeline.Store
	manifest string // the current key's manifest
	apt      string // private apt state
	sources  string // verified inputs
	tmp      string // work directories
}

func (o *Options) dirs() (dirs, error) {
	c, err := cache.Dir(o.CacheDir)
	if err != nil {
		return dirs{}, err
	}
	key, err := o.key()
	if err != nil {
		return dirs{}, err
	}
	root := filepath.Join(c, "cpython")
	return dirs{
		cache:    c,
		store:    pipeline.NewStore(filepath.Join(c, "guests")),
		manifest: filepath.Join(root, "builds", key+".json"),
		apt:      filepath.Join(root, "apt"),
		sources:  filepath.Join(root, "sources"),
		tmp:      filepath.Join(root, "tmp"),
	}, nil
}

// Load returns the prepared interpreter (Steps applied) and the
// build's Info, or an error matching ErrNotBuilt.
func Load(ctx context.Context, opts *Options) ([]byte, Info, error) {
	info, d, err := loadInfo(opts)
	if err != nil {
		return nil, Info{}, err
	}
	b, err := d.store.Get(info.PreparedSHA256)
	if err != nil {
		return nil, Info{}, fmt.Errorf("%w: %w", ErrNotBuilt, err)
	}
	return b, info, nil
}

// Open is Load without the copy where the platform allows (Linux): the prepared interpreter mapped read-only, and done to
// call once the bytes are no longer used, which unmaps them and returns an
// error if the file changed since it was checked.
func Open(ctx context.Context, opts *Options) (wasm []byte, info Info, done func() error, err error) {
	info, d, err := loadInfo(opts)
	if err != nil {
		return nil, Info{}, nil, err
	}
	b, done, err := d.store.Open(info.PreparedSHA256)
	if err != nil {
		return nil, Info{}, nil, fmt.Errorf("%w: %w", ErrNotBuilt, err)
	}
	return b, info, done, nil
}

// LoadUnprepared returns the built interpreter before the preparation steps
// (debug sections stripped), for sandbox.Compile, which applies the same
// errno shim and fuel metering itself.
func LoadUnprepared(ctx context.Context, opts *Options) ([]byte, Info, error) {
	info, d, err := loadInfo(opts)
	if err != nil {
		return nil, Info{}, err
	}
	b, err := d.store.Get(info.WasmSHA256)
	if err != nil {
		return nil, Info{}, fmt.Errorf("%w: %w", ErrNotBuilt, err)
	}
	return b, info, nil
}

// Built returns the Info of the built guest, or an error matching
// ErrNotBuilt. It reads only the manifest.
func Built(opts *Options) (Info, error) {
	info, _, err := loadInfo(opts)
	return info, err
}

func loadInfo(opts *Options) (Info, dirs, error) {
	if opts == nil {
		opts = &Options{}
	}
	d, err := opts.dirs()
	if err != nil {
		return Info{}, dirs{}, err
	}
	b, err := os.ReadFile(d.manifest)
	if errors.Is(err, os.ErrNotExist) {
		return Info{}, d, notBuilt(opts)
	}
	if err != nil {
		return Info{}, d, fmt.Errorf("cpython: %w", err)
	}
	var info Info
	if err := json.Unmarshal(b, &info); err != nil {
		return Info{}, d, fmt.Errorf("%w: manifest %s: %w", ErrNotBuilt, d.manifest, err)
	}
	for _, dg := range []string{info.WasmSHA256, info.StdlibSHA256, info.PreparedSHA256} {
		if !d.store.Has(dg) {
			return Info{}, d, fmt.Errorf("%w: blob %s is missing", ErrNotBuilt, dg)
		}
	}
	return info, d, nil
}
