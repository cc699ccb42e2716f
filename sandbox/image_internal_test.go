package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fumehood/fumehood/internal/snapshot"
	"github.com/spf13/afero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// builtGuest compiles the built guest for one test, or skips it.
func builtGuest(t testing.TB) *Guest {
	g, err := CompilePython(context.Background(), nil)
	if err != nil {
		t.Skipf("the built guest is needed: %v", err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

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
	g := builtGuest(t)
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

// TestMemoryPoolGivesZeroedMemory is the attack on the memory pool: a
// guest fills its whole memory, grown past its image, with a secret; the
// next instance, which gets that memory from the pool, must hold exactly
// what an instance with a memory of its own holds.
func TestMemoryPoolGivesZeroedMemory(t *testing.T) {
	ctx := context.Background()
	g := builtGuest(t)
	sb, err := g.NewSandbox(nil)
	require.NoError(t, err)
	defer sb.Close()
	fresh := func() *instance {
		var in *instance
		in, err := g.newInstance(ctx, sb.fscfg, &sessionClock{in: &in}, seededRand(0), nil, DefaultMemoryLimit, 0)
		require.NoError(t, err)
		return in
	}
	victim := fresh()
	_, ok := victim.mod.Memory().Grow(64)
	require.True(t, ok)
	mem := victim.linear()
	for i := range mem {
		mem[i] = 0xA5
	}
	used := cap(mem)
	victim.close()
	g.background.Wait() // the zeroing
	require.Len(t, g.mems.free, 1, "the memory went back to the pool")

	next := fresh()
	defer next.close()
	assert.Equal(t, used, cap(next.linear()), "the pooled memory was reused")
	g.mems.close()
	own := fresh() // the pool is closed: a memory of its own
	defer own.close()
	assert.Equal(t, len(own.linear()), len(next.linear()))
	assert.True(t, bytes.Equal(own.linear(), next.linear()), "a pooled memory holds nothing of its last instance")
	past := next.linear()[len(next.linear()):cap(next.linear())]
	assert.NotEmpty(t, past)
	assert.Equal(t, len(past), bytes.Count(past, []byte{0}), "nor past its length")
}

// TestImageBuildOutsideRunLimits: the first run of a layout makes its
// image (about half a second) outside the run's limits, so a run with a
// short deadline or a small fuel budget is not charged for it.
func TestImageBuildOutsideRunLimits(t *testing.T) {
	ctx := context.Background()
	g := builtGuest(t)
	g.cacheDir = "" // no image on disk: the run makes it
	sb, err := g.NewSandbox(&Config{Mounts: []Mount{{Path: "/fresh-layout", FS: afero.NewMemMapFs()}}})
	require.NoError(t, err)
	defer sb.Close()
	res, err := sb.Run(ctx, "print(1)", &RunOptions{Limits: Limits{Timeout: 100 * time.Millisecond, Fuel: 20_000_000}})
	require.NoError(t, err)
	assert.Equal(t, "1\n", string(res.Stdout))
	assert.Less(t, res.FuelUsed, int64(20_000_000))
}

// TestHibernatedCheckpointPacked: a hibernated session keeps its pages
// compressed and no page table, and wakes to the same state.
func TestHibernatedCheckpointPacked(t *testing.T) {
	ctx := context.Background()
	g := builtGuest(t)
	s, err := g.NewSession(ctx, nil)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Run(ctx, "x = [i * i for i in range(10000)]", nil)
	require.NoError(t, err)
	require.NoError(t, s.Hibernate())
	require.Nil(t, s.ckpt.pages)
	require.NotNil(t, s.ckpt.packed)
	pages := len(s.ckpt.packed.index) / 4
	assert.Positive(t, pages)
	assert.Less(t, len(s.ckpt.packed.data), pages*pageSize/2, "%d pages", pages)
	res, err := s.Run(ctx, "sum(x)", nil)
	require.NoError(t, err)
	assert.Equal(t, "333283335000", res.Value)
}

// TestFreshPagesCached: a base image loaded from the cache reads its
// fresh pages from the file beside it, which says the same as comparing
// with a fresh instance; a file of another image or a damaged one is
// ignored and written again.
func TestFreshPagesCached(t *testing.T) {
	ctx := context.Background()
	g := builtGuest(t)
	g.cacheDir = t.TempDir()
	layout := []snapshot.Mount{{Path: "/", InMemory: true}, {Path: "/cached"}, {Path: controlPath}}
	b, err := g.base(ctx, layout)
	require.NoError(t, err)
	file := g.baseFile(layout)
	require.FileExists(t, file)
	want := b.fresh
	require.NotEmpty(t, want)

	load := func() []uint32 {
		l, err := g.loadBase(ctx, file, layout)
		require.NoError(t, err)
		return l.fresh
	}
	require.FileExists(t, freshFile(file), "written with the image")
	assert.Equal(t, want, readFresh(file, b.digest))
	assert.Equal(t, want, load(), "read from the file")
	assert.Nil(t, readFresh(file, strings.Repeat("0", len(b.digest))), "another image's")

	data, err := os.ReadFile(freshFile(file))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(freshFile(file), data[:len(data)-1], 0o644))
	assert.Nil(t, readFresh(file, b.digest), "damaged")
	assert.Equal(t, want, load(), "computed again")
	assert.Equal(t, want, readFresh(file, b.digest), "and written again")
}

// baseFiles returns the names of the base images and of their fresh-page
// files in dir.
func baseFiles(t *testing.T, dir string) (bases, fresh []string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		switch {
		case strings.HasSuffix(e.Name(), ".base"):
			bases = append(bases, e.Name())
		case strings.HasSuffix(e.Name(), ".fresh"):
			fresh = append(fresh, e.Name())
		}
	}
	return bases, fresh
}

// TestBaseFilesBounded: the cache directory keeps at most maxBaseImages
// base images per guest, as memory does, 40 layouts or not: the one just
// written and the ones loaded last; another guest's are its own.
func TestBaseFilesBounded(t *testing.T) {
	dir := t.TempDir()
	g := &Guest{cacheDir: dir, id: "guest-a"}
	other := &Guest{cacheDir: dir, id: "guest-b"}
	img := &baseImage{size: wasmPage, pages: make([][]byte, wasmPage/pageSize), digest: "digest", fresh: []uint32{0}}
	img.pages[0] = bytes.Repeat([]byte{1}, pageSize)
	layout := func(p string) []snapshot.Mount { return []snapshot.Mount{{Path: "/", InMemory: true}, {Path: p}} }
	kept := layout("/kept")
	g.cacheBase(g.baseFile(kept), img, kept)
	theirs := layout("/theirs")
	other.cacheBase(other.baseFile(theirs), img, theirs)
	for i := range 40 {
		l := layout(fmt.Sprintf("/v%d", i))
		file := g.baseFile(l)
		g.cacheBase(file, img, l)
		require.FileExists(t, file, "the image just written is kept")
		_, err := g.loadBase(context.Background(), g.baseFile(kept), kept)
		require.NoError(t, err, "the image used last is kept")
		bases, fresh := baseFiles(t, filepath.Dir(file))
		assert.Len(t, bases, min(i+2, maxBaseImages))
		assert.Len(t, fresh, min(i+2, maxBaseImages))
	}
	assert.FileExists(t, other.baseFile(theirs), "another guest's images are not this guest's to evict")
	bases, _ := baseFiles(t, filepath.Dir(other.baseFile(theirs)))
	assert.Len(t, bases, 1)
}

// TestLayoutsOnDiskBounded is the attack of issue 31 on the disk: runs
// with a new mount layout each wrote a base image of 2.7 MB to the cache
// that was never deleted. The cache keeps maxBaseImages of them, and a
// session whose image was evicted from the disk (and from memory) goes on,
// forks, and resumes from its snapshot.
func TestLayoutsOnDiskBounded(t *testing.T) {
	ctx := context.Background()
	g := builtGuest(t)
	g.cacheDir = t.TempDir()
	eval := func(s *Session, code string) string {
		res, err := s.Run(ctx, code, nil)
		require.NoError(t, err)
		return res.Value
	}
	first := &Config{Mounts: []Mount{{Path: "/first", FS: afero.NewMemMapFs()}}}
	s, err := g.NewSession(ctx, first)
	require.NoError(t, err)
	defer s.Close()
	eval(s, "x = 41")
	var snap bytes.Buffer
	require.NoError(t, s.Snapshot(&snap))
	firstFile := g.baseFile(s.layout)
	require.FileExists(t, firstFile)

	for i := range maxBaseImages + 3 {
		sb, err := g.NewSandbox(&Config{Mounts: []Mount{{Path: fmt.Sprintf("/v%d", i), FS: afero.NewMemMapFs()}}})
		require.NoError(t, err)
		res, err := sb.Run(ctx, "print(1)", nil)
		require.NoError(t, err)
		assert.Equal(t, "1\n", string(res.Stdout))
		sb.Close()
		bases, fresh := baseFiles(t, filepath.Dir(firstFile))
		assert.LessOrEqual(t, len(bases), maxBaseImages)
		assert.LessOrEqual(t, len(fresh), maxBaseImages)
	}
	assert.NoFileExists(t, firstFile, "evicted")

	assert.Equal(t, "42", eval(s, "x + 1"))
	f, err := s.Fork(ctx)
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, "43", eval(f, "x + 2"))
	r, err := g.ResumeSession(ctx, &snap, first)
	require.NoError(t, err)
	defer r.Close()
	assert.Equal(t, "41", eval(r, "x"))
}

