package sandbox_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fumehood/fumehood/sandbox/sandboxtest"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/wasi"
)

// openFilesSetup opens what agent code leaves open: a sqlite3 file
// connection, a logging file handler, a file read half-way, a file of a
// volume open for appending, and a directory.
const openFilesSetup = `
import sqlite3, logging, os
db = sqlite3.connect('/work/app.db')
db.execute('create table t (v text)')
db.execute("insert into t values ('base')")
db.commit()
logging.basicConfig(filename='/tmp/app.log', level=logging.INFO, format='%(message)s', force=True)
logging.info('one')
half = open('/work/text.txt', 'w+')
half.write('0123456789')
half.flush()
half.seek(4)
vol = open('/data/vol.txt', 'a')
vol.write('v1\n')
vol.flush()
dirfd = os.open('/work', os.O_RDONLY)
fds = (db.execute('pragma database_list').fetchall() and 0, half.fileno(), vol.fileno(), dirfd)
`

// checkOpenFiles uses every file openFilesSetup left open, adding tag.
func checkOpenFiles(t *testing.T, s *sandbox.Session, tag string) string {
	t.Helper()
	return run(t, s, `
db.execute("insert into t values ('`+tag+`')")
db.commit()
logging.info('`+tag+`')
vol.write('`+tag+`\n')
vol.flush()
(sorted(r[0] for r in db.execute('select v from t')), open('/tmp/app.log').read().split(), half.read(3), half.tell(), open('/data/vol.txt').read().split(), os.read(rel, 4) if (rel := os.open('text.txt', os.O_RDONLY, dir_fd=dirfd)) else None, os.close(rel), (half.fileno(), vol.fileno(), dirfd) == fds[1:])
`).Value
}

func volumeConfig(vol afero.Fs) *sandbox.Config {
	return &sandbox.Config{Mounts: []sandbox.Mount{{Path: "/data", FS: vol}}}
}

func TestSessionOpenFilesSnapshotResume(t *testing.T) {
	vol := afero.NewMemMapFs()
	s := newSession(t, volumeConfig(vol))
	run(t, s, openFilesSetup)
	snap := snapshotOf(t, s)

	r := resume(t, snap, volumeConfig(vol))
	assert.Equal(t, "(['base', 'resumed'], ['one', 'resumed'], '456', 7, ['v1', 'resumed'], b'0123', None, True)", checkOpenFiles(t, r, "resumed"))
	// The session snapshotted goes on with its own files; the volume is
	// shared.
	assert.Equal(t, "(['base', 'orig'], ['one', 'orig'], '456', 7, ['v1', 'resumed', 'orig'], b'0123', None, True)", checkOpenFiles(t, s, "orig"))

	// Twice: a resumed session's snapshot carries them again.
	r2 := resume(t, snapshotOf(t, r), volumeConfig(vol))
	assert.Equal(t, "(['again', 'base', 'resumed'], ['one', 'resumed', 'again'], '789', 10, ['v1', 'resumed', 'orig', 'again'], b'0123', None, True)", checkOpenFiles(t, r2, "again"))
}

func TestSessionOpenFilesFork(t *testing.T) {
	vol := afero.NewMemMapFs()
	s := newSession(t, volumeConfig(vol))
	run(t, s, openFilesSetup)
	f, err := s.Fork(context.Background())
	require.NoError(t, err)
	defer f.Close()
	// Each writes its own database and log (its own in-memory root); the
	// volume's file is the same file.
	assert.Equal(t, "(['base', 'fork'], ['one', 'fork'], '456', 7, ['v1', 'fork'], b'0123', None, True)", checkOpenFiles(t, f, "fork"))
	assert.Equal(t, "(['base', 'parent'], ['one', 'parent'], '456', 7, ['v1', 'fork', 'parent'], b'0123', None, True)", checkOpenFiles(t, s, "parent"))
	assert.Equal(t, "['base', 'fork', 'fork2']", run(t, f, "db.execute(\"insert into t values ('fork2')\")\ndb.commit()\nsorted(r[0] for r in db.execute('select v from t'))").Value)
	assert.Equal(t, "['base', 'parent']", run(t, s, "sorted(r[0] for r in db.execute('select v from t'))").Value)
}

