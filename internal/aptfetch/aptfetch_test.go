package aptfetch

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMachineMirror(t *testing.T) {
	for _, tc := range []struct {
		name, file, content, uri, keyring string
	}{
		{"deb822", "sources.list.d/debian.sources", `Types: deb
# a comment
URIs: http://mirror.invalid/debian-security
Suites: bookworm-security
Components: main
Signed-By: /k/security.gpg

Types: deb
URIs: http://mirror.invalid/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /k/archive.gpg
`, "http://mirror.invalid/debian", "/k/archive.gpg"},
		{"one-line", "sources.list", `# comment
deb http://mirror.invalid/debian-security bookworm-security main
deb [arch=amd64 signed-by=/k/a.gpg] http://mirror.invalid/debian bookworm main
`, "http://mirror.invalid/debian", "/k/a.gpg"},
		{"no keyring", "sources.list", "deb http://mirror.invalid/debian bookworm main\n", "http://mirror.invalid/debian", DefaultKeyring},
	} {
		t.Run(tc.name, func(t *testing.T) {
			etc := t.TempDir()
			p := filepath.Join(etc, tc.file)
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, []byte(tc.content), 0o644))
			uri, kr, err := MachineMirror(etc)
			require.NoError(t, err)
			assert.Equal(t, tc.uri, uri)
			assert.Equal(t, tc.keyring, kr)
		})
	}
	_, _, err := MachineMirror(t.TempDir())
	assert.ErrorIs(t, err, ErrNoMirror)
}

func TestSourceList(t *testing.T) {
	f := &Fetcher{Mirror: "http://mirror.invalid/debian", Keyring: "/k.gpg", Suites: []string{"trixie", "bookworm"}}
	assert.Equal(t, `deb [signed-by=/k.gpg] http://mirror.invalid/debian trixie main
deb-src [signed-by=/k.gpg] http://mirror.invalid/debian trixie main
deb [signed-by=/k.gpg] http://mirror.invalid/debian bookworm main
deb-src [signed-by=/k.gpg] http://mirror.invalid/debian bookworm main
`, f.SourceList())
}
