package sandbox

import (
	"context"
	"fmt"
	"testing"

	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBaseImagesBounded: a guest keeps at most maxBaseImages base images,
// the ones used last.
func TestBaseImagesBounded(t *testing.T) {
	var b baseImages
	ctx := context.Background()
	built := 0
	build := func(context.Context) (*baseImage, error) { built++; return &baseImage{}, nil }
	keep, err := b.get(ctx, "keep", build)
	require.NoError(t, err)
	for i := range 3 * maxBaseImages {
		_, err := b.get(ctx, fmt.Sprint(i), build)
		require.NoError(t, err)
		again, err := b.get(ctx, "keep", build)
		require.NoError(t, err)
		assert.Same(t, keep, again, "the image used last is kept")
		assert.LessOrEqual(t, len(b.images), maxBaseImages)
	}
	assert.Equal(t, 1+3*maxBaseImages, built, "each image was built once, evicted ones included")
}

// TestOneShotLayoutsBounded is the attack on that bound: one-shot runs of
// sandboxes that mount a volume at a new path each, as a server that lets
// each request choose its mount path runs them. Each layout needs its own
// image; the guest keeps no more than maxBaseImages of them.
func TestOneShotLayoutsBounded(t *testing.T) {
	ctx := context.Background()
	g, err := CompilePython(ctx, &Options{Guest: GuestBuilt})
	if err != nil {
		t.Skipf("the built guest is needed: %v", err)
	}
	defer g.Close()
	g.cacheDir = "" // no image files for these layouts
	for i := range maxBaseImages + 3 {
		sb, err := g.NewSandbox(&Config{Mounts: []Mount{{Path: fmt.Sprintf("/v%d", i), FS: afero.NewMemMapFs()}}})
		require.NoError(t, err)
		res, err := sb.Run(ctx, fmt.Sprintf("import os\nprint(os.path.isdir('/v%d'))", i), nil)
		require.NoError(t, err)
		assert.Equal(t, "True\n", string(res.Stdout))
		sb.Close()
		g.bases.mu.Lock()
		n := len(g.bases.images)
		g.bases.mu.Unlock()
		assert.LessOrEqual(t, n, maxBaseImages)
	}
}
