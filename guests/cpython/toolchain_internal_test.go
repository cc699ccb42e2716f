package cpython

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/fumehood/fumehood/internal/aptfetch"
	"github.com/fumehood/fumehood/internal/cache"
)

// TestToolchainInputsPinned: every pinned architecture has the same
// packages at the same versions (the cache key holds only those), each
// with a digest and the file name apt writes; another architecture is an
// error that says how to get the guest.
func TestToolchainInputsPinned(t *testing.T) {
	amd, err := ToolchainInputs("amd64", true)
	require.NoError(t, err)
	arm, err := ToolchainInputs("arm64", true)
	require.NoError(t, err)
	require.Len(t, arm, len(amd))
	for i := range amd {
		assert.Equal(t, amd[i].Package+"="+amd[i].Version, arm[i].Package+"="+arm[i].Version)
		for _, in := range []Input{amd[i], arm[i]} {
			assert.Len(t, in.SHA256, 64, in.Package)
			assert.Equal(t, Binary, in.Kind)
			assert.Equal(t, ToolchainSuite, in.Suite)
			assert.NotContains(t, in.File, ":", "apt writes an epoch as %3a")
		}
	}
	assert.Equal(t, "clang-19_1%3a19.1.7-3~deb12u1_amd64.deb", amd[0].File)
	assert.Equal(t, "clang-19_1%3a19.1.7-3~deb12u1_arm64.deb", arm[0].File)
	base, err := ToolchainInputs("amd64", false)
	require.NoError(t, err)
	assert.Len(t, base, len(toolchainPins))
	_, err = ToolchainInputs("riscv64", false)
	require.ErrorIs(t, err, ErrNoToolchain)
	assert.Contains(t, err.Error(), "fumehood guest import")
}

// TestKeyCoversToolchain: another toolchain version is another guest,
// and numpy's C++ library is part of the numpy variant's key only.
func TestKeyCoversToolchain(t *testing.T) {
	k := Key()
	nopts := &Options{With: []string{Numpy}}
	nk, err := nopts.key()
	require.NoError(t, err)

	old := numpyToolchainPins[0].version
	numpyToolchainPins[0].version = "1:19.1.7-4"
	nk2, err := nopts.key()
	numpyToolchainPins[0].version = old
	require.NoError(t, err)
	assert.Equal(t, k, Key())
	assert.NotEqual(t, nk, nk2)

	old = toolchainPins[0].version
	toolchainPins[0].version = "1:19.1.7-4"
	defer func() { toolchainPins[0].version = old }()
	assert.NotEqual(t, k, Key())
}

// TestToolchainTamperedPackageCachesNothing: a toolchain package whose
// SHA-256 is not its pin is refused with an error naming it, and nothing
// of the fetch is kept, not even the packages that did match, nor any
// unpacked toolchain.
func TestToolchainTamperedPackageCachesNothing(t *testing.T) {
	list, err := ToolchainInputs("amd64", true)
	require.NoError(t, err)
	content := func(in Input) []byte {
		if in.Package == "libllvm19" {
			return []byte("tampered " + in.File)
		}
		return []byte("package " + in.File)
	}
	// The fake archive serves content; the pins are those of the
	// untampered content, so only libllvm19 fails.
	for i := range list {
		sum := sha256.Sum256([]byte("package " + list[i].File))
		list[i].SHA256 = hex.EncodeToString(sum[:])
	}
	f := &fakeFetcher{content: content, list: list}
	useFetcher(t, f)
	opts := &Options{CacheDir: t.TempDir()}
	d, err := opts.dirs()
	require.NoError(t, err)
	_, err = fetchInputs(context.Background(), d, opts, list)
	require.ErrorIs(t, err, cache.ErrIntegrity)
	assert.Contains(t, err.Error(), "libllvm19_1%3a19.1.7-3~deb12u1_amd64.deb")
	assert.Contains(t, err.Error(), "(libllvm19 1:19.1.7-3~deb12u1)")
	assert.Contains(t, f.asked, "clang-19=1:19.1.7-3~deb12u1", "fetched before libllvm19")
	ents, _ := os.ReadDir(d.sources)
	assert.Empty(t, ents, "nothing cached")
	tmp, _ := os.ReadDir(d.tmp)
	assert.Empty(t, tmp, "the download directory is removed")

	// The same archive, untampered: everything is cached, and a cached
	// package damaged later is fetched again.
	f.content = func(in Input) []byte { return []byte("package " + in.File) }
	files, err := fetchInputs(context.Background(), d, opts, list)
	require.NoError(t, err)
	require.Len(t, files, len(list))
	require.NoError(t, os.WriteFile(files["lld-19"], []byte("damaged"), 0o644))
	f.asked = nil
	_, err = fetchInputs(context.Background(), d, opts, list)
	require.NoError(t, err)
	assert.Equal(t, []string{"lld-19=1:19.1.7-3~deb12u1"}, f.asked)
}

