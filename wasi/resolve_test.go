package wasi_test

import (
	"os"
	"path"
	"strings"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/wasi"
)

// buildLayout fills fsys from a layout: one entry a line, "d/path" for a
// directory, "f/path" for a file, "l/path>target" for a symbolic link.
// Parents are created as needed; entries that do not fit (a parent that is
// not a directory, a name taken) are skipped. At most 64 entries are used.
func buildLayout(fsys *symlinkMemFs, layout string) {
	for i, entry := range strings.Split(layout, "\n") {
		if i == 64 {
			return
		}
		if len(entry) < 2 || strings.ContainsRune(entry, 0) {
			continue
		}
		kind, rest := entry[0], entry[1:]
		target := ""
		if kind == 'l' {
			var ok bool
			if rest, target, ok = strings.Cut(rest, ">"); !ok || target == "" {
				continue
			}
		}
		p := path.Clean("/" + rest)
		if p == "/" || !mkdirs(fsys, path.Dir(p)) {
			continue
		}
		if _, err := fsys.Stat(p); err == nil {
			continue
		}
		switch kind {
		case 'd':
			_ = fsys.Mkdir(p, 0o755)
		case 'f':
			_ = afero.WriteFile(fsys.Fs, p, []byte("f"), 0o644)
		case 'l':
			_ = fsys.SymlinkIfPossible(target, p)
		}
	}
}

// mkdirs makes directory p and its parents, reporting false when a
// component exists and is not a directory.
func mkdirs(fsys *symlinkMemFs, p string) bool {
	if p == "/" {
		return true
	}
	if !mkdirs(fsys, path.Dir(p)) {
		return false
	}
	fi, err := fsys.Stat(p)
	if err == nil {
		return fi.IsDir()
	}
	return fsys.Mkdir(p, 0o755) == nil
}

// checkedFs is a symlinkMemFs that fails the test when the resolver hands
// it a path that is not clean and absolute, or that goes through a
// symbolic link or a non-directory: the backing fs must never be asked to
// follow a link.
type checkedFs struct {
	*symlinkMemFs
	t testing.TB
}

func (c *checkedFs) check(p string) {
	c.t.Helper()
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
		c.t.Fatalf("backing fs asked for unclean path %q", p)
	}
	for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
		fi, err := c.symlinkMemFs.Stat(dir)
		if err != nil || !fi.IsDir() || fi.Mode()&os.ModeSymlink != 0 {
			c.t.Fatalf("backing fs asked for %q, through %q which is not a directory", p, dir)
		}
	}
}

func (c *checkedFs) LstatIfPossible(name string) (os.FileInfo, bool, error) {
	c.check(name)
	return c.symlinkMemFs.LstatIfPossible(name)
}

func (c *checkedFs) ReadlinkIfPossible(name string) (string, error) {
	c.check(name)
	return c.symlinkMemFs.ReadlinkIfPossible(name)
}

func (c *checkedFs) Stat(name string) (os.FileInfo, error) {
	c.check(name)
	return c.symlinkMemFs.Stat(name)
}

const testLayout = "d/dir/sub\nf/dir/file\nf/top\n" +
	"l/dir/up>../../../..\nl/abs>/dir\nl/rel>dir/sub\nl/tofile>dir/file\nl/dangling>nowhere\n" +
	"l/loop>loop\nl/a>b\nl/b>a\nl/dir/sub/back>..\nl/slash>dir/\nl/root>/\nl/dotdot>..\nl/chain1>abs/up\nl/chain2>chain1/dir"

