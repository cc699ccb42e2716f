package sandbox

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fumehood/fumehood/internal/pipeline"
)

// startOnly is a small valid WASI command: an empty exported _start.
var startOnly = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type: () -> ()
	0x03, 0x02, 0x01, 0x00, // function 0 of type 0
	0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00, // export _start
	0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b, // code: empty body
}

// TestCompileMappedReleasesAndChecks: the mapped module is released once
// compiled, and a release that reports a change of the cached file fails
// the compilation (what was compiled may not be what was checked).
func TestCompileMappedReleasesAndChecks(t *testing.T) {
	ctx := context.Background()
	opts := &Options{CacheDir: t.TempDir()}
	released := 0
	g, err := compileMapped(ctx, startOnly, opts, func() error { released++; return nil })
	require.NoError(t, err)
	assert.Equal(t, 1, released)
	require.NoError(t, g.Close())

	g, err = compileMapped(ctx, startOnly, opts, func() error { released++; return pipeline.ErrCorrupt })
	assert.ErrorIs(t, err, pipeline.ErrCorrupt)
	assert.Nil(t, g)
	assert.Equal(t, 2, released)

	// A module that does not compile is still released.
	_, err = compileMapped(ctx, startOnly[:20], opts, func() error { released++; return nil })
	assert.ErrorIs(t, err, ErrInvalidModule)
	assert.Equal(t, 3, released)
}
