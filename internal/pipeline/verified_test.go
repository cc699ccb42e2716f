package pipeline

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countHashes makes Get count the blobs it hashes, and stamps files
// however recently they changed unless racy is set.
func countHashes(t *testing.T, racy time.Duration) *int {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("file identities are read on Linux only")
	}
	n := new(int)
	oldDigest, oldWindow := verifyDigest, racyWindow
	verifyDigest = func(b []byte) string { *n++; return Digest(b) }
	racyWindow = racy
	t.Cleanup(func() { verifyDigest, racyWindow = oldDigest, oldWindow })
	return n
}

// overwrite writes b over the blob in place, a kernel tick after its last
// change, so that the file's times move.
func overwrite(t *testing.T, path string, b []byte) {
	t.Helper()
	time.Sleep(20 * time.Millisecond)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(b, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func TestGetHashesOncePerFileIdentity(t *testing.T) {
	hashes := countHashes(t, 0)
	s := NewStore(t.TempDir())
	d, err := s.Put([]byte("content"))
	require.NoError(t, err)

	for range 3 {
		b, err := s.Get(d)
		require.NoError(t, err)
		assert.Equal(t, "content", string(b))
	}
	assert.Equal(t, 1, *hashes, "hashed at the first Get only")
	stamp, err := os.ReadFile(filepath.Join(s.Dir(), "verified", d))
	require.NoError(t, err)
	assert.Contains(t, string(stamp), d)

	// The same size, other bytes, written in place: a new identity.
	overwrite(t, s.BlobPath(d), []byte("CONTENT"))
	_, err = s.Get(d)
	assert.ErrorIs(t, err, ErrCorrupt)
	assert.Equal(t, 2, *hashes)
	_, err = s.Get(d)
	assert.ErrorIs(t, err, ErrCorrupt, "a damaged blob is never stamped")

	// Put back, with a new identity again: hashed once more, then stamped.
	overwrite(t, s.BlobPath(d), []byte("content"))
	for range 2 {
		_, err = s.Get(d)
		require.NoError(t, err)
	}
	assert.Equal(t, 4, *hashes)
}

func TestGetCatchesTruncationAndReplacement(t *testing.T) {
	hashes := countHashes(t, 0)
	s := NewStore(t.TempDir())
	d, err := s.Put([]byte("some content"))
	require.NoError(t, err)
	_, err = s.Get(d)
	require.NoError(t, err)

	require.NoError(t, os.Truncate(s.BlobPath(d), 4))
	_, err = s.Get(d)
	assert.ErrorIs(t, err, ErrCorrupt)

	// A new file renamed over the blob: same content, new inode, hashed.
	tmp := filepath.Join(s.Dir(), "new")
	require.NoError(t, os.WriteFile(tmp, []byte("some content"), 0o644))
	require.NoError(t, os.Rename(tmp, s.BlobPath(d)))
	before := *hashes
	_, err = s.Get(d)
	require.NoError(t, err)
	assert.Equal(t, before+1, *hashes)
}

func TestGetForgedStampIsIgnored(t *testing.T) {
	hashes := countHashes(t, 0)
	s := NewStore(t.TempDir())
	d, err := s.Put([]byte("content"))
	require.NoError(t, err)
	// A stamp for another identity, or garbage, does not skip the hash.
	for _, stamp := range []string{d + " v1 1 2 7 3 4\n", "", "garbage"} {
		require.NoError(t, os.MkdirAll(filepath.Join(s.Dir(), "verified"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(s.Dir(), "verified", d), []byte(stamp), 0o644))
		before := *hashes
		_, err = s.Get(d)
		require.NoError(t, err)
		assert.Equal(t, before+1, *hashes, "stamp %q", stamp)
	}
}

func TestGetRecentFilesAreNotStamped(t *testing.T) {
	hashes := countHashes(t, time.Hour)
	s := NewStore(t.TempDir())
	d, err := s.Put([]byte("content"))
	require.NoError(t, err)
	for range 2 {
		_, err = s.Get(d)
		require.NoError(t, err)
	}
	assert.Equal(t, 2, *hashes, "a file changed within the racy window is hashed each time")
	_, err = os.Stat(filepath.Join(s.Dir(), "verified", d))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestMapChecksOncePerIdentityAndSurvivesTruncation(t *testing.T) {
	hashes := countHashes(t, 0)
	s := NewStore(t.TempDir())
	content := bytes.Repeat([]byte("0123456789abcdef"), 3*4096/16)
	d, err := s.Put(content)
	require.NoError(t, err)

	for range 2 {
		b, err := s.Map(d)
		require.NoError(t, err)
		assert.Equal(t, content, b)
	}
	assert.Equal(t, 1, *hashes, "hashed at the first Map only")
	b, err := s.Get(d)
	require.NoError(t, err, "Get shares Map's stamp")
	assert.Equal(t, content, b)
	assert.Equal(t, 1, *hashes)

	m, err := s.Map(d)
	require.NoError(t, err)
	overwrite(t, s.BlobPath(d), []byte("X"))
	_, err = s.Map(d)
	assert.ErrorIs(t, err, ErrCorrupt, "a changed file is hashed again")

	// Truncated under a live mapping: reading the lost pages is an error,
	// not a crash.
	require.NoError(t, os.Truncate(s.BlobPath(d), 0))
	var x byte
	err = SafeCopy(func() { x = m[2*4096] })
	assert.ErrorIs(t, err, ErrFault)
	assert.ErrorIs(t, err, syscall.EIO)
	assert.Zero(t, x)
	assert.NoError(t, SafeCopy(func() {}))
	assert.Panics(t, func() { _ = SafeCopy(func() { panic("other") }) }, "other panics go on")
}

func TestOpenReportsAChangeWhileInUse(t *testing.T) {
	hashes := countHashes(t, 0)
	s := NewStore(t.TempDir())
	content := bytes.Repeat([]byte("fumehood"), 1024)
	d, err := s.Put(content)
	require.NoError(t, err)

	b, done, err := s.Open(d)
	require.NoError(t, err)
	assert.Equal(t, content, b)
	require.NoError(t, done())
	assert.Equal(t, 1, *hashes)

	b, done, err = s.Open(d)
	require.NoError(t, err)
	assert.Equal(t, 1, *hashes, "stamped: not hashed again")
	overwrite(t, s.BlobPath(d), []byte("FUMEHOOD"))
	assert.Equal(t, "FUMEHOOD", string(b[:8]), "the mapping shows the write")
	assert.ErrorIs(t, done(), ErrCorrupt, "so done reports it")

	_, _, err = s.Open(d)
	assert.ErrorIs(t, err, ErrCorrupt)
	_, _, err = s.Open(Digest([]byte("absent")))
	assert.ErrorIs(t, err, os.ErrNotExist)
}
