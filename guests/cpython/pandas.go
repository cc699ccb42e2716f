package cpython

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Pandas is the name of the optional part that builds pandas into the
// guest (Options.With, `fumehood guest build --with pandas`). It implies
// Numpy.
const Pandas = "pandas"

// PandasVersion is the pandas version built into the pandas variant.
const PandasVersion = "2.2.3"

// PandasRecipe is the version of the pandas part of the recipe: it
// changes whenever the pandas variant's output would change for the same
// inputs.
const PandasRecipe = 1

// PandasInputs are what the pandas variant adds to [Inputs], fetched by
// apt like them: pandas' source (Debian's repack leaves out one
// documentation page and two git files), its pure-Python dependencies,
// whose architecture-independent packages hold the .py files, and the
// zone names Debian keeps apart (tzdata-legacy). pytz is
// Debian's, which reads the zone files the guest already has
// (/usr/share/zoneinfo) instead of a copy of its own; pandas' tzdata
// dependency is optional (it warns only when an installed one is old), and
// zoneinfo uses the same zone files.
var PandasInputs = []Input{
	{Package: "pandas", Version: "2.2.3+dfsg-9", Suite: "trixie", Kind: Source,
		File:     "pandas_2.2.3+dfsg.orig.tar.xz",
		SHA256:   "3aea680c0953fb61ad11d5fb75023b84ff3c0f8bb7faa03a2bf538635a1dcbbe",
		Upstream: "pandas 2.2.3 (Debian repack without doc/source/user_guide/cookbook.rst, .gitignore, .gitattributes)"},
	{Package: "python3-dateutil", Version: "2.9.0-4", Suite: "trixie", Kind: Binary,
		File:     "python3-dateutil_2.9.0-4_all.deb",
		SHA256:   "c86f3b7e878e8035b0850cd4e0d0ee014a4b5ee4a8fb7386d8998e100452d06c",
		Upstream: "python-dateutil 2.9.0"},
	{Package: "python3-pytz", Version: "2025.2-3", Suite: "trixie", Kind: Binary,
		File:     "python3-pytz_2025.2-3_all.deb",
		SHA256:   "a5aa854697849a1e59737373795114587e2325f1d3f9c9a87092254ca88e58fd",
		Upstream: "pytz 2025.2 (Debian's: the system zone files)"},
	{Package: "python3-six", Version: "1.17.0-1", Suite: "trixie", Kind: Binary,
		File:     "python3-six_1.17.0-1_all.deb",
		SHA256:   "cd1caa92b2860d1de83311cb77f9fab1ee66034ef997cc436d41a1707458666d",
		Upstream: "six 1.17.0 (python-dateutil needs it)"},
	{Package: "tzdata-legacy", Version: "2026f-0+deb13u1", Suite: "trixie", Kind: Binary,
		File:     "tzdata-legacy_2026f-0+deb13u1_all.deb",
		SHA256:   "92bb8f5ee8f87e6ee641ec3b24876d2d83b64dd1d7fe864b1cceac4cea7f1549",
		Upstream: "tz 2026f backward-compatible zone names (US/Pacific, ...)"},
}

// pandasGitRevision is pandas' v2.2.3 release commit, which pandas
// reports as pandas.__git_version__ (a release tarball's
// _version_meson.py has it; Debian's repack has none).
const pandasGitRevision = "0691c5cf90477d3503834d983f69350f250a6ff7"

const pandasSrc = "pandas-2.2.3"

// pandasMesonOptions are the options pandas' meson build is configured
// with.
var pandasMesonOptions = []string{"--buildtype=release", "-Db_ndebug=if-release", "-Dpython.bytecompile=-1"}

