package wasi_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	wazerosys "github.com/tetratelabs/wazero/sys"

	"github.com/fumehood/fumehood/wasi"
)

// probe is the fsprobe guest (testdata/fsprobe), built for wasip1 once per
// test binary and compiled by one shared wazero runtime.
var probe struct {
	once     sync.Once
	runtime  wazero.Runtime
	compiled wazero.CompiledModule
	err      error
}

func probeModule(t *testing.T) (wazero.Runtime, wazero.CompiledModule) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a wasip1 guest")
	}
	probe.once.Do(func() {
		dir, err := os.MkdirTemp("", "wasi-fsprobe-")
		if err != nil {
			probe.err = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "fsprobe.wasm")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", out, "./testdata/fsprobe")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			probe.err = &buildError{msg: string(msg), err: err}
			return
		}
		wasm, err := os.ReadFile(out)
		if err != nil {
			probe.err = err
			return
		}
		ctx := context.Background()
		probe.runtime = wazero.NewRuntime(ctx)
		wasi_snapshot_preview1.MustInstantiate(ctx, probe.runtime)
		probe.compiled, probe.err = probe.runtime.CompileModule(ctx, wasm)
	})
	require.NoError(t, probe.err)
	return probe.runtime, probe.compiled
}

type buildError struct {
	msg string
	err error
}

func (e *buildError) Error() string { return "building fsprobe: " + e.err.Error() + "\n" + e.msg }

// mount is one sys.FS at a guest path.
type mount struct {
	fs        sys.FS
	guestPath string
}

// runProbe runs fsprobe with args and the mounts, and returns its output.
func runProbe(t *testing.T, mounts []mount, args ...string) string {
	t.Helper()
	r, compiled := probeModule(t)
	cfg := wazero.NewFSConfig()
	for _, m := range mounts {
		cfg = cfg.(sysfs.FSConfig).WithSysFSMount(m.fs, m.guestPath)
	}
	var stdout, stderr bytes.Buffer
	modCfg := wazero.NewModuleConfig().
		WithName(""). // anonymous, so that runs may overlap
		WithArgs(append([]string{"fsprobe"}, args...)...).
		WithStdout(&stdout).
		WithStderr(&stderr).
		WithFSConfig(cfg)
	mod, err := r.InstantiateModule(context.Background(), compiled, modCfg)
	if mod != nil {
		_ = mod.Close(context.Background())
	}
	if exitErr, ok := err.(*wazerosys.ExitError); ok && exitErr.ExitCode() == 0 {
		err = nil
	}
	require.NoError(t, err, "stderr: %s", stderr.String())
	require.Empty(t, stderr.String())
	return stdout.String()
}

// requireLines checks that out has exactly the want lines, in order.
func requireLines(t *testing.T, want []string, out string) {
	t.Helper()
	require.Equal(t, strings.Join(want, "\n")+"\n", out)
}

func TestGuestMemMapFs(t *testing.T) {
	backing := afero.NewMemMapFs()
	fsys, err := wasi.NewFS(backing, wasi.Options{Quota: wasi.Quota{MaxBytes: 1 << 20, MaxFiles: 1000}})
	require.NoError(t, err)
	out := runProbe(t, []mount{{fsys, "/"}}, "basic")
	requireLines(t, []string{
		"mkdirall /work/sub/deep: ok",
		"mkdir /work/sub again: EEXIST",
		"write /work/sub/a.txt: ok",
		`read /work/sub/a.txt: ok "hello"`,
		"open for append: ok",
		"append: ok",
		"close: ok",
		`read after append: ok "hello, world"`,
		`pread at 7: ok "world"`,
		"seek end-5: ok 7",
		`read after seek: ok "world"`,
		"stat: size 12 regular true ino-nonzero true",
		"rename a.txt to /work/b.txt: ok",
		"stat old name: ENOENT",
		"truncate /work/b.txt to 5: ok",
		`read /work/b.txt: ok "hello"`,
		"ls /work: ok [b.txt sub/]",
		"mkdir /work/many: ok",
		"ls /work/many: ok count 300 unique 300 sorted true",
		"rewind: ok ok ok same true",
		"remove non-empty /work/many: ENOTEMPTY",
		"removeall /work/many: ok",
		"remove /work/sub/deep: ok",
		"remove missing: ENOENT",
		"rmdir a file: ENOTDIR",
		"unlink a directory: EISDIR",
		"create under a file: ENOTDIR",
		"create exclusive existing: EEXIST",
		// Go cleans these to /etc/passwd, which is not in the mount.
		"read ../../etc/passwd: ENOENT",
		"read /../../etc/passwd: ENOENT",
		"read /work/../../../etc/passwd: ENOENT",
		// MemMapFs has no symbolic links.
		"symlink /work/etc -> /etc: ENOSYS",
		"symlink /work/up -> ../../../../..: ENOSYS",
		"ls /: ok [work/]",
	}, out)

	// The guest's changes are in the backing file system.
	b, err := afero.ReadFile(backing, "/work/b.txt")
	require.NoError(t, err)
	require.Equal(t, "hello", string(b))
	_, err = backing.Stat("/work/many")
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Equal(t, wasi.Usage{Bytes: 5, Files: 3}, fsys.Usage()) // work, work/sub, work/b.txt
}

