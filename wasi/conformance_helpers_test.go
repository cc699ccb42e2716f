// The conformance battery: testFS checks that a wasi.FS over a given kind of afero.Fs
// behaves as wazero and a POSIX guest expect, in the spirit of
// testing/fstest.TestFS.
package wasi_test

import (
	"bytes"
	"io"
	"io/fs"
	"math"
	"path"
	"strings"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"
	sysapi "github.com/tetratelabs/wazero/sys"

	"github.com/fumehood/fumehood/wasi"
)

// work is the directory, under the root of each fresh backing file system,
// in which TestFS works. It must not exist in what newFs returns.
const work = "/wasitest"

// hugeQuota turns accounting on without limiting anything.
var hugeQuota = wasi.Quota{MaxBytes: 1 << 50, MaxFiles: 1 << 40}

// TestFS runs the conformance battery against wasi.NewFS over file systems
// made by newFs, which must return a fresh, writable afero.Fs (with or
// without content) for each call. Each check runs as a subtest, on its own
// fresh file system, twice: without a quota and with a quota too large to
// reach (so that the usage accounting runs, and is compared after each check
// with a recount of the backing file system).
//
// Symbolic link checks run when the FS can create links (Symlink does not
// fail with ENOSYS), and are skipped otherwise.
func testFS(t *testing.T, newFs func(t *testing.T) afero.Fs) {
	t.Helper()
	for _, c := range checks {
		for _, accounting := range []bool{false, true} {
			name := c.name
			if accounting {
				name += "/quota"
			}
			t.Run(name, func(t *testing.T) {
				backing := newFs(t)
				opts := wasi.Options{}
				if accounting {
					opts.Quota = hugeQuota
				}
				fsys, err := wasi.NewFS(backing, opts)
				require.NoError(t, err)
				e := &env{t: t, fs: fsys, backing: backing, opts: opts}
				e.ok(fsys.Mkdir(work, 0o755), "wasitest: %s must not exist in the fs newFs returns", work)
				c.run(e)
				if accounting {
					e.checkUsage()
				}
			})
		}
	}
	// Checks that need their own options.
	t.Run("ReadOnly", func(t *testing.T) { testReadOnly(t, newFs(t)) })
	t.Run("QuotaBytes", func(t *testing.T) { testQuotaBytes(t, newFs(t)) })
	t.Run("QuotaFiles", func(t *testing.T) { testQuotaFiles(t, newFs(t)) })
	t.Run("QuotaOpenUnlinked", func(t *testing.T) { testQuotaOpenUnlinked(t, newFs(t)) })
	t.Run("Isolation", func(t *testing.T) { testIsolation(t, newFs(t), newFs(t)) })
}

var checks = []struct {
	name string
	run  func(e *env)
}{
	{"CreateWriteRead", testCreateWriteRead},
	{"OpenErrors", testOpenErrors},
	{"AccessModes", testAccessModes},
	{"Append", testAppend},
	{"PreadPwrite", testPreadPwrite},
	{"Seek", testSeek},
	{"Truncate", testTruncate},
	{"Stat", testStat},
	{"Readdir", testReaddir},
	{"Mkdir", testMkdir},
	{"Rmdir", testRmdir},
	{"Unlink", testUnlink},
	{"Rename", testRename},
	{"Utimens", testUtimens},
	{"Chmod", testChmod},
	{"Link", testLink},
	{"SharedHandles", testSharedHandles},
	{"DotDotEscape", testDotDotEscape},
	{"Symlinks", testSymlinks},
	{"SymlinkEscape", testSymlinkEscape},
}

// env is one check's FS and helpers.
type env struct {
	t       *testing.T
	fs      *wasi.FS
	backing afero.Fs
	opts    wasi.Options // what fs was made with
}

// p returns the path of name under work, keeping a trailing slash.
func (e *env) p(name string) string {
	p := path.Join(work, name)
	if strings.HasSuffix(name, "/") {
		p += "/"
	}
	return p
}

func (e *env) ok(errno sys.Errno, msgAndArgs ...any) {
	e.t.Helper()
	require.Equal(e.t, sys.Errno(0), errno, msgAndArgs...)
}

func (e *env) fail(want, got sys.Errno, msgAndArgs ...any) {
	e.t.Helper()
	require.Equal(e.t, want, got, msgAndArgs...)
}

// open opens name and requires success.
func (e *env) open(name string, flag sys.Oflag) sys.File {
	e.t.Helper()
	f, errno := e.fs.OpenFile(name, flag, 0o644)
	e.ok(errno, "open %s", name)
	require.NotNil(e.t, f)
	return f
}

// writeFile creates or truncates name with content.
func (e *env) writeFile(name, content string) {
	e.t.Helper()
	f := e.open(name, sys.O_WRONLY|sys.O_CREAT|sys.O_TRUNC)
	defer f.Close()
	n, errno := f.Write([]byte(content))
	e.ok(errno)
	require.Equal(e.t, len(content), n)
	e.ok(f.Close())
}

// readFile returns the content of name.
func (e *env) readFile(name string) string {
	e.t.Helper()
	f := e.open(name, sys.O_RDONLY)
	defer f.Close()
	return e.readAll(f)
}

// readAll reads f from its offset to the end.
func (e *env) readAll(f sys.File) string {
	e.t.Helper()
	var out bytes.Buffer
	buf := make([]byte, 7) // small, to exercise partial reads
	for {
		n, errno := f.Read(buf)
		e.ok(errno)
		if n == 0 {
			return out.String()
		}
		out.Write(buf[:n])
	}
}

// exists reports whether name exists (Lstat).
func (e *env) exists(name string) bool {
	e.t.Helper()
	_, errno := e.fs.Lstat(name)
	if errno == sys.ENOENT {
		return false
	}
	e.ok(errno)
	return true
}

// names lists the directory name with Readdir(-1).
func (e *env) names(name string) []string {
	e.t.Helper()
	d := e.open(name, sys.O_RDONLY|sys.O_DIRECTORY)
	defer d.Close()
	ents, errno := d.Readdir(-1)
	e.ok(errno)
	var out []string
	for _, de := range ents {
		out = append(out, de.Name)
	}
	return out
}

// checkUsage compares the FS's usage with a recount of its backing fs.
func (e *env) checkUsage() {
	e.t.Helper()
	fresh, err := wasi.CountUsage(e.backing)
	require.NoError(e.t, err)
	require.Equal(e.t, fresh, e.fs.Usage(), "usage kept by the FS differs from a recount")
}

