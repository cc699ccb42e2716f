package sandbox_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/wasi"
)

func newSandbox(t *testing.T, cfg *sandbox.Config) *sandbox.Sandbox {
	t.Helper()
	s, err := sandboxtest.Python(t).NewSandbox(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// hostDir opens dir with wasi.HostDir, closing it at the end of the test.
func hostDir(t testing.TB, dir string) afero.Fs {
	t.Helper()
	fsys, err := wasi.HostDir(dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fsys.Close() })
	return fsys
}

func runOK(t *testing.T, s *sandbox.Sandbox, code string) string {
	t.Helper()
	res, err := s.Run(context.Background(), code, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	return string(res.Stdout)
}

func TestPythonFilesInMemoryRoot(t *testing.T) {
	s := newSandbox(t, nil)
	out := runOK(t, s, `
import os, shutil
print(sorted(os.listdir("/")))
with open("/work/a.txt", "w") as f:
    f.write("hello\n")
with open("/work/a.txt", "a") as f:
    f.write("world\n")
with open("/work/a.txt", "r+") as f:
    f.seek(6)
    print(repr(f.read()))
    f.seek(0)
    f.write("HELLO")
os.rename("/work/a.txt", "/work/b.txt")
os.makedirs("/work/x/y/z")
open("/work/x/y/z/deep", "w").write("d")
print(sorted(os.listdir("/work")), os.path.exists("/work/a.txt"))
print(open("/work/b.txt").read(), end="")
shutil.rmtree("/work/x")
print(sorted(os.listdir("/work")))
os.chdir("/tmp")
open("rel.txt", "w").write("relative")
print(os.getcwd(), open("/tmp/rel.txt").read())
`)
	assert.Equal(t, `['tmp', 'work']
'world\n'
['b.txt', 'x'] False
HELLO
world
['b.txt']
/tmp relative
`, out)
}

func TestSandboxKeepsFilesBetweenRunsAndHostAPI(t *testing.T) {
	s := newSandbox(t, nil)
	require.NoError(t, s.Files().MkdirAll("/work/in"))
	require.NoError(t, s.Files().WriteFile("/work/in/data.csv", []byte("a,b\n1,2\n3,4\n")))

	out := runOK(t, s, `
import csv
rows = list(csv.DictReader(open("/work/in/data.csv")))
total = sum(int(r["b"]) for r in rows)
open("/work/out.txt", "w").write(str(total))
print(len(rows))
`)
	assert.Equal(t, "2\n", out)
	got, err := s.Files().ReadFile("/work/out.txt")
	require.NoError(t, err)
	assert.Equal(t, "6", string(got))

	// The next run sees the files of the last one.
	assert.Equal(t, "6\n", runOK(t, s, `print(open("/work/out.txt").read())`))

	entries, err := s.Files().ReadDir("/work")
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"in", "out.txt"}, names)
	assert.True(t, entries[0].IsDir())

	fi, err := s.Files().Stat("/work/out.txt")
	require.NoError(t, err)
	assert.Equal(t, int64(1), fi.Size())

	require.NoError(t, s.Files().Remove("/work/out.txt"))
	_, err = s.Files().ReadFile("/work/out.txt")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, s.Files().RemoveAll("/work/in"))
	_, err = s.Files().Stat("/work/in")
	assert.ErrorIs(t, err, fs.ErrNotExist)

	// The host API follows the guest's path rules. Writes take absolute
	// guest paths only; reads take io/fs names too, which cannot climb.
	assert.ErrorIs(t, s.Files().WriteFile("relative/path", nil), fs.ErrInvalid)
	_, err = s.Files().ReadFile("work/../../etc/passwd")
	assert.ErrorIs(t, err, fs.ErrInvalid)
	_, err = s.Files().ReadFile("/work/../../../etc/passwd")
	assert.ErrorIs(t, err, fs.ErrNotExist, "the host's /etc/passwd is not the sandbox's")

	// A new sandbox starts empty.
	other := newSandbox(t, nil)
	_, err = other.Files().ReadFile("/work/in/data.csv")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestVolumePersistsAcrossSandboxes(t *testing.T) {
	dir := t.TempDir()
	vol := func() *sandbox.Config {
		return &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/data", FS: hostDir(t, dir), Quota: wasi.Quota{MaxBytes: 1 << 20, MaxFiles: 100}}}}
	}
	s1 := newSandbox(t, vol())
	runOK(t, s1, `
import os
os.makedirs("/data/notes", exist_ok=True)
open("/data/notes/today.txt", "w").write("remember the milk")
`)
	require.NoError(t, s1.Close())

	b, err := os.ReadFile(filepath.Join(dir, "notes", "today.txt"))
	require.NoError(t, err)
	assert.Equal(t, "remember the milk", string(b), "the volume is a real host directory")

	s2 := newSandbox(t, vol())
	assert.Equal(t, "remember the milk\n", runOK(t, s2, `print(open("/data/notes/today.txt").read())`))
}

