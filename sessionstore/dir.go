package sessionstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// lockStripes is how many lock files a directory store has: a record's
// writers take the one its table and key hash to.
const lockStripes = 64

// Dir is the directory backend: one machine, any number of processes.
// Records are files written whole (a temporary file, fsync, rename, fsync
// of the directory), so a reader sees the old record or the new one; a
// record's compare-and-swap holds a file lock (flock) across processes.
// Leases are not fsynced: they only matter while the processes holding
// them run.
//
// The layout under the root: heads/NAME and leases/NAME (a record: its
// revision, whether it is live, its value), snapshots/NAME/ID,
// locks/NN. Sweep removes orphan snapshots (Options.OrphanAge). A removed
// record's file is deleted: nothing is left of a removed conversation. So
// that a record's revisions never repeat across its removal (a writer
// holding a revision of the removed record must not match the new one), a
// record starts at the current time in microseconds and counts up by one
// per write: a new one starts above any revision of an older one, which
// would have needed more writes than microseconds passed. (Records an
// earlier version left as tombstones, removed but kept, go on from their
// revision; Sweep deletes them after Options.OrphanAge.)
type Dir struct {
	root string

	sweepMu sync.Mutex // one Sweep of this Dir at a time
	heads   walker     // where Sweep goes on in heads/
	leases  walker     // in leases/
	snaps   walker     // and in snapshots/
}

// OpenDir returns the directory backend rooted at root, creating it
// (mode 0700) if needed. It fails on platforms without file locks.
func OpenDir(root string) (*Dir, error) {
	if root == "" {
		return nil, errors.New("sessionstore: the store's directory is empty")
	}
	if err := lockSupported(); err != nil {
		return nil, err
	}
	for _, sub := range []string{"heads", "leases", "snapshots", "locks"} {
		if err := os.MkdirAll(filepath.Join(root, sub), 0o700); err != nil {
			return nil, fmt.Errorf("sessionstore: %w", err)
		}
	}
	return &Dir{root: root,
		heads:  walker{dir: filepath.Join(root, "heads")},
		leases: walker{dir: filepath.Join(root, "leases")},
		snaps:  walker{dir: filepath.Join(root, "snapshots")}}, nil
}

// record is a record file's header: its revision and whether it is live;
// the value follows.
const recordHeader = 9

func (d *Dir) path(t Table, key string) string { return filepath.Join(d.root, t.String(), key) }

// read returns a record file's revision, liveness and value; a missing
// file is revision 0, not live. A record file that is not a regular file,
// or is longer than a record may be, is ErrTampered, and nothing of it is
// read.
func (d *Dir) read(t Table, key string) (rev uint64, live bool, value []byte, err error) {
	f, size, err := openStored(d.path(t, key), recordHeader+MaxRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil, nil
	}
	if err != nil {
		return 0, false, nil, err
	}
	defer f.Close()
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return 0, false, nil, fmt.Errorf("sessionstore: reading %s: %w", d.path(t, key), err)
	}
	if len(b) < recordHeader {
		return 0, false, nil, fmt.Errorf("sessionstore: %s: a truncated record", d.path(t, key))
	}
	return binary.BigEndian.Uint64(b), b[8] == 1, b[recordHeader:], nil
}

