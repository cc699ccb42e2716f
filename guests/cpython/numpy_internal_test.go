package cpython

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNumpyExcluded(t *testing.T) {
	for rel, want := range map[string]bool{
		"__init__.py":                         false,
		"_core/multiarray.py":                 false,
		"_core/tests/test_api.py":             true,
		"_core/include/numpy/ndarrayobject.h": true,
		"__init__.pyi":                        true,
		"random/_common.pxd":                  true,
		"_core/_multiarray_umath.cpython-313-wasm32-wasi.so": true,
		"testing/__init__.py":                                false,
	} {
		assert.Equal(t, want, numpyExcluded(rel), rel)
	}
}

// TestNumpyWrapperArchivesModules runs the compiler wrapper the way meson
// does: a compile with -fPIC (dropped) and a shared-module link, which
// must become an archive of the objects with the static libraries listed
// beside it, found by numpyModules under the module's dotted name.
func TestNumpyWrapperArchivesModules(t *testing.T) {
	if _, err := exec.LookPath("clang-19"); err != nil {
		t.Skip("clang-19 is not installed")
	}
	if _, err := exec.LookPath("llvm-ar-19"); err != nil {
		t.Skip("llvm-ar-19 is not installed")
	}
	w := t.TempDir()
	b := &builder{w: w}
	require.NoError(t, os.MkdirAll(b.path("numpy-tools"), 0o755))
	wrap := b.path("numpy-tools", "cc-wrap")
	require.NoError(t, os.WriteFile(wrap, []byte(ccWrap), 0o755))
	dir := b.path("numpy-build", "numpy", "fft")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "m.c"), []byte("int PyInit__x(void) { return 1; }\n"), 0o644))
	run := func(args ...string) string {
		cmd := exec.Command(wrap, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	// -### prints the compiler's command: -fPIC must not reach it.
	out := run("clang-19", "--target=wasm32-wasi", "-fPIC", "-###", "-c", "m.c", "-o", "m.o")
	assert.NotContains(t, out, "pic-level")
	run("clang-19", "--target=wasm32-wasi", "-nostdlib", "-fPIC", "-c", "m.c", "-o", "m.o")
	run("llvm-ar-19", "rcs", "libdep.a", "m.o")
	so := filepath.Join(dir, "_x.cpython-313-wasm32-wasi.so")
	run("clang-19", "--target=wasm32-wasi", "-shared", "-o", so, "m.o", "libdep.a", "-lm")
	members := run("llvm-ar-19", "t", so)
	assert.Equal(t, "m.o", strings.TrimSpace(members))
	mods, err := b.numpyModules()
	require.NoError(t, err)
	require.Len(t, mods, 1)
	assert.Equal(t, "numpy.fft._x", mods[0].name)
	assert.Equal(t, so, mods[0].archive)
	assert.Equal(t, []string{filepath.Join(dir, "libdep.a")}, mods[0].libs)
}

// TestNumpyLegacyRenames checks the renames of mtrand's legacy copy of
// numpy.random's distributions: one #define per name, each name once, all
// given the mtrand_ prefix.
func TestNumpyLegacyRenames(t *testing.T) {
	defs := strings.Split(strings.TrimSuffix(legacyRenames(), "\n"), "\n")
	require.Len(t, defs, len(numpyLegacyNames))
	seen := map[string]bool{}
	for i, n := range numpyLegacyNames {
		assert.False(t, seen[n], n)
		seen[n] = true
		assert.Equal(t, "#define "+n+" mtrand_"+n, defs[i])
	}
	assert.Contains(t, numpyLegacyNames, "random_poisson")
	assert.Contains(t, numpyLegacyNames, "random_multinomial")
}
