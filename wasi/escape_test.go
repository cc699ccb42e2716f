package wasi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/wasi"
)

const secret = "TOP SECRET"

// hostLayout makes a host directory root to mount, holding symbolic links
// that point outside it, and a directory outside holding a secret file.
//
//	root/inside.txt         "inside"
//	root/abs         -> outside (absolute host path)
//	root/absfile     -> outside/secret.txt
//	root/rel         -> ../../<outside> (relative, climbing out of root)
//	root/a/b/up      -> ../../../../../.. (above the root)
//	root/etc         -> ../../../../../../../../etc
//	root/passwd      -> /etc/passwd
//	root/abs-inside  -> root/inside.txt (absolute host path inside root)
func hostLayout(t *testing.T) (root, outside string) {
	t.Helper()
	outside = t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret.txt"), []byte(secret), 0o600))
	root = t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "inside.txt"), []byte("inside"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "a", "b"), 0o755))
	rel, err := filepath.Rel(root, outside)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(rel, ".."), rel)
	for link, target := range map[string]string{
		"abs":        outside,
		"absfile":    filepath.Join(outside, "secret.txt"),
		"rel":        rel,
		"a/b/up":     "../../../../../..",
		"etc":        "../../../../../../../../etc",
		"passwd":     "/etc/passwd",
		"abs-inside": filepath.Join(root, "inside.txt"),
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(root, link)))
	}
	// The links work on the host: the secret is reachable there.
	b, err := os.ReadFile(filepath.Join(root, "rel", "secret.txt"))
	require.NoError(t, err)
	require.Equal(t, secret, string(b))
	return root, outside
}