func testCreateWriteRead(e *env) {
	f := e.open(e.p("a.txt"), sys.O_RDWR|sys.O_CREAT)
	n, errno := f.Write([]byte("hello, "))
	e.ok(errno)
	require.Equal(e.t, 7, n)
	n, errno = f.Write([]byte("world"))
	e.ok(errno)
	require.Equal(e.t, 5, n)
	off, errno := f.Seek(0, io.SeekStart)
	e.ok(errno)
	require.Equal(e.t, int64(0), off)
	require.Equal(e.t, "hello, world", e.readAll(f))
	// At the end, reads return 0 bytes and no error.
	n, errno = f.Read(make([]byte, 4))
	e.ok(errno)
	require.Zero(e.t, n)
	// Zero-length reads and writes succeed.
	n, errno = f.Read(nil)
	e.ok(errno)
	require.Zero(e.t, n)
	n, errno = f.Write(nil)
	e.ok(errno)
	require.Zero(e.t, n)

	st, errno := f.Stat()
	e.ok(errno)
	require.Equal(e.t, int64(12), st.Size)
	require.True(e.t, st.Mode.IsRegular(), "mode %v", st.Mode)
	require.NotZero(e.t, st.Ino)
	require.NotZero(e.t, st.Dev)
	isDir, errno := f.IsDir()
	e.ok(errno)
	require.False(e.t, isDir)
	ino, errno := f.Ino()
	e.ok(errno)
	require.Equal(e.t, st.Ino, ino)
	dev, errno := f.Dev()
	e.ok(errno)
	require.Equal(e.t, st.Dev, dev)
	e.ok(f.Sync())
	e.ok(f.Datasync())
	if pf, ok := f.(sys.PollableFile); ok {
		ready, errno := pf.Poll(sys.POLLIN, 0)
		e.ok(errno)
		require.True(e.t, ready)
		require.False(e.t, pf.IsNonblock())
		e.ok(pf.SetNonblock(true))
		require.True(e.t, pf.IsNonblock())
	}

	e.ok(f.Close())
	e.ok(f.Close(), "a second Close is not an error")
	_, errno = f.Read(make([]byte, 1))
	e.fail(sys.EBADF, errno, "read after close")
	_, errno = f.Write([]byte("x"))
	e.fail(sys.EBADF, errno, "write after close")
	_, errno = f.Stat()
	e.fail(sys.EBADF, errno, "stat after close")
	_, errno = f.Seek(0, io.SeekStart)
	e.fail(sys.EBADF, errno, "seek after close")
	e.fail(sys.EBADF, f.Sync(), "sync after close")
	e.fail(sys.EBADF, f.Truncate(0), "truncate after close")

	require.Equal(e.t, "hello, world", e.readFile(e.p("a.txt")))
	// O_SYNC and O_DSYNC writes work (and are synced).
	for _, flag := range []sys.Oflag{sys.O_SYNC, sys.O_DSYNC} {
		f := e.open(e.p("sync"), sys.O_RDWR|sys.O_CREAT|flag)
		_, errno := f.Write([]byte("s"))
		e.ok(errno)
		_, errno = f.Pwrite([]byte("S"), 1)
		e.ok(errno)
		e.ok(f.Close())
	}
	require.Equal(e.t, "sS", e.readFile(e.p("sync")))
	// Paths may be given with or without a leading slash, with "." parts.
	require.Equal(e.t, "hello, world", e.readFile(strings.TrimPrefix(e.p("./a.txt"), "/")))
	require.Equal(e.t, "hello, world", e.readFile(work+"/./a.txt"))
}

func testOpenErrors(e *env) {
	e.writeFile(e.p("file"), "x")
	e.ok(e.fs.Mkdir(e.p("dir"), 0o755))

	_, errno := e.fs.OpenFile(e.p("missing"), sys.O_RDONLY, 0)
	e.fail(sys.ENOENT, errno, "missing file")
	_, errno = e.fs.OpenFile(e.p("file"), sys.O_RDWR|sys.O_CREAT|sys.O_EXCL, 0o644)
	e.fail(sys.EEXIST, errno, "O_EXCL on an existing file")
	_, errno = e.fs.OpenFile(e.p("dir"), sys.O_RDWR|sys.O_CREAT|sys.O_EXCL, 0o644)
	e.fail(sys.EEXIST, errno, "O_EXCL on an existing directory")
	_, errno = e.fs.OpenFile(e.p("file"), sys.O_RDONLY|sys.O_DIRECTORY, 0)
	e.fail(sys.ENOTDIR, errno, "O_DIRECTORY on a file")
	_, errno = e.fs.OpenFile(e.p("dir"), sys.O_RDWR, 0)
	e.fail(sys.EISDIR, errno, "a directory opened for writing")
	_, errno = e.fs.OpenFile(e.p("dir"), sys.O_WRONLY, 0)
	e.fail(sys.EISDIR, errno, "a directory opened write-only")
	_, errno = e.fs.OpenFile(e.p("file/x"), sys.O_RDONLY, 0)
	e.fail(sys.ENOTDIR, errno, "a file used as a directory")
	_, errno = e.fs.OpenFile(e.p("file/x"), sys.O_RDWR|sys.O_CREAT, 0o644)
	e.fail(sys.ENOTDIR, errno, "creating under a file")
	_, errno = e.fs.OpenFile(e.p("file/"), sys.O_RDONLY, 0)
	e.fail(sys.ENOTDIR, errno, "a file named with a trailing slash")
	_, errno = e.fs.OpenFile(e.p("missing/x"), sys.O_RDWR|sys.O_CREAT, 0o644)
	e.fail(sys.ENOENT, errno, "creating in a missing directory")
	require.False(e.t, e.exists(e.p("missing")), "no parent directory may be created")
	_, errno = e.fs.OpenFile(e.p("new/"), sys.O_RDWR|sys.O_CREAT, 0o644)
	e.fail(sys.EISDIR, errno, "creating a file named with a trailing slash")
	_, errno = e.fs.OpenFile(e.p("nul\x00byte"), sys.O_RDWR|sys.O_CREAT, 0o644)
	e.fail(sys.EINVAL, errno, "a NUL byte")
	_, errno = e.fs.OpenFile(e.p(strings.Repeat("n", 256)), sys.O_RDWR|sys.O_CREAT, 0o644)
	e.fail(sys.ENAMETOOLONG, errno, "a 256-byte name")
	_, errno = e.fs.OpenFile(strings.Repeat("d/", 2049), sys.O_RDONLY, 0)
	e.fail(sys.ENAMETOOLONG, errno, "a path over 4096 bytes")
	f := e.open(e.p(strings.Repeat("n", 255)), sys.O_RDWR|sys.O_CREAT)
	e.ok(f.Close())

	// A directory opens read-only, and "." and the root are directories.
	for _, name := range []string{e.p("dir"), e.p("dir/"), ".", "/", "", work + "/dir/.."} {
		d, errno := e.fs.OpenFile(name, sys.O_RDONLY, 0)
		e.ok(errno, "open %q", name)
		isDir, errno := d.IsDir()
		e.ok(errno)
		require.True(e.t, isDir, name)
		e.ok(d.Close())
	}
	d := e.open(e.p("dir"), sys.O_RDONLY|sys.O_DIRECTORY)
	e.ok(d.Close())
}

func testAccessModes(e *env) {
	e.writeFile(e.p("f"), "data")
	r := e.open(e.p("f"), sys.O_RDONLY)
	defer r.Close()
	_, errno := r.Write([]byte("x"))
	e.fail(sys.EBADF, errno, "write to a read-only handle")
	_, errno = r.Pwrite([]byte("x"), 0)
	e.fail(sys.EBADF, errno, "pwrite to a read-only handle")
	e.fail(sys.EBADF, r.Truncate(0), "truncate of a read-only handle")

	w := e.open(e.p("f"), sys.O_WRONLY)
	defer w.Close()
	_, errno = w.Read(make([]byte, 1))
	e.fail(sys.EBADF, errno, "read from a write-only handle")
	_, errno = w.Pread(make([]byte, 1), 0)
	e.fail(sys.EBADF, errno, "pread from a write-only handle")

	e.ok(e.fs.Mkdir(e.p("d"), 0o755))
	d := e.open(e.p("d"), sys.O_RDONLY)
	defer d.Close()
	_, errno = d.Read(make([]byte, 1))
	e.fail(sys.EISDIR, errno, "read from a directory")
	_, errno = d.Write([]byte("x"))
	e.fail(sys.EISDIR, errno, "write to a directory")
	_, errno = d.Pwrite([]byte("x"), 0)
	e.fail(sys.EISDIR, errno, "pwrite to a directory")
	e.fail(sys.EISDIR, d.Truncate(0), "truncate of a directory")
	e.fail(sys.EISDIR, d.SetAppend(true), "append mode on a directory")
	require.Equal(e.t, "data", e.readFile(e.p("f")))
}

