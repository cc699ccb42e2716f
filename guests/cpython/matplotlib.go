package cpython

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fumehood/fumehood/internal/cache"
	"github.com/fumehood/fumehood/internal/pipeline"
)

// Matplotlib is the name of the optional part that builds matplotlib with
// its Agg backend into the guest (Options.With, `fumehood guest build
// --with matplotlib`), with what it needs: Pillow (matplotlib writes PNG
// files through it), kiwisolver, contourpy, FreeType and Qhull. It implies
// Numpy.
const Matplotlib = "matplotlib"

// Data names the data stack: numpy, pandas and matplotlib (with Pillow).
// It stands for those parts; a guest built with it is the one built with
// them.
const Data = "data"

// MatplotlibVersion is the matplotlib version built into the matplotlib
// variant.
const MatplotlibVersion = "3.10.9"

// MatplotlibRecipe is the version of the matplotlib part of the recipe: it
// changes whenever the matplotlib variant's output would change for the
// same inputs.
const MatplotlibRecipe = 1

// MatplotlibLocalInputs are the matplotlib part's inputs that apt cannot
// fetch (Debian's archive has neither version): the release trees of
// matplotlib and kiwisolver, given like numpy's (Options.Sources).
var MatplotlibLocalInputs = []LocalInput{
	{Name: "matplotlib", File: "matplotlib-3.10.9.tar.xz",
		SHA256:   "e6f46574b78e3dd28274f46333298a340b512bd34a9da6785a48c4e53e426196",
		Upstream: "matplotlib 3.10.9 (git tree at the release commit dd8d78b8dce60b6c8db86132892577a0b9dbe469)"},
	{Name: "kiwisolver", File: "kiwisolver-1.4.9.tar.xz",
		SHA256:   "8332148985ee0e4597abc746d15e685caff07e85c2a0fb5bce7518515b8f3de1",
		Upstream: "kiwisolver 1.4.9 (git tree at tag 1.4.9, 728f5661fdd021c68dac1b914b3c8610a46b2e7e)"},
}

// dateutilInput and sixInput are pandas' inputs that matplotlib needs too.
var (
	dateutilInput = PandasInputs[1]
	sixInput      = PandasInputs[3]
)

// MatplotlibInputs are what the matplotlib variant adds to [Inputs],
// fetched by apt: the C and C++ sources of FreeType, Qhull, Pillow,
// libjpeg-turbo (Pillow's JPEG codec) and contourpy, fontTools' source (pure Python without its optional Cython
// modules), pybind11's and cppy's headers, and the pure-Python
// dependencies' architecture-independent packages.
var MatplotlibInputs = []Input{
	{Package: "freetype", Version: "2.13.3+dfsg-1+deb13u2", Suite: "trixie", Kind: Source,
		File:     "freetype_2.13.3+dfsg.orig.tar.xz",
		SHA256:   "686ec73cbf6783b245dd068a09ce807b729ac0f8a46dd70f7867923c32fdf4de",
		Upstream: "FreeType 2.13.3 (Debian repack)"},
	{Package: "qhull", Version: "2020.2-6", Suite: "trixie", Kind: Source,
		File:     "qhull_2020.2.orig.tar.gz",
		SHA256:   "b5c2d7eb833278881b952c8a52d20179eab87766b00b865000469a45c1838b7e",
		Upstream: "Qhull 2020.2 (8.0.2)"},
	{Package: "pillow", Version: "11.1.0-5+deb13u4", Suite: "trixie", Kind: Source,
		File:     "pillow_11.1.0.orig.tar.xz",
		SHA256:   "0fc52818220b9c2208e635d495f6819826607a352c42d0b9524f51f2b8a1a82a",
		Upstream: "Pillow 11.1.0"},
	{Package: "libjpeg-turbo", Version: "1:2.1.5-4", Suite: "trixie", Kind: Source,
		File:     "libjpeg-turbo_2.1.5.orig.tar.gz",
		SHA256:   "254f3642b04e309fee775123133c6464181addc150499561020312ec61c1bf7c",
		Upstream: "libjpeg-turbo 2.1.5"},
	{Package: "contourpy", Version: "1.3.1-1", Suite: "trixie", Kind: Source,
		File:     "contourpy_1.3.1.orig.tar.gz",
		SHA256:   "458c88dfda13ab2bda276f8415b60df4893315b1205adc55ecf6b4bac024135c",
		Upstream: "contourpy 1.3.1"},
	{Package: "fonttools", Version: "4.57.0-1+deb13u1", Suite: "trixie", Kind: Source,
		File:     "fonttools_4.57.0.orig.tar.xz",
		SHA256:   "46b96a86e9f789b7c9d37794012a7224dde5f49a3a0b1eca599d1d86d54f3a34",
		Upstream: "fontTools 4.57.0"},
	{Package: "pybind11-dev", Version: "2.13.6-2", Suite: "trixie", Kind: Binary,
		File:     "pybind11-dev_2.13.6-2_all.deb",
		SHA256:   "07cf715fa2d735b7ba6b7e5bb6f559c4230bbc26ae6b3b5b122bfe1ac26c8f88",
		Upstream: "pybind11 2.13.6 (headers)"},
	{Package: "python3-cppy", Version: "1.3.1-1", Suite: "trixie", Kind: Binary,
		File:     "python3-cppy_1.3.1-1_all.deb",
		SHA256:   "b570d93965fbbe79988fb8927a3109c1b217c01f8a970c4deea193264a8b4b1a",
		Upstream: "cppy 1.3.1 (kiwisolver's headers)"},
	{Package: "python3-pyparsing", Version: "3.1.2-1", Suite: "trixie", Kind: Binary,
		File:     "python3-pyparsing_3.1.2-1_all.deb",
		SHA256:   "f784864f3835bc7e62391350418f28958cc004f1d46690a5c03300ec0a9bcc54",
		Upstream: "pyparsing 3.1.2"},
	{Package: "python3-cycler", Version: "0.12.1-1", Suite: "trixie", Kind: Binary,
		File:     "python3-cycler_0.12.1-1_all.deb",
		SHA256:   "3deb8f4ec8a7dbd094829ac1d34daa1c95a2078dd2d64830a24b4f3d41178afc",
		Upstream: "cycler 0.12.1"},
	{Package: "python3-packaging", Version: "25.0-1", Suite: "trixie", Kind: Binary,
		File:     "python3-packaging_25.0-1_all.deb",
		SHA256:   "d70c8469f6e9c6105e1ebcd3ebdc963f11dadbeddd89d2d1a2a3cb1c97d2ecbc",
		Upstream: "packaging 25.0"},
	dateutilInput,
	sixInput,
}