// TestBaseImageOfRetiredBuildRefused: a cached base image of the retired
// asyncify session build (a pause buffer, mutable globals) is refused as
// from a build that no longer exists, even under this guest's ID.
func TestBaseImageOfRetiredBuildRefused(t *testing.T) {
	g := builtGuest(t)
	ctx := context.Background()
	layout := []snapshot.Mount{{Path: "/", InMemory: true}}
	for name, h := range map[string]snapshot.Header{
		"pause buffer": {Guest: g.id, Base: "b", MemorySize: 1 << 20, AsyncifyBuffer: 1 << 16, Args: snapshotArgs, Mounts: layout},
		"globals": {Guest: g.id, Base: "b", MemorySize: 1 << 20, Args: snapshotArgs, Mounts: layout,
			Globals: []snapshot.Global{{Name: "fumehood_global_0", Value: 1}}},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "base")
			var buf bytes.Buffer
			require.NoError(t, snapshot.Encode(&buf, &snapshot.Snapshot{Header: h}))
			require.NoError(t, os.WriteFile(file, buf.Bytes(), 0o644))
			_, err := g.loadBase(ctx, file, layout)
			require.ErrorIs(t, err, ErrSnapshotGuest)
			assert.ErrorContains(t, err, "a build that no longer exists")
		})
	}
}

