package sessionstore

import "context"

// MaxRecord bounds the value of a record in a Backend's tables (a head, a
// lease: a few hundred bytes). A longer one is never read whole: Get
// fails with ErrTampered.
const MaxRecord = 64 << 10

// Table is one of a Backend's two tables of small records.
type Table int

// A Backend's tables.
const (
	// Heads holds a record per conversation: its latest head.
	Heads Table = iota + 1
	// Leases holds a record per conversation held by a caller.
	Leases
)

// String is the table's name.
func (t Table) String() string {
	switch t {
	case Heads:
		return "heads"
	case Leases:
		return "leases"
	}
	return "unknown"
}

// Backend is where a Store keeps its records: two tables of small records
// with a compare-and-swap on their revisions, and blobs. A Store checks
// names, seals records and keeps leases and expiry; a Backend stores bytes.
// Keys given to a Backend have passed CheckName; a blob's id is a SHA-256
// in hex, '-' and 16 hex digits, and unique: a blob is written once.
// Errors match ErrNotFound, ErrConflict and, when the backing
// service cannot be reached, ErrUnavailable.
//
// Package storetest checks a Backend's behaviour.
type Backend interface {
	// Get returns a record and its revision (never 0), or ErrNotFound. A
	// record that is not one (longer than MaxRecord; in a directory, not
	// a regular file) is ErrTampered, with the revision (0 if it has
	// none) that a Set or Remove replacing it gives.
	Get(ctx context.Context, t Table, key string) (value []byte, rev uint64, err error)
	// Set writes a record if its revision is rev (0: if it has none), and
	// returns its new revision; ErrConflict otherwise, and nothing changed.
	Set(ctx context.Context, t Table, key string, value []byte, rev uint64) (uint64, error)
	// Remove deletes a record if its revision is rev (0: any revision);
	// ErrConflict otherwise. Removing a record that is not there does
	// nothing.
	Remove(ctx context.Context, t Table, key string, rev uint64) error
	// PutBlob stores a blob.
	PutBlob(ctx context.Context, key, id string, data []byte) error
	// GetBlob returns a blob, or ErrNotFound.
	GetBlob(ctx context.Context, key, id string) ([]byte, error)
	// RemoveBlob deletes a blob; one that is not there is no error.
	RemoveBlob(ctx context.Context, key, id string) error
	// Close releases the backend's resources.
	Close() error
}
