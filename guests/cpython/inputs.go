package cpython

import (
	"fmt"
	"strings"
)

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
// (Debian's .orig files); no Debian patch is applied (CPython gets the few
// edits of patches.go). CPython bundles mpdecimal (_decimal) and expat
// (pyexpat), which are built from its own tree. LLVMSource gives the
// profile runtime of the profile-guided build (pgo.go).
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
	LLVMSource,
}

// ToolchainSuite is the Debian suite the cross toolchain comes from:
// bookworm's LLVM 19, whose programs run on bookworm and on later Debian
// releases (trixie's need a newer C library than bookworm has).
const ToolchainSuite = "bookworm"

// llvmVersion is the Debian version of the llvm-toolchain-19 packages.
const llvmVersion = "1:19.1.7-3~deb12u1"

// toolchainPin is one package of the toolchain with its .deb's SHA-256 per
// Debian architecture ("all" for an architecture-independent package).
type toolchainPin struct {
	pkg, version, upstream string
	sha256                 map[string]string
}

// toolchainPins are the cross toolchain's packages: clang, lld and the LLVM
// tools, clang's headers and wasm32 runtime, and the shared libraries they
// load that a minimal Debian (one with apt) may lack. The digests are the
// archive's (its signed package index), checked again on every build.
var toolchainPins = []toolchainPin{
	{"clang-19", llvmVersion, "clang 19.1.7", map[string]string{
		"amd64": "89ab931a9bbfd567a76df3141af5d5ec67b01d800150e614f2c9bf4671da9b08",
		"arm64": "afc69199696252641c7bfb39d46c290d4bc9f235e251bf7afbe62143f3a6bdbf"}},
	{"libclang-cpp19", llvmVersion, "clang 19.1.7 (library)", map[string]string{
		"amd64": "5daa784e1d747db320c16604729ffa805e6bfd72d3ac0b7cb0ee5f1a7ebc8aae",
		"arm64": "d9398ada6c8091669fd4af736fbb9aacaf28e140c309685ab00196625969422b"}},
	{"libllvm19", llvmVersion, "LLVM 19.1.7 (library)", map[string]string{
		"amd64": "6edf3a8b28495cdba883d9760e0dca1a81983fc497a5f989dc64d0d96d23b4aa",
		"arm64": "8da27fd815c3feceb5aed709b66e0daf9ef6ea98600778f7fd6b569a9ae1f109"}},
	{"lld-19", llvmVersion, "lld 19.1.7 (wasm-ld)", map[string]string{
		"amd64": "416e084363a16a7060eaa6343ed641dfe864b8208c39170ee00a5679e4b486a2",
		"arm64": "bde4ae1e22c24843319f0b8b3d8f557089bdd8f6170986d309d333442f09bbf0"}},
	{"llvm-19", llvmVersion, "LLVM 19.1.7 (llvm-ar, llvm-ranlib, llvm-strip)", map[string]string{
		"amd64": "f91492c5b361ff12f540b9f6145cf638b5e0fb3f145fceabd6c4b9540eab4bf9",
		"arm64": "46c6084115920b3e3a901cd112ce653befe5c72f95ff4f2d0a4c95aff3d9fda6"}},
	{"libclang-common-19-dev", llvmVersion, "clang 19.1.7 (headers)", map[string]string{
		"amd64": "811c2d398ad772204ec05ffde485cbbc4c210abc5dcf0068ff9ca3e647591ce7",
		"arm64": "ba6f837294395f6aec7f2177c8e578e1c45cf6a3733b469b659fb08824a35f6e"}},
	{"libclang-rt-19-dev-wasm32", llvmVersion, "compiler-rt 19.1.7 builtins for wasm32", map[string]string{
		"all": "a291d4ae24344016f2e05390a7875c88da6c1e2e48711607454e394604ecc669"}},
	{"libz3-4", "4.8.12-3.1", "Z3 4.8.12 (loaded by LLVM)", map[string]string{
		"amd64": "6221ca25ad5abcfbe1965801029d85a88b4775320384b4b716de8fab7a4d2f7a",
		"arm64": "115080b0aee2d75f316da4be24c8a5e88ed7c362c7b4a4cd13f3af9b9da130f2"}},
	{"libedit2", "3.1-20221030-2", "libedit (loaded by LLVM)", map[string]string{
		"amd64": "1cf14abf2716d3279db12d0657a5737cf70074a1e71d3bdf73206625e3c89ce6",
		"arm64": "6ca1e355586ebfcfe8122b4d317fcaad4a9a10ca455c6a9bbd36f55bf4be85d3"}},
	{"libbsd0", "0.11.7-2", "libbsd (loaded by libedit)", map[string]string{
		"amd64": "bb31cc8b40f962a85b2cec970f7f79cc704a1ae4bad24257a822055404b2c60b",
		"arm64": "ef00f132ddd268ee67d756998723ee18543db27ab34930c0a9f1cff75cf55382"}},
	{"libxml2", "2.9.14+dfsg-1.3~deb12u6", "libxml2 2.9.14 (loaded by LLVM)", map[string]string{
		"amd64": "4460e39dda10a815881374217cde08474747cfa018358cd8612c14b390eff53b",
		"arm64": "0bc00975e459387535a4bbabe98a398f0e77c9ab82474face18d01ae8ed0dae4"}},
	{"libicu72", "72.1-3+deb12u1", "ICU 72 (loaded by libxml2)", map[string]string{
		"amd64": "f7f6f99c6d7b025914df2447fc93e11d22c44c0c8bdd8b6f36691c9e7ddcef88",
		"arm64": "4f5d892fd81110435e45ed0a5f1b12899d7ff989d51db283cbc043f5631646d8"}},
}