// pandasSourceEdits are the changes made to pandas' tree before the
// build (numpy's kind).
var pandasSourceEdits = []sourceEdit{
	// The version comes from versioneer, which the tarball lacks;
	// _version_meson.py (pandasExtract) gives it to pandas itself.
	{"meson.build", "version: run_command(['generate_version.py', '--print'], check: true).stdout().strip(),", "version: '" + PandasVersion + "',", 1},
	// Linked into one binary, every extension module shares one symbol
	// space (see numpySourceEdits). khash_python.h defines its allocation
	// functions in the header, so six modules each had a global copy:
	// made static.
	{khashPython, "\nvoid *traced_malloc(size_t size) {", "\nstatic inline void *traced_malloc(size_t size) {", 1},
	{khashPython, "\nvoid *traced_calloc(size_t num, size_t size) {", "\nstatic inline void *traced_calloc(size_t num, size_t size) {", 1},
	{khashPython, "\nvoid *traced_realloc(void *old_ptr, size_t size) {", "\nstatic inline void *traced_realloc(void *old_ptr, size_t size) {", 1},
	{khashPython, "\nvoid traced_free(void *ptr) {", "\nstatic inline void traced_free(void *ptr) {", 1},
	// pandas' copy of numpy's datetime code defines four functions that
	// numpy's _multiarray_umath defines too, one of them with another
	// return type (a struct, where numpy's returns a pointer): pandas'
	// copies are renamed. get_datetime_metadata_from_dtype is also the
	// name of a field and a macro of pandas' datetime C API, so it is
	// renamed where it is declared, defined and taken, not by a macro.
	{npDatetimeH, "\nint is_leapyear(npy_int64 year);", "\n#define is_leapyear pandas_is_leapyear\n" +
		"#define get_datetimestruct_days pandas_get_datetimestruct_days\n" +
		"#define add_minutes_to_datetimestruct pandas_add_minutes_to_datetimestruct\n" +
		"int is_leapyear(npy_int64 year);", 1},
	{npDatetimeH, "PyArray_DatetimeMetaData get_datetime_metadata_from_dtype(PyArray_Descr *dtype);",
		"PyArray_DatetimeMetaData pandas_get_datetime_metadata_from_dtype(PyArray_Descr *dtype);", 1},
	{"pandas/_libs/src/vendored/numpy/datetime/np_datetime.c", "\nget_datetime_metadata_from_dtype(PyArray_Descr *dtype) {",
		"\npandas_get_datetime_metadata_from_dtype(PyArray_Descr *dtype) {", 1},
	{"pandas/_libs/src/datetime/pd_datetime.c", "capi->get_datetime_metadata_from_dtype = get_datetime_metadata_from_dtype;",
		"capi->get_datetime_metadata_from_dtype = pandas_get_datetime_metadata_from_dtype;", 1},
	// The guest has no ctypes (no libffi, no dynamic loading), and two
	// modules that `import pandas` reaches import it at the top, for
	// something that needs it only when called: a Windows-only clipboard
	// error, and the dataframe interchange protocol's buffers by address.
	{"pandas/errors/__init__.py", "\nimport ctypes\n", "\n", 1},
	{"pandas/errors/__init__.py", "        message += f\" ({ctypes.WinError()})\"", "        import ctypes\n\n        message += f\" ({ctypes.WinError()})\"", 1},
	// pandas issue 52451: where np.intc is not np.int32, merge's table
	// takes np.intc for a 64-bit integer. On wasm32 (numpy 2) np.int32 is
	// np.long and np.intc another 32-bit type, the default integer of
	// np.arange among others, so a merge on such keys raised "Buffer
	// dtype mismatch, expected 'const int64_t' but got 'int'": the
	// factorizer is chosen by np.intc's size.
	{"pandas/core/reshape/merge.py", "    _factorizers[np.intc] = libhashtable.Int64Factorizer\n",
		"    _factorizers[np.intc] = libhashtable.Int64Factorizer if np.dtype(np.intc).itemsize == 8 else libhashtable.Int32Factorizer\n", 1},
	// WASI cannot map files: fumehood's start-up code gives runs a copying
	// mmap module, but a bare interpreter (Exec) has none, and pandas
	// needs it only for read_csv(memory_map=True) and to check a handle
	// when it writes Excel files.
	{"pandas/io/common.py", "\nimport mmap\n", optionalMmap, 1},
	{"pandas/io/excel/_openpyxl.py", "\nimport mmap\n", optionalMmap, 1},
	{"pandas/core/interchange/from_dataframe.py", "\nimport ctypes\n", "\ntry:\n    import ctypes\nexcept ImportError:  # no ctypes: from_dataframe fails when it needs it\n    ctypes = None\n", 1},
}

