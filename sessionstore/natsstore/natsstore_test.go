package natsstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/sessionstore"
	"github.com/fumehood/fumehood/sessionstore/natsstore"
	"github.com/fumehood/fumehood/sessionstore/natsstore/natstest"
	"github.com/fumehood/fumehood/sessionstore/storetest"
)

// TestConformance: the JetStream backend on a real single server passes
// the conformance suite; unreachable is the server stopped.
func TestConformance(t *testing.T) {
	srv := natstest.Run(t)
	n := 0
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		n++
		b, err := natsstore.Connect(context.Background(), srv.URL(), &natsstore.Options{
			Heads: fmt.Sprint("heads-", n), Leases: fmt.Sprint("leases-", n), Objects: fmt.Sprint("objects-", n)})
		require.NoError(t, err)
		return storetest.Harness{Backend: b, Break: func() func() {
			srv.Stop()
			return func() { srv.Restart(t) }
		}}
	})
}

// TestUnreachable: a store whose server is gone says so (ErrUnavailable),
// at open and on a commit.
func TestUnreachable(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	url := srv.URL()
	s, err := sessionstore.Open(ctx, url, nil)
	require.NoError(t, err)
	defer s.Close()
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	ref, err := s.Put(ctx, "c", []byte("x"))
	require.NoError(t, err)
	srv.Stop()
	_, err = s.Commit(cctx, "c", sessionstore.Head{}, ref)
	assert.ErrorIs(t, err, sessionstore.ErrUnavailable)
	_, err = sessionstore.Open(ctx, url, nil)
	assert.ErrorIs(t, err, sessionstore.ErrUnavailable)
	t.Logf("open: %v", err)
}

// TestOpenURL: a nats:// URL names the buckets and replicas; bad
// parameters are refused.
func TestOpenURL(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	s, err := sessionstore.Open(ctx, srv.URL()+"?heads=h&leases=l&objects=o&replicas=1", nil)
	require.NoError(t, err)
	ref, err := s.Put(ctx, "c", []byte("x"))
	require.NoError(t, err)
	h, err := s.Commit(ctx, "c", sessionstore.Head{}, ref)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	b, err := natsstore.Connect(ctx, srv.URL(), &natsstore.Options{Heads: "h", Leases: "l", Objects: "o"})
	require.NoError(t, err)
	defer b.Close()
	_, rev, err := b.Get(ctx, sessionstore.Heads, "c")
	require.NoError(t, err)
	assert.Equal(t, h.Revision, rev, "the head is in bucket h")
	for _, q := range []string{"?replicas=0", "?replicas=x", "?bucket=y", "?maxbytes=0", "?maxbytes=x"} {
		_, err := sessionstore.Open(ctx, srv.URL()+q, nil)
		assert.Error(t, err, q)
	}
}

