// Package cxxrt builds LLVM 19's C++ runtime for wasm32-wasi with C++
// exceptions: libc++ and libc++abi compiled from LLVM 19.1.7's sources with
// clang 19's Emscripten-style exceptions (-fexceptions -mllvm
// -enable-emscripten-cxx-exceptions, Flags), plus this package's own
// runtime/emeh.cpp, so that C++ code (pybind11's, for instance) can throw
// and catch. Debian's wasm32 builds of these libraries have no exceptions
// (their libc++abi has no __cxa_throw, and their libc++ aborts where it
// would throw).
//
// Emscripten-style exceptions need no WebAssembly exception handling: a
// call that may throw, in a function with cleanups or catches, becomes a
// call of an imported env.invoke_<sig> function, which the sandbox
// implements with a nested call it can end; a throw (emeh.cpp's
// _Unwind_RaiseException) calls the imported env.fumehood_unwind, which
// ends the innermost one. See internal/emeh for the module's side and
// docs/ARCHITECTURE.md for why this and not WebAssembly exceptions.
//
// The inputs are pinned: the guest build's cross toolchain and wasi-libc
// (guests/cpython's pins, fetched into and shared with its cache
// of sources) and the llvm-toolchain-19 .orig tarball, fetched with apt's
// own client like the guest's other sources. Build runs once per key, a
// digest of the recipe and the inputs' SHA-256s; the libraries are kept in
// the cache directory under cxxrt/<key>.
package cxxrt

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/cache"
)

// recipeVersion changes whenever the recipe changes what it builds.
const recipeVersion = 2

// Source is the tarball of LLVM 19.1.7's sources (Debian's .orig of
// llvm-toolchain-19), of which the build uses libcxx, libcxxabi and
// libunwind's unwind.h: the guest build's own input (its profile runtime
// comes from compiler-rt).
var Source = cpython.LLVMSource

// emeh is the runtime's own part: the unwinder and the landing pads'
// queries of Emscripten-style exceptions, compiled into libc++abi.a.
//
//go:embed runtime/emeh.cpp
var emeh []byte

// Flags are the compiler flags of C++ code that uses the runtime: C++
// exceptions, Emscripten-style. Code compiled with -fno-exceptions links
// against the runtime too.
var Flags = []string{"-fexceptions", "-mllvm", "-enable-emscripten-cxx-exceptions"}

// llvmDir is LLVM 19's tree in the unpacked toolchain packages.
const llvmDir = "usr/lib/llvm-19"

// Flags the runtime is compiled with, and that code using it needs.
var (
	// targetFlags select the target and the exception model.
	targetFlags = append([]string{"--target=wasm32-wasi"}, Flags...)
	// libFlags are the libraries' own: optimised, without assertions.
	libFlags = []string{"-O2", "-DNDEBUG"}

	// cxxabiSources are libc++abi's, without its personality routine,
	// which Emscripten-style exceptions do without (emeh.cpp finds the
	// catch clause instead).
	cxxabiSources = []string{"abort_message.cpp", "cxa_aux_runtime.cpp", "cxa_default_handlers.cpp",
		"cxa_demangle.cpp", "cxa_exception.cpp", "cxa_exception_storage.cpp", "cxa_guard.cpp",
		"cxa_handlers.cpp", "cxa_thread_atexit.cpp", "cxa_vector.cpp",
		"cxa_virtual.cpp", "fallback_malloc.cpp", "private_typeinfo.cpp", "stdlib_exception.cpp",
		"stdlib_new_delete.cpp", "stdlib_stdexcept.cpp", "stdlib_typeinfo.cpp"}
	cxxabiFlags = []string{"-std=c++23", "-fvisibility=hidden", "-D_LIBCXXABI_BUILDING_LIBRARY",
		"-DLIBCXXABI_USE_LLVM_UNWINDER", "-D_LIBCXXABI_HAS_NO_THREADS", "-D_LIBCPP_BUILDING_LIBRARY",
		"-DHAVE___CXA_THREAD_ATEXIT_IMPL=0"}

	// cxxSources are libc++'s for the configuration of Debian's headers
	// for wasm32-wasi (their __config_site: no threads, no filesystem
	// library, localization and a random device); libc++abi defines
	// operator new and delete.
	cxxSources = []string{"algorithm.cpp", "any.cpp", "bind.cpp", "call_once.cpp", "charconv.cpp",
		"chrono.cpp", "error_category.cpp", "exception.cpp", "expected.cpp",
		"filesystem/filesystem_clock.cpp", "filesystem/filesystem_error.cpp", "filesystem/path.cpp",
		"functional.cpp", "hash.cpp", "legacy_pointer_safety.cpp", "memory.cpp", "memory_resource.cpp",
		"new_handler.cpp", "new_helpers.cpp", "optional.cpp", "print.cpp", "random_shuffle.cpp",
		"ryu/d2fixed.cpp", "ryu/d2s.cpp", "ryu/f2s.cpp", "stdexcept.cpp", "string.cpp",
		"system_error.cpp", "typeinfo.cpp", "valarray.cpp", "variant.cpp", "vector.cpp",
		"verbose_abort.cpp", "random.cpp", "fstream.cpp", "ios.cpp", "ios.instantiations.cpp",
		"iostream.cpp", "locale.cpp", "ostream.cpp", "regex.cpp", "strstream.cpp"}
	cxxFlags = []string{"-std=c++23", "-fvisibility-inlines-hidden", "-D_LIBCPP_BUILDING_LIBRARY",
		"-DLIBCXX_BUILDING_LIBCXXABI", "-D_LIBCPP_REMOVE_TRANSITIVE_INCLUDES"}
)