func testAppend(e *env) {
	e.writeFile(e.p("log"), "one\n")
	f := e.open(e.p("log"), sys.O_RDWR|sys.O_APPEND)
	require.True(e.t, f.IsAppend())
	_, errno := f.Seek(0, io.SeekStart)
	e.ok(errno)
	_, errno = f.Write([]byte("two\n"))
	e.ok(errno)
	off, errno := f.Seek(0, io.SeekCurrent)
	e.ok(errno)
	require.Equal(e.t, int64(8), off, "the offset follows an appending write")
	// pwrite writes where it is told, even in append mode.
	_, errno = f.Pwrite([]byte("ONE"), 0)
	e.ok(errno)
	e.ok(f.SetAppend(false))
	require.False(e.t, f.IsAppend())
	_, errno = f.Seek(4, io.SeekStart)
	e.ok(errno)
	_, errno = f.Write([]byte("TWO"))
	e.ok(errno)
	e.ok(f.SetAppend(true))
	_, errno = f.Write([]byte("three\n"))
	e.ok(errno)
	e.ok(f.Close())
	require.Equal(e.t, "ONE\nTWO\nthree\n", e.readFile(e.p("log")))
}

func testPreadPwrite(e *env) {
	e.writeFile(e.p("f"), "0123456789")
	f := e.open(e.p("f"), sys.O_RDWR)
	defer f.Close()
	_, errno := f.Seek(3, io.SeekStart)
	e.ok(errno)
	buf := make([]byte, 4)
	n, errno := f.Pread(buf, 5)
	e.ok(errno)
	require.Equal(e.t, "5678", string(buf[:n]))
	n, errno = f.Pread(buf, 8)
	e.ok(errno)
	require.Equal(e.t, "89", string(buf[:n]), "a short pread at the end")
	n, errno = f.Pread(buf, 100)
	e.ok(errno)
	require.Zero(e.t, n, "a pread past the end")
	_, errno = f.Pread(buf, -1)
	e.fail(sys.EINVAL, errno)

	n, errno = f.Pwrite([]byte("ab"), 2)
	e.ok(errno)
	require.Equal(e.t, 2, n)
	_, errno = f.Pwrite([]byte("x"), -1)
	e.fail(sys.EINVAL, errno)
	_, errno = f.Pwrite([]byte("ab"), math.MaxInt64-1)
	e.fail(sys.EINVAL, errno, "a pwrite whose end overflows")
	// A pwrite past the end leaves a hole of zeros.
	_, errno = f.Pwrite([]byte("Z"), 12)
	e.ok(errno)
	off, errno := f.Seek(0, io.SeekCurrent)
	e.ok(errno)
	require.Equal(e.t, int64(3), off, "pread and pwrite do not move the offset")
	_, errno = f.Seek(0, io.SeekStart)
	e.ok(errno)
	require.Equal(e.t, "01ab456789\x00\x00Z", e.readAll(f))
}

func testSeek(e *env) {
	e.writeFile(e.p("f"), "abcdef")
	f := e.open(e.p("f"), sys.O_RDWR)
	defer f.Close()
	off, errno := f.Seek(-2, io.SeekEnd)
	e.ok(errno)
	require.Equal(e.t, int64(4), off)
	require.Equal(e.t, "ef", e.readAll(f))
	off, errno = f.Seek(-3, io.SeekCurrent)
	e.ok(errno)
	require.Equal(e.t, int64(3), off)
	_, errno = f.Seek(-4, io.SeekCurrent)
	e.fail(sys.EINVAL, errno, "a negative offset")
	_, errno = f.Seek(0, 3)
	e.fail(sys.EINVAL, errno, "a bad whence")
	off, errno = f.Seek(0, io.SeekCurrent)
	e.ok(errno)
	require.Equal(e.t, int64(3), off, "a failed seek does not move the offset")
	off, errno = f.Seek(100, io.SeekStart)
	e.ok(errno)
	require.Equal(e.t, int64(100), off)
	n, errno := f.Read(make([]byte, 4))
	e.ok(errno)
	require.Zero(e.t, n, "a read past the end")
	off, errno = f.Seek(math.MaxInt64, io.SeekStart)
	e.ok(errno)
	require.Equal(e.t, int64(math.MaxInt64), off)
	_, errno = f.Seek(1, io.SeekCurrent)
	e.fail(sys.EINVAL, errno, "an offset past MaxInt64")
	_, errno = f.Write([]byte("ab"))
	e.fail(sys.EINVAL, errno, "a write whose end overflows")
	// A write past the end extends the file with zeros.
	_, errno = f.Seek(8, io.SeekStart)
	e.ok(errno)
	_, errno = f.Write([]byte("!"))
	e.ok(errno)
	require.Equal(e.t, "abcdef\x00\x00!", e.readFile(e.p("f")))
}

func testTruncate(e *env) {
	e.writeFile(e.p("f"), "abcdef")
	f := e.open(e.p("f"), sys.O_RDWR)
	e.ok(f.Truncate(3))
	require.Equal(e.t, "abc", e.readFile(e.p("f")))
	e.ok(f.Truncate(5))
	require.Equal(e.t, "abc\x00\x00", e.readFile(e.p("f")))
	e.fail(sys.EINVAL, f.Truncate(-1))
	st, errno := f.Stat()
	e.ok(errno)
	require.Equal(e.t, int64(5), st.Size)
	e.ok(f.Close())
	// O_TRUNC empties the file.
	f = e.open(e.p("f"), sys.O_RDWR|sys.O_TRUNC)
	st, errno = f.Stat()
	e.ok(errno)
	require.Zero(e.t, st.Size)
	e.ok(f.Close())
	require.Equal(e.t, "", e.readFile(e.p("f")))
}

