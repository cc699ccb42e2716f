package sandbox

import (
	"bytes"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnpopulated: the pages never written read as unpopulated, the ones
// written do not, and what cannot be told is nil.
func TestUnpopulated(t *testing.T) {
	buf := make([]byte, 4<<20) // large: a fresh mapping, page-aligned
	zero := unpopulated(buf, nil)
	require.Len(t, zero, len(buf)/pageSize)
	buf[3*pageSize+17] = 1
	buf[200*pageSize] = 2
	zero = unpopulated(buf, zero)
	require.Len(t, zero, len(buf)/pageSize)
	assert.False(t, zero[3])
	assert.False(t, zero[200])
	for i, z := range zero {
		if z {
			assert.True(t, bytes.Equal(buf[i*pageSize:(i+1)*pageSize], zeroPage), "page %d", i)
		}
	}
	assert.Nil(t, unpopulated(buf[100:], nil), "not on a page")
	assert.Nil(t, unpopulated(buf[:100], nil), "less than a page")
}

// TestCheckpointOfUnpopulatedPages: a page known to be zeros is recorded
// as zeros without reading it, whatever the checkpoint or the base held.
func TestCheckpointOfUnpopulatedPages(t *testing.T) {
	full := bytes.Repeat([]byte{7}, pageSize)
	base := &baseImage{size: 4 * pageSize, pages: [][]byte{nil, full, nil, full}}
	mem := make([]byte, 4*pageSize)
	mem[2*pageSize] = 9 // page 2 written
	var ck checkpoint
	ck.update(base, mem, nil, 0, []bool{true, true, false, false})
	assert.Nil(t, ck.pages[0], "zeros as the base")
	assert.Equal(t, zeroPage, ck.pages[1], "the base's page became zeros")
	assert.Equal(t, mem[2*pageSize:3*pageSize], ck.pages[2])
	assert.Equal(t, zeroPage, ck.pages[3], "read: zeros, not the base's")
	// An owned page becomes zeros in place; zeroPage itself is never
	// written.
	ck.update(base, mem, nil, 0, []bool{true, true, true, true})
	assert.Equal(t, zeroPage, ck.pages[2])
	mem[pageSize] = 5
	ck.update(base, mem, nil, 0, nil)
	assert.Equal(t, byte(5), ck.pages[1][0])
	assert.Equal(t, make([]byte, pageSize), zeroPage)
}

// TestPopulatedEndsWhenMemoryGrows: a memory found all populated is asked
// again once it grows, within its capacity or past it.
func TestPopulatedEndsWhenMemoryGrows(t *testing.T) {
	m := &linearMemory{buf: make([]byte, 1<<20, 2<<20), limit: 8 << 20}
	m.populated = true
	m.Reallocate(1 << 20)
	assert.True(t, m.populated, "the same size adds no page")
	m.Reallocate(2 << 20)
	assert.False(t, m.populated, "grown within its capacity")
	m.populated = true
	m.Reallocate(4 << 20)
	assert.False(t, m.populated, "grown past its capacity")
}

// TestTrimZeros: runs of zero pages go back to the kernel and still read
// as zeros; short runs and pages holding anything stay.
func TestTrimZeros(t *testing.T) {
	b := bytes.Repeat([]byte{0xA5}, 1<<20)
	clear(b[10*pageSize : 30*pageSize]) // 20 pages of zeros
	clear(b[40*pageSize : 43*pageSize]) // 3: too short to give back
	b[20*pageSize+7] = 1                // splits the 20 into 10 and 9
	assert.Equal(t, 19, trimZeros(b, nil))
	zero := unpopulated(b, nil)
	require.NotNil(t, zero)
	for i := range zero {
		given := (i >= 10 && i < 20) || (i >= 21 && i < 30)
		assert.Equal(t, given, zero[i], "page %d", i)
	}
	assert.Equal(t, byte(1), b[20*pageSize+7])
	assert.Equal(t, 20*pageSize-1, bytes.Count(b[10*pageSize:30*pageSize], []byte{0}), "the zeros read as zeros")
	assert.Zero(t, trimZeros(b[1:], nil), "not on a page")
}

// TestSparsePoolZeroesWhatIsThere is the pool's isolation with a memory
// whose pages were given back: every page that holds anything, a given
// back one written again included, is zeros before the memory is handed
// out again.
func TestSparsePoolZeroesWhatIsThere(t *testing.T) {
	var wg sync.WaitGroup
	p := &memPool{wg: &wg}
	b := bytes.Repeat([]byte{0xA5}, 2<<20)
	clear(b[64*pageSize : 200*pageSize])
	require.Equal(t, 136, trimZeros(b, nil))
	b[100*pageSize+5] = 0xA5 // written again after it was given back
	p.put(b, true)
	wg.Wait()
	got := p.get(uint64(len(b)))
	require.NotNil(t, got)
	got = got[:len(b)]
	assert.Equal(t, len(got), bytes.Count(got, []byte{0}), "nothing of the last instance is left")
}