// optionalMmap replaces `import mmap` where pandas needs the module only
// for isinstance checks and memory_map=True: without it, mmap.mmap is a
// class nothing is an instance of.
const optionalMmap = "\ntry:\n    import mmap\nexcept ImportError:  # WASI: no mmap without fumehood's start-up code\n" +
	"    import types as _types\n\n    mmap = _types.SimpleNamespace(mmap=type(\"mmap\", (), {}))\n"

const (
	khashPython = "pandas/_libs/include/pandas/vendored/klib/khash_python.h"
	npDatetimeH = "pandas/_libs/include/pandas/vendored/numpy/datetime/np_datetime.h"
)

// pandasFlags are the pandas part's flags, as recorded in Info.Flags and
// in the cache key.
func pandasFlags() []string {
	return []string{
		"pandas: recipe " + strconv.Itoa(PandasRecipe),
		"pandas: meson " + strings.Join(pandasMesonOptions, " "),
		"pandas: c_args " + strings.Join(numpyCArgs("$W"), " "),
		"pandas: cpp_args " + strings.Join(pandasCppArgs("$W"), " "),
		"pandas: edits " + editFlags(pandasSourceEdits),
	}
}

// pandasCppArgs are the C++ flags of pandas' one C++ module
// (pandas._libs.window.aggregations): see pandasCppNote.
func pandasCppArgs(w string) []string {
	return numpyCppArgs(w)
}

// pandasSteps are the pandas variant's steps, run after numpy's Python
// files are staged (pandas compiles against numpy's headers and Cython
// declarations) and before the extension modules are linked.
func (b *builder) pandasSteps() []buildStep {
	return []buildStep{
		{"pandas: extract", b.pandasExtract},
		{"pandas: configure (meson)", b.pandasConfigure},
		{"pandas: compile", b.pandasCompile},
		{"pandas: python files", b.pandasPython},
	}
}

func (b *builder) pandasExtract(ctx context.Context) error {
	if err := b.run(ctx, b.w, nil, "tar", "-xf", b.files["pandas"]); err != nil {
		return err
	}
	if err := applyEdits(b.path(pandasSrc), "pandas", pandasSourceEdits); err != nil {
		return err
	}
	return os.WriteFile(b.path(pandasSrc, "_version_meson.py"),
		[]byte("__version__=\""+PandasVersion+"\"\n__git_version__=\""+pandasGitRevision+"\"\n"), 0o644)
}

// pandasConfigure configures pandas' meson build with numpy's cross and
// native files. pandas' meson.build asks the build Python for numpy's
// include directory (import numpy; numpy.get_include()), and Cython looks
// for numpy's declarations (numpy/__init__.pxd) on the build Python's
// path: numpy's cross build cannot be imported there, so a stand-in
// package holds its declarations and a get_include that names its staged
// headers.
func (b *builder) pandasConfigure(ctx context.Context) error {
	tools := b.path("pandas-tools")
	stub := filepath.Join(tools, "numpy-stub", "numpy")
	if err := os.MkdirAll(stub, 0o755); err != nil {
		return err
	}
	npy, err := b.numpyStaged()
	if err != nil {
		return err
	}
	for _, f := range []string{"__init__.pxd", "__init__.cython-30.pxd"} {
		if err := copyFile(filepath.Join(npy, f), filepath.Join(stub, f)); err != nil {
			return err
		}
	}
	getInclude := fmt.Sprintf("def get_include():\n    return %q\n", filepath.Join(npy, "_core", "include"))
	if err := os.WriteFile(filepath.Join(stub, "__init__.py"), []byte(getInclude), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tools, "cross.ini"), []byte(b.crossFile(numpyCArgs(b.w), pandasCppArgs(b.w))), 0o644); err != nil {
		return err
	}
	args := []string{b.path(numpySrc, "vendored-meson", "meson", "meson.py"), "setup",
		"--cross-file", filepath.Join(tools, "cross.ini"), "--native-file", b.path("numpy-tools", "native.ini"), "--prefix=/usr"}
	args = append(args, pandasMesonOptions...)
	args = append(args, b.path("pandas-build"))
	return b.run(ctx, b.path(pandasSrc), b.pandasEnv(), b.path("native", "python"), args...)
}

