package cpython

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fumehood/fumehood/internal/pipeline"
)

// builder runs the build's steps in its work directory w:
//
//	w/Python-3.13.5, w/zlib-1.3.1, ...  the extracted sources
//	w/toolchain                          the cross toolchain (toolchain.go)
//	w/wasi-libc/usr                      the WASI sysroot (trixie's wasi-libc)
//	w/tz/usr/share/zoneinfo              the compiled zone files
//	w/native                             the build Python
//	w/deps                               the cross-built libraries (include, lib)
//	w/cross                              the cross build of CPython
//	w/stdlib                             the standard library, compiled
type builder struct {
	w         string
	files     map[string]string // package -> verified input file
	jobs      int
	toolchain []Input // the cross toolchain's packages (ToolchainInputs)
	tcVersion string  // clang's version line (unpackToolchain)
	logs      int
	parts     []string // the optional parts built in (Options.With, implied ones added)
	cxxLibs   []string // the C++ runtime with exceptions, for parts that need it
}

type buildStep struct {
	name string
	run  func(context.Context) error
}

const (
	pySrc    = "Python-3.13.5"
	zlibSrc  = "zlib-1.3.1"
	bzip2Src = "bzip2-1.0.8"
	xzSrc    = "xz-5.8.1"
	sqlSrc   = "sqlite3-3.46.1"
)

func (b *builder) steps() []buildStep {
	return []buildStep{
		{"toolchain", b.unpackToolchain},
		{"extract", b.extract},
		{"edit cpython", b.patchSource},
		{"native python", b.native},
		{"zlib", b.zlib},
		{"bzip2", b.bzip2},
		{"liblzma", b.lzma},
		{"sqlite3", b.sqlite},
		{"configure cpython for wasm32-wasi", b.crossConfigure},
		{"fumehood driver", b.driver},
		// Profile-guided optimization (pgo.go): the profile runtime, an
		// instrumented interpreter, its training run, then the interpreter
		// built with the profile.
		{"profile runtime", b.profileRuntime},
		{"make cpython for wasm32-wasi, instrumented", b.crossMakeInstrumented},
		{"train the instrumented cpython", b.pgoTrain},
		{"make cpython for wasm32-wasi", b.crossMakeOptimized},
		{"standard library", b.stdlib},
	}
}

func (b *builder) path(p ...string) string { return filepath.Join(append([]string{b.w}, p...)...) }

