package cpython

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/cache"
)

// fakeRuntime stands in for internal/cxxrt, which this package's own
// tests cannot import.
type fakeRuntime string

func (f fakeRuntime) Key() (string, error) { return string(f), nil }

func (fakeRuntime) Build(context.Context, string, func(cache.Progress)) ([]string, error) {
	return nil, nil
}

// TestMatplotlibVariantKey: matplotlib implies numpy; data stands for
// numpy, pandas and matplotlib and has their key; the C++ runtime's key is
// part of the key; numpy's and pandas' keys do not depend on it.
func TestMatplotlibVariantKey(t *testing.T) {
	old := cxxRuntime
	t.Cleanup(func() { cxxRuntime = old })
	cxxRuntime = nil
	numpy, err := (&Options{With: []string{Numpy}}).key()
	require.NoError(t, err)
	pandas, err := (&Options{With: []string{Pandas}}).key()
	require.NoError(t, err)
	_, err = (&Options{With: []string{Matplotlib}}).key()
	require.ErrorIs(t, err, ErrNoCxxRuntime)

	RegisterCxxRuntime(fakeRuntime("rt1"))
	numpy2, err := (&Options{With: []string{Numpy}}).key()
	require.NoError(t, err)
	pandas2, err := (&Options{With: []string{Pandas}}).key()
	require.NoError(t, err)
	assert.Equal(t, numpy, numpy2)
	assert.Equal(t, pandas, pandas2)
	mpl, err := (&Options{With: []string{Matplotlib}}).key()
	require.NoError(t, err)
	parts, err := (&Options{With: []string{Matplotlib}}).parts()
	require.NoError(t, err)
	assert.Equal(t, []string{Matplotlib, Numpy}, parts)
	assert.NotEqual(t, numpy, mpl)

	data, err := (&Options{With: []string{Data}}).key()
	require.NoError(t, err)
	all, err := (&Options{With: []string{Pandas, Matplotlib, Numpy}}).key()
	require.NoError(t, err)
	assert.Equal(t, all, data)
	parts, err = (&Options{With: []string{Data}}).parts()
	require.NoError(t, err)
	assert.Equal(t, []string{Matplotlib, Numpy, Pandas}, parts)
	// pandas' and matplotlib's inputs share python-dateutil and six.
	in := partInputs(parts)
	seen := map[string]int{}
	for _, i := range in {
		seen[i.Package]++
	}
	assert.Equal(t, 1, seen["python3-dateutil"])
	assert.Equal(t, 1, seen["python3-six"])
	assert.Len(t, in, len(PandasInputs)+len(MatplotlibInputs)-2)

	RegisterCxxRuntime(fakeRuntime("rt2"))
	mpl2, err := (&Options{With: []string{Matplotlib}}).key()
	require.NoError(t, err)
	assert.NotEqual(t, mpl, mpl2, "another C++ runtime, another guest")
}

// TestMplExcluded: the bundle keeps matplotlib's Python files and data
// (fonts, matplotlibrc) and leaves out tests, stubs and sources.
func TestMplExcluded(t *testing.T) {
	for rel, want := range map[string]bool{
		"pyplot.py":                          false,
		"mpl-data/fonts/ttf/DejaVuSans.ttf":  false,
		"mpl-data/matplotlibrc":              false,
		"tests/test_axes.py":                 true,
		"pyplot.pyi":                         true,
		"src/_backend_agg.cpp":               true,
		"backends/__pycache__/x.cpython.pyc": true,
	} {
		assert.Equal(t, want, mplExcluded(rel), rel)
	}
}

// TestMplSourceEdits applies matplotlib's, contourpy's, Pillow's,
// kiwisolver's and numpy's edits to their
// tarballs (in the cache's sources directory after a build): each edit's
// text occurs as often as it says.
func TestMplSourceEdits(t *testing.T) {
	for _, c := range []struct {
		tarball, src string
		edits        []sourceEdit
	}{
		{MatplotlibLocalInputs[0].File, mplSrc, append(mplSourceEdits, mplEnumEdits...)},
		{mplInputFile(t, "contourpy"), contourpySrc, contourpySourceEdits},
		{mplInputFile(t, "pillow"), pillowSrc, pillowSourceEdits},
		{MatplotlibLocalInputs[1].File, kiwiSrc, kiwiSourceEdits},
		{NumpyInputs[0].File, numpySrc, numpySourceEdits},
	} {
		editTarball(t, c.tarball, c.src, c.edits)
	}
}

// mplInputFile returns the file of the MatplotlibInputs entry of package
// pkg.
func mplInputFile(t *testing.T, pkg string) string {
	t.Helper()
	i := slices.IndexFunc(MatplotlibInputs, func(in Input) bool { return in.Package == pkg })
	require.GreaterOrEqual(t, i, 0, "%s is not in MatplotlibInputs", pkg)
	return MatplotlibInputs[i].File
}

