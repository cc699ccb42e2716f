package sandbox

import (
	"bytes"
	"errors"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// freshMemory maps n bytes no one wrote, as a new linear memory is: the
// Go heap may hand back memory it already wrote (zeroed).
func freshMemory(t testing.TB, n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Munmap(b) })
	return b
}

// TestUnpopulated: the pages never written read as unpopulated, the ones
// written do not, and what cannot be told is nil.
func TestUnpopulated(t *testing.T) {
	buf := freshMemory(t, 4<<20)
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

// TestUnpopulatedScanAgrees: PAGEMAP_SCAN's runs of pages and pagemap's
// entries say the same, with runs that start and end at the range's ends,
// more runs than one call returns, and pages given back.
func TestUnpopulatedScanAgrees(t *testing.T) {
	f := pagemap()
	require.NotNil(t, f)
	buf := freshMemory(t, 8<<20)
	start := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	require.Zero(t, start%pageSize)
	n := len(buf) / pageSize
	for i := 0; i < n; i++ {
		if i%3 == 0 || (i > 1000 && i < 1200) || i == n-1 {
			buf[i*pageSize+i%pageSize] = 1
		}
	}
	require.NoError(t, syscall.Madvise(buf[1100*pageSize:1150*pageSize], syscall.MADV_DONTNEED))
	read := make([]bool, n)
	require.True(t, readUnpopulated(f.Fd(), start, read))
	assert.True(t, read[1], "never written")
	assert.False(t, read[3], "written")
	assert.True(t, read[1120], "given back")
	if pagemapScan == 0 {
		t.Skip("no PAGEMAP_SCAN on this architecture")
	}
	scanned := make([]bool, n)
	for i := range scanned {
		scanned[i] = i%2 == 0 // what the scan must clear
	}
	err := scanUnpopulated(f.Fd(), start, scanned)
	if errors.Is(err, syscall.ENOTTY) || errors.Is(err, syscall.EINVAL) {
		t.Skip("no PAGEMAP_SCAN in this kernel (before 6.7)")
	}
	require.NoError(t, err)
	assert.Equal(t, read, scanned)
	// A range that starts and ends within runs.
	part := make([]bool, 10)
	require.NoError(t, scanUnpopulated(f.Fd(), start+pageSize, part))
	assert.Equal(t, read[1:11], part)
}

// TestCheckpointOfUnpopulatedPages: a page known to be zeros is recorded
// as zeros without reading it, whatever the checkpoint or the base held.
func TestCheckpointOfUnpopulatedPages(t *testing.T) {
	full := bytes.Repeat([]byte{7}, pageSize)
	base := &baseImage{size: 4 * pageSize, pages: [][]byte{nil, full, nil, full}}
	mem := make([]byte, 4*pageSize)
	mem[2*pageSize] = 9 // page 2 written
	var ck checkpoint
	ck.update(base, mem, 0, []bool{true, true, false, false}, nil)
	assert.Nil(t, ck.pages[0], "zeros as the base")
	assert.Equal(t, zeroPage, ck.pages[1], "the base's page became zeros")
	assert.Equal(t, mem[2*pageSize:3*pageSize], ck.pages[2])
	assert.Equal(t, zeroPage, ck.pages[3], "read: zeros, not the base's")
	// An owned page becomes zeros in place; zeroPage itself is never
	// written.
	ck.update(base, mem, 0, []bool{true, true, true, true}, nil)
	assert.Equal(t, zeroPage, ck.pages[2])
	mem[pageSize] = 5
	ck.update(base, mem, 0, nil, nil)
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
	p.put(pooled{b: b}, true)
	wg.Wait()
	got := p.get(uint64(len(b)), 0).b
	require.NotNil(t, got)
	got = got[:len(b)]
	assert.Equal(t, len(got), bytes.Count(got, []byte{0}), "nothing of the last instance is left")
}

// BenchmarkUnpopulated: asking which pages of a session-sized memory (12
// MiB, 1,700 of its 3,072 pages written, as after a small run) the kernel
// holds, by pagemap's entries and by PAGEMAP_SCAN, in the same run:
//
//	go test ./sandbox -run '^$' -bench Unpopulated -count 5
func BenchmarkUnpopulated(b *testing.B) {
	f := pagemap()
	require.NotNil(b, f)
	buf := freshMemory(b, 12<<20)
	for i := 0; i < 1700; i++ {
		buf[(i+i/17*3)%3072*pageSize] = 1
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	dst := make([]bool, len(buf)/pageSize)
	b.Run("entries", func(b *testing.B) {
		for b.Loop() {
			require.True(b, readUnpopulated(f.Fd(), start, dst))
		}
	})
	b.Run("scan", func(b *testing.B) {
		if err := scanUnpopulated(f.Fd(), start, dst); err != nil {
			b.Skip(err)
		}
		for b.Loop() {
			require.NoError(b, scanUnpopulated(f.Fd(), start, dst))
		}
	})
}