// TestClusterNodeDown: on a three-node cluster with three replicas, one
// node stopped in the middle of a stream of commits: commits go on, and
// every acknowledged one is in the store.
func TestClusterNodeDown(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster takes seconds to form")
	}
	ctx := context.Background()
	nodes := natstest.Cluster(t, 3)
	var b *natsstore.Backend
	require.Eventually(t, func() bool {
		var err error
		b, err = natsstore.Connect(ctx, natstest.URLs(nodes), &natsstore.Options{Replicas: 3, Timeout: 2 * time.Second})
		return err == nil
	}, 30*time.Second, 200*time.Millisecond, "the cluster's JetStream is up")
	defer b.Close()
	s, err := sessionstore.New(b, nil)
	require.NoError(t, err)

	const total, stopAt = 60, 20
	acked := 0 // the last value whose commit was acknowledged
	failed := 0
	for i := 1; i <= total; {
		if i == stopAt && nodes[0].Running() {
			nodes[0].Stop() // one of the three, holding replicas of every bucket
		}
		head, err := s.Load(ctx, "stream")
		if err != nil && !errors.Is(err, sessionstore.ErrNotFound) {
			failed++
			require.Less(t, failed, 100, "the cluster did not recover: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		ref, err := s.Put(ctx, "stream", []byte(fmt.Sprint(i)))
		if err == nil {
			_, err = s.Commit(ctx, "stream", head, ref)
		}
		if err != nil {
			// Unacknowledged: it may or may not have landed.
			failed++
			require.Less(t, failed, 100, "the cluster did not recover: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		acked = i
		i++
	}
	var data []byte
	require.Eventually(t, func() bool { // reads may time out while the cluster settles
		head, err := s.Load(ctx, "stream")
		if err == nil {
			data, err = s.Get(ctx, "stream", head.Ref)
		}
		require.True(t, err == nil || errors.Is(err, sessionstore.ErrUnavailable), "%v", err)
		return err == nil
	}, 30*time.Second, 100*time.Millisecond)
	assert.Equal(t, fmt.Sprint(acked), string(data), "the last acknowledged commit is the head")
	assert.Equal(t, total, acked, "commits went on after the node stopped")
	t.Logf("%d commits, %d failed attempts around the stop", total, failed)
}

// TestBucketTTL: the store's TTL is the heads bucket's max age, and the
// snapshots outlive their head by a minute (a snapshot is stored first).
func TestBucketTTL(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	s, err := sessionstore.Open(ctx, srv.URL()+"?heads=h&objects=o", &sessionstore.Options{TTL: time.Hour})
	require.NoError(t, err)
	defer s.Close()
	js := jetStream(t, srv.URL())
	kv, err := js.KeyValue(ctx, "h")
	require.NoError(t, err)
	kvs, err := kv.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, time.Hour, kvs.TTL())
	obs, err := js.ObjectStore(ctx, "o")
	require.NoError(t, err)
	obss, err := obs.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, time.Hour+time.Minute, obss.TTL())
}

// TestBucketFull: a snapshot that would take the snapshots' bucket past
// its max bytes is refused with ErrFull, nothing of it is stored, and the
// conversation's head and snapshot stay as they were.
func TestBucketFull(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	s, err := sessionstore.Open(ctx, srv.URL()+"?maxbytes=65536", nil)
	require.NoError(t, err)
	defer s.Close()
	ref, err := s.Put(ctx, "c", []byte("state"))
	require.NoError(t, err)
	head, err := s.Commit(ctx, "c", sessionstore.Head{}, ref)
	require.NoError(t, err)

	_, err = s.Put(ctx, "c", make([]byte, 100<<10))
	require.ErrorIs(t, err, sessionstore.ErrFull)
	t.Logf("a put past max bytes: %v", err)

	got, err := s.Load(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, head, got)
	data, err := s.Get(ctx, "c", got.Ref)
	require.NoError(t, err)
	assert.Equal(t, "state", string(data))
	// Nothing of the refused snapshot stayed: one that fits still does.
	_, err = s.Put(ctx, "c", make([]byte, 50<<10))
	assert.NoError(t, err)
}

// TestDropLeavesNothing: snapshots dropped after each commit leave
// nothing in the snapshots' bucket (no object store delete markers, one
// per call, which would stay until the bucket's max age): it holds the
// head's snapshot alone, and nothing once the conversation is deleted.
func TestDropLeavesNothing(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	s, err := sessionstore.Open(ctx, srv.URL(), nil)
	require.NoError(t, err)
	defer s.Close()
	var head sessionstore.Head
	for i := range 20 {
		ref, err := s.Put(ctx, "c", []byte(fmt.Sprint("state ", i)))
		require.NoError(t, err)
		next, err := s.Commit(ctx, "c", head, ref)
		require.NoError(t, err)
		if head.Revision != 0 {
			require.NoError(t, s.Drop(ctx, "c", head.Ref))
		}
		head = next
	}
	msgs := func() uint64 {
		nc, err := nats.Connect(srv.URL())
		require.NoError(t, err)
		defer nc.Close()
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		st, err := js.Stream(ctx, "OBJ_"+natsstore.DefaultObjects)
		require.NoError(t, err)
		info, err := st.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}
	assert.Equal(t, uint64(2), msgs(), "the head's snapshot: its meta and its one chunk")
	require.NoError(t, s.Delete(ctx, "c"))
	assert.Zero(t, msgs())
}

// TestOpenAtOnce: replicas opening a store at the same time (a deploy),
// the first time its buckets are made, all succeed, and reads stay with
// the leader whichever made them; a replica opening it later with
// another TTL and bound changes them.
func TestOpenAtOnce(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	for round := range 5 {
		o := &natsstore.Options{Heads: fmt.Sprint("h", round), Leases: fmt.Sprint("l", round), Objects: fmt.Sprint("o", round)}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				b, err := natsstore.Connect(ctx, srv.URL(), o)
				if assert.NoError(t, err, "round %d, opener %d", round, i) {
					b.Close()
				}
			})
		}
		wg.Wait()
	}
	js := jetStream(t, srv.URL())
	for _, name := range []string{"KV_h0", "KV_l0", "OBJ_o0"} {
		st, err := js.Stream(ctx, name)
		require.NoError(t, err)
		assert.False(t, st.CachedInfo().Config.AllowDirect, name)
	}

	// A later opener with another TTL leaves the buckets as they are.
	b, err := natsstore.Connect(ctx, srv.URL(), &natsstore.Options{Heads: "h0", Leases: "l0", Objects: "o0", TTL: time.Hour})
	require.NoError(t, err)
	b.Close()
	heads, err := js.Stream(ctx, "KV_h0")
	require.NoError(t, err)
	assert.Zero(t, heads.CachedInfo().Config.MaxAge)
}