func testStat(e *env) {
	e.writeFile(e.p("f"), "12345")
	e.writeFile(e.p("g"), "1")
	e.ok(e.fs.Mkdir(e.p("d"), 0o755))

	st, errno := e.fs.Stat(e.p("f"))
	e.ok(errno)
	require.True(e.t, st.Mode.IsRegular())
	require.Equal(e.t, int64(5), st.Size)
	require.NotZero(e.t, st.Ino)
	require.NotZero(e.t, st.Mtim)
	lst, errno := e.fs.Lstat(e.p("f"))
	e.ok(errno)
	require.Equal(e.t, st.Ino, lst.Ino)
	again, errno := e.fs.Stat(e.p("./f"))
	e.ok(errno)
	require.Equal(e.t, st.Ino, again.Ino, "inode numbers are stable per path")
	stg, errno := e.fs.Stat(e.p("g"))
	e.ok(errno)
	require.NotEqual(e.t, st.Ino, stg.Ino, "distinct files have distinct inodes")
	require.Equal(e.t, st.Dev, stg.Dev)

	std, errno := e.fs.Stat(e.p("d"))
	e.ok(errno)
	require.True(e.t, std.Mode.IsDir())
	require.Equal(e.t, uint64(1), std.Nlink)
	root, errno := e.fs.Stat("/")
	e.ok(errno)
	require.True(e.t, root.Mode.IsDir())
	dot, errno := e.fs.Stat(".")
	e.ok(errno)
	require.Equal(e.t, root.Ino, dot.Ino)

	_, errno = e.fs.Stat(e.p("missing"))
	e.fail(sys.ENOENT, errno)
	_, errno = e.fs.Lstat(e.p("f/x"))
	e.fail(sys.ENOTDIR, errno)
	_, errno = e.fs.Stat(e.p("f/"))
	e.fail(sys.ENOTDIR, errno)

	// The inode survives a rename, and a dirent carries the same number.
	e.ok(e.fs.Rename(e.p("f"), e.p("d/moved")))
	moved, errno := e.fs.Stat(e.p("d/moved"))
	e.ok(errno)
	require.Equal(e.t, st.Ino, moved.Ino)
	d := e.open(e.p("d"), sys.O_RDONLY)
	defer d.Close()
	ents, errno := d.Readdir(-1)
	e.ok(errno)
	require.Len(e.t, ents, 1)
	require.Equal(e.t, st.Ino, ents[0].Ino)
	dino, errno := d.Ino()
	e.ok(errno)
	require.Equal(e.t, std.Ino, dino)
	dst, errno := d.Stat()
	e.ok(errno)
	require.True(e.t, dst.Mode.IsDir())
	require.Equal(e.t, std.Ino, dst.Ino)
}

func testReaddir(e *env) {
	e.ok(e.fs.Mkdir(e.p("dir"), 0o755))
	want := []string{"a", "b", "c", "d", "e", "sub"}
	for _, n := range []string{"c", "a", "e", "b", "d"} {
		e.writeFile(e.p("dir/"+n), n)
	}
	e.ok(e.fs.Mkdir(e.p("dir/sub"), 0o755))

	d := e.open(e.p("dir"), sys.O_RDONLY|sys.O_DIRECTORY)
	defer d.Close()
	var got []string
	for {
		ents, errno := d.Readdir(2)
		e.ok(errno)
		require.LessOrEqual(e.t, len(ents), 2)
		for _, de := range ents {
			got = append(got, de.Name)
			require.NotZero(e.t, de.Ino, de.Name)
			if de.Name == "sub" {
				require.True(e.t, de.IsDir())
			} else {
				require.Equal(e.t, fs.FileMode(0), de.Type, de.Name)
			}
		}
		if len(ents) < 2 {
			break
		}
	}
	require.Equal(e.t, want, got, "every entry once, in a stable order")
	ents, errno := d.Readdir(10)
	e.ok(errno)
	require.Empty(e.t, ents, "the end of the directory")

	// Rewinding lists again, including entries added since.
	e.writeFile(e.p("dir/f"), "f")
	off, errno := d.Seek(0, io.SeekStart)
	e.ok(errno)
	require.Zero(e.t, off)
	ents, errno = d.Readdir(-1)
	e.ok(errno)
	got = got[:0]
	for _, de := range ents {
		got = append(got, de.Name)
	}
	require.Equal(e.t, []string{"a", "b", "c", "d", "e", "f", "sub"}, got)
	_, errno = d.Seek(1, io.SeekStart)
	e.fail(sys.EISDIR, errno, "only rewinding seeks a directory")

	f := e.open(e.p("dir/a"), sys.O_RDONLY)
	defer f.Close()
	_, errno = f.Readdir(-1)
	e.fail(sys.EBADF, errno, "readdir of a file")
	e.ok(d.Close())
	_, errno = d.Readdir(-1)
	e.fail(sys.EBADF, errno, "readdir after close")
	require.Equal(e.t, []string(nil), e.names(e.p("dir/sub")))
}

func testMkdir(e *env) {
	e.ok(e.fs.Mkdir(e.p("d"), 0o755))
	st, errno := e.fs.Stat(e.p("d"))
	e.ok(errno)
	require.True(e.t, st.Mode.IsDir())
	e.fail(sys.EEXIST, e.fs.Mkdir(e.p("d"), 0o755), "an existing directory")
	e.writeFile(e.p("f"), "")
	e.fail(sys.EEXIST, e.fs.Mkdir(e.p("f"), 0o755), "an existing file")
	e.fail(sys.ENOENT, e.fs.Mkdir(e.p("missing/d"), 0o755), "a missing parent")
	require.False(e.t, e.exists(e.p("missing")))
	e.fail(sys.ENOTDIR, e.fs.Mkdir(e.p("f/d"), 0o755), "a file as parent")
	e.ok(e.fs.Mkdir(e.p("slash/"), 0o755), "a trailing slash")
	e.ok(e.fs.Mkdir(e.p("d/nested"), 0o755))
	e.fail(sys.EEXIST, e.fs.Mkdir("/", 0o755), "the root")
	require.Equal(e.t, []string{"d", "f", "slash"}, e.names(work))
}

func testRmdir(e *env) {
	e.ok(e.fs.Mkdir(e.p("d"), 0o755))
	e.writeFile(e.p("d/f"), "x")
	e.fail(sys.ENOTEMPTY, e.fs.Rmdir(e.p("d")))
	e.fail(sys.ENOTDIR, e.fs.Rmdir(e.p("d/f")))
	e.fail(sys.ENOENT, e.fs.Rmdir(e.p("missing")))
	e.fail(sys.EINVAL, e.fs.Rmdir("/"), "the root")
	e.ok(e.fs.Unlink(e.p("d/f")))
	e.ok(e.fs.Rmdir(e.p("d")))
	require.False(e.t, e.exists(e.p("d")))
	e.fail(sys.ENOENT, e.fs.Rmdir(e.p("d")))
}

func testUnlink(e *env) {
	e.writeFile(e.p("f"), "content")
	e.ok(e.fs.Mkdir(e.p("d"), 0o755))
	e.fail(sys.EISDIR, e.fs.Unlink(e.p("d")))
	e.fail(sys.ENOENT, e.fs.Unlink(e.p("missing")))
	e.fail(sys.ENOTDIR, e.fs.Unlink(e.p("f/x")))
	// An open file stays usable after unlink.
	f := e.open(e.p("f"), sys.O_RDWR)
	e.ok(e.fs.Unlink(e.p("f")))
	require.False(e.t, e.exists(e.p("f")))
	require.Equal(e.t, "content", e.readAll(f))
	_, errno := f.Write([]byte("!"))
	e.ok(errno)
	e.ok(f.Close())
	// A new file of the same name is a new file.
	e.writeFile(e.p("f"), "new")
	require.Equal(e.t, "new", e.readFile(e.p("f")))
	require.Equal(e.t, []string{"d", "f"}, e.names(work))
}