func TestSessionOpenFilesHibernate(t *testing.T) {
	vol := afero.NewMemMapFs()
	s := newSession(t, volumeConfig(vol))
	run(t, s, openFilesSetup)
	require.NoError(t, s.Hibernate())
	assert.Equal(t, "(['base', 'woke'], ['one', 'woke'], '456', 7, ['v1', 'woke'], b'0123', None, True)", checkOpenFiles(t, s, "woke"))
	// Hibernating, a snapshot and a fork carry them too.
	require.NoError(t, s.Hibernate())
	r := resume(t, snapshotOf(t, s), volumeConfig(vol))
	assert.Equal(t, "(['base', 'resumed', 'woke'], ['one', 'woke', 'resumed'], '789', 10, ['v1', 'woke', 'resumed'], b'0123', None, True)", checkOpenFiles(t, r, "resumed"))
	f, err := s.Fork(context.Background())
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, "(['base', 'fork', 'woke'], ['one', 'woke', 'fork'], '789', 10, ['v1', 'woke', 'resumed', 'fork'], b'0123', None, True)", checkOpenFiles(t, f, "fork"))
}

func TestSessionOpenFileDeletedRefused(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "import os\nf = open('/work/gone.txt', 'w')\nos.remove('/work/gone.txt')")
	fd := wasiFD(t, s, "work/gone.txt")
	check := func(what string, err error) {
		t.Helper()
		require.ErrorIs(t, err, sandbox.ErrOpenFiles, what)
		require.ErrorIs(t, err, wasi.ErrUnlinked, what)
		var ofe *sandbox.OpenFileError
		require.ErrorAs(t, err, &ofe, what)
		assert.Equal(t, "/work/gone.txt", ofe.Path, what)
		assert.Equal(t, fd, ofe.FD, what)
		assert.Contains(t, err.Error(), "/work/gone.txt", what)
	}
	check("snapshot", s.Snapshot(&bytes.Buffer{}))
	_, err := s.Fork(context.Background())
	check("fork", err)
	check("hibernate", s.Hibernate())
	// The session goes on, the file still written through its handle.
	assert.Equal(t, "3", run(t, s, "f.write('abc')").Value)
	run(t, s, "f.close()")
	require.NoError(t, s.Snapshot(&bytes.Buffer{}))
	require.NoError(t, s.Hibernate())
}

func TestSessionResumeMissingVolumeFile(t *testing.T) {
	vol := afero.NewMemMapFs()
	s := newSession(t, volumeConfig(vol))
	run(t, s, "f = open('/data/x.txt', 'w')")
	fd := wasiFD(t, s, "x.txt")
	snap := snapshotOf(t, s)
	require.NoError(t, vol.Remove("/x.txt"))
	_, err := sandboxtest.Python(t).ResumeSession(context.Background(), bytes.NewReader(snap), volumeConfig(vol))
	require.ErrorIs(t, err, sandbox.ErrOpenFiles)
	require.ErrorIs(t, err, sys.ENOENT)
	var ofe *sandbox.OpenFileError
	require.ErrorAs(t, err, &ofe)
	assert.Equal(t, "/data/x.txt", ofe.Path)
	assert.Equal(t, fd, ofe.FD)
}

func TestSessionStopWithOpenFileRollsBack(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "import sqlite3\ndb = sqlite3.connect('/work/a.db')\ndb.execute('create table t (v)')\ndb.commit()\nf = open('/tmp/held', 'w+')\nf.write('ab')\nf.flush()\nx = 1")
	for name, cfg := range map[string]*sandbox.RunOptions{
		"deadline": {Limits: sandbox.Limits{Timeout: 100 * time.Millisecond}},
		"fuel":     {Limits: sandbox.Limits{Fuel: 50_000_000}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.Run(context.Background(), "x = 2\nf.write('zz')\nf.flush()\nwhile True: pass", cfg)
			require.True(t, errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sandbox.ErrFuelExhausted), "%v", err)
			// Rolled back, the files still open, at the offset they had.
			assert.Equal(t, "(1, 2, 'abcd', 0)", run(t, s, "f.write('cd')\nf.flush()\ndb.execute('insert into t values (1)')\ndb.commit()\n(x, f.tell() - 2, open('/tmp/held').read(), db.execute('select count(*) from t').fetchone()[0] - 1)").Value)
			run(t, s, "f.seek(0)\nf.truncate()\nf.write('ab')\nf.flush()\ndb.execute('delete from t')\ndb.commit()")
		})
	}
}

