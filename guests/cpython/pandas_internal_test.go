package cpython

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPandasVariantKey: pandas implies numpy, and its variant has a key
// of its own, not the numpy variant's nor the default guest's; the order
// and repetition of With do not matter.
func TestPandasVariantKey(t *testing.T) {
	numpy, err := (&Options{With: []string{Numpy}}).key()
	require.NoError(t, err)
	pandas, err := (&Options{With: []string{Pandas}}).key()
	require.NoError(t, err)
	both, err := (&Options{With: []string{Pandas, Numpy, Pandas}}).key()
	require.NoError(t, err)
	assert.NotEqual(t, numpy, pandas)
	assert.NotEqual(t, Key(), pandas)
	assert.Equal(t, pandas, both)
	parts, err := (&Options{With: []string{Pandas}}).parts()
	require.NoError(t, err)
	assert.Equal(t, []string{Numpy, Pandas}, parts)
	assert.Equal(t, PandasInputs, partInputs(parts))
	assert.Empty(t, partInputs([]string{Numpy}))
	err = notBuilt(&Options{With: []string{Pandas}})
	require.ErrorIs(t, err, ErrNotBuilt)
	assert.Contains(t, err.Error(), "--with numpy,pandas")
}

// TestPandasExcluded: the bundle leaves out pandas' tests, stubs and
// sources and keeps its modules.
func TestPandasExcluded(t *testing.T) {
	for rel, want := range map[string]bool{
		"core/frame.py":                      false,
		"io/formats/templates/html.tpl":      false,
		"tests/frame/test_api.py":            true,
		"_libs/lib.pyi":                      true,
		"_libs/window/aggregations.pyx":      true,
		"_libs/tslibs/__init__.py":           false,
		"core/__pycache__/frame.cpython.pyc": true,
	} {
		assert.Equal(t, want, pandasExcluded(rel), rel)
	}
}

// TestPandasSourceEdits applies pandasSourceEdits to pandas' tarball (in
// the cache's sources directory after a build): each edit's text occurs
// as often as it says.
func TestPandasSourceEdits(t *testing.T) {
	dir := editTarball(t, PandasInputs[0].File, pandasSrc, pandasSourceEdits)
	h, err := os.ReadFile(filepath.Join(dir, pandasSrc, npDatetimeH))
	require.NoError(t, err)
	assert.Contains(t, string(h), "#define is_leapyear pandas_is_leapyear\n")
}
