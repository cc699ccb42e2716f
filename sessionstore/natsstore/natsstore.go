// Package natsstore is the NATS JetStream backend of package sessionstore:
// a key-value bucket for the conversations' heads (its revision-checked
// update is the compare-and-swap), one for their leases, and an object
// store bucket for the snapshot bytes, each replicated as the operator
// chooses. Importing it makes sessionstore.Open handle nats:// URLs:
//
//	nats://host:port?heads=fumehood-heads&leases=fumehood-leases&objects=fumehood-snapshots&replicas=3&maxbytes=10000000000&creds=/path/user.creds
//
// Only the programs that import this package link the NATS client.
package natsstore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fumehood/fumehood/sessionstore"
)

func init() {
	sessionstore.Register("nats", openURL)
}

// Default bucket names and timeout.
const (
	DefaultHeads   = "fumehood-heads"
	DefaultLeases  = "fumehood-leases"
	DefaultObjects = "fumehood-snapshots"
	// DefaultTimeout bounds a request to JetStream whose context has no
	// deadline.
	DefaultTimeout = 5 * time.Second
)

// Options configure the backend's buckets. The zero value gives the
// default names, one replica and no expiry.
type Options struct {
	// Heads, Leases and Objects name the buckets; "" means the defaults.
	Heads, Leases, Objects string
	// Replicas is the buckets' replication factor (1 to 5 in a cluster);
	// 0 means 1.
	Replicas int
	// TTL makes JetStream discard heads not written for that long, and
	// snapshots a minute later (the buckets' max age): set it to the
	// store's TTL. 0 never does.
	TTL time.Duration
	// Timeout bounds a request whose context has no deadline; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// MaxBytes bounds the snapshots' bucket: a snapshot that would take
	// it past that fails to be stored (sessionstore.ErrFull), and its
	// call commits nothing. 0 means no bound.
	MaxBytes int64
}

// Backend is a sessionstore.Backend on JetStream.
type Backend struct {
	nc      *nats.Conn // closed by Close when the backend dialed it
	heads   jetstream.KeyValue
	leases  jetstream.KeyValue
	objects jetstream.ObjectStore
	// bucket is the objects' bucket, stream its stream, which RemoveBlob
	// purges the markers of deleted objects from.
	bucket string
	stream jetstream.Stream
}

// New returns the backend on a connection, creating its buckets or
// updating their configuration. Close leaves the connection open. Give
// the connection nats.ReconnectBufSize(-1), as Connect does: otherwise a
// commit that timed out while it reconnected can still land afterwards.
func New(ctx context.Context, nc *nats.Conn, opts *Options) (*Backend, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Heads = cmp(o.Heads, DefaultHeads)
	o.Leases = cmp(o.Leases, DefaultLeases)
	o.Objects = cmp(o.Objects, DefaultObjects)
	o.Replicas = max(o.Replicas, 1)
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.TTL < 0 {
		o.TTL = 0
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(o.Timeout))
	if err != nil {
		return nil, wrap("connecting to JetStream", err)
	}
	b := &Backend{bucket: o.Objects}
	kv := func(name string, ttl time.Duration) (jetstream.KeyValue, error) {
		err := ensureBucket(ctx, js, "KV_"+name, func() error {
			_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
				Bucket: name, History: 1, TTL: ttl, Replicas: o.Replicas, Storage: jetstream.FileStorage,
				Description: "fumehood sessionstore"})
			return err
		}, func(c *jetstream.StreamConfig) { c.MaxAge, c.Replicas = ttl, o.Replicas })
		if err != nil {
			return nil, err
		}
		return js.KeyValue(ctx, name) // a handle that knows reads go to the leader
	}
	if b.heads, err = kv(o.Heads, o.TTL); err != nil {
		return nil, wrap("the heads bucket "+o.Heads, err)
	}
	if b.leases, err = kv(o.Leases, 0); err != nil {
		return nil, wrap("the leases bucket "+o.Leases, err)
	}
	objectsTTL := o.TTL
	if objectsTTL > 0 {
		// A snapshot is stored before its head: it must not expire first.
		objectsTTL += time.Minute
	}
	maxBytes := o.MaxBytes
	if maxBytes <= 0 {
		maxBytes = -1
	}
	err = ensureBucket(ctx, js, "OBJ_"+o.Objects, func() error {
		_, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket: o.Objects, TTL: objectsTTL, Replicas: o.Replicas, Storage: jetstream.FileStorage,
			MaxBytes: maxBytes, Description: "fumehood sessionstore"})
		return err
	}, func(c *jetstream.StreamConfig) { c.MaxAge, c.Replicas, c.MaxBytes = objectsTTL, o.Replicas, maxBytes })
	if err == nil {
		b.objects, err = js.ObjectStore(ctx, o.Objects) // a handle that knows
	}
	if err == nil {
		b.stream, err = js.Stream(ctx, "OBJ_"+o.Objects)
	}
	if err != nil {
		return nil, wrap("the objects bucket "+o.Objects, err)
	}
	return b, nil
}

