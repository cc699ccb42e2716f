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

	"github.com/fumehood/fumehood/internal/guests/cpython"
	"github.com/fumehood/fumehood/internal/guests/npm"
	"github.com/fumehood/fumehood/internal/testenv"
	"github.com/fumehood/fumehood/sandbox"
)

// TestChooseGuest checks how the Python guest is chosen: Options.Guest,
// else $FUMEHOOD_GUEST, else the built guest where it is built.
func TestChooseGuest(t *testing.T) {
	empty := t.TempDir()
	t.Setenv(sandbox.GuestEnv, "")
	kind, err := sandbox.ChooseGuest(&sandbox.Options{CacheDir: empty})
	require.NoError(t, err)
	assert.Equal(t, sandbox.GuestNPM, kind, "nothing built: the npm guest")
	kind, err = sandbox.ChooseGuest(&sandbox.Options{CacheDir: empty, Guest: sandbox.GuestBuilt})
	require.NoError(t, err)
	assert.Equal(t, sandbox.GuestBuilt, kind)

	t.Setenv(sandbox.GuestEnv, sandbox.GuestBuilt)
	kind, err = sandbox.ChooseGuest(&sandbox.Options{CacheDir: empty})
	require.NoError(t, err)
	assert.Equal(t, sandbox.GuestBuilt, kind, "the environment chooses")
	kind, err = sandbox.ChooseGuest(&sandbox.Options{CacheDir: empty, Guest: sandbox.GuestNPM})
	require.NoError(t, err)
	assert.Equal(t, sandbox.GuestNPM, kind, "Options.Guest wins over the environment")

	t.Setenv(sandbox.GuestEnv, "pypy")
	_, err = sandbox.ChooseGuest(nil)
	require.ErrorIs(t, err, sandbox.ErrUnknownGuest)
	_, err = sandbox.CompilePython(context.Background(), nil)
	require.ErrorIs(t, err, sandbox.ErrUnknownGuest)
}

// TestCompileBuiltNotBuilt asks for the built guest where it is not built.
func TestCompileBuiltNotBuilt(t *testing.T) {
	for _, sessions := range []bool{false, true} {
		_, err := sandbox.CompilePython(context.Background(), &sandbox.Options{CacheDir: t.TempDir(), Guest: sandbox.GuestBuilt, Sessions: sessions})
		require.ErrorIs(t, err, sandbox.ErrGuestNotBuilt)
		assert.Contains(t, err.Error(), cpython.BuildCommand)
	}
}

// TestCompileWithParts checks how Options.With chooses the variant of the
// built guest: it implies the built guest, the npm guest has no parts, an
// unknown part is refused, and a variant that is not built is
// ErrGuestNotBuilt naming its own build command.
func TestCompileWithParts(t *testing.T) {
	empty := t.TempDir()
	t.Setenv(sandbox.GuestEnv, "")
	kind, err := sandbox.ChooseGuest(&sandbox.Options{CacheDir: empty, With: []string{"numpy"}})
	require.NoError(t, err)
	assert.Equal(t, sandbox.GuestBuilt, kind, "only the built guest has parts")
	_, err = sandbox.ChooseGuest(&sandbox.Options{CacheDir: empty, Guest: sandbox.GuestNPM, With: []string{"numpy"}})
	require.ErrorIs(t, err, sandbox.ErrUnknownPart)
	t.Setenv(sandbox.GuestEnv, sandbox.GuestNPM)
	_, err = sandbox.CompilePython(context.Background(), &sandbox.Options{CacheDir: empty, With: []string{"numpy"}})
	require.ErrorIs(t, err, sandbox.ErrUnknownPart)
	t.Setenv(sandbox.GuestEnv, "")

	_, err = sandbox.CompilePython(context.Background(), &sandbox.Options{CacheDir: empty, With: []string{"pandas"}})
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
	assert.Equal(t, sandboxtest.Guest(t), info.Guest)
	assert.Equal(t, g.ID(), info.SHA256)
	assert.Equal(t, info.Guest == sandbox.GuestBuilt, info.Sessions, "the built guest's one build has sessions")
	assert.Empty(t, info.With, "the default guest has no optional parts")
	want := npm.Version
	if info.Guest == sandbox.GuestBuilt {
		want = cpython.PythonVersion
	}
	assert.Equal(t, want, info.Version)
	res, err := g.Run(context.Background(), "import sys; print(sys.version.split()[0])", nil)
	require.NoError(t, err)
	assert.Equal(t, want+"\n", string(res.Stdout))

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
	sandboxtest.RequireGuest(t, sandbox.GuestBuilt)
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

// TestSnapshotOtherGuestRefused takes a session snapshot on one Python
// guest and resumes it on the other: ErrSnapshotGuest.
func TestSnapshotOtherGuestRefused(t *testing.T) {
	sandboxtest.PythonSessions(t) // skips without wasm-opt
	ctx := context.Background()
	guests := map[string]*sandbox.Guest{}
	for _, kind := range []string{sandbox.GuestBuilt, sandbox.GuestNPM} {
		g, err := sandbox.CompilePython(ctx, &sandbox.Options{Guest: kind, Sessions: true})
		if err != nil {
			t.Skipf("the session build of the %s guest is not ready: %v", kind, err)
		}
		defer g.Close()
		assert.Equal(t, kind, g.Python().Guest)
		assert.True(t, g.Python().Sessions)
		guests[kind] = g
	}
	for from, to := range map[string]string{sandbox.GuestBuilt: sandbox.GuestNPM, sandbox.GuestNPM: sandbox.GuestBuilt} {
		s, err := guests[from].NewSession(ctx, nil)
		require.NoError(t, err)
		_, err = s.Run(ctx, "x = 42", nil)
		require.NoError(t, err)
		var snap bytes.Buffer
		require.NoError(t, s.Snapshot(&snap))
		s.Close()
		_, err = guests[to].ResumeSession(ctx, bytes.NewReader(snap.Bytes()), nil)
		require.ErrorIs(t, err, sandbox.ErrSnapshotGuest, "%s to %s", from, to)
		r, err := guests[from].ResumeSession(ctx, bytes.NewReader(snap.Bytes()), nil)
		require.NoError(t, err, "the same guest resumes it")
		res, err := r.Run(ctx, "print(x)", nil)
		require.NoError(t, err)
		assert.Equal(t, "42", strings.TrimSpace(string(res.Stdout)))
		r.Close()
	}
}
