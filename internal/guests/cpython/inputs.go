package cpython

// Kind says how apt fetches an input.
type Kind string

// The kinds of input.
const (
	// Source is an upstream tarball of a Debian source package, fetched
	// with apt-get source --download-only --tar-only.
	Source Kind = "source"
	// Binary is a Debian binary package (.deb), fetched with apt-get
	// download and unpacked with dpkg-deb -x.
	Binary Kind = "binary"
)

// Input is one pinned input of the build: what apt is asked for, the file
// it writes and that file's SHA-256.
type Input struct {
	// Package and Version are what apt is asked for (package=version).
	Package string `json:"package"`
	Version string `json:"version"`
	// Suite is the Debian suite the version is in.
	Suite string `json:"suite"`
	// Kind says how it is fetched.
	Kind Kind `json:"kind"`
	// File is the name of the file apt writes.
	File string `json:"file"`
	// SHA256 is the file's digest in lower-case hex.
	SHA256 string `json:"sha256"`
	// Upstream is the upstream project and version the file holds.
	Upstream string `json:"upstream"`
}

// PythonVersion is the CPython version built.
const PythonVersion = "3.13.5"

// Inputs are the build's pinned inputs. The tarballs are the upstream ones
// (Debian's .orig files); no Debian patch is applied. CPython bundles
// mpdecimal (_decimal) and expat (pyexpat), which are built from its own
// tree.
var Inputs = []Input{
	{Package: "python3.13", Version: "3.13.5-2+deb13u5", Suite: "trixie", Kind: Source,
		File:     "python3.13_3.13.5.orig.tar.xz",
		SHA256:   "93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640",
		Upstream: "CPython 3.13.5"},
	{Package: "wasi-libc", Version: "0.0~git20241209.574b88d-2", Suite: "trixie", Kind: Binary,
		File:     "wasi-libc_0.0~git20241209.574b88d-2_all.deb",
		SHA256:   "b7716260051d289248b7667f81fa2792c125d888ff51da3fa09c6272cc0bd11d",
		Upstream: "wasi-libc 574b88d (2024-12-09)"},
	{Package: "zlib", Version: "1:1.3.dfsg+really1.3.1-1", Suite: "trixie", Kind: Source,
		File:     "zlib_1.3.dfsg+really1.3.1.orig.tar.gz",
		SHA256:   "60dd315c07f616887caa029408308a018ace66e3d142726a97db164b3b8f69fb",
		Upstream: "zlib 1.3.1 (Debian repack without contrib/)"},
	{Package: "bzip2", Version: "1.0.8-6", Suite: "trixie", Kind: Source,
		File:     "bzip2_1.0.8.orig.tar.gz",
		SHA256:   "ab5a03176ee106d3f0fa90e381da478ddae405918153cca248e682cd0c4a2269",
		Upstream: "bzip2 1.0.8"},
	{Package: "xz-utils", Version: "5.8.1-1+deb13u2", Suite: "trixie", Kind: Source,
		File:     "xz-utils_5.8.1.orig.tar.xz",
		SHA256:   "0b54f79df85912504de0b14aec7971e3f964491af1812d83447005807513cd9e",
		Upstream: "xz 5.8.1 (liblzma)"},
	{Package: "sqlite3", Version: "3.46.1-7+deb13u2", Suite: "trixie", Kind: Source,
		File:     "sqlite3_3.46.1.orig.tar.xz",
		SHA256:   "d0cdd2ece271b29e7ce18095745d892517ee26d0f270065b3a25c2e9eb11639c",
		Upstream: "SQLite 3.46.1 (source tree; the amalgamation is generated)"},
	{Package: "tzdata", Version: "2026f-0+deb13u1", Suite: "trixie", Kind: Binary,
		File:     "tzdata_2026f-0+deb13u1_all.deb",
		SHA256:   "2c1c561091402883430d0d47c57a3c0aa00b44afc8a6239265065a87211a5c11",
		Upstream: "tz 2026f compiled zone files"},
}

// Tool is a program the build runs, with the Debian package that holds it.
type Tool struct {
	// Command is the program's name on PATH, or an absolute path of a
	// file that must exist.
	Command string
	// Package is the Debian package that installs it.
	Package string
}

// Tools are what the build needs installed on the machine: bookworm's LLVM
// 19 for the cross build and a native C toolchain for the build Python.
var Tools = []Tool{
	{"clang-19", "clang-19"},
	{"wasm-ld-19", "lld-19"},
	{"llvm-ar-19", "llvm-19"},
	{"llvm-ranlib-19", "llvm-19"},
	{"/usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a", "libclang-rt-19-dev-wasm32"},
	{"cc", "gcc"},
	{"make", "make"},
	{"tclsh", "tcl"},
	{"dpkg-deb", "dpkg"},
	{"apt-get", "apt"},
	{"tar", "tar"},
	{"xz", "xz-utils"},
}