// ensureBucket makes sure a bucket's stream exists (create makes it),
// with apply's settings and direct gets off, which any replica answers,
// possibly behind the leader: a head read from a lagging replica would
// look unchanged when it moved (the commit's compare-and-swap still
// catches it, as a conflict), and an object just stored could be missing.
//
// It changes an existing stream's configuration only where it differs,
// and never turns direct gets on: replicas opening a store at once (a
// deploy) each made it anew with the client's create-or-update, which
// turns them on, and a racing create failed with "stream name already
// in use"; the loser now uses the winner's stream.
func ensureBucket(ctx context.Context, js jetstream.JetStream, stream string, create func() error, apply func(*jetstream.StreamConfig)) error {
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if err = create(); err == nil || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = js.Stream(ctx, stream)
		}
	}
	if err != nil {
		return err
	}
	cfg := st.CachedInfo().Config
	want := cfg
	apply(&want)
	want.AllowDirect = false
	if want.MaxAge > 0 && want.Duplicates > want.MaxAge {
		want.Duplicates = want.MaxAge // the server refuses a window past the max age
	}
	if want.MaxAge == cfg.MaxAge && want.Replicas == cfg.Replicas && want.MaxBytes == cfg.MaxBytes && !cfg.AllowDirect {
		return nil
	}
	_, err = js.UpdateStream(ctx, want)
	return err
}

// Connect dials the NATS servers at urls (comma-separated) and returns the
// backend on that connection, which Close closes. The connection
// reconnects forever, and buffers nothing while it does: a write that
// fails is not sent later behind its caller's back.
func Connect(ctx context.Context, urls string, opts *Options, natsOpts ...nats.Option) (*Backend, error) {
	natsOpts = append([]nats.Option{nats.Name("fumehood sessionstore"), nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond), nats.ReconnectBufSize(-1)}, natsOpts...)
	nc, err := nats.Connect(urls, natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("%w: nats: connecting to %s: %w", sessionstore.ErrUnavailable, urls, err)
	}
	b, err := New(ctx, nc, opts)
	if err != nil {
		nc.Close()
		return nil, err
	}
	b.nc = nc
	return b, nil
}

// openURL opens the backend of a nats:// URL: its query names the buckets
// (heads, leases, objects), the replicas, the snapshots' bucket's bound in
// bytes (maxbytes) and a credentials file (creds); the store's TTL is the
// buckets'.
func openURL(ctx context.Context, u *url.URL, so *sessionstore.Options) (sessionstore.Backend, error) {
	q := u.Query()
	o := Options{Heads: q.Get("heads"), Leases: q.Get("leases"), Objects: q.Get("objects"), TTL: sessionstore.DefaultTTL}
	if so != nil && so.TTL != 0 {
		o.TTL = so.TTL
	}
	for k := range q {
		switch k {
		case "heads", "leases", "objects", "replicas", "maxbytes", "creds":
		default:
			return nil, fmt.Errorf("sessionstore: %s: unknown parameter %q (heads, leases, objects, replicas, maxbytes, creds)", u.Redacted(), k)
		}
	}
	if m := q.Get("maxbytes"); m != "" {
		n, err := strconv.ParseInt(m, 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("sessionstore: %s: maxbytes must be a positive number of bytes", u.Redacted())
		}
		o.MaxBytes = n
	}
	if r := q.Get("replicas"); r != "" {
		n, err := strconv.Atoi(r)
		if err != nil || n < 1 || n > 5 {
			return nil, fmt.Errorf("sessionstore: %s: replicas must be 1 to 5", u.Redacted())
		}
		o.Replicas = n
	}
	var natsOpts []nats.Option
	if c := q.Get("creds"); c != "" {
		natsOpts = append(natsOpts, nats.UserCredentials(c))
	}
	server := url.URL{Scheme: "nats", User: u.User, Host: u.Host}
	return Connect(ctx, server.String(), &o, natsOpts...)
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// JetStream's error codes for a store without room: a stream at its
// limits with the discard-new policy (the description says which limit),
// and the server's or account's storage used up.
const (
	errCodeStoreFailed       jetstream.ErrorCode = 10077
	errCodeStorageExhausted  jetstream.ErrorCode = 10047
	errCodeResourcesExceeded jetstream.ErrorCode = 10023
)

// isFull reports whether JetStream refused a write for want of room.
func isFull(err error) bool {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode {
	case errCodeStorageExhausted, errCodeResourcesExceeded:
		return true
	case errCodeStoreFailed:
		return strings.Contains(api.Description, "maximum bytes") || strings.Contains(api.Description, "maximum messages") ||
			strings.Contains(api.Description, "resources exceeded")
	}
	return false
}

// wrap words a JetStream error in sessionstore's terms.
func wrap(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case isFull(err):
		return fmt.Errorf("%w: nats: %s: %w", sessionstore.ErrFull, what, err)
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrObjectNotFound):
		return sessionstore.ErrNotFound
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return fmt.Errorf("%w: %w", sessionstore.ErrConflict, err)
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, jetstream.ErrConnectionClosed),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrReconnectBufExceeded):
		return fmt.Errorf("%w: nats: %s: %w", sessionstore.ErrUnavailable, what, err)
	}
	return fmt.Errorf("nats: %s: %w", what, err)
}