func testRename(e *env) {
	e.writeFile(e.p("a"), "A")
	e.writeFile(e.p("b"), "B")
	// A file over a file replaces it.
	e.ok(e.fs.Rename(e.p("a"), e.p("b")))
	require.False(e.t, e.exists(e.p("a")))
	require.Equal(e.t, "A", e.readFile(e.p("b")))
	// To a new name.
	e.ok(e.fs.Rename(e.p("b"), e.p("c")))
	require.Equal(e.t, "A", e.readFile(e.p("c")))
	// To itself: nothing happens.
	e.ok(e.fs.Rename(e.p("c"), e.p("./c")))
	require.Equal(e.t, "A", e.readFile(e.p("c")))
	e.fail(sys.ENOENT, e.fs.Rename(e.p("missing"), e.p("x")))
	e.fail(sys.ENOENT, e.fs.Rename(e.p("c"), e.p("missing/x")))
	require.True(e.t, e.exists(e.p("c")))

	e.ok(e.fs.Mkdir(e.p("d1"), 0o755))
	e.writeFile(e.p("d1/inner"), "I")
	e.ok(e.fs.Mkdir(e.p("d1/s"), 0o755))
	e.ok(e.fs.Mkdir(e.p("d2"), 0o755))
	e.ok(e.fs.Mkdir(e.p("full"), 0o755))
	e.writeFile(e.p("full/x"), "X")

	e.fail(sys.EISDIR, e.fs.Rename(e.p("c"), e.p("d2")), "a file over a directory")
	e.fail(sys.ENOTDIR, e.fs.Rename(e.p("d1"), e.p("c")), "a directory over a file")
	e.fail(sys.ENOTEMPTY, e.fs.Rename(e.p("d1"), e.p("full")), "over a non-empty directory")
	e.fail(sys.ENOTEMPTY, e.fs.Rename(e.p("d1/s"), e.p("d1")), "over its own parent")
	e.fail(sys.EINVAL, e.fs.Rename(e.p("d1"), e.p("d1/sub")), "a directory into itself")
	e.fail(sys.EINVAL, e.fs.Rename(e.p("d1"), e.p("d1/s/deeper")), "a directory into its subtree")
	e.fail(sys.ENOTDIR, e.fs.Rename(e.p("d1"), e.p("d1/inner/deeper")), "through a file")
	e.fail(sys.ENOTDIR, e.fs.Rename(e.p("c"), e.p("c2/")), "a file to a name with a trailing slash")
	require.Equal(e.t, "I", e.readFile(e.p("d1/inner")))
	require.Equal(e.t, "X", e.readFile(e.p("full/x")))

	// A directory over an empty directory replaces it, children and all.
	e.ok(e.fs.Rename(e.p("d1"), e.p("d2")))
	require.False(e.t, e.exists(e.p("d1")))
	require.Equal(e.t, "I", e.readFile(e.p("d2/inner")))
	require.Equal(e.t, []string{"inner", "s"}, e.names(e.p("d2")))
	// A directory to a new name, with a trailing slash.
	e.ok(e.fs.Rename(e.p("d2/"), e.p("d3/")))
	require.Equal(e.t, "I", e.readFile(e.p("d3/inner")))
	// Into another directory.
	e.ok(e.fs.Rename(e.p("d3"), e.p("full/d3")))
	require.Equal(e.t, "I", e.readFile(e.p("full/d3/inner")))
	require.Equal(e.t, []string{"c", "full"}, e.names(work))
	require.Equal(e.t, []string{"d3", "x"}, e.names(e.p("full")))

	// A directory renamed to itself stays as it is.
	e.ok(e.fs.Rename(e.p("full"), e.p("./full/")))
	require.Equal(e.t, []string{"d3", "x"}, e.names(e.p("full")))

	// An open file follows its renames.
	f := e.open(e.p("c"), sys.O_RDWR)
	e.ok(e.fs.Rename(e.p("c"), e.p("full/c")))
	_, errno := f.Pwrite([]byte("Z"), 1)
	e.ok(errno)
	e.ok(f.Close())
	require.Equal(e.t, "AZ", e.readFile(e.p("full/c")))
}

func testUtimens(e *env) {
	e.writeFile(e.p("f"), "x")
	const sec = int64(1_000_000_000)
	mtim := 1_600_000_000*sec + 123_456_789
	e.ok(e.fs.Utimens(e.p("f"), sys.UTIME_OMIT, mtim))
	st, errno := e.fs.Stat(e.p("f"))
	e.ok(errno)
	require.Equal(e.t, mtim, st.Mtim)
	e.ok(e.fs.Utimens(e.p("f"), sys.UTIME_OMIT, sys.UTIME_OMIT), "both omitted: nothing to do")
	st, errno = e.fs.Stat(e.p("f"))
	e.ok(errno)
	require.Equal(e.t, mtim, st.Mtim)
	e.ok(e.fs.Utimens(e.p("f"), mtim-sec, sys.UTIME_OMIT), "mtim omitted is kept")
	st, errno = e.fs.Stat(e.p("f"))
	e.ok(errno)
	require.Equal(e.t, mtim, st.Mtim)
	e.fail(sys.ENOENT, e.fs.Utimens(e.p("missing"), 0, 0))

	f := e.open(e.p("f"), sys.O_RDONLY)
	e.ok(f.Utimens(sys.UTIME_OMIT, mtim+sec))
	st, errno = f.Stat()
	e.ok(errno)
	require.Equal(e.t, mtim+sec, st.Mtim)
	e.ok(f.Close())
	e.fail(sys.EBADF, f.Utimens(0, 0))

	e.ok(e.fs.Mkdir(e.p("d"), 0o755))
	e.ok(e.fs.Utimens(e.p("d"), sys.UTIME_OMIT, mtim))
	st, errno = e.fs.Stat(e.p("d"))
	e.ok(errno)
	require.Equal(e.t, mtim, st.Mtim)

	// atim and mtim are kept apart, even where the backing fs stores one
	// time: setting one leaves the other as it was.
	e.ok(e.fs.Utimens(e.p("f"), mtim-2*sec, mtim))
	f = e.open(e.p("f"), sys.O_RDONLY) // MemMapFs sets mtim when a writer closes
	e.ok(f.Utimens(sys.UTIME_OMIT, mtim+2*sec))
	for _, stat := range []func() (sysapi.Stat_t, sys.Errno){f.Stat, func() (sysapi.Stat_t, sys.Errno) { return e.fs.Stat(e.p("f")) }} {
		st, errno = stat()
		e.ok(errno)
		require.Equal(e.t, mtim-2*sec, st.Atim, "atim unchanged by setting mtim")
		require.Equal(e.t, mtim+2*sec, st.Mtim)
	}
	e.ok(e.fs.Utimens(e.p("f"), mtim-3*sec, sys.UTIME_OMIT))
	st, errno = f.Stat()
	e.ok(errno)
	require.Equal(e.t, mtim-3*sec, st.Atim)
	require.Equal(e.t, mtim+2*sec, st.Mtim, "mtim unchanged by setting atim")
	e.ok(f.Close())
	// A rename keeps them.
	e.ok(e.fs.Rename(e.p("f"), e.p("g")))
	st, errno = e.fs.Stat(e.p("g"))
	e.ok(errno)
	require.Equal(e.t, mtim-3*sec, st.Atim)
	require.Equal(e.t, mtim+2*sec, st.Mtim)
}

func testChmod(e *env) {
	e.writeFile(e.p("f"), "x")
	e.ok(e.fs.Chmod(e.p("f"), 0o640))
	st, errno := e.fs.Stat(e.p("f"))
	e.ok(errno)
	require.Equal(e.t, fs.FileMode(0o640), st.Mode.Perm())
	require.True(e.t, st.Mode.IsRegular())
	// setuid, setgid and sticky bits are never set, in the backing fs either.
	e.ok(e.fs.Chmod(e.p("f"), fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky|0o755))
	st, errno = e.fs.Stat(e.p("f"))
	e.ok(errno)
	require.Equal(e.t, fs.FileMode(0o755), st.Mode&^fs.ModeType)
	fi, err := e.backing.Stat(e.p("f"))
	require.NoError(e.t, err)
	require.Zero(e.t, fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky), "backing mode %v", fi.Mode())
	e.fail(sys.ENOENT, e.fs.Chmod(e.p("missing"), 0o644))
	e.ok(e.fs.Chmod(e.p("f"), 0o644))
}