// TestVerifyToolchainPackage: a file under a real pin's name that is not
// the archive's package is refused, naming the file and the package.
func TestVerifyToolchainPackage(t *testing.T) {
	list, err := ToolchainInputs("amd64", false)
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), list[0].File)
	require.NoError(t, os.WriteFile(p, []byte("!<arch>\nnot clang"), 0o644))
	err = verifyFile(p, list[0])
	require.ErrorIs(t, err, cache.ErrIntegrity)
	assert.Contains(t, err.Error(), "clang-19_1%3a19.1.7-3~deb12u1_amd64.deb")
	assert.Contains(t, err.Error(), list[0].SHA256)
}

// skipOffline is an aptfetch.Fetcher that skips the test when the
// Debian mirror cannot be reached.
type skipOffline struct {
	*aptfetch.Fetcher
	t *testing.T
}

func (f skipOffline) Update(ctx context.Context) error {
	if err := f.Fetcher.Update(ctx); err != nil {
		f.t.Skipf("the Debian mirror cannot be reached: %v", err)
	}
	return nil
}

// unpackedToolchain fetches (or takes from the user's cache) the
// toolchain, wasi-libc and LLVM's sources, and unpacks the first two into
// a builder's work directory.
func unpackedToolchain(t *testing.T) *builder {
	if testing.Short() {
		t.Skip("-short: fetches and unpacks the toolchain (about 75 MB, 355 MB unpacked)")
	}
	if err := checkTools([]Tool{{"apt-get", "apt"}, {"dpkg-deb", "dpkg"}}); err != nil {
		t.Skipf("not a Debian machine: %v", err)
	}
	list, err := ToolchainInputs(runtime.GOARCH, false)
	if err != nil {
		t.Skip(err)
	}
	tc := len(list)
	for _, in := range Inputs {
		if in.Package == "wasi-libc" || in.Package == LLVMSource.Package {
			list = append(list, in)
		}
	}
	opts := &Options{CacheDir: t.TempDir()}
	d, err := opts.dirs()
	require.NoError(t, err)
	seedSources(t, d.sources, list)

	ctx := context.Background()
	old := newFetcher
	newFetcher = func(dir string, suites ...string) (fetcher, error) {
		f, err := aptfetch.New(dir, suites...)
		if err != nil {
			t.Skipf("no Debian mirror in the machine's apt sources: %v", err)
		}
		return skipOffline{f, t}, nil
	}
	t.Cleanup(func() { newFetcher = old })
	files, err := fetchInputs(ctx, d, opts, list)
	require.NoError(t, err)

	b := &builder{w: t.TempDir(), files: files, jobs: 1, toolchain: list[:tc]}
	require.NoError(t, b.unpackToolchain(ctx))
	assert.Contains(t, b.tcVersion, "clang version 19.1.7")
	res, err := b.output(ctx, b.w, "clang-19", "-print-resource-dir")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(res, b.toolchainDir()), "clang-19 on the build's PATH is the fetched one: %s", res)
	require.NoError(t, b.run(ctx, b.w, nil, "dpkg-deb", "-x", files["wasi-libc"], b.path("wasi-libc")))
	return b
}

// TestToolchainCompilesC fetches the toolchain (and wasi-libc) from the
// machine's Debian mirror into a temporary cache, unpacks it as the build
// does and compiles a C program for wasm32-wasi with it, which wazero
// then runs. Packages already in the user's cache are taken from there
// (verified) instead of downloaded again. It needs a Debian machine (apt,
// a Debian mirror) and the network; it runs as any user.
func TestToolchainCompilesC(t *testing.T) {
	ctx := context.Background()
	b := unpackedToolchain(t)
	src := "#include <stdio.h>\nint main(void) { printf(\"hello from wasm32-wasi %d\\n\", 6 * 7); return 0; }\n"
	require.NoError(t, os.WriteFile(b.path("hello.c"), []byte(src), 0o644))
	cc := strings.Fields(b.cc())
	require.NoError(t, b.run(ctx, b.w, nil, cc[0], append(cc[1:], "-O2", "hello.c", "-o", "hello.wasm")...))

	wasm, err := os.ReadFile(b.path("hello.wasm"))
	require.NoError(t, err)
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	var out bytes.Buffer
	_, err = r.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithStdout(&out))
	require.NoError(t, err)
	assert.Equal(t, "hello from wasm32-wasi 42\n", out.String())
}

