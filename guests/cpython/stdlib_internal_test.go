package cpython

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNamespaceDirs: the directories that hold modules below them but no
// __init__ of their own, ancestors included; none for regular packages.
func TestNamespaceDirs(t *testing.T) {
	got := namespaceDirs([]string{"a/__init__.py", "a/b.py", "a/data.txt", "ns/sub/__init__.py", "ns/sub/m.pyc",
		"deep/x/y/z.py", "top.py", "d/only.txt", "p/__init__.pyc", "p/q/r.pyc"})
	assert.Equal(t, []string{"deep", "deep/x", "deep/x/y", "ns", "p/q"}, got)
	assert.Empty(t, namespaceDirs([]string{"json/__init__.py", "json/decoder.py", "os.py"}))
}

// TestZipPycNamespacePackages imports a namespace package and a module of
// a regular package from zipPyc's archive with the machine's python3:
// zipimport finds a namespace package only by its directory entry.
func TestZipPycNamespacePackages(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine")
	}
	lib := t.TempDir()
	for name, src := range map[string]string{
		"nspkg/sub/mod.py":    "X = 'namespace'\n",
		"regular/__init__.py": "",
		"regular/mod.py":      "X = 'regular'\n",
	} {
		p := filepath.Join(lib, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(src), 0o644))
	}
	data, err := zipPyc(lib)
	require.NoError(t, err)
	zip := filepath.Join(t.TempDir(), "lib.zip")
	require.NoError(t, os.WriteFile(zip, data, 0o644))
	out, err := exec.Command(python, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1])\n"+
		"import nspkg.sub.mod, regular.mod\nprint(nspkg.sub.mod.X, regular.mod.X)", zip).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "namespace regular\n", string(out))
}