const (
	mplSrc       = "matplotlib-3.10.9"
	kiwiSrc      = "kiwisolver-1.4.9"
	freetypeSrc  = "freetype-2.13.3"
	qhullSrc     = "qhull-2020.2"
	pillowSrc    = "pillow-11.1.0"
	jpegSrc      = "libjpeg-turbo-2.1.5"
	contourpySrc = "contourpy-1.3.1"
	fonttoolsSrc = "fonttools-4.57.0"
)

// mplCppArgs are the C++ flags of matplotlib's, contourpy's and
// kiwisolver's C++ (pybind11 and kiwisolver throw and catch): exceptions
// lowered the way Emscripten lowers them, to calls through imported
// invoke_ functions that the sandbox provides; setjmp as in mplCArgs.
//
// -Wno-c++11-narrowing: on wasm32 long has 32 bits, so matplotlib's
// braced lists of pixel counts (unsigned int into py::ssize_t, a long)
// narrow, which is an error by default; a 64-bit long takes every
// unsigned int, and the counts are far below 2^31.
func mplCppArgs(w string) []string {
	return append(mplCArgs(w), "-fexceptions", "-mllvm", "-enable-emscripten-cxx-exceptions", "-Wno-c++11-narrowing")
}

// mplCArgs are the C flags of the matplotlib part. FreeType's rasterizer
// and font validators and Qhull's error exits leave deep calls with
// longjmp, which clang lowers the way Emscripten does (through the
// invokes that C++ exceptions use), declared by the setjmp.h of
// sjljHeader in mpl-tools/sjlj (wasi-libc's works only with WebAssembly
// exceptions).
func mplCArgs(w string) []string {
	return append(numpyCArgs(w), "-I"+filepath.Join(w, "mpl-tools", "sjlj"), "-mllvm", "-enable-emscripten-sjlj")
}

// sjljHeader is the setjmp.h FreeType is compiled with.
const sjljHeader = `#ifndef FUMEHOOD_SETJMP_H
#define FUMEHOOD_SETJMP_H
/* setjmp and longjmp lowered by clang's -mllvm -enable-emscripten-sjlj:
   the calls become __wasm_setjmp, __wasm_setjmp_test and
   emscripten_longjmp (sjljRuntime). */
typedef struct { void *func_invocation_id; unsigned label; } jmp_buf[1];
int setjmp(jmp_buf) __attribute__((__returns_twice__));
_Noreturn void longjmp(jmp_buf, int);
#endif
`

// sjljRuntime is the guest's half of setjmp and longjmp lowered the
// Emscripten way, on the host's invokes (sandbox/emeh.go): setjmp records
// which call of which function set the buffer; longjmp ends the innermost
// invoke with __THREW__ set to the buffer and __threwValue to the value,
// and the code after each invoke passes it on until the function that
// called setjmp finds its own buffer (the algorithm of LLVM's
// WebAssemblyLowerEmscriptenEHSjLj and wasi-libc's setjmp/wasm32/rt.c).
const sjljRuntime = `#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
extern uintptr_t __THREW__;
/* The C++ runtime's, where it defines it. */
__attribute__((weak)) int __threwValue = 0;
__attribute__((import_module("env"), import_name("fumehood_unwind"))) void fumehood_unwind(void);
struct jmp_buf_impl { void *func_invocation_id; uint32_t label; };
void __wasm_setjmp(void *env, uint32_t label, void *func_invocation_id) {
    struct jmp_buf_impl *jb = env;
    if (label == 0 || func_invocation_id == 0) __builtin_trap();
    jb->func_invocation_id = func_invocation_id;
    jb->label = label;
}
uint32_t __wasm_setjmp_test(void *env, void *func_invocation_id) {
    struct jmp_buf_impl *jb = env;
    if (jb->label == 0 || func_invocation_id == 0) __builtin_trap();
    return jb->func_invocation_id == func_invocation_id ? jb->label : 0;
}
_Noreturn void emscripten_longjmp(uintptr_t env, int val) {
    __THREW__ = env;
    __threwValue = val ? val : 1;
    fumehood_unwind();
    fputs("fatal: longjmp with no setjmp active\n", stderr);
    abort();
}
`

// freetypeMesonOptions build FreeType as a static library without the
// optional libraries (compressed fonts, PNG glyphs, shaping) and without
// mapping font files (WASI has no mmap).
var freetypeMesonOptions = []string{"--buildtype=release", "-Ddefault_library=static",
	"-Dbrotli=disabled", "-Dbzip2=disabled", "-Dharfbuzz=disabled", "-Dpng=disabled", "-Dzlib=disabled",
	"-Dmmap=disabled", "-Dtests=disabled"}

