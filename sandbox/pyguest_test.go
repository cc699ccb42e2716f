package sandbox_test

import (
	"bytes"
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/guests/cpython"
	"github.com/fumehood/fumehood/internal/snapshot"
	"github.com/fumehood/fumehood/internal/testenv"
	"github.com/fumehood/fumehood/sandbox"
)

// TestCompileNotBuilt asks for the Python guest where it is not built:
// an error matching ErrGuestNotBuilt that names the command that builds it.
func TestCompileNotBuilt(t *testing.T) {
	_, err := sandbox.CompilePython(context.Background(), &sandbox.Options{CacheDir: t.TempDir()})
	require.ErrorIs(t, err, sandbox.ErrGuestNotBuilt)
	assert.Contains(t, err.Error(), "fumehood guest build")
}

// TestCompileWithParts checks how Options.With chooses the variant of the
// guest: an unknown part is refused, and a variant that is not built is
// ErrGuestNotBuilt naming its own build command.
func TestCompileWithParts(t *testing.T) {
	empty := t.TempDir()
	_, err := sandbox.CompilePython(context.Background(), &sandbox.Options{CacheDir: empty, With: []string{"pandas"}})
	require.ErrorIs(t, err, sandbox.ErrUnknownPart)
	_, err = sandbox.CompilePython(context.Background(), &sandbox.Options{CacheDir: empty, With: []string{"numpy"}})
	require.ErrorIs(t, err, sandbox.ErrGuestNotBuilt)
	assert.Contains(t, err.Error(), cpython.BuildCommand+" --with numpy")
}

// TestPythonInfo checks that the compiled guest says which one it is, and
// that it is the one that runs.
func TestPythonInfo(t *testing.T) {
	g := sandboxtest.Python(t)
	info := g.Python()
	assert.Equal(t, g.ID(), info.SHA256)
	assert.Empty(t, info.With, "the default guest has no optional parts")
	assert.Equal(t, cpython.PythonVersion, info.Version)
	res, err := g.Run(context.Background(), "import sys; print(sys.version.split()[0])", nil)
	require.NoError(t, err)
	assert.Equal(t, cpython.PythonVersion+"\n", string(res.Stdout))

	go1, err := sandbox.Compile(context.Background(), testenv.BuildGo(t, "guests/testguest"), nil)
	require.NoError(t, err)
	defer go1.Close()
	assert.Equal(t, sandbox.PythonInfo{}, go1.Python())
}

// TestBuiltStdlibMount checks the built guest's standard library mount: at
// /usr in every sandbox, read-only to the guest, none of the sandbox's
// mounts (the host's file methods and the mount quotas do not see it), and
// reserved.
func TestBuiltStdlibMount(t *testing.T) {
	g := sandboxtest.Python(t)
	ctx := context.Background()
	for _, p := range []string{"/usr", "/usr/local"} {
		_, err := g.NewSandbox(&sandbox.Config{Mounts: []sandbox.Mount{{Path: p, FS: afero.NewMemMapFs()}}})
		require.Error(t, err, p)
		assert.Contains(t, err.Error(), "reserved")
	}
	sb, err := g.NewSandbox(&sandbox.Config{Mounts: []sandbox.Mount{{Path: "/data", FS: afero.NewMemMapFs()}}})
	require.NoError(t, err)
	defer sb.Close()
	res, err := sb.Run(ctx, `
import os, errno, zoneinfo
assert os.path.getsize("/usr/lib/python313.zip") > 1000000
assert zoneinfo.ZoneInfo("Europe/Paris").key == "Europe/Paris"
for path in ("/usr/lib/python313.zip", "/usr/new"):
    try:
        open(path, "wb")
    except OSError as e:
        print(errno.errorcode[e.errno])
try:
    os.remove("/usr/lib/python313.zip")
except OSError as e:
    print(errno.errorcode[e.errno])
print(sorted(os.listdir("/")))
`, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, "EROFS\nEROFS\nEROFS\n['data', 'tmp', 'work']\n", string(res.Stdout), "the mount at /data is listed, /usr is not")
	_, err = sb.Files().ReadFile("/usr/lib/python313.zip")
	require.ErrorIs(t, err, fs.ErrNotExist, "the host's file methods see only the sandbox's mounts")
	// The standard library still works after a guest tried to change it.
	res, err = g.Run(ctx, "import json; print(json.dumps([1]))", nil)
	require.NoError(t, err)
	assert.Equal(t, "[1]\n", string(res.Stdout))
}

// TestSnapshotOfRetiredBuildRefused resumes snapshots whose headers say
// they came from the retired asyncify session build (of the npm guest or
// of `guest build --session`): a pause buffer, mutable globals, or both
// with another guest's ID. Each is refused with ErrSnapshotGuest, saying
// the build no longer exists; the same snapshot as taken resumes.
func TestSnapshotOfRetiredBuildRefused(t *testing.T) {
	g := sandboxtest.Python(t)
	ctx := context.Background()
	s, err := g.NewSession(ctx, nil)
	require.NoError(t, err)
	_, err = s.Run(ctx, "x = 42", nil)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, s.Snapshot(&buf))
	s.Close()
	taken := buf.Bytes()

	npmGuest := "e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763"
	for name, craft := range map[string]func(h *snapshot.Header){
		"pause buffer":      func(h *snapshot.Header) { h.AsyncifyBuffer = 2 << 20 },
		"globals":           func(h *snapshot.Header) { h.Globals = []snapshot.Global{{Name: "fumehood_global_0", Value: 1}} },
		"npm guest's build": func(h *snapshot.Header) { h.Guest, h.AsyncifyBuffer = npmGuest, 2<<20 },
	} {
		t.Run(name, func(t *testing.T) {
			snap, err := snapshot.Decode(bytes.NewReader(taken), snapshot.Limits{MaxSize: 1 << 32, MaxMemory: 1 << 32, MaxFileBytes: 1 << 30, MaxFiles: 1 << 10})
			require.NoError(t, err)
			craft(&snap.Header)
			var crafted bytes.Buffer
			require.NoError(t, snapshot.Encode(&crafted, snap))
			_, err = g.ResumeSession(ctx, &crafted, nil)
			require.ErrorIs(t, err, sandbox.ErrSnapshotGuest)
			assert.Contains(t, err.Error(), "a build that no longer exists")
		})
	}
	r, err := g.ResumeSession(ctx, bytes.NewReader(taken), nil)
	require.NoError(t, err, "the snapshot as taken resumes")
	defer r.Close()
	res, err := r.Run(ctx, "print(x)", nil)
	require.NoError(t, err)
	assert.Equal(t, "42", strings.TrimSpace(string(res.Stdout)))
}