// TestBaseImageNameFollowsTheStandardLibrary: a build that changes only
// the standard library (the interpreter's digest the same) gets base
// images of its own; a stale image, whose zipimport offsets point into
// the old library's zip, failed every session with "bad local file
// header" until the cache's sessions/ was deleted.
func TestBaseImageNameFollowsTheStandardLibrary(t *testing.T) {
	dir := t.TempDir()
	g := func(imageID string) *Guest { return &Guest{id: "wasm", imageID: imageID, cacheDir: dir, python: true} }
	a, b := g("wasm stdlib-1").baseFile(defaultLayout), g("wasm stdlib-2").baseFile(defaultLayout)
	assert.NotEqual(t, a, b)
	assert.Equal(t, a, g("wasm stdlib-1").baseFile(defaultLayout))
	assert.Equal(t, (&Guest{id: "wasm", cacheDir: dir}).baseFile(defaultLayout), g("wasm").baseFile(defaultLayout),
		"a guest without a standard library names images by its id")
}

// TestCheckpointStops: a checkpoint told to stop changes no page, and
// takeCheckpoint returns no descriptors for a session closed meanwhile.
func TestCheckpointStops(t *testing.T) {
	base := &baseImage{size: 4 * pageSize, pages: make([][]byte, 4)}
	mem := make([]byte, 4*pageSize)
	mem[pageSize] = 1
	var stop atomic.Bool
	stop.Store(true)
	var ck checkpoint
	ck.update(base, mem, 0, nil, &stop)
	assert.Equal(t, [][]byte{nil, nil, nil, nil}, ck.pages, "no page compared")
	ck.updateWritten(base, mem, 0, []uint32{1}, &stop)
	assert.Nil(t, ck.pages[1])
	stop.Store(false)
	ck.updateWritten(base, mem, 0, []uint32{1}, &stop)
	assert.Equal(t, byte(1), ck.pages[1][0], "taken once not stopped")
}

// TestClosedSessionAbandonsCheckpoint: a session closed right after a run
// tells the checkpoint being taken of that run to stop (nothing will read
// it), and closing waits for none of it; a session that goes on keeps its
// checkpoint whole, so that its next run, a rollback and a snapshot see
// the state of the last run.
func TestClosedSessionAbandonsCheckpoint(t *testing.T) {
	g := builtGuest(t)
	ctx := context.Background()
	dirty := "b = bytearray(32 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nx = 41"

	s, err := g.NewSession(ctx, nil)
	require.NoError(t, err)
	_, err = s.Run(ctx, dirty, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	assert.True(t, s.abandon.Load(), "the checkpoint is told to stop")
	g.background.Wait() // the abandoned checkpoint and the instance's release end

	kept, err := g.NewSession(ctx, nil)
	require.NoError(t, err)
	defer kept.Close()
	_, err = kept.Run(ctx, dirty, nil)
	require.NoError(t, err)
	res, err := kept.Run(ctx, "x += 1\nx", nil)
	require.NoError(t, err)
	assert.Equal(t, "42", res.Value)
	assert.False(t, kept.abandon.Load())
	var buf bytes.Buffer
	require.NoError(t, kept.Snapshot(&buf))
	r, err := g.ResumeSession(ctx, &buf, nil)
	require.NoError(t, err)
	defer r.Close()
	res, err = r.Run(ctx, "x, b[4096], len(b)", nil)
	require.NoError(t, err)
	assert.Equal(t, "(42, 1, 33554432)", res.Value)
}
