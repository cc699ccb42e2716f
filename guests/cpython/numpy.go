package cpython

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Numpy is the name of the optional part that builds numpy into the guest
// (Options.With, `fumehood guest build --with numpy`).
const Numpy = "numpy"

// NumpyVersion is the numpy version built into the numpy variant.
const NumpyVersion = "2.2.5"

// NumpyRecipe is the version of the numpy part of the recipe: it changes
// whenever the numpy variant's output would change for the same inputs.
const NumpyRecipe = 3

// LocalInput is a pinned input that apt cannot fetch: the caller gives its
// path (Options.Sources) or puts it in the cache's sources directory under
// File. It is checked against SHA256 before use.
type LocalInput struct {
	// Name says what it is ("numpy", "cython").
	Name string `json:"name"`
	// File is its file name in the cache's sources directory.
	File string `json:"file"`
	// SHA256 is the file's digest in lower-case hex.
	SHA256 string `json:"sha256"`
	// Upstream is the upstream project and version the file holds.
	Upstream string `json:"upstream"`
}

// NumpyInputs are the numpy variant's inputs beyond [Inputs]: numpy's
// source tree (its git tree at the release tag with the submodules the
// build needs; numpy's source distribution of the same version has the
// same layout) and Cython, which runs from source on the build Python.
var NumpyInputs = []LocalInput{
	{Name: "numpy", File: "numpy-2.2.5-with-submodules.tar.xz",
		SHA256:   "1622e46b97b333c63509de9982c72809dd5ce1b4d2b659841f81a40c2b29ad3c",
		Upstream: "numpy 2.2.5 (git tag v2.2.5 with vendored-meson, highway, pocketfft, pythoncapi-compat)"},
	{Name: "cython", File: "cython-3.1.8.tar.xz",
		SHA256:   "4e28abb1ee588182504c7813c7d3bf5ce621470eb82975ffa522fb21d4852f1f",
		Upstream: "Cython 3.1.8 (git tag 3.1.8)"},
}

// NumpyTools are what the numpy variant needs installed beyond [Tools]:
// ninja for meson. LLVM 19's C++ library for wasm32-wasi comes with the
// fetched toolchain (ToolchainInputs).
var NumpyTools = []Tool{
	{"ninja", "ninja-build"},
}

// ErrUnknownPart reports an Options.With entry that is not a known part.
var ErrUnknownPart = errors.New("cpython: unknown optional part")

// numpyMesonOptions are the options numpy's meson build is configured
// with: no BLAS or LAPACK (numpy's own lapack_lite), no threads, no SIMD
// dispatch (none of numpy's dispatch targets is wasm), none of the x86-only
// submodules.
var numpyMesonOptions = []string{
	"--buildtype=release", "-Db_ndebug=if-release",
	"-Dblas=none", "-Dlapack=none", "-Dallow-noblas=true",
	"-Ddisable-svml=true", "-Ddisable-highway=true", "-Ddisable-intel-sort=true",
	"-Ddisable-threading=true", "-Ddisable-optimization=true", "-Dpython.bytecompile=-1",
}

// numpySkipModules are numpy extension modules left out of the guest.
var numpySkipModules = map[string]bool{
	"numpy._core._simd": true, // tests SIMD dispatch, which is off
}

