package sandbox

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemoryGrowsInPlace is a guest growing its memory a wasm page at a
// time to its 256 MiB limit, writing each: the memory never moves, so no
// copy is made and no old buffer waits for the collector. Grown by
// copying into buffers twice as large, a run filling its limit held 761
// MB of the host's memory at its peak.
func TestMemoryGrowsInPlace(t *testing.T) {
	const limit = DefaultMemoryLimit
	a := &memoryAllocator{limit: limit}
	lm := a.Allocate(16*wasmPage, 65536*wasmPage)
	defer a.release()
	buf := lm.Reallocate(16 * wasmPage)
	require.NotNil(t, buf)
	start := unsafe.SliceData(buf)
	moved := 0
	for size := uint64(17 * wasmPage); size <= limit; size += wasmPage {
		buf = lm.Reallocate(size)
		require.Len(t, buf, int(size))
		if unsafe.SliceData(buf) != start {
			moved++
			start = unsafe.SliceData(buf)
		}
		buf[size-1] = 1
	}
	assert.Zero(t, moved, "times the memory moved")
	assert.Nil(t, lm.Reallocate(limit+wasmPage), "past the limit")
	assert.NotNil(t, a.mem.region)
	assert.Equal(t, uint64(limit), a.mem.peak)
}