// pandasEnv is numpyEnv with the numpy stand-in and Cython (whose
// Tempita pandas' generate_pxi.py imports) on the path.
func (b *builder) pandasEnv() []string {
	env := b.numpyEnv()
	for i, e := range env {
		if strings.HasPrefix(e, "PYTHONPATH=") {
			env[i] = strings.Join([]string{e, b.path("pandas-tools", "numpy-stub"), b.path(cythonSrc)}, string(os.PathListSeparator))
		}
	}
	return env
}

func (b *builder) pandasCompile(ctx context.Context) error {
	return b.run(ctx, b.path("pandas-build"), b.pandasEnv(), "ninja", "-j"+strconv.Itoa(b.jobs))
}

// pandasExcluded are parts of pandas' installed tree left out of the
// standard-library bundle: its tests (about 60% of its Python files), type
// stubs, Cython sources and the module archives.
func pandasExcluded(rel string) bool {
	for _, part := range strings.Split(rel, "/") {
		if part == "tests" || part == "__pycache__" {
			return true
		}
	}
	for _, ext := range []string{".pyi", ".pxd", ".pyx", ".so", ".libs", ".a", ".c", ".h"} {
		if strings.HasSuffix(rel, ext) {
			return true
		}
	}
	return false
}

// pandasDeps are the packages taken from the dependencies' Debian
// packages (their dist-packages directories).
var pandasDeps = []string{"dateutil", "pytz", "six.py"}

// pandasPython installs pandas (meson install into a staging directory)
// and copies its Python files and its dependencies' into the standard
// library tree.
func (b *builder) pandasPython(ctx context.Context) error {
	stage := b.path("pandas-install")
	if err := b.run(ctx, b.path("pandas-build"), b.pandasEnv(), b.path("native", "python"),
		b.path(numpySrc, "vendored-meson", "meson", "meson.py"), "install", "--no-rebuild", "--destdir", stage); err != nil {
		return err
	}
	inits, err := filepath.Glob(filepath.Join(stage, "usr", "lib", "python3.13", "*-packages", "pandas", "__init__.py"))
	if err != nil {
		return err
	}
	if len(inits) != 1 {
		return fmt.Errorf("pandas: install: found %d pandas packages in %s", len(inits), stage)
	}
	dst := b.path("stdlib", "python3.13")
	if err := copyTree(filepath.Dir(inits[0]), filepath.Join(dst, "pandas"), pandasExcluded); err != nil {
		return err
	}
	debs := b.path("pandas-deps")
	for _, in := range PandasInputs[1:] {
		dir := debs
		if in.Package == "tzdata-legacy" {
			// Into the zone files the standard library step packs:
			// Debian's tzdata keeps names such as US/Pacific, which
			// pandas' own code and its users name, in tzdata-legacy.
			dir = b.path("tz")
		}
		if err := b.run(ctx, b.w, nil, "dpkg-deb", "-x", b.files[in.Package], dir); err != nil {
			return err
		}
	}
	// The leap-second ("right/") zones: no Python library reads them.
	if err := os.RemoveAll(b.path("tz", "usr", "share", "zoneinfo", "right")); err != nil {
		return err
	}
	dist := filepath.Join(debs, "usr", "lib", "python3", "dist-packages")
	for _, d := range pandasDeps {
		src := filepath.Join(dist, d)
		fi, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("pandas: dependencies: %w", err)
		}
		if !fi.IsDir() {
			err = copyFile(src, filepath.Join(dst, d))
		} else {
			err = copyTree(src, filepath.Join(dst, d), pandasExcluded)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