// numpySourceEdits are the changes made to numpy's tree before the build,
// each a file, the text replaced, its replacement and how many times it
// must occur.
var numpySourceEdits = slices.Concat([]sourceEdit{
	// npy_cpu.h knows wasm only by emscripten's macro.
	{"numpy/_core/include/numpy/npy_cpu.h", "#elif defined(__EMSCRIPTEN__)\n", "#elif defined(__EMSCRIPTEN__) || defined(__wasm__)\n", 1},
	// .npy files are written and read through the file object: numpy's
	// tofile/fromfile path duplicates the descriptor (os.dup), which WASI
	// preview 1 does not have.
	{"numpy/lib/format.py", "def isfileobj(f):\n", "def isfileobj(f):\n    if os.name != 'nt' and os.uname().sysname == 'wasi':\n        return False\n", 1},
	// numpy.random.mtrand compiles its own copy of distributions.c with
	// NP_RANDOM_LEGACY, where RAND_INT_TYPE is long: 32 bits on wasm32,
	// 64 in the copy the other random modules link (npyrandom). As
	// separate shared modules each finds its own copy; linked into one
	// binary the first copy found served both, and Generator.poisson
	// trapped (an indirect call of the wrong type) and
	// Generator.multinomial called a signature-mismatch stub. The legacy
	// copy's functions are renamed, in mtrand's sources only.
	{"numpy/_core/include/numpy/random/distributions.h", "#define RAND_INT_MAX LONG_MAX\n", "#define RAND_INT_MAX LONG_MAX\n" + legacyRenames(), 1},
},
	// Called with (self, NULL), declared with one parameter (secondParam):
	// _array_converter's scalar_input, an array method's
	// _supports_unaligned and the test dtype's __reduce__.
	secondParam("numpy/_core/src/multiarray/array_converter.c", "void *NPY_UNUSED(closure)",
		"array_converter_get_scalar_input(PyArrayArrayConverterObject *self)"),
	secondParam("numpy/_core/src/multiarray/array_method.c", "void *NPY_UNUSED(closure)",
		"boundarraymethod__supports_unaligned(PyBoundArrayMethodObject *self)"),
	secondParam("numpy/_core/src/umath/_scaled_float_dtype.c", "PyObject *NPY_UNUSED(args)",
		"sfloat___reduce__(PyArray_SFloatDescr *self)"),
)

// numpyLegacyNames are the external functions numpy/random/src/
// distributions/distributions.c defines (`nm --defined-only --extern-only`
// of its object), which mtrand's legacy copy renames (mtrand_ prefix).
var numpyLegacyNames = []string{
	"random_beta", "random_binomial", "random_binomial_btpe", "random_binomial_inversion",
	"random_bounded_bool_fill", "random_bounded_uint16_fill", "random_bounded_uint32_fill",
	"random_bounded_uint64", "random_bounded_uint64_fill", "random_bounded_uint8_fill",
	"random_buffered_bounded_bool", "random_buffered_bounded_uint16",
	"random_buffered_bounded_uint32", "random_buffered_bounded_uint8", "random_chisquare",
	"random_exponential", "random_f", "random_gamma", "random_gamma_f", "random_geometric",
	"random_geometric_inversion", "random_geometric_search", "random_gumbel", "random_interval",
	"random_laplace", "random_loggam", "random_logistic", "random_lognormal", "random_logseries",
	"random_multinomial", "random_negative_binomial", "random_noncentral_chisquare",
	"random_noncentral_f", "random_normal", "random_pareto", "random_poisson",
	"random_positive_int", "random_positive_int32", "random_positive_int64", "random_power",
	"random_rayleigh", "random_standard_cauchy", "random_standard_exponential",
	"random_standard_exponential_f", "random_standard_exponential_fill",
	"random_standard_exponential_fill_f", "random_standard_exponential_inv_fill",
	"random_standard_exponential_inv_fill_f", "random_standard_gamma", "random_standard_gamma_f",
	"random_standard_normal", "random_standard_normal_f", "random_standard_normal_fill",
	"random_standard_normal_fill_f", "random_standard_t", "random_standard_uniform",
	"random_standard_uniform_f", "random_standard_uniform_fill", "random_standard_uniform_fill_f",
	"random_triangular", "random_uint", "random_uniform", "random_vonmises", "random_wald",
	"random_weibull", "random_zipf",
}

// legacyRenames returns the #defines that rename numpyLegacyNames in the
// translation units built with NP_RANDOM_LEGACY.
func legacyRenames() string {
	var b strings.Builder
	for _, n := range numpyLegacyNames {
		b.WriteString("#define " + n + " mtrand_" + n + "\n")
	}
	return b.String()
}

// numpyFlags are the numpy part's flags, as recorded in Info.Flags and in
// the cache key.
func numpyFlags() []string {
	return []string{
		"numpy: recipe " + strconv.Itoa(NumpyRecipe),
		"numpy: meson " + strings.Join(numpyMesonOptions, " "),
		"numpy: c_args " + strings.Join(numpyCArgs("$W"), " "),
		"numpy: cpp_args " + strings.Join(numpyCppArgs("$W"), " "),
		"numpy: edits " + editFlags(numpySourceEdits),
		"numpy: exceptions shim: a C++ throw aborts the run",
		// Every variant has numpy: its packages' namespace directories
		// (numpy.doc; mpl_toolkits with matplotlib) get zip entries.
		"stdlib zip: directory entries for namespace packages",
	}
}

