package wasi_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/wasi"
)

// TestAccessTimes checks that atim and mtim are set independently on every
// backend, MemMapFs (which keeps one time per file) included.
func TestAccessTimes(t *testing.T) {
	const (
		sec  = int64(time.Second)
		atim = 1_000_000 * sec
		mtim = 2_000_000 * sec
	)
	backends := map[string]func(t *testing.T) afero.Fs{
		"memory":  func(*testing.T) afero.Fs { return afero.NewMemMapFs() },
		"symlink": func(*testing.T) afero.Fs { return newSymlinkMemFs() },
		"hostdir": func(t *testing.T) afero.Fs { return afero.NewBasePathFs(afero.NewOsFs(), t.TempDir()) },
	}
	for name, newFs := range backends {
		t.Run(name, func(t *testing.T) {
			fsys, err := wasi.NewFS(newFs(t), wasi.Options{})
			require.NoError(t, err)
			f, errno := fsys.OpenFile("f", sys.O_RDWR|sys.O_CREAT, 0o644)
			require.Equal(t, sys.Errno(0), errno)
			defer f.Close()
			times := func(name string) (int64, int64) {
				t.Helper()
				st, errno := fsys.Stat(name)
				require.Equal(t, sys.Errno(0), errno)
				fst, errno := f.Stat()
				require.Equal(t, sys.Errno(0), errno)
				if name == "f" || name == "g" {
					require.Equal(t, st.Atim, fst.Atim, "path and handle agree")
					require.Equal(t, st.Mtim, fst.Mtim, "path and handle agree")
				}
				return st.Atim, st.Mtim
			}

			require.Equal(t, sys.Errno(0), fsys.Utimens("f", atim, mtim))
			a, m := times("f")
			require.Equal(t, atim, a)
			require.Equal(t, mtim, m)

			// Only mtim: atim is unchanged.
			require.Equal(t, sys.Errno(0), f.Utimens(sys.UTIME_OMIT, mtim+sec))
			a, m = times("f")
			require.Equal(t, atim, a)
			require.Equal(t, mtim+sec, m)

			// Only atim: mtim is unchanged.
			require.Equal(t, sys.Errno(0), fsys.Utimens("f", atim+sec, sys.UTIME_OMIT))
			a, m = times("f")
			require.Equal(t, atim+sec, a)
			require.Equal(t, mtim+sec, m)

			// A write changes mtim, not atim.
			_, errno = f.Write([]byte("x"))
			require.Equal(t, sys.Errno(0), errno)
			a, m = times("f")
			require.Equal(t, atim+sec, a)
			require.NotEqual(t, mtim+sec, m)

			// The access time follows a rename.
			require.Equal(t, sys.Errno(0), fsys.Rename("f", "g"))
			a, _ = times("g")
			require.Equal(t, atim+sec, a)

			// A new file at a removed path does not inherit it.
			require.Equal(t, sys.Errno(0), fsys.Utimens("g", atim, mtim))
			require.Equal(t, sys.Errno(0), fsys.Unlink("g"))
			g, errno := fsys.OpenFile("g", sys.O_RDWR|sys.O_CREAT, 0o644)
			require.Equal(t, sys.Errno(0), errno)
			require.Equal(t, sys.Errno(0), g.Close())
			st, errno := fsys.Stat("g")
			require.Equal(t, sys.Errno(0), errno)
			require.NotEqual(t, atim, st.Atim)

			// Directories too.
			require.Equal(t, sys.Errno(0), fsys.Mkdir("d", 0o755))
			require.Equal(t, sys.Errno(0), fsys.Utimens("d", atim, mtim))
			require.Equal(t, sys.Errno(0), fsys.Utimens("d", sys.UTIME_OMIT, mtim+sec))
			st, errno = fsys.Stat("d")
			require.Equal(t, sys.Errno(0), errno)
			require.Equal(t, atim, st.Atim)
			require.Equal(t, mtim+sec, st.Mtim)
		})
	}
}

// TestHostTimes checks that a host directory reports the host's own times.
func TestHostTimes(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	atime := time.Unix(1_000_000, 123)
	mtime := time.Unix(2_000_000, 456)
	require.NoError(t, os.Chtimes(p, atime, mtime))
	fsys, err := wasi.NewFS(afero.NewBasePathFs(afero.NewOsFs(), dir), wasi.Options{})
	require.NoError(t, err)
	st, errno := fsys.Stat("f")
	require.Equal(t, sys.Errno(0), errno)
	require.Equal(t, atime.UnixNano(), st.Atim)
	require.Equal(t, mtime.UnixNano(), st.Mtim)

	// Set through the FS, the times are the host's.
	require.Equal(t, sys.Errno(0), fsys.Utimens("f", sys.UTIME_OMIT, mtime.UnixNano()+1000))
	// A fresh FS, which keeps nothing of its own, reads them from the host.
	fresh, err := wasi.NewFS(afero.NewBasePathFs(afero.NewOsFs(), dir), wasi.Options{})
	require.NoError(t, err)
	st, errno = fresh.Stat("f")
	require.Equal(t, sys.Errno(0), errno)
	require.Equal(t, atime.UnixNano(), st.Atim)
	require.Equal(t, mtime.UnixNano()+1000, st.Mtim)
	// A change made on the host is seen.
	require.NoError(t, os.Chtimes(p, atime.Add(time.Hour), mtime))
	st, errno = fsys.Stat("f")
	require.Equal(t, sys.Errno(0), errno)
	require.Equal(t, atime.Add(time.Hour).UnixNano(), st.Atim)
	require.Equal(t, mtime.UnixNano(), st.Mtim)
}
