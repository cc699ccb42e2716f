package wasi_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/wasi"
)

// swapLayout makes a host directory to mount and a directory outside it:
//
//	root/x/secret.txt  "inside"
//	root/inside.txt    "inside"
//	root/outlink       -> outside (absolute host path)
//	outside/secret.txt secret, 0600
//
// swap turns root/x into the link to outside (keeping the real directory as
// root/x_real); unswap turns it back.
func swapLayout(t *testing.T) (root, outside string, swap, unswap func() error) {
	t.Helper()
	outside = t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret.txt"), []byte(secret), 0o600))
	root = t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(root, "x"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "x", "secret.txt"), []byte("inside"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "inside.txt"), []byte("inside"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "outlink")))
	x, real, link := filepath.Join(root, "x"), filepath.Join(root, "x_real"), filepath.Join(root, "outlink")
	swap = func() error {
		if err := os.Rename(x, real); err != nil {
			return err
		}
		return os.Rename(link, x)
	}
	unswap = func() error {
		if err := os.Rename(x, link); err != nil {
			return err
		}
		return os.Rename(real, x)
	}
	return root, outside, swap, unswap
}

// outsideChanged reports whether the outside directory holds anything but
// the secret, unchanged.
func outsideChanged(outside string) bool {
	ents, err := os.ReadDir(outside)
	if err != nil || len(ents) != 1 || ents[0].Name() != "secret.txt" {
		return true
	}
	b, err := os.ReadFile(filepath.Join(outside, "secret.txt"))
	if err != nil || string(b) != secret {
		return true
	}
	fi, err := os.Stat(filepath.Join(outside, "secret.txt"))
	return err != nil || fi.Mode().Perm() != 0o600
}

// hookFs runs hook once, right after the FS checked the path at (with
// Lstat) and before it uses it: the window a concurrent change of the host
// directory can hit.
type hookFs struct {
	afero.Fs
	at   string
	hook func() error
	err  error
}

func (h *hookFs) LstatIfPossible(name string) (os.FileInfo, bool, error) {
	fi, ok, err := h.Fs.(afero.Lstater).LstatIfPossible(name)
	if name == h.at && h.hook != nil {
		h.err, h.hook = h.hook(), nil
	}
	return fi, ok, err
}

func (h *hookFs) ReadlinkIfPossible(name string) (string, error) {
	return h.Fs.(afero.LinkReader).ReadlinkIfPossible(name)
}

func (h *hookFs) SymlinkIfPossible(oldname, newname string) error {
	return h.Fs.(afero.Linker).SymlinkIfPossible(oldname, newname)
}

// hostBackends are the two ways to back a mount with a host directory:
// afero's BasePathFs (path strings handed to the OS) and wasi.RootFs
// (HostDir: an os.Root).
var hostBackends = []struct {
	name string
	open func(t *testing.T, dir string) afero.Fs
	// raceSafe is whether the backend stays confined while the directory
	// changes under it.
	raceSafe bool
}{
	{"BasePathFs", func(_ *testing.T, dir string) afero.Fs { return afero.NewBasePathFs(afero.NewOsFs(), dir) }, false},
	{"RootFs", func(t *testing.T, dir string) afero.Fs {
		r, err := wasi.HostDir(dir)
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Close() })
		return r
	}, true},
}

