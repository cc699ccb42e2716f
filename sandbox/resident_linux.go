package sandbox

import (
	"bytes"
	"encoding/binary"
	"os"
	"sync"
	"syscall"
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

// pagemap is the process's /proc/self/pagemap, opened once and kept: the
// write tracker (written_linux_amd64.go) scans through it too.
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
// The entries are read in one pread, made without the scheduler's system
// call bookkeeping (RawSyscall6): it does not block, and a checkpoint that
// a run waits for would otherwise hand its thread off and wake another.
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
	bp := entries.Get().(*[]byte)
	defer entries.Put(bp)
	if cap(*bp) < n*8 {
		*bp = make([]byte, n*8)
	}
	buf := (*bp)[:n*8]
	fd := f.Fd()
	for got := 0; got < len(buf); {
		r, _, errno := syscall.RawSyscall6(syscall.SYS_PREAD64, fd, uintptr(unsafe.Pointer(&buf[got])),
			uintptr(len(buf)-got), (start/pageSize)*8+uintptr(got), 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 || r == 0 || r%8 != 0 {
			return nil
		}
		got += int(r)
	}
	if cap(dst) < n {
		dst = make([]bool, n)
	}
	dst = dst[:n]
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint64(buf[i*8:])&(pagemapPresent|pagemapSwapped) == 0
	}
	return dst
}

// entries holds unpopulated's buffers: 8 bytes a page, 56 KiB for a
// session's memory.
var entries = sync.Pool{New: func() any { return new([]byte) }}

// minTrimPages is the shortest run of zero pages trimZeros gives back: a
// call and the TLB shootdown that follows cost more than a page or two.
const minTrimPages = 8

// trimZeros gives back to the kernel the runs of at least minTrimPages
// pages of b that hold only zeros (those marked in zero, known to be
// unpopulated, are not read), so a memory that was written all over with
// zeros (a pooled one) stops holding them. They read as zeros after, as
// before. It returns how many pages it gave back.
func trimZeros(b []byte, zero []bool) int {
	n, trimmed := len(b)/pageSize, 0
	if n == 0 || os.Getpagesize() != pageSize || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%pageSize != 0 {
		return 0
	}
	run := -1
	flush := func(end int) {
		if run >= 0 && end-run >= minTrimPages &&
			syscall.Madvise(b[run*pageSize:end*pageSize], syscall.MADV_DONTNEED) == nil {
			trimmed += end - run
		}
		run = -1
	}
	for i := range n {
		if (i >= len(zero) || !zero[i]) && !bytes.Equal(b[i*pageSize:(i+1)*pageSize], zeroPage) {
			flush(i)
			continue
		}
		if run < 0 {
			run = i
		}
	}
	flush(n)
	return trimmed
}
