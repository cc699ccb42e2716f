package cpython

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
		{MatplotlibInputs[3].File, contourpySrc, contourpySourceEdits},
		{MatplotlibInputs[2].File, pillowSrc, pillowSourceEdits},
		{MatplotlibLocalInputs[1].File, kiwiSrc, kiwiSourceEdits},
		{NumpyInputs[0].File, numpySrc, numpySourceEdits},
	} {
		editTarball(t, c.tarball, c.src, c.edits)
	}
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