// TestProfileRuntime builds LLVM's profile runtime as the profile-guided
// build does, links an instrumented C program with it, runs it on wazero
// as the training runs the interpreter, and merges what it wrote: the
// merged profile has the program's functions with the counts of the run.
// Its needs are TestToolchainCompilesC's, and LLVM's source tarball.
func TestProfileRuntime(t *testing.T) {
	ctx := context.Background()
	b := unpackedToolchain(t)
	require.NoError(t, b.profileRuntime(ctx))
	src := `#include <stdio.h>
static int twice(int x) { return x % 3 ? 2 * x : x + 1; }
int main(void) { long s = 0; for (int i = 0; i < 1000; i++) s += twice(i); printf("%ld\n", s); return 0; }
`
	require.NoError(t, os.WriteFile(b.path("count.c"), []byte(src), 0o644))
	cc := strings.Fields(b.cc())
	args := append(cc[1:], "-O0", pgoGenerate, "count.c", "-o", "count.wasm")
	require.NoError(t, b.run(ctx, b.w, nil, cc[0], append(args, strings.Fields(b.pgoLibs())...)...))
	wasm, err := os.ReadFile(b.path("count.wasm"))
	require.NoError(t, err)

	require.NoError(t, os.MkdirAll(b.path("pgo", "raw"), 0o755))
	out, err := os.Create(b.path("count.log"))
	require.NoError(t, err)
	defer out.Close()
	code, err := runWASI(ctx, wasm, []string{"count"}, map[string]string{"LLVM_PROFILE_FILE": "/raw/count.profraw"},
		[]wasiMount{{b.path("pgo", "raw"), "/raw", false}}, out)
	require.NoError(t, err)
	require.Zero(t, code)
	log, err := os.ReadFile(b.path("count.log"))
	require.NoError(t, err)
	assert.Equal(t, "832501\n", string(log))

	prof := b.path("pgo", "count.profdata")
	require.NoError(t, b.run(ctx, b.w, nil, "llvm-profdata-19", "merge", "-o", prof, b.path("pgo", "raw", "count.profraw")))
	shown, err := b.output(ctx, b.w, "llvm-profdata-19", "show", "--all-functions", "--counts", prof)
	require.NoError(t, err)
	// IR-level counts, one per edge the instrumentation chose: main's
	// loop ran 1000 times and returned once; twice took its branches 666
	// and 334 times.
	assert.Contains(t, shown, "main:\n    Hash:")
	assert.Contains(t, shown, "Block counts: [1000, 1]")
	assert.Contains(t, shown, "count.c;twice:")
	assert.Contains(t, shown, "Block counts: [666, 334]")
}

// seedSources copies into sources the packages of list that the user's
// cache already holds and that match their pins.
func seedSources(t *testing.T, sources string, list []Input) {
	c, err := cache.Dir("")
	if err != nil {
		return
	}
	require.NoError(t, os.MkdirAll(sources, 0o755))
	for _, in := range list {
		p := filepath.Join(c, "cpython", "sources", in.File)
		if verifyFile(p, in) != nil {
			continue
		}
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(sources, in.File), data, 0o644))
	}
}

// TestBuildRefusesTamperedToolchain: a build whose toolchain packages do
// not match their pins stops before any step with an error naming the
// first, caches none of them and stores no guest. The other inputs come
// from the user's cache (verified), so it needs no network.
func TestBuildRefusesTamperedToolchain(t *testing.T) {
	if err := CheckTools(); err != nil {
		t.Skipf("build tools missing: %v", err)
	}
	opts := &Options{CacheDir: t.TempDir()}
	d, err := opts.dirs()
	require.NoError(t, err)
	seedSources(t, d.sources, Inputs)
	for _, in := range Inputs {
		if verifyFile(filepath.Join(d.sources, in.File), in) != nil {
			t.Skipf("%s is not in the user's cache (run `%s` once)", in.File, BuildCommand)
		}
	}
	list, err := ToolchainInputs(runtime.GOARCH, false)
	if err != nil {
		t.Skip(err)
	}
	f := &fakeFetcher{content: func(in Input) []byte { return []byte("tampered " + in.File) }, list: list}
	useFetcher(t, f)
	_, err = Build(context.Background(), opts)
	require.ErrorIs(t, err, cache.ErrIntegrity)
	t.Log(err)
	assert.Contains(t, err.Error(), list[0].File)
	assert.Contains(t, err.Error(), "("+list[0].Package+" "+list[0].Version+")")
	for _, in := range list {
		assert.NoFileExists(t, filepath.Join(d.sources, in.File))
	}
	tmp, _ := os.ReadDir(d.tmp)
	assert.Empty(t, tmp, "no download or build directory is left")
	_, _, err = Load(context.Background(), opts)
	assert.ErrorIs(t, err, ErrNotBuilt)
}
