package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/fumehood/fumehood/wasi"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/hostcall"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// walk lists every path fs.WalkDir finds from root.
func walk(t *testing.T, fsys fs.FS, root string) []string {
	t.Helper()
	var paths []string
	require.NoError(t, fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	}))
	return paths
}

// TestFilesIsAnIOFS: a sandbox's Files is an io/fs file system (Open with
// io/fs names; ReadFile, ReadDir and Stat with those or absolute guest
// paths), and what the guest wrote is what it reads.
func TestFilesIsAnIOFS(t *testing.T) {
	data := afero.NewMemMapFs()
	require.NoError(t, afero.WriteFile(data, "/in.csv", []byte("a,b\n"), 0o644))
	s := newSandbox(t, &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/work/data", FS: data, ReadOnly: true}}})
	runOK(t, s, `
import os
os.makedirs("/work/sub/deeper")
open("/work/a.txt", "w").write("alpha")
open("/work/sub/b.txt", "w").write("b" * 70000)
open("/work/sub/deeper/c.py", "w").write("")
`)
	files := s.Files()

	require.NoError(t, fstest.TestFS(files.FS(), "work/a.txt", "work/sub/b.txt", "work/sub/deeper/c.py"))
	mounted, err := fs.Sub(files.FS(), "work/data")
	require.NoError(t, err)
	require.NoError(t, fstest.TestFS(mounted, "in.csv"))

	// A mount point is listed in its parent, as on Linux, and walking
	// goes into the mount.
	assert.Equal(t, []string{"work", "work/a.txt", "work/data", "work/data/in.csv", "work/sub", "work/sub/b.txt",
		"work/sub/deeper", "work/sub/deeper/c.py"}, walk(t, files.FS(), "work"))
	assert.Equal(t, []string{"work/data", "work/data/in.csv"}, walk(t, files.FS(), "work/data"))
	matches, err := fs.Glob(files.FS(), "work/*/*.txt")
	require.NoError(t, err)
	assert.Equal(t, []string{"work/sub/b.txt"}, matches)
	sub, err := fs.Sub(files.FS(), "work/sub")
	require.NoError(t, err)
	b, err := fs.ReadFile(sub, "b.txt")
	require.NoError(t, err)
	assert.Len(t, b, 70000)

	// A guest path and its io/fs name reach the same file; the io/fs root
	// is "."; Files refuses io/fs names and FS refuses guest paths.
	for _, name := range []string{"/work/a.txt", "/work/../work/a.txt"} {
		b, err := files.ReadFile(name)
		require.NoError(t, err, name)
		assert.Equal(t, "alpha", string(b), name)
	}
	b, err = fs.ReadFile(files.FS(), "work/a.txt")
	require.NoError(t, err)
	assert.Equal(t, "alpha", string(b))
	_, err = files.ReadFile("work/a.txt")
	assert.ErrorIs(t, err, fs.ErrInvalid)
	_, err = fs.ReadFile(files.FS(), "/work/a.txt")
	assert.ErrorIs(t, err, fs.ErrInvalid)
	for _, name := range []string{"/", "."} {
		stat, readDir := files.Stat, files.ReadDir
		if name == "." {
			stat = func(n string) (fs.FileInfo, error) { return fs.Stat(files.FS(), n) }
			readDir = func(n string) ([]fs.DirEntry, error) { return fs.ReadDir(files.FS(), n) }
		}
		fi, err := stat(name)
		require.NoError(t, err)
		assert.True(t, fi.IsDir())
		assert.Equal(t, name, fi.Name())
		entries, err := readDir(name)
		require.NoError(t, err)
		assert.Equal(t, []string{"tmp", "work"}, names(entries))
	}
	entries, err := files.ReadDir("/work")
	require.NoError(t, err)
	assert.Equal(t, []string{"a.txt", "data", "sub"}, names(entries))
	fi, err := fs.Stat(files.FS(), "work/a.txt")
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular())
	assert.Equal(t, int64(5), fi.Size())

	// FS takes io/fs names only; every name keeps to the guest's rules.
	for _, name := range []string{"/work/a.txt", "work/../work/a.txt", "./work", "work/", ""} {
		_, err := files.FS().Open(name)
		assert.ErrorIs(t, err, fs.ErrInvalid, name)
	}
	for _, name := range []string{"../etc/passwd", "work/../../etc"} {
		_, err := files.ReadFile(name)
		assert.ErrorIs(t, err, fs.ErrInvalid, name)
	}
	_, err = files.ReadFile("/../../etc/passwd")
	assert.ErrorIs(t, err, fs.ErrNotExist, "the host's /etc/passwd is not the sandbox's")
	_, err = files.ReadFile("/work/a\x00.txt")
	assert.ErrorIs(t, err, fs.ErrInvalid)
	_, err = files.ReadFile("/work")
	assert.Error(t, err, "a directory is not a file")

	// Writes take absolute guest paths only, and keep the mounts' rules.
	for _, name := range []string{"work/new.txt", "new.txt", ""} {
		assert.ErrorIs(t, files.WriteFile(name, []byte("x")), fs.ErrInvalid, name)
		assert.ErrorIs(t, files.MkdirAll(name), fs.ErrInvalid, name)
		assert.ErrorIs(t, files.Remove(name), fs.ErrInvalid, name)
		assert.ErrorIs(t, files.RemoveAll(name), fs.ErrInvalid, name)
	}
	assert.ErrorIs(t, files.WriteFile("/work/data/new.csv", []byte("x")), fs.ErrPermission)
	assert.ErrorIs(t, files.Remove("/work/data"), fs.ErrPermission, "a mount's root stays")
	require.NoError(t, files.MkdirAll("/work/out/plots"))
	require.NoError(t, files.WriteFile("/work/out/plots/p.svg", []byte("<svg/>")))
	assert.Equal(t, "<svg/>\n", runOK(t, s, `print(open("/work/out/plots/p.svg").read())`))

	// A directory opened reads in pages.
	f, err := files.FS().Open("work")
	require.NoError(t, err)
	dir, ok := f.(fs.ReadDirFile)
	require.True(t, ok)
	first, err := dir.ReadDir(2)
	require.NoError(t, err)
	rest, err := dir.ReadDir(10)
	require.NoError(t, err)
	_, err = dir.ReadDir(1)
	assert.ErrorIs(t, err, io.EOF)
	assert.Equal(t, []string{"a.txt", "data", "out", "sub"}, append(names(first), names(rest)...))
	require.NoError(t, f.Close())
	assert.ErrorIs(t, f.Close(), fs.ErrClosed)

	// A closed sandbox's files are gone.
	require.NoError(t, s.Close())
	_, err = files.ReadFile("/work/a.txt")
	assert.ErrorIs(t, err, sandbox.ErrClosed)
	_, err = files.FS().Open("work/a.txt")
	assert.ErrorIs(t, err, sandbox.ErrClosed)
	assert.ErrorIs(t, files.WriteFile("/work/a.txt", nil), sandbox.ErrClosed)
}