// mplMesonOptions configure matplotlib's build: the FreeType built before
// (matplotlib's own would download 2.6.1), Qhull from its tarball as
// matplotlib's subproject, no link-time optimisation (the modules are
// archives linked into python.wasm), and Agg as the default backend (the
// guest has no display; matplotlib would otherwise try the GUI toolkits'
// imports first).
var mplMesonOptions = []string{"--buildtype=release", "-Db_ndebug=if-release", "-Db_lto=false",
	"-Dsystem-freetype=true", "-Dmacosx=false", "-DrcParams-backend=Agg", "-Dpython.bytecompile=-1"}

// contourpyMesonOptions configure contourpy's build.
var contourpyMesonOptions = []string{"--buildtype=release", "-Db_ndebug=if-release", "-Db_lto=false", "-Dpython.bytecompile=-1"}

// mplSourceEdits are the changes made to matplotlib's tree before the
// build.
var mplSourceEdits = []sourceEdit{
	// The version comes from setuptools_scm, which the build Python has
	// not; the tree is git archive's, without the metadata it reads.
	{"meson.build", "  version: run_command(\n    # Also keep version in sync with pyproject.toml.\n    find_program('python3', 'python', version: '>= 3.10'),\n    '-m', 'setuptools_scm', check: true).stdout().strip(),\n",
		"  version: '" + MatplotlibVersion + "',\n", 1},
	// The standard library is a zip, which open() cannot read:
	// matplotlib's data (matplotlibrc, fonts, styles) is kept as files
	// under /usr/share (mplPython).
	{"lib/matplotlib/__init__.py", "    return str(Path(__file__).with_name(\"mpl-data\"))\n",
		"    return " + strconv.Quote(mplDataPath) + "\n", 1},
	// Delaunay triangulation (Qhull) hides Qhull's messages by writing
	// them to /dev/null, which the sandbox did not have when this was
	// written: every triangulation raised "Could not open devnull". They
	// go to a 4 KiB memory stream instead, which drops what does not fit,
	// is freed at fclose and needs no file (the sandbox has /dev/null
	// since; the edit stays, so the variant's key does).
	{"src/_qhull_wrapper.cpp", "        error_file = fopen(STRINGIFY(MPL_DEVNULL), \"w\");\n",
		"        error_file = fmemopen(NULL, 4096, \"w\");  /* fumehood: the sandbox has no /dev/null */\n", 1},
	// The Tk backend's module finds Tcl/Tk by loading libraries at run
	// time, which WASI cannot: not built.
	// (and mplEnumEdits)
	{"src/meson.build", "  '_tkagg': {\n    'subdir': 'matplotlib/backends',\n    'sources': files(\n      '_tkagg.cpp',\n    ),\n" +
		"    'include_directories': include_directories('.'),\n    # The dl/psapi libraries are needed for finding Tcl/Tk at run time.\n" +
		"    'dependencies': [\n      pybind11_dep, agg_dep.partial_dependency(includes: true), dl, comctl32, psapi,\n    ],\n  },\n", "", 1},
}

// noThreadsHeader is included first in contourpy's and kiwisolver's
// sources: contourpy's threaded generator uses std::thread, std::mutex and
// std::condition_variable, and kiwisolver a std::recursive_mutex (for
// Python without the GIL), which libc++ for wasm32-wasi (built without
// threads) does not declare.
// With one hardware thread the generator starts no thread of its own; its
// locks are no-ops, and its barrier never waits (the one thread is the
// last to arrive). Anything else traps. (libc++'s lock_guard is
// declared without threads, and takes this mutex.)
const noThreadsHeader = `#pragma once
#include <mutex>
namespace std {
struct mutex { void lock() {} void unlock() {} bool try_lock() { return true; } };
struct recursive_mutex { void lock() {} void unlock() {} bool try_lock() { return true; } };
template <class M> struct unique_lock { explicit unique_lock(M&) {} void lock() {} void unlock() {} };
struct condition_variable {
  void notify_one() {}
  void notify_all() {}
  template <class L> void wait(L&) { __builtin_trap(); }
};
struct thread {
  template <class F, class... A> explicit thread(F&&, A&&...) { __builtin_trap(); }
  void join() {}
  static unsigned hardware_concurrency() { return 1; }
};
}
`

// contourpyCppArgs are contourpy's C++ flags: matplotlib's, with
// noThreadsHeader.
func (b *builder) contourpyCppArgs() []string {
	return append(mplCppArgs(b.w), "-include", b.mplTools("nothreads.h"))
}

// contourpySourceEdits are the changes made to contourpy's tree before the
// build.
var contourpySourceEdits = []sourceEdit{
	// contourpy records the meson-python version in its build
	// configuration; meson runs here without meson-python.
	{"lib/contourpy/util/meson.build", "  run_command(\n    py3,\n    ['-c', 'import importlib.metadata as im; print(im.version(\"meson-python\"))'],\n    check: true\n  ).stdout().strip()\n",
		"  'none (meson without meson-python)'\n", 1},
}

// pillowSourceEdits are the changes made to Pillow's tree before the
// build: methods Python calls with (self, NULL), declared with one
// parameter (secondParam). Image.getextrema() trapped.
var pillowSourceEdits = slices.Concat(
	secondParam("src/_imaging.c", "PyObject *Py_UNUSED(args)",
		"_getpalettemode(ImagingObject *self)", "_isblock(ImagingObject *self)",
		"_getextrema(ImagingObject *self)", "_getprojection(ImagingObject *self)",
		"_split(ImagingObject *self)", "_chop_invert(ImagingObject *self)"),
	secondParam("src/encode.c", "PyObject *Py_UNUSED(args)", "_encode_to_pyfd(ImagingEncoderObject *encoder)"),
)