func numpyCArgs(w string) []string {
	return []string{"-ffile-prefix-map=" + w + "=/build"}
}

// numpyCppArgs: -fexceptions lets the try/catch of numpy's FFT compile;
// WASI preview 1 has no unwinding, so a throw traps (numpy_cxa.c).
func numpyCppArgs(w string) []string {
	return []string{"-ffile-prefix-map=" + w + "=/build", "-fexceptions"}
}

const (
	numpySrc  = "numpy-2.2.5"
	cythonSrc = "cython-3.1.8"
)

// numpySteps are the numpy variant's steps, run after CPython's cross
// build and before the extension modules are linked (numpyLink) and the
// standard library is packed.
func (b *builder) numpySteps() []buildStep {
	return []buildStep{
		{"numpy: extract", b.numpyExtract},
		{"numpy: configure (meson)", b.numpyConfigure},
		{"numpy: compile", b.numpyCompile},
		{"numpy: python files", b.numpyPython},
	}
}

func (b *builder) numpyExtract(ctx context.Context) error {
	for _, name := range []string{"numpy", "cython"} {
		if err := b.run(ctx, b.w, nil, "tar", "-xf", b.files[name]); err != nil {
			return err
		}
	}
	if err := applyEdits(b.path(numpySrc), "numpy", numpySourceEdits); err != nil {
		return err
	}
	return os.MkdirAll(b.path("numpy-tools"), 0o755)
}

// ccWrap is the compiler wrapper meson calls: it runs the compiler, except
// that linking a shared module (which WASI preview 1 cannot load) writes an
// archive of the module's objects instead, and the static libraries the
// link named to <module>.libs; numpyLink links those into python.wasm. It
// drops -fPIC, which meson adds for shared modules: everything is linked
// statically, and position-independent wasm would go through a GOT.
const ccWrap = `#!/bin/sh
for a in "$@"; do
  shift
  [ "$a" = "-fPIC" ] || [ "$a" = "-fpic" ] || set -- "$@" "$a"
done
for a in "$@"; do
  if [ "$a" = "-shared" ]; then
    out=; objs=; libs=; prev=
    for b in "$@"; do
      [ "$prev" = "-o" ] && out=$b
      case "$b" in *.o) objs="$objs $b";; *.a) libs="$libs $(realpath "$b")";; esac
      prev=$b
    done
    rm -f "$out" && llvm-ar-19 rcs "$out" $objs || exit 1
    printf '%s\n' $libs > "$out.libs"
    exit 0
  fi
done
exec "$@"
`

// numpyCxa stands in for the C++ runtime's exception entry points, which
// Debian's libc++abi for wasm32-wasi (built without exceptions) lacks: a
// throw (numpy's FFT throws only when out of memory) ends the run.
const numpyCxa = `#include <stdio.h>
#include <stdlib.h>
void *__cxa_allocate_exception(unsigned long size) { return malloc(size ? size : 1); }
void __cxa_free_exception(void *p) { free(p); }
_Noreturn void __cxa_throw(void *e, void *type, void (*dtor)(void *)) {
    (void)e; (void)type; (void)dtor;
    fputs("fatal: C++ exception in numpy (no unwinding in this guest)\n", stderr);
    abort();
}
`

// sysconfigName is the cross build's sysconfig data module.
const sysconfigName = "_sysconfigdata__wasi_wasm32-wasi"