func TestGuestSymlinks(t *testing.T) {
	// The same program over a backing fs with symbolic links: the guest may
	// create links with relative targets, but they resolve inside the mount.
	// An absolute target is refused (EPERM); a link with one made directly
	// in the backing fs resolves inside the mount.
	backing := newSymlinkMemFs()
	require.NoError(t, backing.MkdirAll("/work", 0o755))
	require.NoError(t, backing.SymlinkIfPossible("/etc", "/work/etc"))
	fsys, err := wasi.NewFS(backing, wasi.Options{})
	require.NoError(t, err)
	require.Equal(t, sys.EPERM, fsys.Symlink("/etc", "work/etc2"))
	out := runProbe(t, []mount{{fsys, "/"}}, "basic")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Equal(t, []string{
		"symlink /work/etc -> /etc: EPERM",
		"read /work/etc/passwd: ENOENT",
		"symlink /work/up -> ../../../../..: ok",
		"ls /work/up: ok [work/]",
		"ls /: ok [work/]",
	}, lines[len(lines)-5:])
}

func TestGuestHostSymlinkEscape(t *testing.T) {
	for _, b := range hostBackends {
		t.Run(b.name, func(t *testing.T) { testGuestHostSymlinkEscape(t, b.open) })
	}
}

func testGuestHostSymlinkEscape(t *testing.T, open func(*testing.T, string) afero.Fs) {
	root, outside := hostLayout(t)
	fsys, err := wasi.NewFS(open(t, root), wasi.Options{})
	require.NoError(t, err)
	mounts := []mount{{fsys, "/"}}
	out := runProbe(t, mounts, "read",
		"/abs/secret.txt", "/absfile", "/rel/secret.txt", "/a/b/up/inside.txt",
		"/etc/passwd", "/passwd", "/abs-inside", "/a/b/up/"+filepath.Base(outside)+"/secret.txt",
		outside+"/secret.txt")
	requireLines(t, []string{
		"read /abs/secret.txt: ENOENT",
		"read /absfile: ENOENT",
		"read /rel/secret.txt: ENOENT",
		`read /a/b/up/inside.txt: "inside"`,
		// etc -> ../../(...)/etc is /etc in the mount: itself.
		"read /etc/passwd: ELOOP",
		"read /passwd: ELOOP",
		`read /abs-inside: "inside"`,
		"read /a/b/up/" + filepath.Base(outside) + "/secret.txt: ENOENT",
		"read " + outside + "/secret.txt: ENOENT",
	}, out)

	out = runProbe(t, mounts, "write", "/abs/new.txt", "/rel/new.txt", "/a/b/up/new.txt", "/absfile")
	requireLines(t, []string{
		"write /abs/new.txt: ENOENT",
		"write /rel/new.txt: ENOENT",
		"write /a/b/up/new.txt: ok",
		"write /absfile: ENOENT",
	}, out)
	requireOutsideUntouched(t, outside)
	b, err := os.ReadFile(filepath.Join(root, "new.txt"))
	require.NoError(t, err, "the write through a/b/up lands in the root")
	require.Equal(t, "written by the guest", string(b))
}

func TestGuestReadOnlyAndQuota(t *testing.T) {
	rwBacking := afero.NewMemMapFs()
	rw, err := wasi.NewFS(rwBacking, wasi.Options{Quota: wasi.Quota{MaxBytes: 1000}})
	require.NoError(t, err)
	roBacking := afero.NewMemMapFs()
	require.NoError(t, afero.WriteFile(roBacking, "/lib.txt", []byte("library"), 0o644))
	ro, err := wasi.NewFS(roBacking, wasi.Options{ReadOnly: true})
	require.NoError(t, err)
	mounts := []mount{{rw, "/"}, {ro, "/ro"}}

	out := runProbe(t, mounts, "read", "/ro/lib.txt")
	requireLines(t, []string{`read /ro/lib.txt: "library"`}, out)
	out = runProbe(t, mounts, "write", "/ro/lib.txt", "/ro/new.txt", "/fine.txt")
	requireLines(t, []string{
		"write /ro/lib.txt: EROFS",
		"write /ro/new.txt: EROFS",
		"write /fine.txt: ok",
	}, out)
	b, err := afero.ReadFile(roBacking, "/lib.txt")
	require.NoError(t, err)
	require.Equal(t, "library", string(b))
	_, err = roBacking.Stat("/new.txt")
	require.ErrorIs(t, err, os.ErrNotExist)

	// A write that would pass the quota writes nothing. wazero has no
	// ENOSPC: the guest sees EIO.
	out = runProbe(t, mounts, "fill", "/big.bin", "2000")
	requireLines(t, []string{
		"write 2000 bytes: EIO written 0",
		"size after: 0",
	}, out)
	out = runProbe(t, mounts, "fill", "/small.bin", "900")
	requireLines(t, []string{
		"write 900 bytes: ok written 900",
		"size after: 900",
	}, out)
	require.Equal(t, int64(900+len("written by the guest")), rw.Usage().Bytes)
}

func TestGuestTwoMountsAreSeparate(t *testing.T) {
	a, err := wasi.NewFS(afero.NewMemMapFs(), wasi.Options{})
	require.NoError(t, err)
	bBacking := afero.NewMemMapFs()
	b, err := wasi.NewFS(bBacking, wasi.Options{})
	require.NoError(t, err)
	mounts := []mount{{a, "/"}, {b, "/data"}}
	out := runProbe(t, mounts, "write", "/data/in-b.txt", "/in-a.txt")
	requireLines(t, []string{"write /data/in-b.txt: ok", "write /in-a.txt: ok"}, out)
	_, err = bBacking.Stat("/in-b.txt")
	require.NoError(t, err)
	_, err = bBacking.Stat("/in-a.txt")
	require.ErrorIs(t, err, os.ErrNotExist)
	// A fresh run over b alone sees only its own file.
	out = runProbe(t, []mount{{b, "/"}}, "read", "/in-b.txt", "/in-a.txt")
	requireLines(t, []string{`read /in-b.txt: "written by the guest"`, "read /in-a.txt: ENOENT"}, out)
}
