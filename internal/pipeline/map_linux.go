//go:build linux

package pipeline

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// Map is Get without the copy: it returns the blob d mapped read-only into
// memory, checked as Get checks it (hashed once per file identity). The
// mapping is never unmapped, so map only what the process keeps for its
// lifetime (the built guest's standard library). Its pages are read from
// the page cache as they are touched; a later write to the file in place
// (nothing in fumehood writes a blob in place) would show through, and a
// truncation makes touching the lost pages fault: read a mapping through
// SafeCopy.
func (s *Store) Map(d string) ([]byte, error) {
	if !validDigest(d) {
		return nil, fmt.Errorf("pipeline: invalid digest %q: %w", d, fs.ErrNotExist)
	}
	f, err := os.Open(s.BlobPath(d))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	id, known := identify(f)
	if !known || id.size <= 0 || int64(int(id.size)) != id.size {
		return s.Get(d)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(id.size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return s.Get(d)
	}
	if s.stamped(d, id) {
		return b, nil
	}
	var sum string
	if err := SafeCopy(func() { sum = verifyDigest(b) }); err != nil {
		syscall.Munmap(b)
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, s.BlobPath(d), err)
	}
	if after, _ := identify(f); sum != d || after != id {
		syscall.Munmap(b)
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, s.BlobPath(d))
	}
	s.stamp(d, id)
	return b, nil
}
