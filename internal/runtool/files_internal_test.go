package runtool

import (
	"bytes"
	"runtime"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadAtMost: an image is read only if it holds at most the limit,
// and reading a larger one (one that grew after it was listed small)
// holds about the limit, not the file.
func TestReadAtMost(t *testing.T) {
	big := bytes.Repeat([]byte{0x89}, 64<<20)
	fsys := fstest.MapFS{"small.png": {Data: big[:1000]}, "big.png": {Data: big}}

	data, err := readAtMost(fsys, "small.png", 1000)
	require.NoError(t, err)
	assert.Equal(t, big[:1000], data)
	_, err = readAtMost(fsys, "small.png", 999)
	assert.ErrorIs(t, err, errTooLarge)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = readAtMost(fsys, "big.png", 1<<20)
	runtime.ReadMemStats(&after)
	assert.ErrorIs(t, err, errTooLarge)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8<<20), "bytes allocated to refuse a 64 MiB file")
}