func testLink(e *env) {
	e.writeFile(e.p("f"), "x")
	e.fail(sys.ENOENT, e.fs.Link(e.p("missing"), e.p("l")))
	e.fail(sys.EEXIST, e.fs.Link(e.p("f"), e.p("f")))
	e.fail(sys.ENOSYS, e.fs.Link(e.p("f"), e.p("l")), "afero has no hard links")
	require.False(e.t, e.exists(e.p("l")))
}

func testSharedHandles(e *env) {
	e.writeFile(e.p("f"), "")
	w := e.open(e.p("f"), sys.O_WRONLY)
	defer w.Close()
	r := e.open(e.p("f"), sys.O_RDONLY)
	defer r.Close()
	_, errno := w.Write([]byte("seen"))
	e.ok(errno)
	require.Equal(e.t, "seen", e.readAll(r))
	ino1, _ := w.Ino()
	ino2, _ := r.Ino()
	require.Equal(e.t, ino1, ino2)
}

func testDotDotEscape(e *env) {
	// ".." never leaves the root: these all name files in the root.
	e.writeFile("../../top.txt", "top")
	require.Equal(e.t, "top", e.readFile("/top.txt"))
	require.Equal(e.t, "top", e.readFile(work+"/../../../../top.txt"))
	_, err := e.backing.Stat("/top.txt")
	require.NoError(e.t, err, "the file is at the root of the backing fs")
	root, errno := e.fs.Stat("/")
	e.ok(errno)
	for _, name := range []string{"..", "../..", "/..", work + "/../..", work + "/../../../.."} {
		st, errno := e.fs.Stat(name)
		e.ok(errno, name)
		require.Equal(e.t, root.Ino, st.Ino, name)
		p, err := wasi.Resolve(e.backing, name)
		require.NoError(e.t, err)
		require.Equal(e.t, "/", p, name)
	}
	// ".." needs the directory before it to exist, as in POSIX.
	_, errno = e.fs.Stat("missing/../..")
	e.fail(sys.ENOENT, errno)
	_, errno = e.fs.OpenFile("../../../../etc/passwd", sys.O_RDONLY, 0)
	e.fail(sys.ENOENT, errno, "no /etc in a fresh backing fs")
	e.ok(e.fs.Unlink("/top.txt"))
}

// symlinksSupported creates a probe link, skipping the check when links
// cannot be created.
func (e *env) symlinksSupported() bool {
	e.t.Helper()
	errno := e.fs.Symlink("target", e.p("probe"))
	if errno == sys.ENOSYS {
		e.t.Skip("the backing fs cannot create symbolic links")
		return false
	}
	e.ok(errno)
	e.ok(e.fs.Unlink(e.p("probe")))
	return true
}

// hostSymlink creates the link name pointing at target, an absolute path,
// directly in the backing fs, as the host may (FS.Symlink refuses absolute
// targets), after checking that FS.Symlink refuses it with EPERM. The FS is
// then made afresh over the backing fs, as a host would mount it again, so
// that its usage counts the link.
func (e *env) hostSymlink(target, name string) {
	e.t.Helper()
	require.True(e.t, strings.HasPrefix(target, "/"), target)
	e.fail(sys.EPERM, e.fs.Symlink(target, name), "symlink to the absolute %s", target)
	linker, ok := e.backing.(afero.Linker)
	require.True(e.t, ok, "a backing fs that can create links is an afero.Linker")
	if _, ok := e.backing.(*afero.BasePathFs); ok {
		// It refuses a target that climbs above its base.
		target = path.Clean(target)
	}
	require.NoError(e.t, linker.SymlinkIfPossible(target, name))
	fsys, err := wasi.NewFS(e.backing, e.opts)
	require.NoError(e.t, err)
	require.NoError(e.t, fsys.Recount(), "FSes over a host directory share a count")
	e.fs = fsys
}

// requireLinkTarget checks what readlink returns for a link in dir created
// with target: the target itself, or the same place as an absolute path in
// the mount (afero.BasePathFs) or as a path relative to dir (wasi.RootFs,
// for an absolute target).
func (e *env) requireLinkTarget(link, dir, target string) {
	e.t.Helper()
	got, errno := e.fs.Readlink(link)
	e.ok(errno)
	abs := target
	if !strings.HasPrefix(target, "/") {
		abs = path.Join(dir, target)
	}
	want := []string{target, path.Clean(abs), relPath(dir, path.Clean(abs))}
	require.Contains(e.t, want, got, "readlink %s", link)
}

// relPath returns the path of target relative to dir, both clean absolute
// paths.
func relPath(dir, target string) string {
	d, t := strings.Split(strings.Trim(dir, "/"), "/"), strings.Split(strings.Trim(target, "/"), "/")
	if d[0] == "" {
		d = nil
	}
	if t[0] == "" {
		t = nil
	}
	i := 0
	for i < len(d) && i < len(t) && d[i] == t[i] {
		i++
	}
	parts := make([]string, 0, len(d)-i+len(t)-i)
	for range d[i:] {
		parts = append(parts, "..")
	}
	parts = append(parts, t[i:]...)
	if len(parts) == 0 {
		return "."
	}
	return strings.Join(parts, "/")
}