func (b *builder) numpyConfigure(ctx context.Context) error {
	tools := b.path("numpy-tools")
	// The headers numpy compiles against: CPython's Include and the cross
	// build's pyconfig.h, found through a pkg-config file that the build
	// Python's sysconfig (the cross build's data, LIBPC changed) names.
	inc := filepath.Join(tools, "include", "python3.13")
	if err := copyTree(b.path(pySrc, "Include"), inc, func(string) bool { return false }); err != nil {
		return err
	}
	if err := copyFile(b.path("cross", "pyconfig.h"), filepath.Join(inc, "pyconfig.h")); err != nil {
		return err
	}
	pc := filepath.Join(tools, "pkgconfig")
	if err := os.MkdirAll(pc, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(pc, "python-3.13.pc"), []byte("Name: Python\nDescription: CPython "+PythonVersion+
		" for wasm32-wasi\nVersion: 3.13\nLibs:\nCflags: -I"+inc+"\n"), 0o644); err != nil {
		return err
	}
	scDir := filepath.Join(tools, "sysconfig")
	if err := os.MkdirAll(scDir, 0o755); err != nil {
		return err
	}
	sc, err := os.ReadFile(b.path("cross", "build", "lib.wasi-wasm32-3.13", sysconfigName+".py"))
	if err != nil {
		return err
	}
	sc = append(sc, []byte(fmt.Sprintf("\nbuild_time_vars['LIBPC'] = %q\nbuild_time_vars['INCLUDEPY'] = %q\n", pc, inc))...)
	if err := os.WriteFile(filepath.Join(scDir, sysconfigName+".py"), sc, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tools, "cc-wrap"), []byte(ccWrap), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tools, "cross.ini"), []byte(b.crossFile(numpyCArgs(b.w), numpyCppArgs(b.w))), 0o644); err != nil {
		return err
	}
	// Cython runs on the build machine: the build Python runs it from source.
	native := "[binaries]\ncython = " + pyList(b.path("native", "python"), b.path(cythonSrc, "cython.py")) + "\n"
	if err := os.WriteFile(filepath.Join(tools, "native.ini"), []byte(native), 0o644); err != nil {
		return err
	}
	args := []string{b.path(numpySrc, "vendored-meson", "meson", "meson.py"), "setup",
		"--cross-file", filepath.Join(tools, "cross.ini"), "--native-file", filepath.Join(tools, "native.ini"), "--prefix=/usr"}
	args = append(args, numpyMesonOptions...)
	args = append(args, b.path("numpy-build"))
	return b.run(ctx, b.path(numpySrc), b.numpyEnv(), b.path("native", "python"), args...)
}

// numpyEnv makes the build Python (which runs meson and Cython) report the
// cross build's configuration.
func (b *builder) numpyEnv() []string {
	return []string{
		"_PYTHON_SYSCONFIGDATA_NAME=" + sysconfigName,
		"PYTHONPATH=" + b.path("numpy-tools", "sysconfig"),
		"PYTHONDONTWRITEBYTECODE=1",
	}
}

func pyList(items ...string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = "'" + strings.ReplaceAll(s, "'", `\'`) + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// crossFile is the meson cross file of numpy's and pandas' builds, with
// their C and C++ flags.
func (b *builder) crossFile(cArgs, cppArgs []string) string {
	wrap := b.path("numpy-tools", "cc-wrap")
	sysroot := "--sysroot=" + b.path("wasi-libc", "usr")
	return "[binaries]\n" +
		"c = " + pyList(wrap, "clang-19", "--target=wasm32-wasi", sysroot) + "\n" +
		"cpp = " + pyList(wrap, "clang++-19", "--target=wasm32-wasi", sysroot, "-isystem", b.toolchainDir(llvmDir, "include", "wasm32-wasi", "c++", "v1")) + "\n" +
		"ar = 'llvm-ar-19'\nstrip = 'llvm-strip-19'\n" +
		"python = " + pyList(b.path("native", "python")) + "\n" +
		"pkg-config = 'pkg-config'\n\n" +
		"[properties]\nlongdouble_format = 'IEEE_QUAD_LE'\nneeds_exe_wrapper = true\n\n" +
		"[built-in options]\n" +
		"c_args = " + pyList(cArgs...) + "\n" +
		"cpp_args = " + pyList(cppArgs...) + "\n\n" +
		"[host_machine]\nsystem = 'wasi'\ncpu_family = 'wasm32'\ncpu = 'wasm32'\nendian = 'little'\n"
}

func (b *builder) numpyCompile(ctx context.Context) error {
	return b.run(ctx, b.path("numpy-build"), b.numpyEnv(), "ninja", "-j"+strconv.Itoa(b.jobs))
}

// numpyModule is one numpy extension module: its dotted name, the archive
// of its objects and the static libraries it links.
type numpyModule struct {
	name, archive string
	libs          []string
}

// numpyModules lists the extension modules the meson builds of the
// parts produced: numpy's, and pandas' in the pandas variant.
func (b *builder) numpyModules() ([]numpyModule, error) {
	var mods []numpyModule
	for _, dir := range b.mesonBuilds() {
		m, err := b.modulesIn(b.path(dir))
		if err != nil {
			return nil, err
		}
		mods = append(mods, m...)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].name < mods[j].name })
	return mods, nil
}