func TestResolve(t *testing.T) {
	fsys := newSymlinkMemFs()
	buildLayout(fsys, testLayout)
	backing := &checkedFs{symlinkMemFs: fsys, t: t}
	for _, tc := range []struct {
		name, follow, nofollow string
		err                    sys.Errno // for both when set
	}{
		{name: "", follow: "/", nofollow: "/"},
		{name: "/", follow: "/", nofollow: "/"},
		{name: ".", follow: "/", nofollow: "/"},
		{name: "..", follow: "/", nofollow: "/"},
		{name: "../../..", follow: "/", nofollow: "/"},
		{name: "dir/file", follow: "/dir/file", nofollow: "/dir/file"},
		{name: "//dir//./file", follow: "/dir/file", nofollow: "/dir/file"},
		{name: "dir/sub/..", follow: "/dir", nofollow: "/dir"},
		{name: "dir/../../../top", follow: "/top", nofollow: "/top"},
		{name: "dir/missing", follow: "/dir/missing", nofollow: "/dir/missing"},
		{name: "dir/up", follow: "/", nofollow: "/dir/up"},
		{name: "dir/up/top", follow: "/top", nofollow: "/top"},
		{name: "dir/up/../../top", follow: "/top", nofollow: "/top"},
		{name: "abs", follow: "/dir", nofollow: "/abs"},
		{name: "abs/", follow: "/dir", nofollow: "/dir"},
		{name: "abs/file", follow: "/dir/file", nofollow: "/dir/file"},
		{name: "rel/back/file", follow: "/dir/file", nofollow: "/dir/file"},
		{name: "tofile", follow: "/dir/file", nofollow: "/tofile"},
		{name: "dangling", follow: "/nowhere", nofollow: "/dangling"},
		{name: "slash", follow: "/dir", nofollow: "/slash"},
		{name: "root/dir/up/root", follow: "/", nofollow: "/root"},
		{name: "dotdot", follow: "/", nofollow: "/dotdot"},
		{name: "chain2/file", follow: "/dir/file", nofollow: "/dir/file"},
		{name: "new/", follow: "/new", nofollow: "/new"},
		{name: "tofile/", err: sys.ENOTDIR},
		{name: "tofile/x", err: sys.ENOTDIR},
		{name: "top/", err: sys.ENOTDIR},
		{name: "top/.", err: sys.ENOTDIR},
		{name: "top/..", err: sys.ENOTDIR},
		{name: "dangling/x", err: sys.ENOENT},
		{name: "missing/x", err: sys.ENOENT},
		{name: "missing/..", err: sys.ENOENT},
		{name: "loop/x", err: sys.ELOOP},
		{name: "a/x", err: sys.ELOOP},
		{name: "nul\x00", err: sys.EINVAL},
		{name: strings.Repeat("x", 256), err: sys.ENAMETOOLONG},
		{name: strings.Repeat("/", 4097), err: sys.ENAMETOOLONG},
	} {
		got, err := wasi.Resolve(backing, tc.name)
		gotNo, errNo := wasi.ResolveNoFollow(backing, tc.name)
		if tc.err != 0 {
			require.Equal(t, tc.err, err, "Resolve(%q) = %q", tc.name, got)
			require.Equal(t, tc.err, errNo, "ResolveNoFollow(%q) = %q", tc.name, gotNo)
			continue
		}
		require.NoError(t, err, tc.name)
		require.NoError(t, errNo, tc.name)
		require.Equal(t, tc.follow, got, "Resolve(%q)", tc.name)
		require.Equal(t, tc.nofollow, gotNo, "ResolveNoFollow(%q)", tc.name)
	}
	_, err := wasi.Resolve(backing, "loop")
	require.Equal(t, sys.ELOOP, err)
	p, err := wasi.ResolveNoFollow(backing, "loop")
	require.NoError(t, err)
	require.Equal(t, "/loop", p)
}

func TestResolveWithoutLinkSupport(t *testing.T) {
	// MemMapFs has no links: resolution is lexical, confined to the root.
	fsys := afero.NewMemMapFs()
	require.NoError(t, afero.WriteFile(fsys, "/a/b", []byte("x"), 0o644))
	p, err := wasi.Resolve(fsys, "../a/../../a/b")
	require.NoError(t, err)
	require.Equal(t, "/a/b", p)
	_, err = wasi.Resolve(fsys, "a/b/c")
	require.Equal(t, sys.ENOTDIR, err)
}

// FuzzResolve builds a random layout of directories, files and symbolic
// links, resolves a random path in it, and checks that resolution never
// panics, never asks the backing fs to follow a link, and always yields a
// clean path inside the root in which no component but the last is a link
// (and not even the last when following).
func FuzzResolve(f *testing.F) {
	f.Add(testLayout, "dir/up/top", true)
	f.Add(testLayout, "chain2/../../../x", false)
	f.Add("l/a>../../../../etc\nd/etc", "a/passwd", true)
	f.Add("l/x>/x/x/x\n", "x", true)
	f.Add("d/d\nl/d/l>../../d/l/", "d/l/", false)
	f.Add("l/s>.\nl/t>s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s", "t/t", true)
	f.Add("f/f", "f/", false)
	f.Add("l/l>/", "l/..//./l/../l/", true)
	f.Fuzz(func(t *testing.T, layout, name string, follow bool) {
		fsys := newSymlinkMemFs()
		buildLayout(fsys, layout)
		backing := &checkedFs{symlinkMemFs: fsys, t: t}
		resolve := wasi.ResolveNoFollow
		if follow {
			resolve = wasi.Resolve
		}
		p, err := resolve(backing, name)
		if err != nil {
			switch err {
			case sys.ENOENT, sys.ENOTDIR, sys.ELOOP, sys.ENAMETOOLONG, sys.EINVAL:
			default:
				t.Fatalf("resolve(%q): unexpected error %v", name, err)
			}
			return
		}
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p || strings.ContainsRune(p, 0) || len(p) > wasi.MaxPathLen {
			t.Fatalf("resolve(%q) = %q: not a clean absolute path", name, p)
		}
		for _, c := range strings.Split(p, "/")[1:] {
			if c == ".." || c == "." || (c == "" && p != "/") {
				t.Fatalf("resolve(%q) = %q: bad component %q", name, p, c)
			}
		}
		backing.check(p) // every parent is a real directory
		fi, statErr := fsys.Stat(p)
		if statErr == nil && follow && fi.Mode()&os.ModeSymlink != 0 {
			t.Fatalf("Resolve(%q) = %q: a symbolic link", name, p)
		}
		if statErr != nil && strings.HasSuffix(name, "/") && strings.Trim(name, "/") != "" {
			// only a missing final component may be returned
			if _, err := fsys.Stat(path.Dir(p)); err != nil {
				t.Fatalf("resolve(%q) = %q: missing parent", name, p)
			}
		}
		// Resolving a result again gives itself.
		if statErr == nil {
			again, err := resolve(backing, p)
			if err != nil || again != p {
				t.Fatalf("resolve(%q) = %q, but resolve(%q) = %q, %v", name, p, p, again, err)
			}
		}
	})
}