func (b *builder) extract(ctx context.Context) error {
	for _, pkg := range []string{"python3.13", "zlib", "bzip2", "xz-utils", "sqlite3"} {
		if err := b.run(ctx, b.w, nil, "tar", "-xf", b.files[pkg]); err != nil {
			return err
		}
	}
	for pkg, dir := range map[string]string{"wasi-libc": "wasi-libc", "tzdata": "tz"} {
		if err := b.run(ctx, b.w, nil, "dpkg-deb", "-x", b.files[pkg], b.path(dir)); err != nil {
			return err
		}
	}
	for _, d := range []string{"native", "cross", "deps/lib/pkgconfig", "deps/include", "sqlite-gen"} {
		if err := os.MkdirAll(b.path(d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// native builds the build Python: a native CPython of the same source,
// which the cross build runs to freeze modules and which compiles the
// standard library.
func (b *builder) native(ctx context.Context) error {
	if err := b.run(ctx, b.path("native"), nil, "../"+pySrc+"/configure", "-q",
		"--without-ensurepip", "--disable-test-modules"); err != nil {
		return err
	}
	return b.run(ctx, b.path("native"), nil, "make", "-j"+strconv.Itoa(b.jobs), "-s")
}

// cc is the cross compiler with its target and sysroot.
func (b *builder) cc() string {
	return "clang-19 --target=wasm32-wasi --sysroot=" + b.path("wasi-libc", "usr")
}

// depFlags are the C flags of the libraries: optimization and the build
// directory's name mapped away.
func (b *builder) depFlags() string {
	return OptFlags + " -ffile-prefix-map=" + b.w + "=/build -fdebug-prefix-map=" + b.w + "=/build"
}

func (b *builder) crossEnv() []string {
	return []string{"CC=" + b.cc(), "CFLAGS=" + b.depFlags(), "AR=llvm-ar-19", "RANLIB=llvm-ranlib-19"}
}

func (b *builder) zlib(ctx context.Context) error {
	dir := b.path(zlibSrc)
	if err := b.run(ctx, dir, append(b.crossEnv(), "CHOST=wasm32"), "./configure", "--static", "--prefix="+b.path("deps")); err != nil {
		return err
	}
	if err := b.run(ctx, dir, nil, "make", "-j"+strconv.Itoa(b.jobs), "libz.a"); err != nil {
		return err
	}
	return b.install(dir, []string{"libz.a"}, []string{"zlib.h", "zconf.h"})
}

func (b *builder) bzip2(ctx context.Context) error {
	dir := b.path(bzip2Src)
	cc := strings.Fields(b.cc())
	var objs []string
	for _, f := range []string{"blocksort", "huffman", "crctable", "randtable", "compress", "decompress", "bzlib"} {
		args := append(cc[1:], strings.Fields(b.depFlags())...)
		args = append(args, "-D_FILE_OFFSET_BITS=64", "-c", f+".c", "-o", f+".o")
		if err := b.run(ctx, dir, nil, cc[0], args...); err != nil {
			return err
		}
		objs = append(objs, f+".o")
	}
	if err := b.run(ctx, dir, nil, "llvm-ar-19", append([]string{"rcs", "libbz2.a"}, objs...)...); err != nil {
		return err
	}
	return b.install(dir, []string{"libbz2.a"}, []string{"bzlib.h"})
}

func (b *builder) lzma(ctx context.Context) error {
	dir := b.path(xzSrc)
	if err := b.run(ctx, dir, b.crossEnv(), "./configure", "-q", "--host=wasm32-unknown-wasi",
		"--prefix="+b.path("deps"), "--disable-shared", "--enable-static", "--disable-dependency-tracking",
		"--disable-xz", "--disable-xzdec", "--disable-lzmadec", "--disable-lzmainfo", "--disable-lzma-links",
		"--disable-scripts", "--disable-doc", "--disable-threads", "--disable-nls",
		"--disable-microlzma", "--disable-lzip-decoder"); err != nil {
		return err
	}
	if err := b.run(ctx, dir, nil, "make", "-j"+strconv.Itoa(b.jobs), "-C", "src/liblzma"); err != nil {
		return err
	}
	return b.run(ctx, dir, nil, "make", "-C", "src/liblzma", "install")
}

// sqliteDefines make SQLite build for WASI: no threads, no loadable
// extensions, no WAL or memory-mapped I/O (WASI has no shared memory
// mappings).
var sqliteDefines = []string{
	"-DSQLITE_THREADSAFE=0", "-DSQLITE_OMIT_LOAD_EXTENSION", "-DSQLITE_OMIT_WAL",
	"-DSQLITE_MAX_MMAP_SIZE=0", "-DSQLITE_OMIT_SHARED_CACHE", "-DSQLITE_NOHAVE_SYSTEM",
	"-DSQLITE_OMIT_POPEN", "-D_WASI_EMULATED_GETPID", "-D_WASI_EMULATED_PROCESS_CLOCKS",
	"-D_WASI_EMULATED_SIGNAL",
}

// sqlite generates the amalgamation natively (it needs tclsh), then
// compiles it for wasm32-wasi.
func (b *builder) sqlite(ctx context.Context) error {
	gen := b.path("sqlite-gen")
	if err := b.run(ctx, gen, nil, "../"+sqlSrc+"/configure", "-q", "--disable-tcl"); err != nil {
		return err
	}
	if err := b.run(ctx, gen, nil, "make", "sqlite3.c"); err != nil {
		return err
	}
	cc := strings.Fields(b.cc())
	args := append(cc[1:], strings.Fields(b.depFlags())...)
	args = append(args, sqliteDefines...)
	args = append(args, "-c", "sqlite3.c", "-o", "sqlite3.o")
	if err := b.run(ctx, gen, nil, cc[0], args...); err != nil {
		return err
	}
	if err := b.run(ctx, gen, nil, "llvm-ar-19", "rcs", "libsqlite3.a", "sqlite3.o"); err != nil {
		return err
	}
	return b.install(gen, []string{"libsqlite3.a"}, []string{"sqlite3.h", "sqlite3ext.h"})
}

// install copies libraries and headers into the dependency prefix.
func (b *builder) install(dir string, libs, headers []string) error {
	for _, l := range libs {
		if err := copyFile(filepath.Join(dir, l), b.path("deps", "lib", l)); err != nil {
			return err
		}
	}
	for _, h := range headers {
		if err := copyFile(filepath.Join(dir, h), b.path("deps", "include", h)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

// crossFlags are the cross build's environment, configure arguments and
// the flags set elsewhere, with w standing for the work directory, as
// recorded in Info.Flags. They are part of the cache key.
func crossFlags(w string) []string {
	flags := append(crossEnv(w), crossArgs(w)...)
	return append(append(flags,
		"make LDFLAGS_NODIST="+stackLDFlags(),
		"Setup.local: "+kdfSetup,
		"_fumehood_kdf.c sha256: "+pipeline.Digest(kdfSource),
		"hashlib.py: falls back to _fumehood_kdf",
		"stdlib zip: .pyc stored, .py deflated",
		"sqlite: "+strings.Join(sqliteDefines, " "),
		"libraries: "+OptFlags,
		"cpython edits: "+editFlags(cpythonEdits),
		driverFlag(),
	), pgoFlags()...)
}

// crossEnv is the environment of CPython's cross configure.
func crossEnv(w string) []string {
	inc, lib := w+"/deps/include", w+"/deps/lib"
	return []string{
		"CONFIG_SITE=" + w + "/" + pySrc + "/Tools/wasm/config.site-wasm32-wasi",
		"CC=clang-19 --target=wasm32-wasi --sysroot=" + w + "/wasi-libc/usr",
		"AR=llvm-ar-19",
		"RANLIB=llvm-ranlib-19",
		"OPT=-DNDEBUG " + OptFlags,
		"CFLAGS=-ffile-prefix-map=" + w + "=/build -fdebug-prefix-map=" + w + "=/build",
		"ZLIB_CFLAGS=-I" + inc, "ZLIB_LIBS=-L" + lib + " -lz",
		"BZIP2_CFLAGS=-I" + inc, "BZIP2_LIBS=-L" + lib + " -lbz2",
		"LIBLZMA_CFLAGS=-I" + inc, "LIBLZMA_LIBS=-L" + lib + " -llzma",
		"LIBSQLITE3_CFLAGS=-I" + inc, "LIBSQLITE3_LIBS=-L" + lib + " -lsqlite3",
		driverLinkCC(w),
	}
}

// crossArgs are the arguments of CPython's cross configure (and --build,
// which config.guess gives).
//
// --with-pymalloc: configure leaves CPython's small-object allocator out
// for WASI (and Emscripten), so every object went through wasi-libc's
// dlmalloc, 37% of the guest's time in a loop of int additions. With it
// the guest allocates as native CPython does; the CPU set takes 0.92x the
// time (bench/README.md, issue 36). --without-mimalloc: mimalloc served
// only PYTHONMALLOC=mimalloc (the free-threaded build's allocator), and
// leaving it out more than pays for pymalloc's code in the module.
func crossArgs(w string) []string {
	return []string{
		"--host=wasm32-unknown-wasi",
		"--with-build-python=" + w + "/native/python",
		"--prefix=/usr",
		"--disable-test-modules",
		"--without-ensurepip",
		"--with-pymalloc",
		"--without-mimalloc",
	}
}

func (b *builder) crossConfigure(ctx context.Context) error {
	if err := b.addKDF(); err != nil {
		return err
	}
	guess, err := b.output(ctx, b.path(pySrc), "sh", "config.guess")
	if err != nil {
		return err
	}
	args := append([]string{"-q"}, crossArgs(b.w)...)
	args = append(args, "--build="+guess)
	return b.run(ctx, b.path("cross"), crossEnv(b.w), "../"+pySrc+"/configure", args...)
}

func (b *builder) output(ctx context.Context, dir, name string, args ...string) (string, error) {
	if err := b.run(ctx, dir, nil, name, args...); err != nil {
		return "", err
	}
	out, err := os.ReadFile(filepath.Join(b.w, "logs", fmt.Sprintf("%02d-%s.log", b.logs, filepath.Base(name))))
	return strings.TrimSpace(string(out)), err
}
