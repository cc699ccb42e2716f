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
	b, f, _, err := s.mapChecked(d)
	if f != nil {
		f.Close()
	}
	return b, err
}

// Open is Map for a use with an end: done, called once the bytes are no
// longer used, unmaps them and reports an error matching ErrCorrupt if the
// file changed in any way since Open checked it (its identity differs), in
// which case what was read from the mapping may not be what was checked.
// Reads before done should run under SafeCopy (or debug.SetPanicOnFault),
// so that a truncation is an error rather than a crash.
func (s *Store) Open(d string) (b []byte, done func() error, err error) {
	b, f, id, err := s.mapChecked(d)
	if err != nil || f == nil {
		return b, func() error { return nil }, err
	}
	return b, func() error {
		defer f.Close()
		after, _ := identify(f)
		if err := syscall.Munmap(b); err != nil {
			return fmt.Errorf("pipeline: unmap %s: %w", s.BlobPath(d), err)
		}
		if after != id {
			return fmt.Errorf("%w: %s changed while it was in use", ErrCorrupt, s.BlobPath(d))
		}
		return nil
	}, nil
}

// mapChecked maps d and checks it. It returns the open file and its
// identity when b is a mapping, and a nil file when b is a copy (Get's,
// where the file cannot be mapped).
func (s *Store) mapChecked(d string) ([]byte, *os.File, identity, error) {
	if !validDigest(d) {
		return nil, nil, identity{}, fmt.Errorf("pipeline: invalid digest %q: %w", d, fs.ErrNotExist)
	}
	f, err := os.Open(s.BlobPath(d))
	if err != nil {
		return nil, nil, identity{}, err
	}
	id, known := identify(f)
	if !known || id.size <= 0 || int64(int(id.size)) != id.size {
		f.Close()
		b, err := s.Get(d)
		return b, nil, identity{}, err
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(id.size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		b, err := s.Get(d)
		return b, nil, identity{}, err
	}
	fail := func(err error) ([]byte, *os.File, identity, error) {
		syscall.Munmap(b)
		f.Close()
		return nil, nil, identity{}, err
	}
	if s.stamped(d, id) {
		return b, f, id, nil
	}
	var sum string
	if err := SafeCopy(func() { sum = verifyDigest(b) }); err != nil {
		return fail(fmt.Errorf("%w: %s: %w", ErrCorrupt, s.BlobPath(d), err))
	}
	if after, _ := identify(f); sum != d || after != id {
		return fail(fmt.Errorf("%w: %s", ErrCorrupt, s.BlobPath(d)))
	}
	s.stamp(d, id)
	return b, f, id, nil
}