// Libraries are the archives Build makes, in the order to link them.
var Libraries = []string{"libc++.a", "libc++abi.a"}

// Options configure Build and UnpackToolchain.
type Options struct {
	// CacheDir overrides the cache directory (see cache.Dir).
	CacheDir string
	// Progress, if set, is told how the fetch and the build proceed.
	Progress func(cache.Progress)
}

func (o *Options) progress(p cache.Progress) {
	if o.Progress != nil {
		o.Progress(p)
	}
}

// Runtime is a built runtime.
type Runtime struct {
	// Dir holds the archives named in Libraries.
	Dir string
	// Key is the build's key, a digest of the recipe and its inputs.
	Key string
}

// LinkArgs are the arguments that link a program against the runtime,
// after -nostdlib++.
func (r *Runtime) LinkArgs() []string {
	var args []string
	for _, l := range Libraries {
		args = append(args, filepath.Join(r.Dir, l))
	}
	return args
}

// multiarch gives the Debian library directory of the toolchain's
// programs by Go architecture.
var multiarch = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}

// toolchainInputs are the pinned packages the toolchain is unpacked from:
// the guest build's (with its C++ library's headers) and wasi-libc.
func toolchainInputs() ([]cpython.Input, error) {
	list, err := cpython.ToolchainInputs(runtime.GOARCH, true)
	if err != nil {
		return nil, err
	}
	for _, in := range cpython.Inputs {
		if in.Package == "wasi-libc" {
			list = append(list, in)
		}
	}
	return list, nil
}

// key digests the recipe and its inputs.
func key(inputs []cpython.Input) string {
	h := sha256.New()
	fmt.Fprintf(h, "cxxrt %d\n", recipeVersion)
	for _, in := range inputs {
		fmt.Fprintf(h, "%s %s %s\n", in.Package, in.Version, in.SHA256)
	}
	for _, list := range [][]string{targetFlags, libFlags, cxxabiSources, cxxabiFlags, cxxSources, cxxFlags} {
		fmt.Fprintf(h, "%q\n", list)
	}
	fmt.Fprintf(h, "%x\n", sha256.Sum256(emeh))
	return hex.EncodeToString(h.Sum(nil))
}

// manifest is what Build records next to the libraries.
type manifest struct {
	Recipe int             `json:"recipe"`
	Inputs []cpython.Input `json:"inputs"`
}