// TestSessionRefusesOldVersions: snapshots of format versions 1 and 2
// came only from the retired asyncify session build, which paused its
// interpreter with a pause buffer: such a snapshot is refused as from a
// build that no longer exists; one without the buffer, which those
// versions cannot describe, is corrupt.
func TestSessionRefusesOldVersions(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "x = 41")
	snap := snapshotOf(t, s)
	require.Equal(t, uint32(3), binary.LittleEndian.Uint32(snap[12:]))
	old := func(version uint32, edit func(string) string) []byte {
		b := bytes.Clone(snap)
		binary.LittleEndian.PutUint32(b[12:], version)
		return rewriteHeader(t, b, edit)
	}
	same := func(h string) string { return h }
	paused := func(h string) string {
		return strings.Replace(h, `"asyncify_buffer":0`, `"asyncify_buffer":65536`, 1)
	}
	g := sandboxtest.Python(t)
	for _, v := range []uint32{1, 2} {
		_, err := g.ResumeSession(context.Background(), bytes.NewReader(old(v, same)), nil)
		assert.ErrorIs(t, err, sandbox.ErrSnapshotCorrupt, "version %d", v)
		_, err = g.ResumeSession(context.Background(), bytes.NewReader(old(v, paused)), nil)
		assert.ErrorIs(t, err, sandbox.ErrSnapshotGuest, "version %d", v)
		assert.ErrorContains(t, err, "a build that no longer exists", "version %d", v)
	}
}

// wasiFD returns the WASI descriptor of the file the session holds open
// at name (relative to its mount), as the host numbers it.
func wasiFD(t *testing.T, s *sandbox.Session, name string) int32 {
	t.Helper()
	open, err := sandbox.OpenDescriptors(s)
	require.NoError(t, err)
	for _, d := range open {
		var fd int32
		var n string
		if _, err := fmt.Sscanf(d, "%d %s", &fd, &n); err == nil && n == name {
			return fd
		}
	}
	t.Fatalf("%s is not open: %q", name, open)
	return -1
}

// TestSessionOpenFileRenamed shows that a file renamed while open is
// carried at its new path, and one replaced by a rename is refused.
func TestSessionOpenFileRenamed(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "import os\nf = open('/work/a.txt', 'w+')\nf.write('abc')\nf.flush()\nos.rename('/work/a.txt', '/work/b.txt')")
	r := resume(t, snapshotOf(t, s), nil)
	assert.Equal(t, "'abcd'", run(t, r, "f.write('d')\nf.flush()\nopen('/work/b.txt').read()").Value)

	run(t, s, "g = open('/work/c.txt', 'w')\nopen('/work/d.txt', 'w').close()\nos.rename('/work/d.txt', '/work/c.txt')")
	err := s.Snapshot(&bytes.Buffer{})
	require.ErrorIs(t, err, wasi.ErrUnlinked)
	var ofe *sandbox.OpenFileError
	require.ErrorAs(t, err, &ofe)
	assert.Equal(t, "/work/c.txt", ofe.Path)
}

// TestSessionStopAfterDeletingHeldFile: a stopped run that deleted a file
// held open since before it rolls back all the same; the descriptor it
// cannot open again is closed (EBADF), the session goes on.
func TestSessionStopAfterDeletingHeldFile(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "import os\nf = open('/work/x.txt', 'w')\ng = open('/work/y.txt', 'w')\nx = 1")
	_, err := s.Run(context.Background(), "x = 2\nos.remove('/work/x.txt')\nwhile True: pass", &sandbox.RunOptions{Limits: sandbox.Limits{Timeout: 100 * time.Millisecond}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, "(1, 'EBADF', 2)", run(t, s, "import errno\ntry:\n    f.write('a'); f.flush(); e = None\nexcept OSError as ex:\n    e = errno.errorcode[ex.errno]\n(x, e, g.write('ok'))").Value)
	require.NoError(t, s.Snapshot(&bytes.Buffer{}), "the closed descriptor is not carried")
}

// TestSessionOpenStdlibFile: a file of the guest's standard library held
// open (matplotlib keeps its fonts open) is carried by a snapshot, a fork
// and a hibernation, at its offset, read-only.
func TestSessionOpenStdlibFile(t *testing.T) {
	s := newSession(t, nil)
	run(t, s, "f = open('/usr/lib/python313.zip', 'rb')\nhead = f.read(2)\nf.seek(0)\nf.read(1)")
	check := func(s *sandbox.Session) {
		t.Helper()
		assert.Equal(t, "(b'K', True, 2)", run(t, s, "(f.read(1), head == b'PK', f.tell())").Value)
	}
	fork, err := s.Fork(context.Background())
	require.NoError(t, err)
	defer fork.Close()
	check(fork)
	r := resume(t, snapshotOf(t, s), nil)
	check(r)
	check(s)
	// A snapshot may not claim to write there.
	assert.Equal(t, "OSError", run(t, s, "g = None\ntry:\n    g = open('/usr/lib/python313.zip', 'ab')\nexcept OSError as e:\n    g = type(e).__name__\ng").Value[1:8])
}
