package sandbox_test

import (
	"context"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
)

// devNullUse is what agent code does with os.devnull: silence output,
// point a log at it, read it, and check what it is.
const devNullUse = `
import os, stat, contextlib, logging
with open(os.devnull, "w") as dn, contextlib.redirect_stdout(dn):
    print("silenced " * 10000)
logging.basicConfig(filename=os.devnull, force=True)
logging.warning("gone")
with open(os.devnull, "rb") as f:
    print(repr(f.read()))
st = os.stat(os.devnull)
print(os.devnull, stat.S_ISCHR(st.st_mode), st.st_size, os.path.exists("/dev/null"))
for change in (lambda: os.remove(os.devnull), lambda: os.rename(os.devnull, "/tmp/x"), lambda: os.mkdir(os.devnull)):
    try:
        change()
    except OSError as e:
        print(type(e).__name__, end=" ")
print()
`

const devNullOut = "b''\n/dev/null True 0 True\nPermissionError PermissionError PermissionError \n"

func TestPythonDevNull(t *testing.T) {
	s := newSandbox(t, nil)
	assert.Equal(t, devNullOut, runOK(t, s, devNullUse))
	// Nothing of it is in the sandbox's files.
	entries, err := s.Files().ReadDir("/")
	require.NoError(t, err)
	for _, e := range entries {
		assert.NotEqual(t, "dev", e.Name())
	}
}

// TestPythonDevNullOwnRoot: with a root of the caller's, read-only, the
// guest still has the device, and it is writable; the caller's files are
// untouched.
func TestPythonDevNullOwnRoot(t *testing.T) {
	root := afero.NewMemMapFs()
	require.NoError(t, afero.WriteFile(root, "/work/in.txt", []byte("in"), 0o644))
	s := newSandbox(t, &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/", FS: root, ReadOnly: true}}})
	assert.Equal(t, devNullOut, runOK(t, s, devNullUse))
	_, err := root.Stat("/dev")
	assert.Error(t, err, "the device is not in the caller's file system")
}

// TestSessionDevNullCarried: a descriptor of /dev/null held open in a
// session is carried by a snapshot, a fork and a hibernation, as any file
// of the session's mounts.
func TestSessionDevNullCarried(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "import os\nnull = open(os.devnull, 'w')\nnullr = open(os.devnull, 'rb')\nfds = (null.fileno(), nullr.fileno())")
	use := "null.write('x' * 1000), null.flush(), nullr.read(), (null.fileno(), nullr.fileno()) == fds"
	want := "(1000, None, b'', True)"
	assert.Equal(t, want, run(t, s, use).Value)

	r := resume(t, snapshotOf(t, s), nil)
	assert.Equal(t, want, run(t, r, use).Value)

	f, err := s.Fork(context.Background())
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, want, run(t, f, use).Value)

	require.NoError(t, s.Hibernate())
	assert.Equal(t, want, run(t, s, use).Value)
}