func names(entries []fs.DirEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Name()
	}
	return out
}

// TestSessionFilesCannotReachControl: a session's Files cannot list, open,
// stat, write or remove fumehood's control directory, neither between runs
// nor from a host function during one, and the session's runs still
// report their outcome.
func TestSessionFilesCannotReachControl(t *testing.T) {
	var s *sandbox.Session
	var probe []string // what the host function found
	try := func(what string, err error) {
		probe = append(probe, what+": "+errName(err))
	}
	tryAll := func(files *sandbox.Files) {
		try("write", files.WriteFile(sandbox.ControlPath+"/result-forged", []byte("{}")))
		try("write by ..", files.WriteFile("/work/../.fumehood/forged", []byte("{}")))
		try("mkdir", files.MkdirAll(sandbox.ControlPath+"/d"))
		try("remove", files.Remove(sandbox.ControlPath+"/keep"))
		try("removeall", files.RemoveAll(sandbox.ControlPath))
		try("removeall below", files.RemoveAll(sandbox.ControlPath+"/keep"))
		_, err := files.ReadFile(sandbox.ControlPath + "/keep")
		try("read", err)
		_, err = files.ReadDir(sandbox.ControlPath)
		try("readdir", err)
		_, err = fs.ReadDir(files.FS(), ".fumehood")
		try("readdir io/fs", err)
		_, err = files.Stat(sandbox.ControlPath)
		try("stat", err)
		_, err = files.Stat(sandbox.ControlPath + "/keep")
		try("stat below", err)
		_, err = files.FS().Open(".fumehood")
		try("open", err)
		_, err = files.FS().Open(".fumehood/keep")
		try("open below", err)
		entries, err := files.ReadDir("/")
		try("root listed "+strings.Join(names(entries), ","), err)
		var seen []string
		_ = fs.WalkDir(files.FS(), ".", func(p string, _ fs.DirEntry, err error) error {
			if strings.Contains(p, "fumehood") {
				seen = append(seen, p)
			}
			return nil
		})
		try("walked to "+strings.Join(seen, ","), nil)
		matches, err := fs.Glob(files.FS(), ".f*/*")
		try("glob "+strings.Join(matches, ","), err)
	}
	want := []string{
		"write: ErrNotExist", "write by ..: ErrNotExist", "mkdir: ErrNotExist", "remove: ErrNotExist",
		"removeall: nil", "removeall below: nil", "read: ErrNotExist", "readdir: ErrNotExist",
		"readdir io/fs: ErrNotExist", "stat: ErrNotExist", "stat below: ErrNotExist", "open: ErrNotExist",
		"open below: ErrNotExist", "root listed tmp,work: nil", "walked to : nil", "glob : nil",
	}
	cfg := &sandbox.Config{HostCalls: &hostcall.Config{Funcs: map[string]hostcall.Handler{
		"probe": hostcall.Func(func(ctx context.Context, _ struct{}) (int, error) {
			tryAll(s.Files())
			return len(probe), nil
		}),
	}}}
	s = newSession(t, cfg)

	// Between runs.
	tryAll(s.Files())
	assert.Equal(t, want, probe)

	// During a run, with a file of the guest's own in the directory: the
	// host function sees nothing there and changes nothing.
	probe = nil
	res := run(t, s, `import fumehood, os
open('/.fumehood/keep', 'w').write('guest')
n = fumehood.call('probe')
(n, open('/.fumehood/keep').read(), sorted(os.listdir('/.fumehood')))`)
	assert.Equal(t, want, probe)
	assert.Equal(t, "(16, 'guest', ['keep'])", res.Value)

	// The runs after still report their outcome: a value, an exception.
	assert.Equal(t, "2", run(t, s, "1 + 1").Value)
	res, err := s.Run(context.Background(), "{}['missing']", nil)
	var exc *sandbox.Exception
	require.ErrorAs(t, err, &exc)
	assert.Equal(t, "KeyError", exc.Type)
	require.NotNil(t, res)
	assert.Equal(t, 1, res.ExitCode)
}