// mesonBuilds are the build directories of the parts' meson builds.
func (b *builder) mesonBuilds() []string {
	dirs := []string{"numpy-build"}
	if slices.Contains(b.parts, Pandas) {
		dirs = append(dirs, "pandas-build")
	}
	if slices.Contains(b.parts, Matplotlib) {
		dirs = append(dirs, "contourpy-build", "matplotlib-build", "mpl-direct")
	}
	return dirs
}

// modulesIn lists the extension modules of the meson build in root. A
// module's name is its path where meson installs it, relative to the
// package directory (matplotlib builds its modules in src/), or else its
// path in root.
func (b *builder) modulesIn(root string) ([]numpyModule, error) {
	installed, err := mesonInstalled(root)
	if err != nil {
		return nil, err
	}
	var mods []numpyModule
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".so") {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if to, ok := installed[p]; ok {
			rel = to
		}
		base, _, _ := strings.Cut(filepath.Base(rel), ".")
		name := strings.ReplaceAll(filepath.ToSlash(filepath.Join(filepath.Dir(rel), base)), "/", ".")
		if numpySkipModules[name] {
			return nil
		}
		libs, err := os.ReadFile(p + ".libs")
		if err != nil {
			return fmt.Errorf("module %s: %w", name, err)
		}
		mods = append(mods, numpyModule{name: name, archive: p, libs: strings.Fields(string(libs))})
		return nil
	})
	return mods, err
}