// TestOpenKeepsBuckets: opening a store never changes its buckets. A
// bare URL adopts the bound the buckets have; a URL that asks for
// another bound or replica count is ErrSettings, naming both, and the
// buckets stay as they were.
func TestOpenKeepsBuckets(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	s, err := sessionstore.Open(ctx, srv.URL()+"?maxbytes=5000000", &sessionstore.Options{TTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	js := jetStream(t, srv.URL())
	configs := func() []jetstream.StreamConfig {
		var c []jetstream.StreamConfig
		for _, name := range []string{"KV_" + natsstore.DefaultHeads, "KV_" + natsstore.DefaultLeases, "OBJ_" + natsstore.DefaultObjects} {
			st, err := js.Stream(ctx, name)
			require.NoError(t, err)
			c = append(c, st.CachedInfo().Config)
		}
		return c
	}
	before := configs()
	require.Equal(t, int64(5000000), before[2].MaxBytes)

	s, err = sessionstore.Open(ctx, srv.URL(), nil)
	require.NoError(t, err, "a bare URL adopts the buckets")
	ref, err := s.Put(ctx, "c", []byte("x"))
	require.NoError(t, err)
	_, err = s.Commit(ctx, "c", sessionstore.Head{}, ref)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	assert.Equal(t, before, configs(), "a bare URL changed nothing")

	for q, want := range map[string]string{
		"?maxbytes=100000":             "maxbytes=5000000 (asked: 100000)",
		"?replicas=3":                  "replicas=1 (asked: 3)",
		"?replicas=1&maxbytes=5000000": "",
	} {
		s, err := sessionstore.Open(ctx, srv.URL()+q, nil)
		if want == "" {
			require.NoError(t, err, q)
			require.NoError(t, s.Close())
			continue
		}
		require.ErrorIs(t, err, natsstore.ErrSettings, q)
		assert.ErrorContains(t, err, want, q)
	}
	assert.Equal(t, before, configs(), "no URL changed anything")
}

// TestRecordBound: a head or lease past sessionstore.MaxRecord, put by a
// client without the key, is ErrTampered, and such a lease is taken over.
func TestRecordBound(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	s, err := sessionstore.Open(ctx, srv.URL(), &sessionstore.Options{Key: []byte("0123456789abcdef"), LeaseWait: -1})
	require.NoError(t, err)
	defer s.Close()
	js := jetStream(t, srv.URL())
	big := make([]byte, sessionstore.MaxRecord+1)
	for _, bucket := range []string{natsstore.DefaultHeads, natsstore.DefaultLeases} {
		kv, err := js.KeyValue(ctx, bucket)
		require.NoError(t, err)
		_, err = kv.Put(ctx, "c", big)
		require.NoError(t, err)
	}
	_, err = s.Load(ctx, "c")
	assert.ErrorIs(t, err, sessionstore.ErrTampered)
	l, err := s.Lease(ctx, "c", time.Minute)
	require.NoError(t, err, "a lease that is not one is free")
	assert.NoError(t, l.Release(ctx))
	assert.NoError(t, s.Delete(ctx, "c"), "a head that is not one still goes")
	_, err = s.Load(ctx, "c")
	assert.ErrorIs(t, err, sessionstore.ErrNotFound)
}

// jetStream returns a client of the server at url, as another process
// sharing the store would have.
func jetStream(t *testing.T, url string) jetstream.JetStream {
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}