// Build returns the runtime, building it first if the cache lacks it
// (about two minutes on two cores). It needs apt's client to fetch missing
// inputs, dpkg-deb, tar and xz.
func Build(ctx context.Context, opts *Options) (*Runtime, error) {
	if opts == nil {
		opts = &Options{}
	}
	tcInputs, err := toolchainInputs()
	if err != nil {
		return nil, err
	}
	inputs := append(tcInputs, Source)
	k := key(inputs)
	c, err := cache.Dir(opts.CacheDir)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(c, "cxxrt")
	rt := &Runtime{Dir: filepath.Join(root, k), Key: k}
	if _, err := os.Stat(filepath.Join(rt.Dir, "manifest.json")); err == nil {
		return rt, nil
	}
	files, err := cpython.FetchInputs(ctx, &cpython.Options{CacheDir: opts.CacheDir, Progress: opts.Progress}, inputs)
	if err != nil {
		return nil, fmt.Errorf("cxxrt: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "tmp"), 0o755); err != nil {
		return nil, fmt.Errorf("cxxrt: %w", err)
	}
	work, err := os.MkdirTemp(filepath.Join(root, "tmp"), "build-")
	if err != nil {
		return nil, fmt.Errorf("cxxrt: %w", err)
	}
	defer os.RemoveAll(work)
	tc, err := unpack(ctx, opts, tcInputs, files, filepath.Join(work, "toolchain"))
	if err != nil {
		return nil, err
	}
	opts.progress(cache.Progress{Stage: "build", Step: "unpack " + Source.File})
	src := filepath.Join(work, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, fmt.Errorf("cxxrt: %w", err)
	}
	if err := run(ctx, "", nil, "tar", "-xf", files[Source.Package], "-C", src, "--strip-components=1",
		"--wildcards", "*/libcxx/*", "*/libcxxabi/*", "*/libunwind/include/*"); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(src, "libcxxabi", "src", "fumehood_emeh.cpp"), emeh, 0o644); err != nil {
		return nil, fmt.Errorf("cxxrt: %w", err)
	}
	out := filepath.Join(work, "lib")
	if err := tc.compileRuntime(ctx, opts, src, out); err != nil {
		return nil, err
	}
	m, err := json.MarshalIndent(manifest{Recipe: recipeVersion, Inputs: inputs}, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(out, "manifest.json"), m, 0o644); err != nil {
		return nil, fmt.Errorf("cxxrt: %w", err)
	}
	if err := os.Rename(out, rt.Dir); err != nil {
		if _, serr := os.Stat(filepath.Join(rt.Dir, "manifest.json")); serr == nil {
			return rt, nil // another build finished first
		}
		return nil, fmt.Errorf("cxxrt: %w", err)
	}
	return rt, nil
}

// Toolchain is the cross toolchain, unpacked.
type Toolchain struct {
	root string   // where the packages are unpacked
	env  []string // LD_LIBRARY_PATH for the unpacked programs
}

// UnpackToolchain fetches (if missing from the cache) and unpacks the
// pinned cross toolchain and wasi-libc into dir, which must be empty or
// missing; the unpacked tree takes about 300 MB.
func UnpackToolchain(ctx context.Context, opts *Options, dir string) (*Toolchain, error) {
	if opts == nil {
		opts = &Options{}
	}
	inputs, err := toolchainInputs()
	if err != nil {
		return nil, err
	}
	files, err := cpython.FetchInputs(ctx, &cpython.Options{CacheDir: opts.CacheDir, Progress: opts.Progress}, inputs)
	if err != nil {
		return nil, fmt.Errorf("cxxrt: %w", err)
	}
	return unpack(ctx, opts, inputs, files, dir)
}

func unpack(ctx context.Context, opts *Options, inputs []cpython.Input, files map[string]string, dir string) (*Toolchain, error) {
	ma, ok := multiarch[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("cxxrt: no toolchain for %s", runtime.GOARCH)
	}
	for i, in := range inputs {
		opts.progress(cache.Progress{Stage: "build", Step: "unpack " + in.File, Done: int64(i), Total: int64(len(inputs))})
		if err := run(ctx, "", nil, "dpkg-deb", "-x", files[in.Package], dir); err != nil {
			return nil, err
		}
	}
	libs := filepath.Join(dir, "usr", "lib", ma) + ":" + filepath.Join(dir, llvmDir, "lib")
	return &Toolchain{root: dir, env: []string{"LD_LIBRARY_PATH=" + libs}}, nil
}

// clangArgs are the arguments every compile and link starts with.
func (tc *Toolchain) clangArgs() []string {
	return append([]string{"--sysroot=" + filepath.Join(tc.root, "usr"),
		"-fuse-ld=" + filepath.Join(tc.root, llvmDir, "bin", "wasm-ld")}, targetFlags...)
}

// cxxInclude is the directory of libc++'s headers for wasm32-wasi.
func (tc *Toolchain) cxxInclude() string {
	return filepath.Join(tc.root, llvmDir, "include", "wasm32-wasi", "c++", "v1")
}