// errName names err by the io/fs error it matches.
func errName(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, fs.ErrNotExist):
		return "ErrNotExist"
	case errors.Is(err, fs.ErrPermission):
		return "ErrPermission"
	case errors.Is(err, fs.ErrExist):
		return "ErrExist"
	case errors.Is(err, fs.ErrInvalid):
		return "ErrInvalid"
	}
	return err.Error()
}

// TestFilesWritePastQuota: a host write the quota cannot hold fails with
// an error matching syscall.ENOSPC, whose message says so, and changes
// nothing: no file left behind, an existing file keeps its content, and
// the same holds for the quota's file count.
func TestFilesWritePastQuota(t *testing.T) {
	s := newSandbox(t, &sandbox.Config{RootQuota: wasi.Quota{MaxBytes: 1 << 20, MaxFiles: 20}})
	files := s.Files()
	big := make([]byte, 2<<20)

	err := files.WriteFile("/work/big.bin", big)
	require.ErrorIs(t, err, syscall.ENOSPC)
	assert.Contains(t, err.Error(), "no space left on device")
	_, err = files.Stat("/work/big.bin")
	assert.ErrorIs(t, err, fs.ErrNotExist, "a failed write leaves no file behind")

	require.NoError(t, files.WriteFile("/work/keep.txt", []byte("kept")))
	require.ErrorIs(t, files.WriteFile("/work/keep.txt", big), syscall.ENOSPC)
	b, err := files.ReadFile("/work/keep.txt")
	require.NoError(t, err)
	assert.Equal(t, "kept", string(b), "a failed write keeps the file's content")

	// Fill the file count: the write that would pass it creates nothing.
	var n int
	for n = 0; n < 30; n++ {
		if err = files.WriteFile(fmt.Sprintf("/work/f%d", n), nil); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, syscall.ENOSPC)
	_, err = files.Stat(fmt.Sprintf("/work/f%d", n))
	assert.ErrorIs(t, err, fs.ErrNotExist)
	// Overwriting an existing file needs no new entry.
	require.NoError(t, files.WriteFile("/work/f0", []byte("again")))
	// The guest sees the same content.
	assert.Equal(t, "kept again\n", runOK(t, s, `print(open("/work/keep.txt").read(), open("/work/f0").read())`))
}

// TestMountPointsListed: a mount at /data (and one below /work) is a
// directory in its parent's listing for the guest (os.listdir), the host's
// Files.ReadDir and fs.WalkDir, in one-shot sandboxes and sessions; a
// mount inside another mount adds nothing to the root.
func TestMountPointsListed(t *testing.T) {
	data, nested := afero.NewMemMapFs(), afero.NewMemMapFs()
	require.NoError(t, afero.WriteFile(data, "/in.csv", []byte("a\n"), 0o644))
	mounts := []sandbox.Mount{{Path: "/data", FS: data, ReadOnly: true}, {Path: "/work/out", FS: afero.NewMemMapFs()},
		{Path: "/data/deep/er", FS: nested}}
	code := `import os; print(sorted(os.listdir("/")), sorted(os.listdir("/work")), os.listdir("/data"))`
	want := "['data', 'tmp', 'work'] ['out'] ['in.csv']\n"

	s := newSandbox(t, &sandbox.Config{Mounts: mounts})
	assert.Equal(t, want, runOK(t, s, code))
	check := func(files *sandbox.Files) {
		entries, err := files.ReadDir("/")
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
			if e.Name() == "data" {
				assert.True(t, e.IsDir())
			}
		}
		assert.Equal(t, []string{"data", "tmp", "work"}, names)
		assert.Equal(t, []string{".", "data", "data/in.csv", "tmp", "work", "work/out"}, walk(t, files.FS(), "."))
	}
	check(s.Files())

	sess, err := sandboxtest.Python(t).NewSession(context.Background(), &sandbox.Config{Mounts: mounts})
	require.NoError(t, err)
	t.Cleanup(func() { sess.Close() })
	res, err := sess.Run(context.Background(), code, nil)
	require.NoError(t, err)
	assert.Equal(t, want, string(res.Stdout))
	check(sess.Files())
}