func (b *Backend) kv(t sessionstore.Table) jetstream.KeyValue {
	if t == sessionstore.Leases {
		return b.leases
	}
	return b.heads
}

// Get implements sessionstore.Backend.
func (b *Backend) Get(ctx context.Context, t sessionstore.Table, key string) ([]byte, uint64, error) {
	e, err := b.kv(t).Get(ctx, key)
	if err != nil {
		return nil, 0, wrap("reading "+t.String()+"/"+key, err)
	}
	return e.Value(), e.Revision(), nil
}

// Set implements sessionstore.Backend: KV Create when there is no record,
// Update at rev otherwise.
func (b *Backend) Set(ctx context.Context, t sessionstore.Table, key string, value []byte, rev uint64) (uint64, error) {
	var err error
	var n uint64
	if rev == 0 {
		n, err = b.kv(t).Create(ctx, key, value)
	} else {
		n, err = b.kv(t).Update(ctx, key, value, rev)
	}
	return n, wrap("writing "+t.String()+"/"+key, err)
}

// Remove implements sessionstore.Backend: a purge, at rev if it is not 0.
func (b *Backend) Remove(ctx context.Context, t sessionstore.Table, key string, rev uint64) error {
	var opts []jetstream.KVDeleteOpt
	if rev != 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	err := wrap("removing "+t.String()+"/"+key, b.kv(t).Purge(ctx, key, opts...))
	if errors.Is(err, sessionstore.ErrNotFound) {
		return nil
	}
	return err
}

// PutBlob implements sessionstore.Backend. Blob ids are unique: an
// object is never replaced (a replacement drops the object's chunks under
// a reader's feet).
func (b *Backend) PutBlob(ctx context.Context, key, id string, data []byte) error {
	_, err := b.objects.PutBytes(ctx, key+"/"+id, data)
	return wrap("storing snapshot "+key+"/"+id, err)
}

// GetBlob implements sessionstore.Backend.
func (b *Backend) GetBlob(ctx context.Context, key, id string) ([]byte, error) {
	data, err := b.objects.GetBytes(ctx, key+"/"+id)
	if err != nil {
		return nil, wrap("reading snapshot "+key+"/"+id, err)
	}
	return data, nil
}

// RemoveBlob implements sessionstore.Backend: the object store's delete,
// which marks the object deleted and purges its chunks, then a purge of
// that marker. Names are never reused (an ID is unique), so the marker
// guards nothing; left, it held about 750 bytes of the bucket per call
// until the bucket's max age.
func (b *Backend) RemoveBlob(ctx context.Context, key, id string) error {
	name := key + "/" + id
	err := wrap("removing snapshot "+name, b.objects.Delete(ctx, name))
	if errors.Is(err, sessionstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	// The meta subject of the object store's layout (ADR-20):
	// $O.<bucket>.M.<name in URL-safe base64>.
	meta := "$O." + b.bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
	return wrap("removing the marker of snapshot "+name, b.stream.Purge(ctx, jetstream.WithPurgeSubject(meta)))
}

// Close closes the connection if Connect dialed it.
func (b *Backend) Close() error {
	if b.nc != nil {
		b.nc.Close()
	}
	return nil
}
