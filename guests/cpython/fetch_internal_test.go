package cpython

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/aptfetch"
	"github.com/fumehood/fumehood/internal/cache"
)

// fakeFetcher writes, for every input of list (Inputs if nil) asked for,
// the content content returns under the input's file name, as apt would.
type fakeFetcher struct {
	content func(in Input) []byte
	list    []Input
	asked   []string
}

func (f *fakeFetcher) Update(context.Context) error { return nil }

func (f *fakeFetcher) Source(_ context.Context, dir, pkg, version string) error {
	return f.write(dir, pkg, version)
}

func (f *fakeFetcher) Binary(_ context.Context, dir string, pkgVersions ...string) error {
	for _, pv := range pkgVersions {
		pkg, version, _ := strings.Cut(pv, "=")
		if err := f.write(dir, pkg, version); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeFetcher) write(dir, pkg, version string) error {
	f.asked = append(f.asked, pkg+"="+version)
	list := f.list
	if list == nil {
		list = Inputs
	}
	for _, in := range list {
		if in.Package == pkg && in.Version == version {
			return os.WriteFile(filepath.Join(dir, in.File), f.content(in), 0o644)
		}
	}
	return os.ErrNotExist
}

func useFetcher(t *testing.T, f fetcher) {
	old := newFetcher
	newFetcher = func(string, ...string) (fetcher, error) { return f, nil }
	t.Cleanup(func() { newFetcher = old })
}

// TestFetchTamperedInputCachesNothing: a download whose SHA-256 is not the
// pinned one is an error that names the file, and nothing of it is kept.
func TestFetchTamperedInputCachesNothing(t *testing.T) {
	f := &fakeFetcher{content: func(in Input) []byte { return []byte("tampered " + in.File) }}
	useFetcher(t, f)
	opts := &Options{CacheDir: t.TempDir()}
	d, err := opts.dirs()
	require.NoError(t, err)
	_, err = fetchInputs(context.Background(), d, opts, Inputs)
	require.ErrorIs(t, err, cache.ErrIntegrity)
	assert.Contains(t, err.Error(), Inputs[0].File)
	assert.Equal(t, []string{Inputs[0].Package + "=" + Inputs[0].Version}, f.asked, "stops at the first bad file")
	ents, _ := os.ReadDir(d.sources)
	assert.Empty(t, ents, "nothing cached")
	tmp, _ := os.ReadDir(d.tmp)
	assert.Empty(t, tmp, "the download directory is removed")
}

// TestVerifyFile checks a file against its pin: the right digest passes, a
// truncated file fails naming it, a missing one is fs.ErrNotExist.
func TestVerifyFile(t *testing.T) {
	dir := t.TempDir()
	in := Input{Package: "p", Version: "1", File: "p_1.orig.tar.xz",
		SHA256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"} // sha256("hello")
	p := filepath.Join(dir, in.File)
	require.ErrorIs(t, verifyFile(p, in), os.ErrNotExist)
	require.NoError(t, os.WriteFile(p, []byte("hello"), 0o644))
	require.NoError(t, verifyFile(p, in))
	require.NoError(t, os.WriteFile(p, []byte("hell"), 0o644))
	err := verifyFile(p, in)
	require.ErrorIs(t, err, cache.ErrIntegrity)
	assert.Contains(t, err.Error(), in.File)
}

// TestRemoveStale removes the work directory of a build whose process is
// gone and keeps that of a live one.
func TestRemoveStale(t *testing.T) {
	tmp := t.TempDir()
	live, dead := filepath.Join(tmp, "build-live"), filepath.Join(tmp, "build-dead")
	require.NoError(t, os.MkdirAll(live, 0o755))
	require.NoError(t, os.MkdirAll(dead, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(live, "pid"), []byte(itoa(os.Getpid())), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dead, "pid"), []byte("2147483646"), 0o644))
	removeStale(tmp)
	assert.DirExists(t, live)
	assert.NoDirExists(t, dead)
}

// TestKeyCoversInputs: changing a pinned digest changes the cache key.
func TestKeyCoversInputs(t *testing.T) {
	k := Key()
	old := Inputs[0].SHA256
	Inputs[0].SHA256 = "00" + old[2:]
	defer func() { Inputs[0].SHA256 = old }()
	assert.NotEqual(t, k, Key())
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestMissingToolsNamePackages: with apt but without the native build
// tools, the error names their Debian packages and none of the cross
// toolchain's, which the build fetches.
func TestMissingToolsNamePackages(t *testing.T) {
	bin := t.TempDir()
	for _, c := range []string{"apt-get", "dpkg-deb"} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, c), []byte("#!/bin/sh\n"), 0o755))
	}
	t.Setenv("PATH", bin)
	err := CheckTools()
	require.ErrorIs(t, err, ErrMissingTools)
	assert.NotErrorIs(t, err, ErrNoToolchain)
	for _, pkg := range []string{"apt-get install", "gcc", "make", "tcl", "xz-utils"} {
		assert.Contains(t, err.Error(), pkg)
	}
	for _, pkg := range []string{"clang", "lld", "llvm"} {
		assert.NotContains(t, err.Error(), pkg)
	}
}

// TestNoAptSaysImport: on a machine without apt (macOS, another
// distribution) the error says how to get the guest from elsewhere.
func TestNoAptSaysImport(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := CheckTools()
	require.ErrorIs(t, err, ErrMissingTools)
	require.ErrorIs(t, err, ErrNoToolchain)
	for _, s := range []string{"Debian", "fumehood guest export", "fumehood guest import", "docker run"} {
		assert.Contains(t, err.Error(), s)
	}
}

// TestNoMirrorSaysImport: apt without a Debian mirror (another
// distribution's archive) is the same advice.
func TestNoMirrorSaysImport(t *testing.T) {
	old := newFetcher
	newFetcher = func(string, ...string) (fetcher, error) { return nil, aptfetch.ErrNoMirror }
	t.Cleanup(func() { newFetcher = old })
	opts := &Options{CacheDir: t.TempDir()}
	d, err := opts.dirs()
	require.NoError(t, err)
	_, err = fetchInputs(context.Background(), d, opts, Inputs)
	require.ErrorIs(t, err, aptfetch.ErrNoMirror)
	require.ErrorIs(t, err, ErrNoToolchain)
	assert.Contains(t, err.Error(), "fumehood guest import")
}

// TestBuildWithoutToolsStoresNothing: a build that cannot start leaves the
// cache without a manifest, so Load still says the guest is not built.
func TestBuildWithoutToolsStoresNothing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	opts := &Options{CacheDir: t.TempDir()}
	_, err := Build(context.Background(), opts)
	require.ErrorIs(t, err, ErrMissingTools)
	_, _, err = Load(context.Background(), opts)
	assert.ErrorIs(t, err, ErrNotBuilt)
}