func TestReadOnlyMountRefusesWrites(t *testing.T) {
	src := afero.NewMemMapFs()
	require.NoError(t, afero.WriteFile(src, "/ref.txt", []byte("reference"), 0o644))
	s := newSandbox(t, &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/ref", FS: src, ReadOnly: true}}})
	out := runOK(t, s, `
import errno, os
print(open("/ref/ref.txt").read())
for attempt in (lambda: open("/ref/ref.txt", "w"), lambda: open("/ref/new.txt", "w"),
                lambda: os.remove("/ref/ref.txt"), lambda: os.mkdir("/ref/d"),
                lambda: os.rename("/ref/ref.txt", "/ref/moved.txt")):
    try:
        attempt()
        print("allowed")
    except OSError as e:
        print(errno.errorcode[e.errno])
`)
	assert.Equal(t, "reference\nEROFS\nEROFS\nEROFS\nEROFS\nEROFS\n", out)
	err := s.Files().WriteFile("/ref/host.txt", []byte("x"))
	assert.ErrorIs(t, err, fs.ErrPermission, "the host API respects read-only too")
	b, err := afero.ReadFile(src, "/ref.txt")
	require.NoError(t, err)
	assert.Equal(t, "reference", string(b))
}

func TestEscapesNeverReachTheHost(t *testing.T) {
	outside := t.TempDir()
	secret := "TOP-SECRET-" + filepath.Base(outside)
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret.txt"), []byte(secret), 0o644))
	dir := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "abs-link")))
	require.NoError(t, os.Symlink("../../../../../../../../"+outside, filepath.Join(dir, "rel-link")))
	require.NoError(t, os.Symlink("/etc", filepath.Join(dir, "etc-link")))
	require.NoError(t, os.Symlink("loop-b", filepath.Join(dir, "loop-a")))
	require.NoError(t, os.Symlink("loop-a", filepath.Join(dir, "loop-b")))

	s := newSandbox(t, &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/data", FS: hostDir(t, dir)}}})
	res, err := s.Run(context.Background(), `
import os
def attempt(label, f):
    try:
        print(label, "read", len(f()))
    except OSError as e:
        print(label, type(e).__name__)
attempt("dotdot", lambda: open("/data/../../etc/passwd").read())
attempt("abs", lambda: open("/data/abs-link/secret.txt").read())
attempt("rel", lambda: open("/data/rel-link/secret.txt").read())
attempt("etc", lambda: open("/data/etc-link/passwd").read())
attempt("loop", lambda: open("/data/loop-a").read())
os.chdir("/data")
for _ in range(50):
    try:
        os.chdir("..")
    except OSError:
        pass
print("cwd", os.getcwd(), sorted(os.listdir(".")))
attempt("up-data", lambda: os.listdir("/data/../.."))
attempt("up-root", lambda: os.listdir("/../../.."))
for root, dirs, files in os.walk("/"):
    for name in files:
        try:
            data = open(os.path.join(root, name), "rb").read()
        except OSError:
            continue
        if b"TOP-SECRET" in data:
            print("LEAK", os.path.join(root, name))
`, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	out := string(res.Stdout)
	assert.NotContains(t, out, secret)
	assert.NotContains(t, out, "LEAK")
	assert.Contains(t, out, "dotdot PermissionError")
	assert.Contains(t, out, "abs FileNotFoundError")
	assert.Contains(t, out, "rel FileNotFoundError")
	assert.Contains(t, out, "etc FileNotFoundError")
	assert.Contains(t, out, "loop OSError")
	assert.Regexp(t, `cwd (/|/data) \[`, out)
	// wasi-libc hands ".." to the mount it starts from; going above a
	// mount's root is refused.
	assert.Contains(t, out, "up-data PermissionError")
	assert.Contains(t, out, "up-root PermissionError")
}

func TestQuotaIsOSError(t *testing.T) {
	s := newSandbox(t, &sandbox.Config{RootQuota: wasi.Quota{MaxBytes: 1 << 20, MaxFiles: 50}})
	out := runOK(t, s, `
import errno, os
try:
    with open("/work/big", "wb") as f:
        for _ in range(64):
            f.write(b"x" * 65536)
except OSError as e:
    print("bytes", errno.errorcode[e.errno])
print(os.path.getsize("/work/big") <= 1 << 20)
os.remove("/work/big")
try:
    for i in range(100):
        open(f"/work/f{i}", "w").close()
except OSError as e:
    print("files", errno.errorcode[e.errno], i)
`)
	assert.Equal(t, "bytes ENOSPC\nTrue\nfiles ENOSPC 48\n", out)
	// The host is unaffected and the sandbox still works once space is freed.
	require.NoError(t, s.Files().RemoveAll("/work"))
	assert.Equal(t, "ok\n", runOK(t, s, `import os; os.makedirs("/work"); open("/work/x", "w").write("1"); print("ok")`))
}

func TestSandboxesAreIsolated(t *testing.T) {
	a := newSandbox(t, &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/data", FS: hostDir(t, t.TempDir())}}})
	b := newSandbox(t, &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/data", FS: hostDir(t, t.TempDir())}}})
	runOK(t, a, `open("/data/a-only", "w").write("a"); open("/work/a-root", "w").write("a")`)
	out := runOK(t, b, `import os; print(os.listdir("/data"), os.listdir("/work"))`)
	assert.Equal(t, "[] []\n", out)
}

func TestSandboxConfigErrors(t *testing.T) {
	py := sandboxtest.Python(t)
	for name, cfg := range map[string]*sandbox.Config{
		"relative path": {Mounts: []sandbox.Mount{{Path: "data", FS: afero.NewMemMapFs()}}},
		"unclean path":  {Mounts: []sandbox.Mount{{Path: "/data/../x", FS: afero.NewMemMapFs()}}},
		"no fs":         {Mounts: []sandbox.Mount{{Path: "/data"}}},
		"twice":         {Mounts: []sandbox.Mount{{Path: "/d", FS: afero.NewMemMapFs()}, {Path: "/d", FS: afero.NewMemMapFs()}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := py.NewSandbox(cfg)
			assert.Error(t, err)
		})
	}
}

func TestVolumeCreatesItsDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	vol, err := wasi.Volume(dir)
	require.NoError(t, err)
	s, err := sandboxtest.Python(t).NewSandbox(&sandbox.Config{Mounts: []sandbox.Mount{{Path: "/data", FS: vol, Quota: wasi.Quota{MaxBytes: 1 << 30, MaxFiles: 100_000}}}})
	require.NoError(t, err)
	defer s.Close()
	res, err := s.Run(context.Background(), "open('/data/kept', 'w').write('yes')", nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	data, err := os.ReadFile(filepath.Join(dir, "kept"))
	require.NoError(t, err)
	assert.Equal(t, "yes", string(data))

	_, err = wasi.Volume(filepath.Join(dir, "kept", "below-a-file"))
	assert.Error(t, err)
}

func TestOpenFilesAreBounded(t *testing.T) {
	s, err := sandboxtest.Python(t).NewSandbox(nil)
	require.NoError(t, err)
	defer s.Close()
	res, err := s.Run(context.Background(), `
import errno
held = []
try:
    for i in range(5000):
        held.append(open('/tmp/f%d' % i, 'w'))
except OSError as e:
    print(len(held), errno.errorcode[e.errno], e.strerror)
for f in held:
    f.close()
print(len(open('/tmp/f1').read()))
`, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	assert.Equal(t, fmt.Sprintf("%d EMFILE No file descriptors available\n0\n", sandbox.DefaultMaxOpen-1), string(res.Stdout),
		"the runtime holds one handle on the root")
}

// TestHostDirSymlinkSwapEscape is the shared-volume attack: a host link in a
// volume points outside it; a guest in one sandbox keeps swapping a
// directory of the volume for that link (renames), while another sandbox on
// the same volume reads and writes through the directory. Through HostDir,
// nothing outside the volume is ever read or written. Bounded in time.
func TestHostDirSymlinkSwapEscape(t *testing.T) {
	outside := t.TempDir()
	secret := "TOP-SECRET-" + filepath.Base(outside)
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret.txt"), []byte(secret), 0o600))
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "x"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x", "secret.txt"), []byte("inside"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "outlink")))

	swapper := newSandbox(t, &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/v", FS: hostDir(t, dir)}}})
	victim := newSandbox(t, &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/v", FS: hostDir(t, dir)}}})

	seconds := 2.0
	if testing.Short() {
		seconds = 0.5
	}
	done := make(chan error, 1)
	go func() {
		res, err := swapper.Run(context.Background(), fmt.Sprintf(`
import os, time
end = time.time() + %g
n = 0
while time.time() < end:
    os.rename("/v/x", "/v/x_real"); os.rename("/v/outlink", "/v/x")
    os.rename("/v/x", "/v/outlink"); os.rename("/v/x_real", "/v/x")
    n += 1
print(n)
`, seconds), nil)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("swapper: %s", res.Stderr)
		}
		done <- err
	}()
	tries, escapes := 0, 0
	for running := true; running; {
		select {
		case err := <-done:
			require.NoError(t, err)
			running = false
		default:
		}
		tries++
		if b, err := victim.Files().ReadFile("/v/x/secret.txt"); err == nil && string(b) == secret {
			escapes++
		}
		_ = victim.Files().WriteFile("/v/x/new.txt", []byte("planted"))
		_ = victim.Files().Remove("/v/x/new.txt")
		if _, err := os.Lstat(filepath.Join(outside, "new.txt")); err == nil {
			escapes++
		}
	}
	t.Logf("%d escapes in %d tries", escapes, tries)
	require.Zero(t, escapes)
	ents, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Len(t, ents, 1, "nothing created outside")
}

// TestDirectoryListingsAreBounded is the listing attack from a guest: a
// directory of 9,000 entries and 1,000 scandir iterators, each read once,
// which unbounded held 9,000,000 entries (660 MB of host memory). The
// listings a mount holds stop at DefaultMaxListingBytes: the next read
// fails with ENOMEM, and the files stay usable.
func TestDirectoryListingsAreBounded(t *testing.T) {
	s := newSandbox(t, nil)
	res, err := s.Run(context.Background(), `
import errno, os
os.makedirs('/tmp/d')
for i in range(9000):
    open('/tmp/d/f%05d' % i, 'w').close()
held = []
try:
    for i in range(1000):
        it = os.scandir('/tmp/d')
        held.append(it)
        next(it)
    print(len(held), 'none')
except OSError as e:
    print(len(held), errno.errorcode[e.errno])
for it in held:
    it.close()
print(len(os.listdir('/tmp/d')))
`, nil)
	require.NoError(t, err, "stderr: %s", res.Stderr)
	perListing := 9000 * (wasi.ListingEntryBytes + len("f00000"))
	fit := sandbox.DefaultMaxListingBytes / perListing
	// (os.scandir reads the directory as it opens it, so the iterator whose
	// listing fails is never held.)
	assert.Equal(t, fmt.Sprintf("%d ENOMEM\n9000\n", fit), string(res.Stdout),
		"%d listings fit in the bound; the next fails", fit)
}

// TestHostDirReadlinkShowsNoHostPath: links a guest makes in a host mount
// are stored relative, so that readlink never shows the host's paths, even
// after the directory moved, and the links still work there.
func TestHostDirReadlinkShowsNoHostPath(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "vol")
	require.NoError(t, os.Mkdir(dir, 0o755))
	a := newSandbox(t, &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/data", FS: hostDir(t, dir)}}})
	runOK(t, a, `
import os
os.makedirs("/data/sub")
open("/data/f", "w").write("content")
os.symlink("f", "/data/l")
os.symlink("../f", "/data/sub/up")
os.symlink("../../../../f", "/data/sub/climb")
`)
	moved := filepath.Join(parent, "moved")
	require.NoError(t, os.Rename(dir, moved))
	b := newSandbox(t, &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/data", FS: hostDir(t, moved)}}})
	out := runOK(t, b, `
import os
for l in ["/data/l", "/data/sub/up", "/data/sub/climb"]:
    print(l, os.readlink(l))
    try:
        print(open(l).read())
    except OSError as e:
        print(e)
try:
    os.readlink("/data/missing")
except OSError as e:
    print(e)
`)
	assert.Equal(t, "/data/l f\ncontent\n/data/sub/up ../f\ncontent\n/data/sub/climb ../f\ncontent\n"+
		"[Errno 44] No such file or directory: '/data/missing'\n", out)
	assert.NotContains(t, out, parent)
}
