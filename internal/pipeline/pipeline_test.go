package pipeline

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func upper(calls *int) Step {
	return Step{Name: "upper", Version: 1, Apply: func(_ context.Context, in []byte) ([]byte, error) {
		*calls++
		return bytes.ToUpper(in), nil
	}}
}

func TestRunCachesEachStep(t *testing.T) {
	s := NewStore(t.TempDir())
	src, err := s.Put([]byte("hello"))
	require.NoError(t, err)

	var upCalls, exclCalls int
	excl := Step{Name: "excl", Version: 1, Apply: func(_ context.Context, in []byte) ([]byte, error) {
		exclCalls++
		return append(bytes.Clone(in), '!'), nil
	}}
	steps := []Step{upper(&upCalls), excl}

	_, ok := s.Lookup(src, steps)
	assert.False(t, ok)

	d, err := s.Run(context.Background(), src, steps, nil)
	require.NoError(t, err)
	b, err := s.Get(d)
	require.NoError(t, err)
	assert.Equal(t, "HELLO!", string(b))

	got, ok := s.Lookup(src, steps)
	require.True(t, ok)
	assert.Equal(t, d, got)

	// A second run reuses everything.
	_, err = s.Run(context.Background(), src, steps, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, upCalls)
	assert.Equal(t, 1, exclCalls)

	// A new version of the last step reruns only that step.
	excl.Version = 2
	excl.Apply = func(_ context.Context, in []byte) ([]byte, error) {
		exclCalls++
		return append(bytes.Clone(in), '?'), nil
	}
	_, ok = s.Lookup(src, []Step{upper(&upCalls), excl})
	assert.False(t, ok, "a new step version must not find the old result")
	d2, err := s.Run(context.Background(), src, []Step{upper(&upCalls), excl}, nil)
	require.NoError(t, err)
	b, err = s.Get(d2)
	require.NoError(t, err)
	assert.Equal(t, "HELLO?", string(b))
	assert.Equal(t, 1, upCalls)
	assert.Equal(t, 2, exclCalls)
}

func TestGetDetectsCorruption(t *testing.T) {
	s := NewStore(t.TempDir())
	d, err := s.Put([]byte("content"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(s.BlobPath(d), []byte("tampered"), 0o644))
	_, err = s.Get(d)
	assert.ErrorIs(t, err, ErrCorrupt)

	_, err = s.Get(Digest([]byte("absent")))
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = s.Get("../../etc/passwd")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestFailedStepStoresNothing(t *testing.T) {
	dir := t.TempDir()
	s := NewStore(dir)
	src, err := s.Put([]byte("x"))
	require.NoError(t, err)
	boom := errors.New("boom")
	_, err = s.Run(context.Background(), src, []Step{{Name: "fail", Version: 1, Apply: func(context.Context, []byte) ([]byte, error) {
		return nil, boom
	}}}, nil)
	require.ErrorIs(t, err, boom)
	entries, err := os.ReadDir(filepath.Join(dir, "blobs"))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "only the source blob")
	_, err = os.Stat(filepath.Join(dir, "links"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestConcurrentRuns(t *testing.T) {
	s := NewStore(t.TempDir())
	src, err := s.Put(bytes.Repeat([]byte("ab"), 1<<16))
	require.NoError(t, err)
	step := Step{Name: "upper", Version: 1, Apply: func(_ context.Context, in []byte) ([]byte, error) {
		return bytes.ToUpper(in), nil
	}}
	var wg sync.WaitGroup
	digests := make([]string, 8)
	errs := make([]error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			digests[i], errs[i] = s.Run(context.Background(), src, []Step{step}, nil)
		}()
	}
	wg.Wait()
	for i := range 8 {
		require.NoError(t, errs[i])
		assert.Equal(t, digests[0], digests[i])
	}
	b, err := s.Get(digests[0])
	require.NoError(t, err)
	assert.Equal(t, bytes.ToUpper(bytes.Repeat([]byte("ab"), 1<<16)), b)
	left, err := filepath.Glob(filepath.Join(s.Dir(), "*", ".tmp-*"))
	require.NoError(t, err)
	assert.Empty(t, left, "no temporary files left behind")
}