// kiwiSourceEdits are the changes made to kiwisolver's tree before the
// build: methods and getters Python calls with (self, NULL), declared with
// one parameter (secondParam; C++, so a default argument keeps the direct
// calls). Variable.value() and strength.weak trapped.
var kiwiSourceEdits = slices.Concat(
	secondParam("py/src/constraint.cpp", "PyObject* = nullptr", "Constraint_expression(Constraint *self)",
		"Constraint_op(Constraint *self)", "Constraint_strength(Constraint *self)", "Constraint_violated(Constraint *self)"),
	secondParam("py/src/expression.cpp", "PyObject* = nullptr", "Expression_terms( Expression* self )",
		"Expression_constant( Expression* self )", "Expression_value( Expression* self )"),
	secondParam("py/src/solver.cpp", "PyObject* = nullptr", "Solver_updateVariables( Solver* self )",
		"Solver_reset( Solver* self )", "Solver_dump( Solver* self )", "Solver_dumps( Solver* self )"),
	secondParam("py/src/strength.cpp", "void* = nullptr", "strength_weak( strength* self )",
		"strength_medium( strength* self )", "strength_strong( strength* self )", "strength_required( strength* self )"),
	secondParam("py/src/term.cpp", "PyObject* = nullptr", "Term_variable( Term* self )",
		"Term_coefficient( Term* self )", "Term_value( Term* self )"),
	secondParam("py/src/variable.cpp", "PyObject* = nullptr", "Variable_name( Variable* self )",
		"Variable_context( Variable* self )", "Variable_value( Variable* self )"),
)

// The edits of mplEnumEdits: linked into python.wasm, a module's static
// initializers run when the interpreter starts, before Python is
// initialized, where a shared module's run when Python loads it. Those of
// P11X_DECLARE_ENUM (ft2font's enums) make Python objects: they are
// deferred to bind_enums, which the module's init function calls.
var mplEnumEdits = []sourceEdit{
	{"src/_enums.h", "#include <pybind11/pybind11.h>\n", "#include <pybind11/pybind11.h>\n#include <functional>\n#include <vector>\n", 1},
	{"src/_enums.h", "    auto enums = std::unordered_map<std::string, py::object>{};\n",
		"    auto enums = std::unordered_map<std::string, py::object>{};\n\n" +
			"    // The enums' declarations, run by bind_enums (fumehood: static linking).\n" +
			"    auto enum_inits = std::vector<std::function<void()>>{};\n", 1},
	{"src/_enums.h", "    auto bind_enums(py::module mod) -> void\n    {\n",
		"    auto bind_enums(py::module mod) -> void\n    {\n      for (auto& init: enum_inits) { init(); }\n      enum_inits.clear();\n", 1},
	{"src/_enums.h", "      [[maybe_unused]] auto const P11X_CAT(enum_placeholder_, __COUNTER__) = \\\n        [](auto args) { \\\n",
		"      [[maybe_unused]] auto const P11X_CAT(enum_placeholder_, __COUNTER__) = \\\n        (p11x::enum_inits.push_back([]() { [](auto args) { \\\n", 1},
	{"src/_enums.h", "          return 0; \\\n        } (std::vector{std::pair __VA_ARGS__}); \\\n",
		"          return 0; \\\n        } (std::vector{std::pair __VA_ARGS__}); }), 0); \\\n", 1},
}

// matplotlibFlags are the matplotlib part's flags, as recorded in
// Info.Flags and in the cache key.
func matplotlibFlags() []string {
	return []string{
		"matplotlib: recipe " + strconv.Itoa(MatplotlibRecipe),
		"matplotlib: freetype meson " + strings.Join(freetypeMesonOptions, " "),
		"matplotlib: setjmp.h " + sjljHeader + "sjlj runtime " + sjljRuntime,
		"matplotlib: meson " + strings.Join(mplMesonOptions, " "),
		"matplotlib: contourpy meson " + strings.Join(contourpyMesonOptions, " "),
		"matplotlib: c_args " + strings.Join(mplCArgs("$W"), " "),
		"matplotlib: cpp_args " + strings.Join(mplCppArgs("$W"), " "),
		"matplotlib: pillow " + strings.Join(pillowDefines, " "),
		"matplotlib: libjpeg " + strings.Join(jpegSources, " ") + " jconfig.h sha256: " + pipeline.Digest([]byte(jconfigHeader)) +
			" jconfigint.h sha256: " + pipeline.Digest([]byte(jconfigintHeader)) + " jversion.h: COPYRIGHT_YEAR " + jpegCopyrightYear,
		"matplotlib: edits " + editFlags(append(mplSourceEdits, mplEnumEdits...)),
		"contourpy: edits " + editFlags(contourpySourceEdits),
		"pillow: edits " + editFlags(pillowSourceEdits),
		"kiwisolver: edits " + editFlags(kiwiSourceEdits),
		"contourpy: cpp_args " + strings.Join((&builder{w: "$W"}).contourpyCppArgs(), " ") + " " + noThreadsHeader,
	}
}