func testSymlinks(e *env) {
	if !e.symlinksSupported() {
		return
	}
	e.ok(e.fs.Mkdir(e.p("dir"), 0o755))
	e.writeFile(e.p("dir/file"), "content")

	e.hostSymlink(work+"/dir", e.p("abs"))
	e.ok(e.fs.Symlink("dir/file", e.p("rel")))
	e.ok(e.fs.Symlink("../dir/file", e.p("dir/up")))
	e.ok(e.fs.Symlink("missing", e.p("dangling")))
	e.ok(e.fs.Symlink("loop2", e.p("loop1")))
	e.ok(e.fs.Symlink("loop1", e.p("loop2")))
	e.fail(sys.EEXIST, e.fs.Symlink("x", e.p("rel")))
	e.fail(sys.ENOENT, e.fs.Symlink("", e.p("empty")))

	require.Equal(e.t, "content", e.readFile(e.p("rel")))
	require.Equal(e.t, "content", e.readFile(e.p("abs/file")))
	require.Equal(e.t, "content", e.readFile(e.p("dir/up")))
	e.requireLinkTarget(e.p("rel"), work, "dir/file")
	e.requireLinkTarget(e.p("abs"), work, work+"/dir")
	_, errno := e.fs.Readlink(e.p("dir/file"))
	e.fail(sys.EINVAL, errno, "readlink of a file")
	_, errno = e.fs.Readlink(e.p("missing"))
	e.fail(sys.ENOENT, errno)

	lst, errno := e.fs.Lstat(e.p("rel"))
	e.ok(errno)
	require.NotZero(e.t, lst.Mode&fs.ModeSymlink, "lstat shows the link")
	st, errno := e.fs.Stat(e.p("rel"))
	e.ok(errno)
	require.True(e.t, st.Mode.IsRegular(), "stat follows the link")
	fst, errno := e.fs.Stat(e.p("dir/file"))
	e.ok(errno)
	require.Equal(e.t, fst.Ino, st.Ino)
	st, errno = e.fs.Stat(e.p("abs/"))
	e.ok(errno)
	require.True(e.t, st.Mode.IsDir(), "a trailing slash follows the link")

	_, errno = e.fs.Stat(e.p("loop1"))
	e.fail(sys.ELOOP, errno)
	_, errno = e.fs.OpenFile(e.p("loop1"), sys.O_RDONLY, 0)
	e.fail(sys.ELOOP, errno)
	_, errno = e.fs.OpenFile(e.p("rel"), sys.O_RDONLY|sys.O_NOFOLLOW, 0)
	e.fail(sys.ELOOP, errno, "O_NOFOLLOW on a link")
	_, errno = e.fs.OpenFile(e.p("dangling"), sys.O_RDWR|sys.O_CREAT|sys.O_EXCL, 0o644)
	e.fail(sys.EEXIST, errno, "O_EXCL on a dangling link")
	_, errno = e.fs.Stat(e.p("dangling"))
	e.fail(sys.ENOENT, errno)
	// O_CREAT through a dangling link creates its target.
	f := e.open(e.p("dangling"), sys.O_RDWR|sys.O_CREAT)
	e.ok(f.Close())
	require.True(e.t, e.exists(e.p("missing")))

	// Readdir shows links as links.
	d := e.open(work, sys.O_RDONLY)
	ents, errno := d.Readdir(-1)
	e.ok(errno)
	e.ok(d.Close())
	types := map[string]fs.FileMode{}
	for _, de := range ents {
		types[de.Name] = de.Type
	}
	require.Equal(e.t, fs.ModeSymlink, types["rel"])
	require.Equal(e.t, fs.ModeDir, types["dir"])

	// Unlink and rename act on the link, not its target.
	e.ok(e.fs.Rename(e.p("rel"), e.p("rel2")))
	require.Equal(e.t, "content", e.readFile(e.p("rel2")))
	e.ok(e.fs.Unlink(e.p("rel2")))
	require.Equal(e.t, "content", e.readFile(e.p("dir/file")))
	e.fail(sys.ENOTDIR, e.fs.Rmdir(e.p("abs")), "rmdir of a link to a directory")
	e.ok(e.fs.Unlink(e.p("abs")))
	require.True(e.t, e.exists(e.p("dir")))
	// Too many links in a chain: ELOOP.
	prev := "dir/file"
	for i := 0; i <= wasi.MaxSymlinks; i++ {
		name := "chain" + strings.Repeat("x", i)
		e.ok(e.fs.Symlink(prev, e.p(name)))
		prev = name
	}
	_, errno = e.fs.Stat(e.p(prev))
	e.fail(sys.ELOOP, errno, "a chain of %d links", wasi.MaxSymlinks+1)
	_, errno = e.fs.Stat(e.p("chain" + strings.Repeat("x", wasi.MaxSymlinks-1)))
	e.ok(errno, "a chain of %d links", wasi.MaxSymlinks)
}

func testSymlinkEscape(e *env) {
	if !e.symlinksSupported() {
		return
	}
	e.writeFile("/secret-in-root", "in root")
	// Links that point above the root, or to absolute paths, stay inside.
	// Only the host can create the latter.
	e.hostSymlink("/", e.p("root"))
	e.hostSymlink("/../../..", e.p("rootup"))
	e.hostSymlink("/etc/passwd", e.p("passwd"))
	e.ok(e.fs.Symlink("../../../../../../..", e.p("up")))
	e.ok(e.fs.Symlink("up/etc", e.p("etc")))
	for _, name := range []string{"up", "root", "rootup"} {
		require.Equal(e.t, "in root", e.readFile(e.p(name+"/secret-in-root")), name)
		p, err := wasi.Resolve(e.backing, e.p(name))
		require.NoError(e.t, err)
		require.Equal(e.t, "/", p, name)
	}
	_, errno := e.fs.OpenFile(e.p("passwd"), sys.O_RDONLY, 0)
	e.fail(sys.ENOENT, errno)
	_, errno = e.fs.OpenFile(e.p("etc/passwd"), sys.O_RDONLY, 0)
	e.fail(sys.ENOENT, errno)
	// Writing through an escaping link writes inside the root.
	e.writeFile(e.p("up/written"), "w")
	_, err := e.backing.Stat("/written")
	require.NoError(e.t, err)
	e.ok(e.fs.Unlink("/written"))
	e.ok(e.fs.Unlink("/secret-in-root"))
}

func testReadOnly(t *testing.T, backing afero.Fs) {
	rw, err := wasi.NewFS(backing, wasi.Options{})
	require.NoError(t, err)
	e := &env{t: t, fs: rw, backing: backing}
	e.ok(rw.Mkdir(work, 0o755))
	e.writeFile(e.p("f"), "data")
	e.ok(rw.Mkdir(e.p("d"), 0o755))

	ro, err := wasi.NewFS(backing, wasi.Options{ReadOnly: true})
	require.NoError(t, err)
	require.True(t, ro.ReadOnly())
	e.fs = ro
	require.Equal(t, "data", e.readFile(e.p("f")))
	require.Equal(t, []string{"d", "f"}, e.names(work))
	for _, flag := range []sys.Oflag{sys.O_WRONLY, sys.O_RDWR, sys.O_RDONLY | sys.O_TRUNC, sys.O_RDWR | sys.O_APPEND} {
		_, errno := ro.OpenFile(e.p("f"), flag, 0)
		e.fail(sys.EROFS, errno, "open flag %v", flag)
	}
	_, errno := ro.OpenFile(e.p("new"), sys.O_RDWR|sys.O_CREAT, 0o644)
	e.fail(sys.EROFS, errno)
	_, errno = ro.OpenFile(e.p("new"), sys.O_RDONLY|sys.O_CREAT, 0o644)
	e.fail(sys.EROFS, errno)
	e.fail(sys.EROFS, ro.Mkdir(e.p("new"), 0o755))
	e.fail(sys.EROFS, ro.Rmdir(e.p("d")))
	e.fail(sys.EROFS, ro.Unlink(e.p("f")))
	e.fail(sys.EROFS, ro.Rename(e.p("f"), e.p("g")))
	e.fail(sys.EROFS, ro.Link(e.p("f"), e.p("g")))
	e.fail(sys.EROFS, ro.Symlink("f", e.p("g")))
	e.fail(sys.EROFS, ro.Chmod(e.p("f"), 0o777))
	e.fail(sys.EROFS, ro.Utimens(e.p("f"), 0, 0))
	f := e.open(e.p("f"), sys.O_RDONLY)
	defer f.Close()
	_, errno = f.Write([]byte("x"))
	e.fail(sys.EBADF, errno)
	e.fail(sys.EBADF, f.Truncate(0))
	e.fail(sys.EROFS, f.Utimens(0, 0))
	require.Equal(t, "data", e.readAll(f))
	// Nothing changed underneath.
	e.fs = rw
	require.Equal(t, "data", e.readFile(e.p("f")))
	require.Equal(t, []string{"d", "f"}, e.names(work))
}

// newQuotaEnv makes an FS over backing whose limits are what backing
// already uses plus extraBytes and extraFiles (zero: no limit).
func newQuotaEnv(t *testing.T, backing afero.Fs, extraBytes, extraFiles int64) *env {
	counted, err := wasi.NewFS(backing, wasi.Options{Quota: hugeQuota})
	require.NoError(t, err)
	base := counted.Usage()
	q := wasi.Quota{}
	if extraBytes > 0 {
		q.MaxBytes = base.Bytes + extraBytes
	}
	if extraFiles > 0 {
		q.MaxFiles = base.Files + 1 + extraFiles // +1: work itself
	}
	fsys, err := wasi.NewFS(backing, wasi.Options{Quota: q})
	require.NoError(t, err)
	require.Equal(t, q, fsys.Quota())
	e := &env{t: t, fs: fsys, backing: backing}
	e.ok(fsys.Mkdir(work, 0o755))
	return e
}

