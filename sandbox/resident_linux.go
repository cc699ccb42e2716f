package sandbox

import (
	"encoding/binary"
	"os"
	"sync"
	"unsafe"
)

// /proc/self/pagemap has one 64-bit entry per page of the process: bit 63
// is set when the page is in memory, bit 62 when it is swapped out (or
// being migrated). A page of private anonymous memory, which every linear
// memory is, with neither bit set has never been written since it was
// allocated or given back: it reads as zeros, and reading it makes the
// kernel allocate it (on some machines a fresh page for every page read,
// not the shared zero page). See the kernel's
// Documentation/admin-guide/mm/pagemap.rst.
const (
	pagemapPresent = 1 << 63
	pagemapSwapped = 1 << 62
)

var pagemap = sync.OnceValue(func() *os.File {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil
	}
	return f
})

// unpopulated sets dst[i], for each page i of b, when the kernel holds no
// page there (so it reads as zeros), and returns dst, or nil when it
// cannot tell: no pagemap, b not starting on a page, pages of another size.
func unpopulated(b []byte, dst []bool) []bool {
	f := pagemap()
	n := len(b) / pageSize
	if f == nil || n == 0 || os.Getpagesize() != pageSize {
		return nil
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if start%pageSize != 0 {
		return nil
	}
	if cap(dst) < n {
		dst = make([]bool, n)
	}
	dst = dst[:n]
	var buf [512 * 8]byte
	for i := 0; i < n; {
		chunk := buf[:min(n-i, 512)*8]
		at := int64(start/pageSize+uintptr(i)) * 8
		got, err := f.ReadAt(chunk, at)
		if err != nil || got != len(chunk) {
			if got < 8 {
				return nil
			}
			chunk = chunk[:got&^7]
		}
		for j := 0; j < len(chunk); j += 8 {
			dst[i] = binary.LittleEndian.Uint64(chunk[j:])&(pagemapPresent|pagemapSwapped) == 0
			i++
		}
	}
	return dst
}