// matplotlibSteps are the matplotlib variant's steps, run after numpy's
// (and pandas') and before the extension modules are linked.
func (b *builder) matplotlibSteps() []buildStep {
	return []buildStep{
		{"matplotlib: extract", b.mplExtract},
		{"matplotlib: freetype", b.mplFreetype},
		{"matplotlib: configure (meson)", b.mplConfigure},
		{"matplotlib: compile", b.mplCompile},
		{"matplotlib: python files", b.mplPython},
	}
}

func (b *builder) mplExtract(ctx context.Context) error {
	for _, name := range []string{"matplotlib", "kiwisolver", "freetype", "qhull", "pillow", "libjpeg-turbo", "contourpy", "fonttools"} {
		if err := b.run(ctx, b.w, nil, "tar", "-xf", b.files[name]); err != nil {
			return err
		}
	}
	for _, in := range MatplotlibInputs {
		if in.Kind == Binary {
			if err := b.run(ctx, b.w, nil, "dpkg-deb", "-x", b.files[in.Package], b.path("mpl-deps")); err != nil {
				return err
			}
		}
	}
	if err := applyEdits(b.path(mplSrc), "matplotlib", append(mplSourceEdits, mplEnumEdits...)); err != nil {
		return err
	}
	if err := applyEdits(b.path(contourpySrc), "contourpy", contourpySourceEdits); err != nil {
		return err
	}
	if err := applyEdits(b.path(pillowSrc), "pillow", pillowSourceEdits); err != nil {
		return err
	}
	if err := applyEdits(b.path(kiwiSrc), "kiwisolver", kiwiSourceEdits); err != nil {
		return err
	}
	// Qhull 2020.2 is the 8.0.2 that matplotlib's wrap names: put where
	// the wrap finds it, with matplotlib's meson.build for it.
	qhull := b.path(mplSrc, "subprojects", "qhull-8.0.2")
	if err := os.Rename(b.path(qhullSrc), qhull); err != nil {
		return err
	}
	if err := copyFile(b.path(mplSrc, "subprojects", "packagefiles", "qhull-8.0.2", "meson.build"), filepath.Join(qhull, "meson.build")); err != nil {
		return err
	}
	// kiwisolver's version header, which setuptools_scm writes.
	return os.WriteFile(b.path(kiwiSrc, "py", "src", "version.h"),
		[]byte("#pragma once\n#define PY_KIWI_VERSION \""+KiwisolverVersion+"\"\n"), 0o644)
}

// shareDir holds files the standard-library step packs under /usr/share
// in the guest, outside the zip.
const shareDir = "share"

// mplDataPath is where matplotlib's mpl-data is in the guest.
const mplDataPath = "/usr/share/matplotlib/mpl-data"

// KiwisolverVersion is the kiwisolver version built into the matplotlib
// variant.
const KiwisolverVersion = "1.4.9"

// mplTools is the directory of the matplotlib part's build files.
func (b *builder) mplTools(p ...string) string {
	return b.path(append([]string{"mpl-tools"}, p...)...)
}

// mplMeson configures a meson build in dir (run from src) with the
// cross file named cross in mpl-tools and the part's pkg-config directory.
func (b *builder) mplMeson(ctx context.Context, src, dir, cross string, opts []string) error {
	args := []string{b.path(numpySrc, "vendored-meson", "meson", "meson.py"), "setup",
		"--cross-file", b.mplTools(cross), "--native-file", b.path("numpy-tools", "native.ini"),
		"--prefix=/usr", "-Dpkg_config_path=" + b.mplTools("pkgconfig")}
	args = append(append(args, opts...), dir)
	return b.run(ctx, src, b.numpyEnv(), b.path("native", "python"), args...)
}