// requireOutsideUntouched checks that the outside directory still holds
// only the secret, unchanged.
func requireOutsideUntouched(t *testing.T, outside string) {
	t.Helper()
	ents, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	require.Equal(t, "secret.txt", ents[0].Name())
	b, err := os.ReadFile(filepath.Join(outside, "secret.txt"))
	require.NoError(t, err)
	require.Equal(t, secret, string(b))
	fi, err := os.Stat(filepath.Join(outside, "secret.txt"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

func TestHostSymlinkEscape(t *testing.T) {
	for _, b := range hostBackends {
		t.Run(b.name, func(t *testing.T) {
			root, outside := hostLayout(t)
			testHostSymlinkEscape(t, root, outside, b.open(t, root))
		})
	}
}

func testHostSymlinkEscape(t *testing.T, root, outside string, backing afero.Fs) {
	fsys, err := wasi.NewFS(backing, wasi.Options{Quota: wasi.Quota{MaxBytes: 1 << 20}})
	require.NoError(t, err)

	// Paths through the links. "etc" points at "/etc" in the mount, which is
	// itself: a loop.
	through := map[string]sys.Errno{
		"abs/secret.txt": sys.ENOENT,
		"absfile":        sys.ENOENT,
		"rel/secret.txt": sys.ENOENT,
		"etc/passwd":     sys.ELOOP,
		"passwd":         sys.ELOOP,
		"a/b/up/" + filepath.Base(outside) + "/secret.txt": sys.ENOENT,
		outside + "/secret.txt":                            sys.ENOENT,
		"../../../../../../.." + outside + "/secret.txt":   sys.ENOENT,
		"a/b/up/../../../" + outside + "/secret.txt":       sys.ENOENT,
	}
	for name, want := range through {
		_, errno := fsys.OpenFile(name, sys.O_RDONLY, 0)
		require.Equal(t, want, errno, "open %s", name)
		_, errno = fsys.Stat(name)
		require.Equal(t, want, errno, "stat %s", name)
		_, errno = fsys.OpenFile(name, sys.O_RDWR|sys.O_CREAT|sys.O_TRUNC, 0o644)
		require.Equal(t, want, errno, "create %s", name)
		require.Equal(t, want, fsys.Chmod(name, 0o777), "chmod %s", name)
		require.Equal(t, want, fsys.Utimens(name, 0, 0), "utimens %s", name)
		if name == "absfile" || name == "passwd" {
			continue // these name the links themselves, inside the root
		}
		require.Equal(t, want, fsys.Unlink(name), "unlink %s", name)
		require.Equal(t, want, fsys.Rename("inside.txt", name), "rename onto %s", name)
		require.Equal(t, want, fsys.Rename(name, "stolen"), "rename from %s", name)
	}
	_, errno := fsys.OpenFile("abs", sys.O_RDONLY|sys.O_DIRECTORY, 0)
	require.Equal(t, sys.ENOENT, errno, "list outside")
	require.Equal(t, sys.ENOENT, fsys.Mkdir("abs/newdir", 0o755))
	require.Equal(t, sys.ENOENT, fsys.Mkdir("rel/newdir", 0o755))
	require.Equal(t, sys.ENOENT, fsys.Symlink("x", "abs/link"))
	requireOutsideUntouched(t, outside)

	// Links that stay inside work: "up" stops at the root, and an absolute
	// host path under the root is shown relative to it.
	for _, name := range []string{"a/b/up/inside.txt", "abs-inside", "a/b/up/a/b/up/inside.txt"} {
		f, errno := fsys.OpenFile(name, sys.O_RDONLY, 0)
		require.Equal(t, sys.Errno(0), errno, name)
		buf := make([]byte, 16)
		n, errno := f.Read(buf)
		require.Equal(t, sys.Errno(0), errno)
		require.Equal(t, "inside", string(buf[:n]), name)
		require.Equal(t, sys.Errno(0), f.Close())
	}
	target, errno := fsys.Readlink("abs-inside")
	require.Equal(t, sys.Errno(0), errno)
	require.Equal(t, "/inside.txt", target)
	target, errno = fsys.Readlink("a/b/up")
	require.Equal(t, sys.Errno(0), errno)
	require.Equal(t, "../../../../../..", target)

	// Every resolution stays in the root of the backing fs.
	for _, name := range []string{"abs", "absfile", "rel", "a/b/up", "etc", "passwd", "rel/secret.txt", "a/b/up/.."} {
		p, err := wasi.Resolve(backing, name)
		if err != nil {
			require.Contains(t, []error{sys.ENOENT, sys.ELOOP}, err, name)
			continue
		}
		require.True(t, strings.HasPrefix(p, "/") && !strings.Contains(p, ".."), "%s -> %s", name, p)
		host := filepath.Join(root, p)
		require.True(t, host == root || strings.HasPrefix(host, root+"/"), "%s -> %s", name, host)
	}

	// Removing a link removes the link only.
	require.Equal(t, sys.Errno(0), fsys.Unlink("absfile"))
	require.Equal(t, sys.Errno(0), fsys.Unlink("abs"))
	requireOutsideUntouched(t, outside)

	// The guest cannot create a link with an absolute target (WASI forbids
	// them): nothing is created.
	require.Equal(t, sys.EPERM, fsys.Symlink("/etc/passwd", "mine"))
	require.Equal(t, sys.EPERM, fsys.Symlink("/", "mine"))
	require.Equal(t, sys.EPERM, fsys.Symlink(outside, "mine"))
	_, err = os.Lstat(filepath.Join(root, "mine"))
	require.ErrorIs(t, err, os.ErrNotExist)
	// Through the backing fs, BasePathFs and RootFs store an absolute
	// target under the root, and it reads back relative to the mount.
	_, isRoot := backing.(*wasi.RootFs)
	require.NoError(t, backing.(afero.Linker).SymlinkIfPossible("/etc/passwd", "/mine"))
	hostTarget, err := os.Readlink(filepath.Join(root, "mine"))
	require.NoError(t, err)
	target, errno = fsys.Readlink("mine")
	require.Equal(t, sys.Errno(0), errno)
	if isRoot {
		// RootFs stores it relative, the same place from the link.
		require.Equal(t, "etc/passwd", hostTarget)
		require.Equal(t, "etc/passwd", target)
	} else {
		require.Equal(t, filepath.Join(root, "etc/passwd"), hostTarget)
		require.Equal(t, "/etc/passwd", target)
	}
	_, errno = fsys.Stat("mine")
	require.Equal(t, sys.ELOOP, errno, "/etc is the etc link, which loops")
	// Links the guest creates with relative targets stay inside on the host
	// too: BasePathFs stores them under the root, RootFs relative, cut at
	// the root.
	require.Equal(t, sys.Errno(0), fsys.Symlink("../../../../..", "a/mine"))
	hostTarget, err = os.Readlink(filepath.Join(root, "a/mine"))
	require.NoError(t, err)
	if isRoot {
		require.Equal(t, "..", hostTarget)
	} else {
		require.Equal(t, root, hostTarget)
	}
	requireOutsideUntouched(t, outside)
}

func TestSymlinkLoopsAndLimits(t *testing.T) {
	backing := newSymlinkMemFs()
	fsys, err := wasi.NewFS(backing, wasi.Options{})
	require.NoError(t, err)
	require.Equal(t, sys.Errno(0), fsys.Symlink("self", "self"))
	// An absolute target is refused; the host can still make one.
	require.Equal(t, sys.EPERM, fsys.Symlink("/", "root"))
	require.NoError(t, backing.SymlinkIfPossible("/", "/root"))
	require.Equal(t, sys.Errno(0), fsys.Symlink(strings.Repeat("root/", 41)+"x", "deep"))
	require.Equal(t, sys.Errno(0), fsys.Symlink(strings.Repeat("a", 256), "longname"))
	_, errno := fsys.Stat("self")
	require.Equal(t, sys.ELOOP, errno)
	_, errno = fsys.Stat("self/x")
	require.Equal(t, sys.ELOOP, errno)
	_, errno = fsys.Lstat("self")
	require.Equal(t, sys.Errno(0), errno, "lstat does not follow")
	_, errno = fsys.Stat("deep")
	require.Equal(t, sys.ELOOP, errno, "41 links in one resolution")
	_, errno = fsys.Stat(strings.Repeat("root/", 39) + "self")
	require.Equal(t, sys.ELOOP, errno)
	_, errno = fsys.Stat(strings.Repeat("root/", 40))
	require.Equal(t, sys.Errno(0), errno, "40 links are fine")
	_, errno = fsys.Stat("longname")
	require.Equal(t, sys.ENAMETOOLONG, errno)
	require.Equal(t, sys.ENAMETOOLONG, fsys.Symlink(strings.Repeat("a", wasi.MaxPathLen+1), "toolong"))
}
