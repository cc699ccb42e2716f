// Package natsstore is the NATS JetStream backend of package sessionstore:
// a key-value bucket for the conversations' heads (its revision-checked
// update is the compare-and-swap), one for their leases, and an object
// store bucket for the snapshot bytes, each replicated as the operator
// chooses. Importing it makes sessionstore.Open handle nats:// URLs:
//
//	nats://host:port?heads=fumehood-heads&leases=fumehood-leases&objects=fumehood-snapshots&replicas=3&maxbytes=10000000000&creds=/path/user.creds
//
// Buckets that are missing are created with the URL's settings. Buckets
// that exist are used as they are: a bare URL adopts their replicas and
// bound, and a URL whose replicas or maxbytes differ from theirs is an
// error naming the difference (ErrSettings); opening never changes them.
// The store's TTL is the max age of the buckets it creates.
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

// ErrSettings: a bucket exists with other settings (replicas, max bytes)
// than the Options or URL ask for; nothing was changed.
var ErrSettings = errors.New("natsstore: a bucket's settings differ from those asked for")

// Options configure the backend's buckets. The zero value gives the
// default names and uses the buckets as they are; buckets it creates get
// one replica, no bound and no expiry.
//
// Opening never changes an existing bucket's replicas, max bytes or max
// age: Replicas and MaxBytes, when set, must match what the bucket has
// (else ErrSettings), and TTL only applies to buckets it creates. Changing
// a bucket is the operator's act, on its stream (KV_<heads>, KV_<leases>,
// OBJ_<objects>) with the NATS tools.
type Options struct {
	// Heads, Leases and Objects name the buckets; "" means the defaults.
	Heads, Leases, Objects string
	// Replicas is the buckets' replication factor (1 to 5 in a cluster);
	// 0 means the existing buckets', and 1 for those it creates.
	Replicas int
	// TTL makes JetStream discard heads not written for that long, and
	// snapshots a minute later (the buckets' max age), in the buckets it
	// creates: set it to the store's TTL. 0 never does.
	TTL time.Duration
	// Timeout bounds a request whose context has no deadline; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// MaxBytes bounds the snapshots' bucket: a snapshot that would take
	// it past that fails to be stored (sessionstore.ErrFull), and its
	// call commits nothing. 0 means the existing bucket's, and no bound
	// for one it creates.
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

// New returns the backend on a connection, creating its buckets if they
// are missing and using them as they are if not (see Options). Close leaves the connection open. Give
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
	if o.Replicas < 0 || o.MaxBytes < 0 {
		return nil, fmt.Errorf("natsstore: replicas %d, max bytes %d: give 0 (the bucket's own) or a positive number", o.Replicas, o.MaxBytes)
	}
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
		_, err := ensureBucket(ctx, js, "KV_"+name, func() error {
			_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
				Bucket: name, History: 1, TTL: ttl, Replicas: max(o.Replicas, 1), Storage: jetstream.FileStorage,
				Description: "fumehood sessionstore"})
			return err
		}, settings{replicas: o.Replicas})
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
	_, err = ensureBucket(ctx, js, "OBJ_"+o.Objects, func() error {
		maxBytes := o.MaxBytes
		if maxBytes == 0 {
			maxBytes = -1
		}
		_, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket: o.Objects, TTL: objectsTTL, Replicas: max(o.Replicas, 1), Storage: jetstream.FileStorage,
			MaxBytes: maxBytes, Description: "fumehood sessionstore"})
		return err
	}, settings{replicas: o.Replicas, maxBytes: o.MaxBytes})
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

// settings are what a caller asks of a bucket: 0 asks nothing, and the
// bucket's own stands.
type settings struct {
	replicas int
	maxBytes int64 // -1: no bound
}

// ensureBucket makes sure a bucket's stream exists (create makes it, with
// the caller's settings) and returns its settings. It never changes an
// existing bucket's replicas, max bytes or max age: a setting the caller
// asks for that the bucket does not have is an error naming both. The one
// change it makes is to turn direct gets off (which the client's create
// turns on, even on a racing create that lost): with them any replica
// answers a read, possibly one behind the leader, so that a head read
// would look unchanged when it moved and an object just stored could be
// missing.
func ensureBucket(ctx context.Context, js jetstream.JetStream, stream string, create func() error, ask settings) (settings, error) {
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if err = create(); err == nil || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = js.Stream(ctx, stream)
		}
	}
	if err != nil {
		return settings{}, err
	}
	cfg := st.CachedInfo().Config
	has := settings{replicas: max(cfg.Replicas, 1), maxBytes: cfg.MaxBytes}
	if has.maxBytes <= 0 {
		has.maxBytes = -1
	}
	var diff []string
	if ask.replicas != 0 && ask.replicas != has.replicas {
		diff = append(diff, fmt.Sprintf("replicas=%d (asked: %d)", has.replicas, ask.replicas))
	}
	if ask.maxBytes != 0 && ask.maxBytes != has.maxBytes {
		diff = append(diff, fmt.Sprintf("maxbytes=%s (asked: %s)", bytesSetting(has.maxBytes), bytesSetting(ask.maxBytes)))
	}
	if len(diff) > 0 {
		return settings{}, fmt.Errorf("%w: the bucket exists with %s: leave those settings out to use the bucket's, or change the bucket itself (its stream %s)",
			ErrSettings, strings.Join(diff, ", "), stream)
	}
	if cfg.AllowDirect {
		cfg.AllowDirect = false
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return settings{}, err
		}
	}
	return has, nil
}

// bytesSetting words a max bytes setting.
func bytesSetting(n int64) string {
	if n < 0 {
		return "none"
	}
	return strconv.FormatInt(n, 10)
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

// Get implements sessionstore.Backend. A record arrives whole in one
// message, which the server's max payload bounds (1 MiB by default);
// one past sessionstore.MaxRecord is ErrTampered.
func (b *Backend) Get(ctx context.Context, t sessionstore.Table, key string) ([]byte, uint64, error) {
	e, err := b.kv(t).Get(ctx, key)
	if err != nil {
		return nil, 0, wrap("reading "+t.String()+"/"+key, err)
	}
	if n := len(e.Value()); n > sessionstore.MaxRecord {
		return nil, e.Revision(), fmt.Errorf("%w: %s/%s is %d bytes, past its bound of %d", sessionstore.ErrTampered, t, key, n, sessionstore.MaxRecord)
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