// numpyToolchainPins are what the numpy variant adds to the toolchain:
// LLVM 19's C++ library for wasm32-wasi (numpy's sort, string ufuncs,
// linalg and FFT are C++).
var numpyToolchainPins = []toolchainPin{
	{"libc++-19-dev-wasm32", llvmVersion, "libc++ 19.1.7 for wasm32-wasi", map[string]string{
		"all": "e2c3a1ec97f42ff660688e7a435dab7cb785211d9e9559eef86192a218c24ce8"}},
	{"libc++abi-19-dev-wasm32", llvmVersion, "libc++abi 19.1.7 for wasm32-wasi", map[string]string{
		"all": "a0835ee4cf44d41ee988e77be30d023134160a80bdea02b03a6a384c3f048e4d"}},
}

// debianArch is the Debian architecture of the machine's Go architecture,
// and multiarch its library directory's name.
var debianArch = map[string]struct{ arch, multiarch string }{
	"amd64": {"amd64", "x86_64-linux-gnu"},
	"arm64": {"arm64", "aarch64-linux-gnu"},
}

// ToolchainInputs returns the toolchain's pinned packages for a Go
// architecture (runtime.GOARCH), numpy's with numpy true. An architecture
// without pins is an error matching ErrNoToolchain.
func ToolchainInputs(goarch string, numpy bool) ([]Input, error) {
	a, ok := debianArch[goarch]
	if !ok {
		return nil, fmt.Errorf("%w for %s (pinned: amd64, arm64); %s", ErrNoToolchain, goarch, elsewhere)
	}
	pins := toolchainPins
	if numpy {
		pins = append(append([]toolchainPin(nil), pins...), numpyToolchainPins...)
	}
	var out []Input
	for _, p := range pins {
		arch, sum := a.arch, p.sha256[a.arch]
		if sum == "" {
			arch, sum = "all", p.sha256["all"]
		}
		out = append(out, Input{Package: p.pkg, Version: p.version, Suite: ToolchainSuite, Kind: Binary,
			File:   p.pkg + "_" + strings.ReplaceAll(p.version, ":", "%3a") + "_" + arch + ".deb",
			SHA256: sum, Upstream: p.upstream})
	}
	return out, nil
}

// toolchainIDs are the toolchain's packages as package=version, the same
// on every architecture: the cache key's part, so that a guest built on
// one architecture can be imported on another.
func toolchainIDs(pins []toolchainPin) []string {
	var ids []string
	for _, p := range pins {
		ids = append(ids, p.pkg+"="+p.version)
	}
	return ids
}

// Tool is a program the build runs, with the Debian package that holds it.
type Tool struct {
	// Command is the program's name on PATH, or an absolute path of a
	// file that must exist.
	Command string
	// Package is the Debian package that installs it.
	Package string
}

// Tools are what the build needs installed on the machine: apt and dpkg,
// which fetch and unpack the inputs and the toolchain, and a native C
// toolchain for the build Python and SQLite's generator. The cross
// toolchain is not among them: the build fetches it (ToolchainInputs).
var Tools = []Tool{
	{"apt-get", "apt"},
	{"dpkg-deb", "dpkg"},
	{"cc", "gcc"},
	{"make", "make"},
	{"tclsh", "tcl"},
	{"tar", "tar"},
	{"xz", "xz-utils"},
}