// mplFreetype builds FreeType as a static library, installed in
// mpl-tools/freetype with the pkg-config file matplotlib's build finds it
// by.
func (b *builder) mplFreetype(ctx context.Context) error {
	for _, d := range []string{"pkgconfig", "sjlj"} {
		if err := os.MkdirAll(b.mplTools(d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(b.mplTools("sjlj", "setjmp.h"), []byte(sjljHeader), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(b.mplTools("cross.ini"), []byte(b.crossFile(mplCArgs(b.w), mplCppArgs(b.w))), 0o644); err != nil {
		return err
	}
	opts := append([]string{"--prefix=" + b.mplTools("freetype"), "--libdir=lib"}, freetypeMesonOptions...)
	args := []string{b.path(numpySrc, "vendored-meson", "meson", "meson.py"), "setup",
		"--cross-file", b.mplTools("cross.ini"), "--native-file", b.path("numpy-tools", "native.ini")}
	args = append(append(args, opts...), b.path("freetype-build"))
	if err := b.run(ctx, b.path(freetypeSrc), b.numpyEnv(), b.path("native", "python"), args...); err != nil {
		return err
	}
	if err := b.run(ctx, b.path("freetype-build"), b.numpyEnv(), "ninja", "-j"+strconv.Itoa(b.jobs)); err != nil {
		return err
	}
	if err := b.run(ctx, b.path("freetype-build"), b.numpyEnv(), b.path("native", "python"),
		b.path(numpySrc, "vendored-meson", "meson", "meson.py"), "install", "--no-rebuild"); err != nil {
		return err
	}
	return copyFile(b.mplTools("freetype", "lib", "pkgconfig", "freetype2.pc"), b.mplTools("pkgconfig", "freetype2.pc"))
}

// mplConfigure configures matplotlib's and contourpy's meson builds, with
// pybind11's headers found through a pkg-config file.
func (b *builder) mplConfigure(ctx context.Context) error {
	if err := os.WriteFile(b.mplTools("nothreads.h"), []byte(noThreadsHeader), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(b.mplTools("contourpy.ini"), []byte(b.crossFile(mplCArgs(b.w), b.contourpyCppArgs())), 0o644); err != nil {
		return err
	}
	pc := "Name: pybind11\nDescription: pybind11 headers\nVersion: 2.13.6\nCflags: -I" + b.path("mpl-deps", "usr", "include") + "\n"
	if err := os.WriteFile(b.mplTools("pkgconfig", "pybind11.pc"), []byte(pc), 0o644); err != nil {
		return err
	}
	if err := b.mplMeson(ctx, b.path(contourpySrc), b.path("contourpy-build"), "contourpy.ini", contourpyMesonOptions); err != nil {
		return err
	}
	if err := b.mplMeson(ctx, b.path(mplSrc), b.path("matplotlib-build"), "cross.ini", mplMesonOptions); err != nil {
		return err
	}
	return b.writeDirectBuild()
}

// pillowDefines are the macros Pillow's setup.py would define here: zlib
// (PNG) and libjpeg (JPEG), and nothing else (no TIFF, WebP, JPEG 2000 or
// LCMS libraries). They go through the shell that ninja runs, quoted for
// it.
var pillowDefines = []string{"-DHAVE_LIBZ", "-DHAVE_LIBJPEG", `'-DPILLOW_VERSION="11.1.0"'`}

// jpegSources are libjpeg-turbo's library sources as its CMakeLists.txt
// lists them for a build with arithmetic coding and without SIMD
// (jsimd_none.c): libjpeg's API (version 6b, as Debian's libjpeg62-turbo),
// not TurboJPEG's. They are compiled into mpl-direct/libjpeg.a, which
// Pillow's _imaging links, with the configuration headers below in place
// of the ones CMake would write (CMake is not a tool of the build).
var jpegSources = strings.Fields(`jcapimin jcapistd jccoefct jccolor jcdctmgr jchuff jcicc jcinit
jcmainct jcmarker jcmaster jcomapi jcparam jcphuff jcprepct jcsample jctrans jdapimin jdapistd
jdatadst jdatasrc jdcoefct jdcolor jddctmgr jdhuff jdicc jdinput jdmainct jdmarker jdmaster
jdmerge jdphuff jdpostct jdsample jdtrans jerror jfdctflt jfdctfst jfdctint jidctflt jidctfst
jidctint jidctred jquant1 jquant2 jutils jmemmgr jmemnobs jaricom jcarith jdarith jsimd_none`)

// jconfigHeader is libjpeg-turbo's jconfig.h (from jconfig.h.in) for
// wasm32: the libjpeg 6b API, arithmetic coding both ways, in-memory
// source and destination managers, 8-bit samples, no SIMD.
const jconfigHeader = `#define JPEG_LIB_VERSION  62
#define LIBJPEG_TURBO_VERSION  2.1.5
#define LIBJPEG_TURBO_VERSION_NUMBER  2001005
#define C_ARITH_CODING_SUPPORTED 1
#define D_ARITH_CODING_SUPPORTED 1
#define MEM_SRCDST_SUPPORTED 1
#define BITS_IN_JSAMPLE  8
`

// jpegCopyrightYear is what libjpeg-turbo's CMakeLists.txt puts for
// @COPYRIGHT_YEAR@ into jversion.h (from jversion.h.in), the one
// placeholder of that template.
const jpegCopyrightYear = "1991-2023"

// jversionHeader makes libjpeg-turbo's jversion.h from its template in
// the source tree, as CMake would.
func (b *builder) jversionHeader() ([]byte, error) {
	in, err := os.ReadFile(b.path(jpegSrc, "jversion.h.in"))
	if err != nil {
		return nil, err
	}
	const placeholder = "@COPYRIGHT_YEAR@"
	if n := strings.Count(string(in), "@"); n != 2 || !strings.Contains(string(in), placeholder) {
		return nil, fmt.Errorf("libjpeg-turbo's jversion.h.in has %d @ where one %s was expected", n, placeholder)
	}
	return []byte(strings.Replace(string(in), placeholder, jpegCopyrightYear, 1)), nil
}

// jconfigintHeader is libjpeg-turbo's jconfigint.h (from jconfigint.h.in)
// for wasm32: size_t and unsigned long are both 32 bits, so
// __builtin_ctzl serves; one thread, so no thread-local storage.
const jconfigintHeader = `#define BUILD  "20250611"
#undef inline
#define INLINE  __inline__ __attribute__((always_inline))
#define THREAD_LOCAL
#define PACKAGE_NAME  "libjpeg-turbo"
#define VERSION  "2.1.5"
#define SIZEOF_SIZE_T  4
#define HAVE_BUILTIN_CTZL
#if defined(__has_attribute)
#if __has_attribute(fallthrough)
#define FALLTHROUGH  __attribute__((fallthrough));
#else
#define FALLTHROUGH
#endif
#else
#define FALLTHROUGH
#endif
`

// pillowImaging are Pillow's _imaging module's sources (setup.py's
// _IMAGING and _LIB_IMAGING).
var pillowImaging = strings.Fields(`_imaging decode encode map display outline path
libImaging/Access libImaging/AlphaComposite libImaging/Resample libImaging/Reduce libImaging/Bands
libImaging/BcnDecode libImaging/BitDecode libImaging/Blend libImaging/Chops libImaging/ColorLUT
libImaging/Convert libImaging/ConvertYCbCr libImaging/Copy libImaging/Crop libImaging/Dib
libImaging/Draw libImaging/Effects libImaging/EpsEncode libImaging/File libImaging/Fill
libImaging/Filter libImaging/FliDecode libImaging/Geometry libImaging/GetBBox libImaging/GifDecode
libImaging/GifEncode libImaging/HexDecode libImaging/Histo libImaging/JpegDecode libImaging/JpegEncode
libImaging/Matrix libImaging/ModeFilter libImaging/Negative libImaging/Offset libImaging/Pack
libImaging/PackDecode libImaging/Palette libImaging/Paste libImaging/Quant libImaging/QuantOctree
libImaging/QuantHash libImaging/QuantHeap libImaging/PcdDecode libImaging/PcxDecode libImaging/PcxEncode
libImaging/Point libImaging/RankFilter libImaging/RawDecode libImaging/RawEncode libImaging/Storage
libImaging/SgiRleDecode libImaging/SunRleDecode libImaging/TgaRleDecode libImaging/TgaRleEncode
libImaging/Unpack libImaging/UnpackYCC libImaging/UnsharpMask libImaging/XbmDecode libImaging/XbmEncode
libImaging/ZipDecode libImaging/ZipEncode libImaging/TiffDecode libImaging/Jpeg2KDecode
libImaging/Jpeg2KEncode libImaging/BoxBlur libImaging/QuantPngQuant libImaging/codec_fd`)

// directModule is an extension module built without its project's build
// system (setuptools, which cannot cross-compile): its dotted name, its
// sources relative to src, and its flags.
type directModule struct {
	name, src string
	sources   []string
	flags     []string
	libs      []string
}

// directModules are kiwisolver's and Pillow's modules.
func (b *builder) directModules() []directModule {
	var imaging []string
	for _, s := range pillowImaging {
		imaging = append(imaging, "src/"+s+".c")
	}
	pil := append([]string{"-I" + b.path(pillowSrc, "src", "libImaging"), "-I" + b.path("deps", "include"),
		"-I" + b.mplTools("jpeg"), "-I" + b.path(jpegSrc)}, pillowDefines...)
	kiwi := []string{"-include", b.mplTools("nothreads.h"), "-I" + b.path(kiwiSrc), "-I" + b.path("mpl-deps", "usr", "lib", "python3", "dist-packages", "cppy", "include"), "-std=c++11"}
	var kiwiSources []string
	for _, s := range []string{"kiwisolver", "constraint", "expression", "solver", "strength", "term", "variable"} {
		kiwiSources = append(kiwiSources, "py/src/"+s+".cpp")
	}
	return []directModule{
		{"kiwisolver._cext", kiwiSrc, kiwiSources, kiwi, nil},
		{"PIL._imaging", pillowSrc, imaging, pil, []string{b.path("deps", "lib", "libz.a"), b.path("mpl-direct", "libjpeg.a")}},
		{"PIL._imagingmath", pillowSrc, []string{"src/_imagingmath.c"}, pil, nil},
		{"PIL._imagingmorph", pillowSrc, []string{"src/_imagingmorph.c"}, pil, nil},
	}
}

// writeDirectBuild writes a ninja file that compiles directModules into
// mpl-direct, each module as numpyModules expects one: an archive named
// like the shared module meson would link, with its .libs list.
func (b *builder) writeDirectBuild() error {
	dir := b.path("mpl-direct")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	inc := "-I" + b.path("numpy-tools", "include", "python3.13")
	var n strings.Builder
	fmt.Fprintf(&n, "cc = clang-19 --target=wasm32-wasi --sysroot=%s\n", b.path("wasi-libc", "usr"))
	fmt.Fprintf(&n, "cxx = clang++-19 --target=wasm32-wasi --sysroot=%s -isystem %s\n", b.path("wasi-libc", "usr"), b.toolchainDir(llvmDir, "include", "wasm32-wasi", "c++", "v1"))
	fmt.Fprintf(&n, "cflags = -O2 -DNDEBUG %s %s\n", inc, strings.Join(mplCArgs(b.w), " "))
	fmt.Fprintf(&n, "cxxflags = -O2 -DNDEBUG %s %s\n", inc, strings.Join(mplCppArgs(b.w), " "))
	n.WriteString("rule cc\n  command = $cc $cflags $extra -c $in -o $out\n")
	n.WriteString("rule cxx\n  command = $cxx $cxxflags $extra -c $in -o $out\n")
	n.WriteString("rule ar\n  command = rm -f $out && llvm-ar-19 rcs $out $in\n")
	// libjpeg-turbo's library, for Pillow's JPEG codec, with the headers
	// CMake would write.
	jversion, err := b.jversionHeader()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(b.mplTools("jpeg"), 0o755); err != nil {
		return err
	}
	for name, text := range map[string][]byte{"jconfig.h": []byte(jconfigHeader), "jconfigint.h": []byte(jconfigintHeader), "jversion.h": jversion} {
		if err := os.WriteFile(b.mplTools("jpeg", name), text, 0o644); err != nil {
			return err
		}
	}
	var jpegFiles []string
	for _, s := range jpegSources {
		jpegFiles = append(jpegFiles, s+".c")
	}
	ninjaArchive(&n, "libjpeg.a", "libjpeg", b.path(jpegSrc), jpegFiles, []string{"-I" + b.mplTools("jpeg"), "-I" + b.path(jpegSrc)})
	for _, m := range b.directModules() {
		archive := strings.ReplaceAll(m.name, ".", "/") + ".so"
		ninjaArchive(&n, archive, m.name, b.path(m.src), m.sources, m.flags)
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(archive)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, archive+".libs"), []byte(strings.Join(m.libs, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "build.ninja"), []byte(n.String()), 0o644)
}

// ninjaArchive writes to n the build statements that compile sources
// (relative to src; C, or C++ for .cpp) with flags into objects under
// obj/name, and archive them as archive.
func ninjaArchive(n *strings.Builder, archive, name, src string, sources, flags []string) {
	var objs []string
	for _, s := range sources {
		obj := filepath.Join("obj", name, strings.TrimSuffix(s, filepath.Ext(s))+".o")
		rule := "cc"
		if strings.HasSuffix(s, ".cpp") {
			rule = "cxx"
		}
		fmt.Fprintf(n, "build %s: %s %s\n  extra = %s\n", obj, rule, filepath.Join(src, s), strings.Join(flags, " "))
		objs = append(objs, obj)
	}
	fmt.Fprintf(n, "build %s: ar %s\n", archive, strings.Join(objs, " "))
}

func (b *builder) mplCompile(ctx context.Context) error {
	for _, dir := range []string{"contourpy-build", "matplotlib-build", "mpl-direct"} {
		if err := b.run(ctx, b.path(dir), b.numpyEnv(), "ninja", "-j"+strconv.Itoa(b.jobs)); err != nil {
			return err
		}
	}
	return nil
}

// mplExcluded are parts of the installed trees left out of the
// standard-library bundle: tests, type stubs, C sources, the module
// archives (matplotlib's tests hold its baseline images).
func mplExcluded(rel string) bool {
	return pandasExcluded(rel) || strings.HasSuffix(rel, ".cpp")
}

// mplDeps are the packages taken from the dependencies' Debian packages
// (their dist-packages directories).
var mplDeps = []string{"pyparsing", "cycler", "packaging", "dateutil", "six.py"}

// mplPython installs matplotlib and contourpy (meson install into a
// staging directory) and copies their Python files, kiwisolver's,
// Pillow's, fontTools' and the dependencies' into the standard library
// tree.
func (b *builder) mplPython(ctx context.Context) error {
	dst := b.path("stdlib", "python3.13")
	stage := b.path("mpl-install")
	for _, dir := range []string{"contourpy-build", "matplotlib-build"} {
		if err := b.run(ctx, b.path(dir), b.numpyEnv(), b.path("native", "python"),
			b.path(numpySrc, "vendored-meson", "meson", "meson.py"), "install", "--no-rebuild", "--destdir", stage); err != nil {
			return err
		}
	}
	site, err := filepath.Glob(filepath.Join(stage, "usr", "lib", "python3.13", "*-packages"))
	if err != nil {
		return err
	}
	if len(site) != 1 {
		return fmt.Errorf("matplotlib: install: found %d package directories in %s", len(site), stage)
	}
	trees := []struct{ src, name string }{
		{site[0], "matplotlib"}, {site[0], "mpl_toolkits"}, {site[0], "contourpy"},
		{b.path(kiwiSrc, "py"), "kiwisolver"}, {b.path(pillowSrc, "src"), "PIL"},
		{b.path(fonttoolsSrc, "Lib"), "fontTools"},
	}
	dist := b.path("mpl-deps", "usr", "lib", "python3", "dist-packages")
	for _, d := range mplDeps {
		trees = append(trees, struct{ src, name string }{dist, d})
	}
	for _, t := range trees {
		src := filepath.Join(t.src, t.name)
		fi, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("matplotlib: %w", err)
		}
		if !fi.IsDir() {
			err = copyFile(src, filepath.Join(dst, t.name))
		} else {
			err = copyTree(src, filepath.Join(dst, t.name), mplExcluded)
		}
		if err != nil {
			return err
		}
	}
	if err := copyFile(filepath.Join(site[0], "pylab.py"), filepath.Join(dst, "pylab.py")); err != nil {
		return err
	}
	// mpl-data goes under /usr/share (mplDataPath), out of the zip.
	data := filepath.Join(dst, "matplotlib", "mpl-data")
	share := b.path(shareDir, "matplotlib")
	if err := os.MkdirAll(share, 0o755); err != nil {
		return err
	}
	return os.Rename(data, filepath.Join(share, "mpl-data"))
}

// CxxRuntime is the C++ runtime with exceptions (internal/cxxrt) that the
// parts with C++ code that throws (matplotlib's pybind11 modules,
// contourpy, kiwisolver) link instead of Debian's libc++, which has none.
type CxxRuntime interface {
	// Key is the runtime's key, known without building it.
	Key() (string, error)
	// Build builds the runtime unless the cache has it, and returns the
	// archives to link.
	Build(ctx context.Context, cacheDir string, progress func(cache.Progress)) ([]string, error)
}

var cxxRuntime CxxRuntime

// RegisterCxxRuntime gives the build its C++ runtime: internal/cxxrt
// registers itself when a program links it (package sandbox imports it).
func RegisterCxxRuntime(r CxxRuntime) { cxxRuntime = r }

// ErrNoCxxRuntime reports a build or look-up of a variant with C++
// exceptions in a program that does not link internal/cxxrt.
var ErrNoCxxRuntime = errors.New("cpython: the C++ runtime with exceptions (internal/cxxrt) is not linked into this program")

// needsCxxRuntime reports whether parts link the C++ runtime with
// exceptions.
func needsCxxRuntime(parts []string) bool { return slices.Contains(parts, Matplotlib) }

// cxxRuntimeKey is the runtime's key for the parts, "" for parts that do
// not link it.
func cxxRuntimeKey(parts []string) (string, error) {
	if !needsCxxRuntime(parts) {
		return "", nil
	}
	if cxxRuntime == nil {
		return "", ErrNoCxxRuntime
	}
	return cxxRuntime.Key()
}