func testQuotaBytes(t *testing.T, backing afero.Fs) {
	e := newQuotaEnv(t, backing, 10, 0)
	base := e.fs.Usage().Bytes
	f := e.open(e.p("f"), sys.O_RDWR|sys.O_CREAT)
	n, errno := f.Write([]byte("12345678"))
	e.ok(errno)
	require.Equal(t, 8, n)
	// A write past the quota writes nothing.
	n, errno = f.Write([]byte("abcde"))
	e.fail(wasi.ENOSPC, errno)
	require.Zero(t, n)
	require.Equal(t, "12345678", e.readFile(e.p("f")))
	// So does a pwrite whose end is past it, and a truncate that grows past it.
	n, errno = f.Pwrite([]byte("xyz"), 8)
	e.fail(wasi.ENOSPC, errno)
	require.Zero(t, n)
	e.fail(wasi.ENOSPC, f.Truncate(11))
	st, errno := f.Stat()
	e.ok(errno)
	require.Equal(t, int64(8), st.Size)
	// Overwriting inside the file costs nothing.
	_, errno = f.Pwrite([]byte("ABCDEFGH"), 0)
	e.ok(errno)
	n, errno = f.Write([]byte("ij"))
	e.ok(errno, "exactly at the limit")
	require.Equal(t, 2, n)
	require.Equal(t, base+10, e.fs.Usage().Bytes)
	// Truncate, unlink, rename over and O_TRUNC give bytes back.
	e.ok(f.Truncate(4))
	require.Equal(t, base+4, e.fs.Usage().Bytes)
	e.ok(f.Close())
	e.writeFile(e.p("g"), "123456")
	h := e.open(e.p("h"), sys.O_RDWR|sys.O_CREAT)
	e.ok(h.Close()) // an empty file costs no byte
	require.Equal(t, base+10, e.fs.Usage().Bytes)
	e.ok(e.fs.Rename(e.p("g"), e.p("f")))
	require.Equal(t, base+6, e.fs.Usage().Bytes)
	g := e.open(e.p("f"), sys.O_WRONLY|sys.O_TRUNC)
	e.ok(g.Close())
	require.Equal(t, base, e.fs.Usage().Bytes)
	e.writeFile(e.p("big"), "0123456789")
	e.ok(e.fs.Unlink(e.p("big")))
	require.Equal(t, base, e.fs.Usage().Bytes)
	// A directory full of files is counted through rename and rmdir.
	e.ok(e.fs.Mkdir(e.p("d"), 0o755))
	e.writeFile(e.p("d/x"), "xxxx")
	e.ok(e.fs.Rename(e.p("d"), e.p("d2")))
	require.Equal(t, base+4, e.fs.Usage().Bytes)
	e.ok(e.fs.Unlink(e.p("d2/x")))
	e.ok(e.fs.Rmdir(e.p("d2")))
	require.Equal(t, base, e.fs.Usage().Bytes)
	e.checkUsage()
}

func testQuotaFiles(t *testing.T, backing afero.Fs) {
	e := newQuotaEnv(t, backing, 0, 3)
	base := e.fs.Usage().Files
	e.writeFile(e.p("a"), "")
	e.ok(e.fs.Mkdir(e.p("d"), 0o755))
	e.writeFile(e.p("d/b"), "")
	require.Equal(t, base+3, e.fs.Usage().Files)
	_, errno := e.fs.OpenFile(e.p("c"), sys.O_RDWR|sys.O_CREAT, 0o644)
	e.fail(wasi.ENOSPC, errno)
	require.False(t, e.exists(e.p("c")), "nothing is created past the quota")
	e.fail(wasi.ENOSPC, e.fs.Mkdir(e.p("d2"), 0o755))
	require.False(t, e.exists(e.p("d2")))
	if errno := e.fs.Symlink("a", e.p("l")); errno != sys.ENOSYS {
		e.fail(wasi.ENOSPC, errno)
	}
	require.False(t, e.exists(e.p("l")))
	// Opening existing files is fine, and removing frees slots.
	f := e.open(e.p("a"), sys.O_RDWR|sys.O_CREAT)
	e.ok(f.Close())
	e.ok(e.fs.Unlink(e.p("d/b")))
	e.ok(e.fs.Rmdir(e.p("d")))
	require.Equal(t, base+1, e.fs.Usage().Files)
	e.ok(e.fs.Mkdir(e.p("d2"), 0o755))
	e.writeFile(e.p("c"), "")
	// Rename over an existing file frees one.
	e.ok(e.fs.Rename(e.p("c"), e.p("a")))
	require.Equal(t, base+2, e.fs.Usage().Files)
	e.checkUsage()
}

func testQuotaOpenUnlinked(t *testing.T, backing afero.Fs) {
	e := newQuotaEnv(t, backing, 10, 0)
	base := e.fs.Usage().Bytes
	f := e.open(e.p("f"), sys.O_RDWR|sys.O_CREAT)
	_, errno := f.Write([]byte("123456"))
	e.ok(errno)
	e.ok(e.fs.Unlink(e.p("f")))
	// Its bytes stay charged while it is open, as on a disk.
	require.Equal(t, base+6, e.fs.Usage().Bytes)
	e.writeFile(e.p("g"), "1234")
	h := e.open(e.p("h"), sys.O_RDWR|sys.O_CREAT)
	_, errno = h.Write([]byte("x"))
	e.fail(wasi.ENOSPC, errno)
	_, errno = f.Write([]byte("78"))
	e.fail(wasi.ENOSPC, errno, "the unlinked file is still counted")
	e.ok(f.Truncate(2))
	require.Equal(t, base+6, e.fs.Usage().Bytes)
	e.ok(f.Close())
	require.Equal(t, base+4, e.fs.Usage().Bytes, "the last close releases it")
	// The same through rename over an open file.
	_, errno = h.Write([]byte("abc"))
	e.ok(errno)
	e.ok(e.fs.Rename(e.p("g"), e.p("h")))
	require.Equal(t, base+7, e.fs.Usage().Bytes)
	e.ok(h.Close())
	require.Equal(t, base+4, e.fs.Usage().Bytes)
	e.checkUsage()
}

func testIsolation(t *testing.T, backing1, backing2 afero.Fs) {
	fs1, err := wasi.NewFS(backing1, wasi.Options{})
	require.NoError(t, err)
	fs2, err := wasi.NewFS(backing2, wasi.Options{})
	require.NoError(t, err)
	e1 := &env{t: t, fs: fs1, backing: backing1}
	e2 := &env{t: t, fs: fs2, backing: backing2}
	e1.ok(fs1.Mkdir(work, 0o755))
	e2.ok(fs2.Mkdir(work, 0o755))
	e1.writeFile(e1.p("one"), "1")
	e2.writeFile(e2.p("two"), "2")
	require.Equal(t, []string{"one"}, e1.names(work))
	require.Equal(t, []string{"two"}, e2.names(work))
	_, errno := fs1.Stat(e1.p("two"))
	e1.fail(sys.ENOENT, errno)
	_, errno = fs2.Stat(e2.p("one"))
	e2.fail(sys.ENOENT, errno)
	st1, _ := fs1.Stat("/")
	st2, _ := fs2.Stat("/")
	require.NotEqual(t, st1.Dev, st2.Dev, "each FS has its own device number")
}
