package sessionpool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/sessionpool"
	"github.com/fumehood/fumehood/sandbox"
	"github.com/fumehood/fumehood/sandbox/sandboxtest"
)

// opener opens sessions of py, counting them.
type opener struct {
	py     *sandbox.Guest
	opened int
}

func (o *opener) open(ctx context.Context) (*sandbox.Session, error) {
	o.opened++
	return o.py.NewSession(ctx, nil)
}

// run runs code in key's session, opening one if needed, and returns the
// call's Fresh and Gone.
func run(t *testing.T, p *sessionpool.Pool[string], o *opener, key, code string) (bool, sessionpool.Gone) {
	t.Helper()
	c, err := p.Acquire(context.Background(), key, "owner", o.open)
	require.NoError(t, err)
	defer c.Release(true)
	_, err = c.Session.Run(context.Background(), code, nil)
	require.NoError(t, err)
	return c.Fresh, c.Gone
}

// TestEvictAndIdle: past Max a new key closes the least recently released
// session, an idle one is closed after IdleTimeout, and each key's next
// call is told why its session went; a key keeps its session between
// calls meanwhile.
func TestEvictAndIdle(t *testing.T) {
	o := &opener{py: sandboxtest.Python(t)}
	freed := make(chan struct{}, 10)
	p := sessionpool.New[string](sessionpool.Options{Max: 2, Evict: true, IdleTimeout: time.Hour,
		OnFree: func() { freed <- struct{}{} }})
	defer p.Close()
	fresh, _ := run(t, p, o, "a", "v = 1")
	assert.True(t, fresh)
	run(t, p, o, "b", "v = 2")
	fresh, _ = run(t, p, o, "a", "v")
	assert.False(t, fresh, "a keeps its session")
	assert.Equal(t, 2, p.Len())
	assert.Equal(t, 2, p.Idle())

	fresh, gone := run(t, p, o, "c", "v = 3")
	assert.True(t, fresh)
	assert.Zero(t, gone)
	assert.Len(t, freed, 1, "b's session was closed")
	fresh, gone = run(t, p, o, "b", "2")
	assert.True(t, fresh)
	assert.Equal(t, sessionpool.GoneEvicted, gone)
	assert.Equal(t, 4, o.opened)

	q := sessionpool.New[string](sessionpool.Options{IdleTimeout: 50 * time.Millisecond})
	defer q.Close()
	run(t, q, o, "x", "1")
	require.Eventually(t, func() bool { return q.Len() == 0 }, 10*time.Second, 10*time.Millisecond)
	_, gone = run(t, q, o, "x", "1")
	assert.Equal(t, sessionpool.GoneIdle, gone)
}

// nothing opens an entry without a session, for the tests of turns and
// bounds.
func nothing(context.Context) (*sandbox.Session, error) { return nil, nil }

// TestTurnsOwnersAndBounds: one call at a time per key, a waiter gives up
// with its context, another owner finds nothing, and past Max without
// Evict a new key is refused, as is every call after Close.
func TestTurnsOwnersAndBounds(t *testing.T) {
	ctx := context.Background()
	p := sessionpool.New[string](sessionpool.Options{Max: 1})
	c, err := p.Acquire(ctx, "k", "alice", nothing)
	require.NoError(t, err)
	assert.True(t, c.Fresh)

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = p.Acquire(short, "k", "alice", nothing)
	assert.ErrorIs(t, err, sessionpool.ErrWaiting)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = p.Acquire(ctx, "k", "bob", nothing)
	assert.ErrorIs(t, err, sessionpool.ErrNotFound, "another owner's session")
	_, err = p.Acquire(ctx, "other", "alice", nothing)
	assert.ErrorIs(t, err, sessionpool.ErrFull)
	_, err = p.Acquire(ctx, "other", "alice", nil)
	assert.ErrorIs(t, err, sessionpool.ErrNotFound)
	c.Release(false)

	c, err = p.Acquire(ctx, "k", "alice", nil)
	require.NoError(t, err)
	assert.False(t, c.Fresh)
	c.Release(false)
	assert.ErrorIs(t, p.Remove("k", "bob"), sessionpool.ErrNotFound)
	require.NoError(t, p.Remove("k", "alice"))
	assert.Equal(t, 0, p.Len())

	// A failed open leaves no entry behind.
	boom := errors.New("boom")
	_, err = p.Acquire(ctx, "k", "alice", func(context.Context) (*sandbox.Session, error) { return nil, boom })
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, 0, p.Len())

	_, err = p.Acquire(ctx, "k", "alice", nothing)
	require.NoError(t, err)
	p.RemoveOwner("alice")
	assert.Equal(t, 0, p.Len())
	p.Close()
	_, err = p.Acquire(ctx, "k", "alice", nothing)
	assert.ErrorIs(t, err, sessionpool.ErrClosed)
}
