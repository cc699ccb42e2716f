package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Verification stamps.
//
// Hashing a stored blob at every load costs a pass over every byte of it in
// every process (the guests are 8-15 MB, the built guest's library 12 MB).
// Its only use is to catch damage to the cache: a truncated, overwritten or
// bit-flipped file. It is no defence against someone who can write the
// cache directory, who could as well rewrite the links, the built guest's
// manifest or wazero's compilation cache (native code, checked by wazero
// with a CRC only). So the store hashes a file once per file identity: when
// a blob's content matched its digest, a stamp under verified/ records the
// identity of the file it was read from. A later Get that finds the same
// identity before and after reading skips the hash.
//
// The identity is the device and inode numbers, the size, and the
// modification and status-change times in nanoseconds. A write to the file
// changes its times, a replacement its inode, a truncation its size; the
// status-change time cannot be set back from user space. Times are kept by
// the kernel at the resolution of its clock tick, so a write in the same
// tick as the one that produced the stamped identity would go unseen: as
// git does for its index, a file changed less than racyWindow before it is
// hashed gets no stamp, and is hashed again at its next load.
//
// Where the platform gives no such identity (identify's ok is false), every
// Get hashes.

// racyWindow is how old a file's last change must be for its identity to
// be stamped (a variable for tests).
var racyWindow = 2 * time.Second

// verifyDigest is Digest as Get uses it (a variable for tests, which count
// the hashes).
var verifyDigest = Digest

// identity is what a stamp records of a blob's file.
type identity struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds since the epoch
}

func (id identity) String() string {
	return fmt.Sprintf("v1 %d %d %d %d %d", id.dev, id.ino, id.size, id.mtime, id.ctime)
}

func (s *Store) stampPath(d string) string {
	return filepath.Join(s.dir, "verified", d)
}

// stamped reports whether d's stamp records id.
func (s *Store) stamped(d string, id identity) bool {
	b, err := os.ReadFile(s.stampPath(d))
	return err == nil && string(b) == d+" "+id.String()+"\n"
}

// stamp records that the file with identity id held d's content, unless
// the file changed too recently to tell a later change by its times. A
// stamp that cannot be written only costs a hash at the next load.
func (s *Store) stamp(d string, id identity) {
	last := max(id.mtime, id.ctime)
	if time.Since(time.Unix(0, last)) < racyWindow {
		return
	}
	_ = writeFile(s.stampPath(d), []byte(d+" "+id.String()+"\n"), false)
}