// openStored opens a stored file for reading if it is a regular file of
// at most bound bytes, and returns its size. A link (not followed), a
// device, a FIFO or a longer file is ErrTampered, and nothing of it is
// read; a missing one is fs.ErrNotExist.
func openStored(name string, bound int64) (*os.File, int64, error) {
	f, err := os.OpenFile(name, openFlags, 0)
	if err != nil {
		if isLinkErr(err) {
			return nil, 0, fmt.Errorf("%w: %s is a link", ErrTampered, name)
		}
		return nil, 0, fmt.Errorf("sessionstore: %w", err)
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
		err = fmt.Errorf("sessionstore: %w", err)
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("%w: %s is not a regular file (%v)", ErrTampered, name, fi.Mode().Type())
	case fi.Size() > bound:
		err = fmt.Errorf("%w: %s is %d bytes, past its bound of %d", ErrTampered, name, fi.Size(), bound)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// Get implements Backend.
func (d *Dir) Get(ctx context.Context, t Table, key string) ([]byte, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	rev, live, v, err := d.read(t, key)
	if err != nil {
		return nil, 0, err
	}
	if !live {
		return nil, 0, ErrNotFound
	}
	return v, rev, nil
}

// Set implements Backend.
func (d *Dir) Set(ctx context.Context, t Table, key string, value []byte, rev uint64) (uint64, error) {
	return d.swap(ctx, t, key, value, rev, true, "")
}

// setHead is Set of a head pointing to snapshot id, which must still be
// there: checked under the head's lock, which Sweep holds while it
// removes the conversation's orphans, so a commit never lands on a
// snapshot the sweep removed. A missing one is ErrConflict.
func (d *Dir) setHead(ctx context.Context, key string, value []byte, rev uint64, id string) (uint64, error) {
	return d.swap(ctx, Heads, key, value, rev, true, id)
}

// Remove implements Backend.
func (d *Dir) Remove(ctx context.Context, t Table, key string, rev uint64) error {
	_, err := d.swap(ctx, t, key, nil, rev, false, "")
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// swap writes a record (or removes it) if its revision is still rev, and
// blob (if any) is one of key's snapshots, holding its lock.
func (d *Dir) swap(ctx context.Context, t Table, key string, value []byte, rev uint64, live bool, blob string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	unlock, err := d.lock(t, key)
	if err != nil {
		return 0, err
	}
	defer unlock()
	cur, curLive, _, err := d.read(t, key)
	if errors.Is(err, ErrTampered) {
		// A record that is not one is there at no revision: a Set that
		// expects none replaces it, a Remove of any revision deletes it.
		cur, curLive, err = 0, true, nil
	}
	if err != nil {
		return 0, err
	}
	switch {
	case !live && !curLive:
		return 0, ErrNotFound
	case !live && rev != 0 && cur != rev, live && !curLive && rev != 0, live && curLive && cur != rev:
		return 0, fmt.Errorf("%w (revision %d, not %d)", ErrConflict, cur, rev)
	}
	if blob != "" {
		_, err := os.Stat(filepath.Join(d.root, "snapshots", key, blob))
		if errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("%w: its snapshot %s is gone (swept as an orphan: put longer than Options.OrphanAge ago?)", ErrConflict, blob)
		}
		if err != nil {
			return 0, fmt.Errorf("sessionstore: %w", err)
		}
	}
	if !live {
		return 0, removeFile(d.path(t, key), t == Heads)
	}
	next := cur + 1
	if cur == 0 {
		next = max(1, uint64(time.Now().UnixMicro())) // a new record: see Dir
	}
	b := make([]byte, recordHeader, recordHeader+len(value))
	binary.BigEndian.PutUint64(b, next)
	b[8] = 1
	b = append(b, value...)
	if err := writeFile(d.path(t, key), b, t == Heads); err != nil {
		return 0, err
	}
	return next, nil
}

// removeFile deletes a record's file; durable, its directory fsynced.
func removeFile(name string, durable bool) error {
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sessionstore: %w", err)
	}
	if !durable {
		return nil
	}
	if err := syncDir(filepath.Dir(name)); err != nil {
		return fmt.Errorf("sessionstore: %w", err)
	}
	return nil
}

// syncDir fsyncs a directory, making a rename or removal in it durable.
func syncDir(name string) error {
	dir, err := os.Open(name)
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

// removeTombstone deletes key's record in t if it is a removed one (an
// earlier version's tombstone), holding its lock; it reports whether it
// did.
func (d *Dir) removeTombstone(t Table, key string) bool {
	unlock, err := d.lock(t, key)
	if err != nil {
		return false
	}
	defer unlock()
	rev, live, _, err := d.read(t, key)
	return err == nil && rev != 0 && !live && removeFile(d.path(t, key), t == Heads) == nil
}

// lock takes the file lock of a record's stripe.
func (d *Dir) lock(t Table, key string) (unlock func(), err error) {
	h := fnv.New32a()
	h.Write([]byte(t.String()))
	h.Write([]byte{0})
	h.Write([]byte(key))
	name := filepath.Join(d.root, "locks", fmt.Sprintf("%02d", h.Sum32()%lockStripes))
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sessionstore: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("sessionstore: locking %s: %w", name, err)
	}
	return func() { f.Close() }, nil // closing unlocks
}

// PutBlob implements Backend.
func (d *Dir) PutBlob(ctx context.Context, key, id string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := filepath.Join(d.root, "snapshots", key)
	for try := 0; ; try++ {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("sessionstore: %w", err)
		}
		// The directory, if it was empty, may have been removed (by
		// RemoveBlob or Sweep) between the two: make it again.
		err := writeFile(filepath.Join(dir, id), data, true)
		if !errors.Is(err, fs.ErrNotExist) || try == 2 {
			return err
		}
	}
}

// GetBlob implements Backend.
func (d *Dir) GetBlob(ctx context.Context, key, id string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(d.root, "snapshots", key, id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("sessionstore: %w", err)
	}
	return b, nil
}

// RemoveBlob implements Backend.
func (d *Dir) RemoveBlob(ctx context.Context, key, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := filepath.Join(d.root, "snapshots", key)
	if err := os.Remove(filepath.Join(dir, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sessionstore: %w", err)
	}
	_ = os.Remove(dir) // fails while it holds another snapshot
	return nil
}

// Keys implements Lister: the names of the table's record files
// (an earlier version's tombstones included).
func (d *Dir) Keys(ctx context.Context, t Table) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(d.root, t.String()))
	if err != nil {
		return nil, fmt.Errorf("sessionstore: %w", err)
	}
	var keys []string
	for _, e := range entries {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			keys = append(keys, e.Name())
		}
	}
	return keys, nil
}

// Close implements Backend: it closes the directories Sweep reads.
func (d *Dir) Close() error {
	d.sweepMu.Lock()
	defer d.sweepMu.Unlock()
	d.heads.close()
	d.leases.close()
	d.snaps.close()
	return nil
}

// tmpPrefix begins the name of a file being written, until it is renamed.
const tmpPrefix = ".tmp-"

// writeFile replaces name with data whole: a temporary file in the same
// directory, renamed over it; durable, both fsynced.
func writeFile(name string, data []byte, durable bool) (err error) {
	var r [8]byte
	_, _ = rand.Read(r[:])
	tmp := filepath.Join(filepath.Dir(name), tmpPrefix+hex.EncodeToString(r[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("sessionstore: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
			if isFull(err) {
				err = fmt.Errorf("%w: %w", ErrFull, err)
			}
			err = fmt.Errorf("sessionstore: writing %s: %w", name, err)
		}
	}()
	_, err = f.Write(data)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		return err
	}
	if durable {
		return syncDir(filepath.Dir(name))
	}
	return nil
}

// isFull reports whether a write failed for want of room: a full disk, a
// quota, a file size limit.
func isFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG)
}