// TestEscapeBySymlinkSwap swaps a directory of the mount for a symbolic
// link to the outside exactly between the FS's check of a path and its use,
// for each kind of operation. BasePathFs is shown to escape (so the test
// can see an escape); RootFs never does.
func TestEscapeBySymlinkSwap(t *testing.T) {
	ops := []struct {
		name string
		at   string // the check after which the swap happens
		do   func(fsys *wasi.FS) (readSecret bool)
	}{
		{"read", "/x/secret.txt", func(fsys *wasi.FS) bool {
			f, errno := fsys.OpenFile("x/secret.txt", sys.O_RDONLY, 0)
			if errno != 0 {
				return false
			}
			defer f.Close()
			buf := make([]byte, 64)
			n, _ := f.Read(buf)
			return string(buf[:n]) == secret
		}},
		{"create", "/x/new", func(fsys *wasi.FS) bool {
			if f, errno := fsys.OpenFile("x/new", sys.O_WRONLY|sys.O_CREAT|sys.O_EXCL, 0o644); errno == 0 {
				f.Close()
			}
			return false
		}},
		{"truncate", "/x/secret.txt", func(fsys *wasi.FS) bool {
			if f, errno := fsys.OpenFile("x/secret.txt", sys.O_WRONLY|sys.O_TRUNC, 0); errno == 0 {
				f.Close()
			}
			return false
		}},
		{"mkdir", "/x/dir", func(fsys *wasi.FS) bool { fsys.Mkdir("x/dir", 0o755); return false }},
		{"unlink", "/x/secret.txt", func(fsys *wasi.FS) bool { fsys.Unlink("x/secret.txt"); return false }},
		{"rename into", "/x/stolen", func(fsys *wasi.FS) bool { fsys.Rename("inside.txt", "x/stolen"); return false }},
		{"rename from", "/x/secret.txt", func(fsys *wasi.FS) bool { fsys.Rename("x/secret.txt", "stolen"); return false }},
		{"chmod", "/x/secret.txt", func(fsys *wasi.FS) bool { fsys.Chmod("x/secret.txt", 0o666); return false }},
		{"symlink", "/x/link", func(fsys *wasi.FS) bool { fsys.Symlink("target", "x/link"); return false }},
	}
	for _, b := range hostBackends {
		escapes := 0
		for _, op := range ops {
			t.Run(b.name+"/"+op.name, func(t *testing.T) {
				root, outside, swap, _ := swapLayout(t)
				h := &hookFs{Fs: b.open(t, root), at: op.at, hook: swap}
				fsys, err := wasi.NewFS(h, wasi.Options{Quota: wasi.Quota{MaxBytes: 1 << 20}})
				require.NoError(t, err)
				read := op.do(fsys)
				require.NoError(t, h.err)
				require.Nil(t, h.hook, "the swap happened")
				escaped := read || outsideChanged(outside)
				if b.raceSafe {
					assert.False(t, escaped, "escaped the mount")
				}
				if escaped {
					escapes++
				}
			})
		}
		if !b.raceSafe {
			// Every operation escapes through BasePathFs: the test sees it.
			assert.Equal(t, len(ops), escapes, "%s: the swap must be seen to escape", b.name)
		}
	}
}

// TestEscapeBySymlinkSwapRace is the attack as a guest sharing a volume
// would run it: one goroutine keeps swapping a directory of the mount for a
// link to the outside, another reads and creates files through it, for a
// bounded time. Through RootFs, nothing outside is ever read or created.
// (TestEscapeBySymlinkSwap shows the same window deterministically.)
func TestEscapeBySymlinkSwapRace(t *testing.T) {
	bound := 2 * time.Second
	if testing.Short() {
		bound = 300 * time.Millisecond
	}
	for _, b := range hostBackends {
		t.Run(b.name, func(t *testing.T) {
			root, outside, swap, unswap := swapLayout(t)
			fsys, err := wasi.NewFS(b.open(t, root), wasi.Options{})
			require.NoError(t, err)

			var stop atomic.Bool
			var wg sync.WaitGroup
			var swapErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					if swapErr = swap(); swapErr != nil {
						return
					}
					if swapErr = unswap(); swapErr != nil {
						return
					}
				}
			}()
			var reads, escapes int
			buf := make([]byte, 64)
			deadline := time.Now().Add(bound)
			for time.Now().Before(deadline) && escapes == 0 {
				reads++
				if f, errno := fsys.OpenFile("x/secret.txt", sys.O_RDONLY, 0); errno == 0 {
					n, _ := f.Read(buf)
					if bytes.Equal(buf[:n], []byte(secret)) {
						escapes++
					}
					f.Close()
				}
				if f, errno := fsys.OpenFile("x/new", sys.O_WRONLY|sys.O_CREAT|sys.O_EXCL, 0o644); errno == 0 {
					f.Close()
					fsys.Unlink("x/new")
				}
				if _, err := os.Lstat(filepath.Join(outside, "new")); err == nil {
					escapes++
				}
			}
			stop.Store(true)
			wg.Wait()
			require.NoError(t, swapErr)
			t.Logf("%s: %d escapes in %d tries", b.name, escapes, reads)
			if b.raceSafe {
				require.Zero(t, escapes)
				require.False(t, outsideChanged(outside))
			}
		})
	}
}

