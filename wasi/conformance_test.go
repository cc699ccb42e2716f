package wasi_test

import (
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/wasi"
)

func TestConformanceMemMapFs(t *testing.T) {
	testFS(t, func(*testing.T) afero.Fs { return afero.NewMemMapFs() })
}

func TestConformanceOsFs(t *testing.T) {
	testFS(t, func(t *testing.T) afero.Fs {
		return afero.NewBasePathFs(afero.NewOsFs(), t.TempDir())
	})
}

func TestConformanceCopyOnWriteFs(t *testing.T) {
	testFS(t, func(t *testing.T) afero.Fs { return newCopyOnWrite(t) })
}

func TestConformanceSymlinkMemFs(t *testing.T) {
	testFS(t, func(*testing.T) afero.Fs { return newSymlinkMemFs() })
}

// newCopyOnWrite returns an afero.CopyOnWriteFs whose read-only base holds
// baseContent, with an empty in-memory overlay.
func newCopyOnWrite(t *testing.T) afero.Fs {
	base := afero.NewMemMapFs()
	for name, content := range baseContent {
		require.NoError(t, afero.WriteFile(base, name, []byte(content), 0o644))
	}
	return afero.NewCopyOnWriteFs(afero.NewReadOnlyFs(base), afero.NewMemMapFs())
}

var baseContent = map[string]string{
	"/readme.txt":          "read me",
	"/lib/python/os.py":    "import sys\n",
	"/lib/python/empty.py": "",
}

func TestConformanceRootFs(t *testing.T) {
	testFS(t, func(t *testing.T) afero.Fs {
		r, err := wasi.HostDir(t.TempDir())
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Close() })
		return r
	})
}