// editTarball extracts from the cached tarball (in the cache's sources
// directory after a build; the test is skipped without it) the files that
// edits change, below src, makes the edits (each edit's text must occur as
// often as it says) and returns the directory holding src.
func editTarball(t *testing.T, tarball, src string, edits []sourceEdit) string {
	t.Helper()
	d, err := (&Options{}).dirs()
	require.NoError(t, err)
	path := filepath.Join(d.sources, tarball)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s is not in the cache: %v", tarball, err)
	}
	dir := t.TempDir()
	var files []string
	for _, e := range edits {
		if f := src + "/" + e.file; !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	out, err := exec.Command("tar", append([]string{"-xf", path, "-C", dir}, files...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NoError(t, applyEdits(filepath.Join(dir, src), src, edits))
	return dir
}

// TestJpegConfig checks the libjpeg-turbo build against its tarball (in
// the cache's sources directory after a build): jpegSources are the
// library sources CMakeLists.txt lists (with arithmetic coding, without
// SIMD), and the configuration headers define each name the templates
// do, but those left off on purpose.
func TestJpegConfig(t *testing.T) {
	d, err := (&Options{}).dirs()
	require.NoError(t, err)
	path := filepath.Join(d.sources, mplInputFile(t, "libjpeg-turbo"))
	if _, err := os.Stat(path); err != nil {
		t.Skipf("libjpeg-turbo's tarball is not in the cache: %v", err)
	}
	dir := t.TempDir()
	out, err := exec.Command("tar", "-xf", path, "-C", dir, jpegSrc+"/CMakeLists.txt", jpegSrc+"/jconfig.h.in",
		jpegSrc+"/jconfigint.h.in", jpegSrc+"/jversion.h.in").CombinedOutput()
	require.NoError(t, err, "%s", out)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, jpegSrc, name))
		require.NoError(t, err)
		return string(b)
	}

	cmake := read("CMakeLists.txt")
	list := cmake[strings.Index(cmake, "set(JPEG_SOURCES "):]
	list = list[len("set(JPEG_SOURCES "):strings.IndexByte(list, ')')]
	want := strings.Fields(strings.ReplaceAll(list, ".c", ""))
	want = append(want, "jaricom", "jcarith", "jdarith", "jsimd_none")
	for _, s := range []string{"jaricom.c", "jcarith.c", "jdarith.c", "jsimd_none.c"} {
		assert.Contains(t, cmake, s)
	}
	assert.ElementsMatch(t, want, jpegSources)

	off := map[string]bool{"WITH_SIMD": true, "RIGHT_SHIFT_IS_UNSIGNED": true, "HAVE_INTRIN_H": true,
		"HAVE_BITSCANFORWARD64": true, "HAVE_BITSCANFORWARD": true}
	for _, c := range []struct{ template, header string }{
		{read("jconfig.h.in"), jconfigHeader}, {read("jconfigint.h.in"), jconfigintHeader},
	} {
		for _, line := range strings.Split(c.template, "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || (f[0] != "#define" && f[0] != "#cmakedefine") {
				continue
			}
			if off[f[1]] {
				assert.NotContains(t, c.header, "#define "+f[1]+" ", "%s is left off", f[1])
				continue
			}
			assert.Regexp(t, `(?m)^#define `+f[1]+`\b`, c.header, "%s is defined", f[1])
		}
		assert.NotContains(t, c.header, "@", "no template placeholder left")
	}

	// jversion.h: the copyright year CMake would put in.
	assert.Contains(t, cmake, `set(COPYRIGHT_YEAR "`+jpegCopyrightYear+`")`)
	jv, err := (&builder{w: dir}).jversionHeader()
	require.NoError(t, err)
	assert.Contains(t, string(jv), "Copyright (C) "+jpegCopyrightYear+" The libjpeg-turbo Project")
	assert.NotContains(t, string(jv), "@")

	// Every local header the library's sources include, directly or not,
	// is in the tarball or one the build writes.
	out, err = exec.Command("tar", "-xf", path, "-C", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	written := map[string]bool{"jconfig.h": true, "jconfigint.h": true, "jversion.h": true}
	include := regexp.MustCompile(`(?m)^\s*#\s*include\s+"([^"]+)"`)
	seen := map[string]bool{}
	todo := slices.Clone(jpegSources)
	for i := range todo {
		todo[i] += ".c"
	}
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		if seen[name] || written[name] {
			continue
		}
		seen[name] = true
		b, err := os.ReadFile(filepath.Join(dir, jpegSrc, name))
		require.NoError(t, err, "%s is included but neither in the tarball nor written by the build", name)
		for _, m := range include.FindAllStringSubmatch(string(b), -1) {
			todo = append(todo, m[1])
		}
	}
}