// mesonInstalled maps the files of the meson build in root to where meson
// installs them, relative to the Python package directory (for files
// installed there). A build without meson's record maps nothing.
func mesonInstalled(root string) (map[string]string, error) {
	data, err := os.ReadFile(filepath.Join(root, "meson-info", "intro-installed.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var all map[string]string
	if err := json.Unmarshal(data, &all); err != nil {
		return nil, fmt.Errorf("%s: %w", root, err)
	}
	out := map[string]string{}
	for from, to := range all {
		if _, rel, ok := strings.Cut(to, "/site-packages/"); ok {
			out[from] = rel
		}
	}
	return out, nil
}

// numpyLink registers numpy's extension modules as built-in modules under
// their dotted names (CPython's BuiltinImporter finds a built-in by its
// full name) in the cross build's Modules/config.c, and relinks
// python.wasm with their archives, the static libraries they use and the
// C++ runtime.
func (b *builder) numpyLink(ctx context.Context) error {
	mods, err := b.numpyModules()
	if err != nil {
		return err
	}
	if len(mods) == 0 {
		return errors.New("the builds produced no extension modules")
	}
	var decls, entries strings.Builder
	var link []string
	seen := map[string]bool{}
	inits := map[string]string{}
	for _, m := range mods {
		last := m.name[strings.LastIndex(m.name, ".")+1:]
		if other, ok := inits[last]; ok {
			return fmt.Errorf("modules %s and %s both have PyInit_%s", other, m.name, last)
		}
		inits[last] = m.name
		fmt.Fprintf(&decls, "extern PyObject* PyInit_%s(void);\n", last)
		fmt.Fprintf(&entries, "    {%q, PyInit_%s},\n", m.name, last)
		link = append(link, m.archive)
	}
	for _, m := range mods {
		for _, l := range m.libs {
			if !seen[l] {
				seen[l] = true
				link = append(link, l)
			}
		}
	}
	// config.c as CPython's build wrote it is kept, so that a second link
	// starts from it.
	cfg, orig := b.path("cross", "Modules", "config.c"), b.path("numpy-tools", "config.c.orig")
	if _, err := os.Stat(orig); errors.Is(err, os.ErrNotExist) {
		if err := copyFile(cfg, orig); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(orig)
	if err != nil {
		return err
	}
	src := string(data)
	const marker1, sentinel = "/* -- ADDMODULE MARKER 1 -- */", "    /* Sentinel */"
	if strings.Count(src, marker1) != 1 || strings.Count(src, sentinel) != 1 {
		return errors.New("numpy: Modules/config.c has not the expected markers")
	}
	src = strings.Replace(src, marker1, marker1+"\n"+decls.String(), 1)
	src = strings.Replace(src, sentinel, entries.String()+sentinel, 1)
	if err := os.WriteFile(cfg, []byte(src), 0o644); err != nil {
		return err
	}
	// The C++ runtime: with exceptions (internal/cxxrt) for parts that
	// need it, with setjmp and longjmp on top of it (FreeType's); else
	// Debian's, without, and the exceptions shim.
	rt, rtName := numpyCxa, "numpy_cxa"
	if b.cxxLibs != nil {
		rt, rtName = sjljRuntime, "sjlj"
	}
	rtSrc := b.path("numpy-tools", rtName+".c")
	if err := os.WriteFile(rtSrc, []byte(rt), 0o644); err != nil {
		return err
	}
	cc := strings.Fields(b.cc())
	args := append(cc[1:], strings.Fields(b.depFlags())...)
	args = append(args, "-c", rtSrc, "-o", b.path("numpy-tools", rtName+".o"))
	if err := b.run(ctx, b.path("numpy-tools"), nil, cc[0], args...); err != nil {
		return err
	}
	link = append(link, b.path("numpy-tools", rtName+".o"))
	if b.cxxLibs != nil {
		link = append(link, b.cxxLibs...)
	} else {
		link = append(link, "-L"+b.toolchainDir(llvmDir, "lib", "wasm32-wasi"), "-lc++", "-lc++abi")
	}
	// numpy parses and prints long double (IEEE quad on wasm32), which
	// wasi-libc keeps in a library of its own.
	link = append(link, "-lc-printscan-long-double")
	// The relink keeps the cross build's stack and initial memory
	// (stackLDFlags), which make takes from its command line only.
	return b.run(ctx, b.path("cross"), nil, "make", "python.wasm",
		"SYSLIBS=$(LIBM) $(LIBC) "+strings.Join(link, " "), "LDFLAGS_NODIST="+stackLDFlags())
}

// numpyExcluded are parts of numpy's installed tree left out of the
// standard-library bundle: tests, type stubs, C headers and sources, and
// the module archives. numpy.testing imports one module of numpy's tests,
// _core/tests/_natype.py, which is kept (numpyPython makes its directory
// a package).
func numpyExcluded(rel string) bool {
	if rel == numpyNatype || rel == path.Dir(numpyNatype) {
		return false
	}
	for _, part := range strings.Split(rel, "/") {
		if part == "tests" || part == "include" || part == "__pycache__" {
			return true
		}
	}
	for _, ext := range []string{".pyi", ".pxd", ".so", ".libs", ".a", ".c", ".h", ".pc", ".cmake", ".pyx"} {
		if strings.HasSuffix(rel, ext) {
			return true
		}
	}
	return false
}

// numpyPython installs numpy (meson install into a staging directory) and
// copies its Python files into the standard library tree, which the next
// step compiles and packs.
func (b *builder) numpyPython(ctx context.Context) error {
	stage := b.path("numpy-install")
	if err := b.run(ctx, b.path("numpy-build"), b.numpyEnv(), b.path("native", "python"),
		b.path(numpySrc, "vendored-meson", "meson", "meson.py"), "install", "--no-rebuild", "--destdir", stage); err != nil {
		return err
	}
	staged, err := b.numpyStaged()
	if err != nil {
		return err
	}
	dst := b.path("stdlib", "python3.13", "numpy")
	if err := copyTree(staged, dst, numpyExcluded); err != nil {
		return err
	}
	// numpy/__config__.py records the compiler commands: map the work
	// directory to /build, as the compiler's prefix maps do.
	cfg := filepath.Join(dst, "__config__.py")
	data, err := os.ReadFile(cfg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfg, bytes.ReplaceAll(data, []byte(b.w), []byte("/build")), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dst, filepath.FromSlash(path.Dir(numpyNatype)), "__init__.py"), nil, 0o644)
}

// numpyStaged is the numpy package meson install staged.
func (b *builder) numpyStaged() (string, error) {
	stage := b.path("numpy-install")
	inits, err := filepath.Glob(filepath.Join(stage, "usr", "lib", "python3.13", "*-packages", "numpy", "__init__.py"))
	if err != nil {
		return "", err
	}
	if len(inits) != 1 {
		return "", fmt.Errorf("numpy: install: found %d numpy packages in %s", len(inits), stage)
	}
	return filepath.Dir(inits[0]), nil
}

// numpyNatype is the one module of numpy's tests that numpy.testing
// imports.
const numpyNatype = "_core/tests/_natype.py"