// TestRootFsReadlinkHidesHostPaths checks that readlink never shows a host
// path: links the guest makes are stored relative, host links under the
// directory are shown from the mount root, and moving the directory or
// opening it through another path changes nothing.
func TestRootFsReadlinkHidesHostPaths(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "vol")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("f"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(dir, "f"), filepath.Join(dir, "host-abs")))

	open := func(dir string) *wasi.FS {
		r, err := wasi.HostDir(dir)
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Close() })
		fsys, err := wasi.NewFS(r, wasi.Options{})
		require.NoError(t, err)
		return fsys
	}
	fsys := open(dir)
	require.Equal(t, sys.Errno(0), fsys.Symlink("../../f", "a/b/up"))
	require.Equal(t, sys.Errno(0), fsys.Symlink("../../../../../../f", "a/b/climb"))
	require.Equal(t, sys.Errno(0), fsys.Symlink("../../../../../..", "a/root"))
	require.Equal(t, sys.EPERM, fsys.Symlink(filepath.Join(dir, "f"), "abs"))
	// The host may make one through the RootFs: it is stored relative too.
	r, err := wasi.HostDir(dir)
	require.NoError(t, err)
	require.NoError(t, r.SymlinkIfPossible("/f", "/a/b/abs"))
	require.NoError(t, r.Close())

	// What the host stores: relative targets, the climbing ones cut at the
	// root, so that even programs on the host reading them stay inside.
	for link, want := range map[string]string{"a/b/up": "../../f", "a/b/climb": "../../f", "a/root": "..", "a/b/abs": "../../f"} {
		got, err := os.Readlink(filepath.Join(dir, link))
		require.NoError(t, err)
		require.Equal(t, want, got, link)
	}

	want := map[string]string{"a/b/up": "../../f", "a/b/climb": "../../f", "a/root": "..", "a/b/abs": "../../f", "host-abs": "/f"}
	check := func(fsys *wasi.FS, hostPaths ...string) {
		t.Helper()
		for link, target := range want {
			got, errno := fsys.Readlink(link)
			require.Equal(t, sys.Errno(0), errno, link)
			require.Equal(t, target, got, link)
			for _, p := range hostPaths {
				require.NotContains(t, got, p)
			}
			st, errno := fsys.Stat(link)
			require.Equal(t, sys.Errno(0), errno, link)
			require.True(t, st.Mode.IsDir() == (link == "a/root"), link)
		}
	}
	check(fsys, dir, parent)

	// The same directory through a symbolic link to it, and after a move.
	alias := filepath.Join(parent, "alias")
	require.NoError(t, os.Symlink(dir, alias))
	check(open(alias), dir, parent)
	moved := filepath.Join(parent, "moved")
	require.NoError(t, os.Rename(dir, moved))
	// (host-abs, made by the host with the old absolute path, now points
	// outside: it is the host's own content and read as it is.)
	delete(want, "host-abs")
	check(open(moved), dir, parent)
}

// TestRootFsErrorsHideHostPaths checks that the errors of a RootFs and of
// its files name paths in the RootFs, never the host directory.
func TestRootFsErrorsHideHostPaths(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	require.NoError(t, os.Symlink("/etc", filepath.Join(dir, "abs")))
	r, err := wasi.HostDir(dir)
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, "RootFs", r.Name())

	var errs []error
	_, err = r.Open("missing")
	errs = append(errs, err)
	_, err = r.Open("abs/passwd")
	errs = append(errs, err)
	errs = append(errs, r.Mkdir("d", 0o755), r.Remove("missing"), r.Rename("missing", "x"))
	_, err = r.Stat("abs/passwd")
	errs = append(errs, err)
	d, err := r.Open("d")
	require.NoError(t, err)
	require.Equal(t, "/d", d.Name())
	_, err = d.Read(make([]byte, 1))
	errs = append(errs, err)
	_, err = d.Write([]byte("x"))
	errs = append(errs, err)
	require.NoError(t, d.Close())
	errs = append(errs, d.Close())
	_, err = d.Readdir(1)
	errs = append(errs, err)
	for i, err := range errs {
		require.Error(t, err, i)
		require.NotContains(t, err.Error(), dir, i)
	}
	// A link out of the directory, met by os.Root, is EPERM to the guest.
	fsys, err := wasi.NewFS(r, wasi.Options{})
	require.NoError(t, err)
	_, err = r.Open("abs/passwd")
	require.True(t, errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), "escapes"), err)
	_, errno := fsys.Stat("abs/passwd")
	require.Equal(t, sys.ENOENT, errno, "the resolver takes /etc inside the mount")

	_, err = wasi.HostDir(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
