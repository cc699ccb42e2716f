// Package pipeline prepares guest binaries through named, versioned steps
// and keeps every intermediate result in a content-addressed store, so that
// each step runs once per machine and adding a step never serves a stale
// result.
//
// The store has two kinds of entry. A blob is a file named by the SHA-256 of
// its content. A link records that applying step S (name and version) to
// the blob with digest D produced the blob with digest E; its file name is a
// hash of D and S. Looking up a prepared binary is therefore a walk from
// the source digest through the links of the current steps, and changing a
// step's version simply misses the old links.
//
// Every write goes to a temporary file in the same directory and is renamed
// into place, so concurrent writers and crashes never leave a partial entry.
package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Step is one named, versioned transformation of a binary. Apply must be
// deterministic: the same input always gives the same output.
type Step struct {
	// Name identifies the step, such as "strip-debug".
	Name string
	// Version changes whenever Apply's output would change.
	Version int
	// Apply transforms the input binary.
	Apply func(ctx context.Context, in []byte) ([]byte, error)
}

// ID is the step's name and version, as in "strip-debug@1".
func (s Step) ID() string { return fmt.Sprintf("%s@%d", s.Name, s.Version) }

// ErrCorrupt reports a stored blob whose content no longer matches its digest.
var ErrCorrupt = errors.New("pipeline: stored blob does not match its digest")

// Store is a content-addressed store rooted at a directory.
type Store struct {
	dir string
}

// NewStore returns a store rooted at dir. The directory is created on the
// first write.
func NewStore(dir string) *Store { return &Store{dir: dir} }

// Dir returns the store's root directory.
func (s *Store) Dir() string { return s.dir }

// Digest returns the store's name for b: its SHA-256 in lower-case hex.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func validDigest(d string) bool {
	if len(d) != 64 {
		return false
	}
	_, err := hex.DecodeString(d)
	return err == nil && strings.ToLower(d) == d
}

// BlobPath returns the path at which the blob with digest d is stored.
func (s *Store) BlobPath(d string) string {
	return filepath.Join(s.dir, "blobs", d+".wasm")
}

func (s *Store) linkPath(in string, step Step) string {
	sum := sha256.Sum256([]byte(in + "\x00" + step.ID()))
	return filepath.Join(s.dir, "links", hex.EncodeToString(sum[:]))
}

// Put stores b and returns its digest.
func (s *Store) Put(b []byte) (string, error) {
	d := Digest(b)
	if s.Has(d) {
		return d, nil
	}
	return d, WriteAtomic(s.BlobPath(d), b)
}

// Has reports whether a blob with digest d is stored. It does not read it.
func (s *Store) Has(d string) bool {
	if !validDigest(d) {
		return false
	}
	_, err := os.Stat(s.BlobPath(d))
	return err == nil
}

// Get reads the blob with digest d and checks that its content still
// matches. A missing blob is an error matching fs.ErrNotExist; a damaged one
// matches ErrCorrupt.
//
// The content is hashed with SHA-256 unless this very file was hashed
// before: a verification stamp (see verified.go) records the identity of
// a file whose content matched (device, inode, size, modification and
// change times), and a file with that identity, unchanged while it was
// read, is not hashed again. Any write to the file, a replacement of it or
// a change of its size changes the identity, so it is hashed again.
func (s *Store) Get(d string) ([]byte, error) {
	if !validDigest(d) {
		return nil, fmt.Errorf("pipeline: invalid digest %q: %w", d, fs.ErrNotExist)
	}
	f, err := os.Open(s.BlobPath(d))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	before, known := identify(f)
	b, err := readAll(f, before.size)
	if err != nil {
		return nil, err
	}
	after, _ := identify(f)
	unchanged := known && before == after && int64(len(b)) == before.size
	if unchanged && s.stamped(d, before) {
		return b, nil
	}
	if verifyDigest(b) != d {
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, s.BlobPath(d))
	}
	if unchanged {
		s.stamp(d, before)
	}
	return b, nil
}

// readAll reads f to its end; size is what fstat said, a hint.
func readAll(f *os.File, size int64) ([]byte, error) {
	if size < 0 || size > 1<<34 {
		size = 0
	}
	b := make([]byte, 0, size+1) // +1: the read that finds the end
	for {
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// Lookup walks from the source digest through steps and returns the digest
// of the final blob if every step's result is already stored.
func (s *Store) Lookup(src string, steps []Step) (string, bool) {
	d := src
	for _, step := range steps {
		b, err := os.ReadFile(s.linkPath(d, step))
		if err != nil {
			return "", false
		}
		d = strings.TrimSpace(string(b))
		if !validDigest(d) {
			return "", false
		}
	}
	return d, s.Has(d)
}

// Progress is told when a step starts running. It is not told about steps
// whose result was already stored.
type Progress func(step Step, index, total int)

// Run applies steps to the stored blob src, reusing every stored result,
// and returns the final digest. The source blob must be stored.
func (s *Store) Run(ctx context.Context, src string, steps []Step, progress Progress) (string, error) {
	d := src
	var cur []byte // the content of d, once read
	for i, step := range steps {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		lp := s.linkPath(d, step)
		if b, err := os.ReadFile(lp); err == nil {
			if next := strings.TrimSpace(string(b)); validDigest(next) && s.Has(next) {
				d, cur = next, nil
				continue
			}
		}
		if cur == nil {
			var err error
			if cur, err = s.Get(d); err != nil {
				return "", err
			}
		}
		if progress != nil {
			progress(step, i, len(steps))
		}
		out, err := step.Apply(ctx, cur)
		if err != nil {
			return "", fmt.Errorf("pipeline: step %s: %w", step.ID(), err)
		}
		next, err := s.Put(out)
		if err != nil {
			return "", err
		}
		if err := WriteAtomic(lp, []byte(next+"\n")); err != nil {
			return "", err
		}
		d, cur = next, out
	}
	return d, nil
}

// WriteAtomic writes b to path through a temporary file in the same
// directory and a rename, so readers see either nothing or all of b.
func WriteAtomic(path string, b []byte) error { return writeFile(path, b, true) }

// writeFile is WriteAtomic, with the data synced to disk before the rename
// if sync is set.
func writeFile(path string, b []byte, sync bool) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("pipeline: write %s: %w", path, err)
	}
	return nil
}