// CXX runs clang++ for wasm32-wasi with C++ exceptions (Flags) and libc++'s
// headers, linking against rt: args are the rest of the command line
// (sources, -o and flags).
func (tc *Toolchain) CXX(ctx context.Context, rt *Runtime, args ...string) error {
	all := append(tc.clangArgs(), "-nostdinc++", "-isystem", tc.cxxInclude())
	all = append(all, args...)
	all = append(all, "-nostdlib++")
	all = append(all, rt.LinkArgs()...)
	return run(ctx, "", tc.env, filepath.Join(tc.root, llvmDir, "bin", "clang++"), all...)
}

// compileRuntime compiles the two libraries from the sources in src
// into out.
func (tc *Toolchain) compileRuntime(ctx context.Context, opts *Options, src, out string) error {
	obj := filepath.Join(out, "obj")
	if err := os.MkdirAll(obj, 0o755); err != nil {
		return fmt.Errorf("cxxrt: %w", err)
	}
	clang := filepath.Join(tc.root, llvmDir, "bin", "clang")
	base := append(tc.clangArgs(), libFlags...)
	type job struct {
		lib, src, obj string
		args          []string
	}
	var jobs []job
	add := func(lib, dir string, sources, flags []string) {
		for _, s := range sources {
			o := filepath.Join(obj, lib+"-"+strings.NewReplacer("/", "_", ".", "_").Replace(s)+".o")
			args := append(append(append([]string{}, base...), flags...), "-c", filepath.Join(dir, s), "-o", o)
			jobs = append(jobs, job{lib, s, o, args})
		}
	}
	cxx := []string{"-nostdinc++", "-isystem", tc.cxxInclude()}
	add("libc++abi.a", filepath.Join(src, "libcxxabi", "src"), append(cxxabiSources, "fumehood_emeh.cpp"),
		append(append(append([]string{}, cxxabiFlags...), cxx...),
			"-I"+filepath.Join(src, "libcxxabi", "include"), "-I"+filepath.Join(src, "libcxx", "src"),
			"-I"+filepath.Join(src, "libunwind", "include")))
	add("libc++.a", filepath.Join(src, "libcxx", "src"), cxxSources,
		append(append(append([]string{}, cxxFlags...), cxx...),
			"-I"+filepath.Join(src, "libcxx", "src"), "-I"+filepath.Join(src, "libcxxabi", "include")))

	// As many compiles at once as there are CPUs.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan job)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		done     int64
	)
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				err := run(ctx, "", tc.env, clang, j.args...)
				mu.Lock()
				done++
				if err != nil && firstErr == nil {
					firstErr = err
					cancel()
				}
				opts.progress(cache.Progress{Stage: "build", Step: j.lib + ": " + j.src, Done: done, Total: int64(len(jobs))})
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		select {
		case work <- j:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ar := filepath.Join(tc.root, llvmDir, "bin", "llvm-ar")
	for _, lib := range Libraries {
		args := []string{"rcs", filepath.Join(out, lib)}
		for _, j := range jobs {
			if j.lib == lib {
				args = append(args, j.obj)
			}
		}
		if err := run(ctx, "", tc.env, ar, args...); err != nil {
			return err
		}
	}
	return os.RemoveAll(obj)
}

// run runs a program, at lower priority where nice exists (builds share
// the machine), and returns an error with the end of its output.
func run(ctx context.Context, dir string, env []string, name string, args ...string) error {
	prog := filepath.Base(name)
	if nice, err := exec.LookPath("nice"); err == nil {
		args = append([]string{"-n", "10", name}, args...)
		name = nice
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		tail := string(out)
		if len(tail) > 4000 {
			tail = "..." + tail[len(tail)-4000:]
		}
		return fmt.Errorf("cxxrt: %s: %w\n%s", prog, err, tail)
	}
	return nil
}

// Key returns the key of the runtime Build makes, without building it.
func Key() (string, error) {
	tcInputs, err := toolchainInputs()
	if err != nil {
		return "", err
	}
	return key(append(tcInputs, Source)), nil
}

// guestRuntime is the runtime as guests/cpython's variants with C++
// exceptions (matplotlib's) link it.
type guestRuntime struct{}

func (guestRuntime) Key() (string, error) { return Key() }

func (guestRuntime) Build(ctx context.Context, cacheDir string, progress func(cache.Progress)) ([]string, error) {
	rt, err := Build(ctx, &Options{CacheDir: cacheDir, Progress: progress})
	if err != nil {
		return nil, err
	}
	return rt.LinkArgs(), nil
}

// The guest build cannot import this package (it imports the guest
// build's pins): it is given the runtime when this package is linked in.
func init() { cpython.RegisterCxxRuntime(guestRuntime{}) }
